#!/usr/bin/env python3
"""Reference plans of nnU-Net v2's ResEnc planners for tests/sweep/test_plan.cpp.

Calls nnunetv2 2.8.1's nnUNetPlannerResEncM / L / XL `get_plans_for_configuration` (3d_fullres)
directly on chosen fingerprints (target spacing, median shape, number of cases; 1 channel, 14
classes) and writes what it planned: patch, batch and the feature-map estimate of the final patch,
with the network's stages. The planners need a dataset to be constructed: experiments/plan/
nnunet_plans.sh leaves one in $NNUNET_WORK (default /tmp/nnunet); its fingerprint is not used here.
  nnUNet_raw=/tmp/nnunet/raw nnUNet_preprocessed=/tmp/nnunet/preprocessed nnUNet_results=/tmp/nnunet/results \
    /tmp/nnunet-venv/bin/python tests/sweep/reference/make_nnunet_plans.py
Writes nnunet_resenc_plans.json beside itself.
"""
import json
import os

import numpy as np
from nnunetv2.experiment_planning.experiment_planners.residual_unets.residual_encoder_unet_planners import (
    nnUNetPlannerResEncL, nnUNetPlannerResEncM, nnUNetPlannerResEncXL)

# (spacing z, y, x in mm; median shape at that spacing; cases)
FINGERPRINTS = [
    ([1.0, 1.0, 1.0], [400, 400, 400], 50),    # large isotropic CT: the memory target decides
    ([3.0, 3.0, 3.0], [30, 101, 122], 1),      # the project's CT at 3 mm: the image and the data decide
    ([0.7, 0.7, 0.7], [129, 433, 523], 1),     # the same CT at 0.7 mm, one case
    ([2.5, 0.8, 0.8], [120, 512, 512], 30),    # anisotropic slices
    ([1.5, 1.5, 1.5], [180, 240, 240], 10),
    ([0.8, 0.8, 0.8], [150, 190, 160], 400),   # batch by memory: the dataset covers it
]

out = []
for cls, preset in [(nnUNetPlannerResEncM, "M"), (nnUNetPlannerResEncL, "L"), (nnUNetPlannerResEncXL, "XL")]:
    planner = cls(501)
    for spacing, shape, cases in FINGERPRINTS:
        voxels = float(np.prod(shape, dtype=np.float64) * cases)
        p = planner.get_plans_for_configuration(np.array(spacing), np.array(shape, dtype=np.float64), "x", voxels, {})
        a = p["architecture"]["arch_kwargs"]
        from nnunetv2.utilities.get_network_from_plans import get_network_from_plans
        net = get_network_from_plans(p["architecture"]["network_class_name"], a,
                                     p["architecture"]["_kw_requires_import"], 1, 14, allow_init=False)
        out.append({"preset": preset, "spacing": spacing, "median_shape": shape, "cases": cases,
                    "patch": [int(v) for v in p["patch_size"]], "batch": int(p["batch_size"]),
                    "estimate": int(net.compute_conv_feature_map_size(p["patch_size"])),
                    "strides": [[int(s) for s in st] for st in a["strides"]],
                    "kernels": [[int(k) for k in ks] for ks in a["kernel_sizes"]]})
        print(out[-1])
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "nnunet_resenc_plans.json"), "w") as f:
    json.dump({"made_by": "nnunetv2 2.8.1 ResEnc planners, get_plans_for_configuration (3d_fullres)",
               "channels": 1, "classes": 14, "plans": out}, f, indent=1)
