#!/usr/bin/env python3
"""Builds each plan's 3d_fullres network the way nnU-Net does (get_network_from_plans, 1 input channel,
14 classes, deep_supervision=True) and prints its parameter count, plus why the batch size came out
as it did: the planner's VRAM-derived batch vs. its dataset-coverage cap (min batch 2 applies after).
Needs nnunetv2==2.8.1. usage: nnunet_params.py PLANS_DIR   (e.g. experiments/plan/nnunet)"""
import json, sys
import numpy as np
from nnunetv2.utilities.get_network_from_plans import get_network_from_plans

d = sys.argv[1]
fp = json.load(open(f"{d}/dataset_fingerprint.json"))
n_vox = sum(np.prod(s, dtype=np.float64) for s in fp["shapes_after_crop"])  # spacing unchanged here (3 mm in, 3 mm out)
# (plans file, planner's UNet_reference_val_3d, max_dataset_covered), from nnunetv2 2.8.1's planners
for name, ref, cov in [("nnUNetPlans", 560e6, 0.05), ("nnUNetResEncUNetMPlans", 680e6, 1),
                       ("nnUNetResEncUNetLPlans", 2100e6, 1), ("nnUNetResEncUNetXLPlans", 3600e6, 1)]:
    c = json.load(open(f"{d}/{name}.json"))["configurations"]["3d_fullres"]
    a = c["architecture"]
    net = get_network_from_plans(a["network_class_name"], a["arch_kwargs"], a["_kw_requires_import"],
                                 1, 14, allow_init=True, deep_supervision=True)
    est = net.compute_conv_feature_map_size(c["patch_size"])
    print(f"{name}: {type(net).__name__} params={sum(p.numel() for p in net.parameters())} "
          f"batch={c['batch_size']} (by VRAM estimate {round(ref / est * 2)}, "
          f"by {cov:.0%} dataset coverage {round(n_vox * cov / np.prod(c['patch_size'], dtype=np.float64))})")
