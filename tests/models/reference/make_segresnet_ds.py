#!/usr/bin/env python3
"""Reference outputs of MONAI 1.5's SegResNetDS for tests/models/test_segresnet_ds.cpp.

Builds monai.networks.nets.SegResNetDS at a small width, fills every parameter by the closed
formula of make_resenc_unet.py (the C++ test fills voxfit's network by the same one, by parameter
name), runs a closed-formula input through it (16 x 32 x 32) in training (deep supervision:
highest resolution first; batch norm updates its running statistics) and then in eval, and writes
the outputs. Two configurations: instance norm with dsdepth 3 (Auto3DSeg's shape), batch norm
with dsdepth 1 (SegResNetDS's own defaults).
  PYTHONPATH=../shared/peers python3 tests/models/reference/make_segresnet_ds.py
Writes segresnet_ds_<name>.json (config, shapes, offsets) and .bin (float32, little-endian) beside itself.
"""
import os
import sys


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_resenc_unet import make_monai_reference  # noqa: E402  (shared with the other fixtures)
from monai.networks.nets import SegResNetDS  # noqa: E402

CONFIGS = {
    "instance_ds": dict(init_filters=4, blocks_down=[1, 2, 2, 1], norm="instance_affine", dsdepth=3, classes=3),
    "batch": dict(init_filters=4, blocks_down=[1, 2, 1], norm="batch", dsdepth=1, classes=2),
}


def make(name, c):
    net = SegResNetDS(spatial_dims=3, init_filters=c["init_filters"], in_channels=1, out_channels=c["classes"],
                      norm="BATCH" if c["norm"] == "batch" else "INSTANCE", blocks_down=tuple(c["blocks_down"]),
                      dsdepth=c["dsdepth"])
    make_monai_reference(f"segresnet_ds_{name}", net, c, (2, 1, 16, 32, 32), "MONAI SegResNetDS")


if __name__ == "__main__":
    for name, c in CONFIGS.items():
        make(name, c)
