#!/usr/bin/env python3
"""Checks a `voxfit export` state dict from Python:
    python3 tests/python/check_export.py WEIGHTS [MONAI_MODEL] [--input X.pt --expect Y.pt]
torch.load's the file (a dict of name -> tensor, with torch.load's default weights_only=True);
where MONAI is importable, builds MONAI_MODEL (UNETR or SwinUNETR; default: the sidecar's MONAI
class with its arguments) and loads the dict with strict=False, printing the missing and unexpected
keys. With --input and --expect (tensors torch.load reads), MONAI's network in eval mode runs on X
and its output must equal Y (voxfit's output for X) to a relative 1e-4 of Y's largest magnitude.
Exits non-zero when loading fails, a key's shape differs from MONAI's or the outputs differ."""
import argparse
import json
import os
import sys

import torch


def main():
    parser = argparse.ArgumentParser(usage=__doc__)
    parser.add_argument("weights")
    parser.add_argument("monai_model", nargs="?")
    parser.add_argument("--input")
    parser.add_argument("--expect")
    args = parser.parse_args()
    weights = args.weights
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
    name = args.monai_model or spec.get("class", "").rsplit(".", 1)[-1]
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
    if bad:
        return 1
    if args.input and args.expect:
        x = torch.load(args.input, map_location="cpu", weights_only=True)
        expect = torch.load(args.expect, map_location="cpu", weights_only=True)
        model.eval()
        with torch.no_grad():
            out = model(x)
        if out.shape != expect.shape:
            print(f"output shape differs: MONAI {tuple(out.shape)}, voxfit {tuple(expect.shape)}")
            return 1
        diff = (out - expect).abs().max().item()
        scale = expect.abs().max().item()
        print(f"{name} output against voxfit's: max |difference| {diff:.3g} (largest |value| {scale:.3g})")
        if not diff <= 1e-4 * max(scale, 1e-12):
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
