#!/usr/bin/env python3
"""Checks a `voxfit export` state dict from Python:
    python3 tests/python/check_export.py WEIGHTS [MONAI_MODEL]
torch.load's the file (a dict of name -> tensor); where MONAI is importable, builds MONAI_MODEL
(UNETR or SwinUNETR; default: the sidecar's MONAI class with its arguments) and loads the dict
with strict=False, printing the missing and unexpected keys. Exits non-zero when loading fails or
a key's shape differs from MONAI's."""
import json
import os
import sys

import torch


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    weights = sys.argv[1]
    state = torch.load(weights, map_location="cpu", weights_only=True)
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        sys.exit(f"{weights}: not a dict of tensors")
    print(f"{weights}: {len(state)} tensors")
    sidecar = {}
    side_path = os.path.splitext(weights)[0] + ".json"
    if os.path.exists(side_path):
        with open(side_path) as f:
            sidecar = json.load(f)
    try:
        import monai.networks.nets as nets
    except ImportError:
        print("MONAI is not importable: checked torch.load only")
        return 0
    spec = sidecar.get("monai") or {}
    kwargs = dict(spec.get("kwargs", {}))
    name = sys.argv[2] if len(sys.argv) > 2 else spec.get("class", "").rsplit(".", 1)[-1]
    if not name:
        print("no MONAI counterpart named in the sidecar and none given: checked torch.load only")
        return 0
    if isinstance(kwargs.get("norm_name"), list):
        kwargs["norm_name"] = tuple(kwargs["norm_name"])
    cls = getattr(nets, name)
    try:
        model = cls(**kwargs)
    except TypeError:  # MONAI < 1.5's SwinUNETR also wants img_size
        model = cls(img_size=sidecar.get("patch"), **kwargs)
    own = model.state_dict()
    bad = [k for k, v in state.items() if k in own and own[k].shape != v.shape]
    for k in bad:
        print(f"shape differs: {k}: exported {tuple(state[k].shape)}, MONAI {tuple(own[k].shape)}")
    try:
        result = model.load_state_dict(state, strict=False)
    except RuntimeError as e:
        print(f"load_state_dict failed: {e}")
        return 1
    print(f"{name}: {len(own)} keys; missing {len(result.missing_keys)}, unexpected {len(result.unexpected_keys)}")
    for k in result.missing_keys:
        print(f"  missing: {k}")
    for k in result.unexpected_keys:
        print(f"  unexpected: {k}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
