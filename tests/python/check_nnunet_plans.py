#!/usr/bin/env python3
"""Loads a plans file of `voxfit plan` as nnU-Net v2 does and builds each configuration's network:
    python3 tests/python/check_nnunet_plans.py PLANS.json CHANNELS CLASSES
Where nnunetv2 is importable, through its PlansManager (get_configuration(name).network_arch_class_name
and network_arch_init_kwargs) and get_network_from_plans; otherwise with dynamic_network_architectures
alone, as get_network_from_plans builds it (the _kw_requires_import entries located by name). Prints
one line per configuration: NAME PATCH BATCH PARAMETERS. Exits non-zero when a configuration does
not load or build."""
import json
import pydoc
import sys


def build(class_name, kwargs, requires_import, channels, classes):
    try:
        from nnunetv2.utilities.get_network_from_plans import get_network_from_plans
        return get_network_from_plans(class_name, kwargs, requires_import, channels, classes, allow_init=False,
                                      deep_supervision=True)
    except ImportError:
        kwargs = dict(kwargs)
        for k in requires_import:
            if kwargs[k] is not None:
                kwargs[k] = pydoc.locate(kwargs[k])
        return pydoc.locate(class_name)(input_channels=channels, num_classes=classes, deep_supervision=True, **kwargs)


def main():
    path, channels, classes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    plans = json.load(open(path))
    try:
        from nnunetv2.utilities.plans_handling.plans_handler import PlansManager
        manager = PlansManager(plans)
    except ImportError:
        manager = None
    for name, c in plans["configurations"].items():
        if manager is not None:
            conf = manager.get_configuration(name)
            class_name, kwargs, req = (conf.network_arch_class_name, conf.network_arch_init_kwargs,
                                       conf.network_arch_init_kwargs_req_import)
            patch, batch = conf.patch_size, conf.batch_size
        else:
            a = c["architecture"]
            class_name, kwargs, req = a["network_class_name"], a["arch_kwargs"], a["_kw_requires_import"]
            patch, batch = c["patch_size"], c["batch_size"]
        net = build(class_name, kwargs, req, channels, classes)
        print(name, "x".join(str(p) for p in patch), batch, sum(p.numel() for p in net.parameters()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
