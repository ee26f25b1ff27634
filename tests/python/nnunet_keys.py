#!/usr/bin/env python3
"""Writes the state-dict keys and shapes of nnU-Net's ResidualEncoderUNet in the small setting of
tests/train/test_export.cpp (patch 32^3 at 1 mm, base 4, max 16, 1 in, 3 classes, the ResEnc
planner's rules), which checks voxfit's exported nnU-Net names against them, aliases included
(a strict load_state_dict of nnU-Net's network needs every one):
    PYTHONPATH=../shared/peers python3 tests/python/nnunet_keys.py
(tests/train/data/nnunet_resenc_unet_keys.txt; one "key d0,d1,..." a line). Made from
dynamic_network_architectures 0.4.4 and nnunetv2 2.8.1."""
import os

from torch import nn
from dynamic_network_architectures.architectures.unet import ResidualEncoderUNet
from nnunetv2.experiment_planning.experiment_planners.network_topology import get_pool_and_conv_props

_, pools, convs, _, _ = get_pool_and_conv_props([1.0, 1.0, 1.0], [32, 32, 32], 4, 999999)
n = len(pools)
net = ResidualEncoderUNet(
    input_channels=1, num_classes=3, n_stages=n, features_per_stage=[min(16, 4 * 2**i) for i in range(n)],
    conv_op=nn.Conv3d, kernel_sizes=convs, strides=pools, n_blocks_per_stage=(1, 3, 4, 6, 6, 6)[:n],
    n_conv_per_stage_decoder=(1,) * (n - 1), conv_bias=True, norm_op=nn.InstanceNorm3d,
    norm_op_kwargs={"eps": 1e-5, "affine": True}, dropout_op=None, dropout_op_kwargs=None,
    nonlin=nn.LeakyReLU, nonlin_kwargs={"inplace": True}, deep_supervision=True)
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train", "data", "nnunet_resenc_unet_keys.txt")
with open(out, "w") as f:
    for key, t in net.state_dict().items():
        f.write(f"{key} {','.join(str(d) for d in t.shape)}\n")
print(out, len(net.state_dict()), sum(p.numel() for p in net.parameters()))
