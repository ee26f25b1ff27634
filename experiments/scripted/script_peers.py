#!/usr/bin/env python3
"""Scripts the networks of `peer_seg.py` (issue 49's GPU check) as a user scripts theirs.

MONAI 1.5's DynUNet (peer_seg.py's nnU-Net-like 6 stages, filters 32..320, instance norm with
affine, no deep supervision) and UNETR (feature 16, hidden 768, 12 heads, instance norm, residual
blocks) for 1 input channel and 14 classes at PATCH^3, built exactly as peer_seg.py's make() builds
them, torch.manual_seed(0), torch.jit.script(net).save(OUT_DIR/<name>_<patch>.ts). Prints each
file and its parameter count.
  PYTHONPATH=../shared/peers python3 experiments/scripted/script_peers.py OUT_DIR [PATCH]
"""
import os
import sys

import torch
from monai.networks.nets import UNETR, DynUNet


def networks(patch):
    yield "dynunet", lambda: DynUNet(spatial_dims=3, in_channels=1, out_channels=14, kernel_size=[3] * 6,
                                     strides=[1, 2, 2, 2, 2, 2], upsample_kernel_size=[2] * 5,
                                     filters=[32, 64, 128, 256, 320, 320], norm_name=("INSTANCE", {"affine": True}))
    yield "unetr", lambda: UNETR(in_channels=1, out_channels=14, img_size=(patch,) * 3, feature_size=16,
                                 hidden_size=768, mlp_dim=3072, num_heads=12, norm_name="instance", res_block=True,
                                 dropout_rate=0.0)


def main():
    out = sys.argv[1]
    patch = int(sys.argv[2]) if len(sys.argv) > 2 else 96
    os.makedirs(out, exist_ok=True)
    for name, make in networks(patch):
        torch.manual_seed(0)
        net = make()
        path = os.path.join(out, f"{name}_{patch}.ts")
        torch.jit.script(net).save(path)
        print(path, sum(p.numel() for p in net.parameters()))


if __name__ == "__main__":
    main()
