#!/usr/bin/env python3
"""Writes the state-dict keys and shapes of MONAI's UNETR and SwinUNETR in the small settings of
tests/train/test_export.cpp, which checks voxfit's exported MONAI names against them:
    python3 tests/python/monai_keys.py [MONAI_PARENT_DIR]
(tests/train/data/monai_*_keys.txt; one "key d0,d1,..." a line). Made from MONAI 1.5."""
import os
import sys
import warnings

warnings.filterwarnings("ignore")
if len(sys.argv) > 1:
    sys.path.insert(0, sys.argv[1])
from monai.networks.nets import UNETR, SwinUNETR  # noqa: E402

nets = {
    "unetr": UNETR(in_channels=1, out_channels=3, img_size=(32, 32, 32), feature_size=4, hidden_size=32,
                   mlp_dim=64, num_heads=2),
    "swin_unetr": SwinUNETR(in_channels=1, out_channels=3, feature_size=12, depths=(2, 1, 1, 1),
                            num_heads=(1, 1, 1, 1), window_size=(4, 4, 4), use_v2=True),
}
out_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train", "data")
for name, net in nets.items():
    with open(os.path.join(out_dir, f"monai_{name}_keys.txt"), "w") as f:
        for key, t in net.state_dict().items():
            f.write(f"{key} {','.join(str(d) for d in t.shape)}\n")
