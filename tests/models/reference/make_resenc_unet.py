#!/usr/bin/env python3
"""Reference outputs of nnU-Net's ResidualEncoderUNet for tests/models/test_resenc_unet.cpp.

Builds dynamic_network_architectures' ResidualEncoderUNet with the arch_kwargs nnU-Net's ResEnc
planner writes (get_pool_and_conv_props(spacing, patch, 4, 999999), features min(base * 2^i, max),
blocks 1,3,4,6,..., one decoder conv per stage, conv bias, affine InstanceNorm, LeakyReLU), fills
every parameter by the closed formula below (the C++ test fills voxfit's network by the same one,
by parameter name), runs a closed-formula input through it, and writes the outputs: with deep
supervision (highest resolution first) and without. Two configurations: an isotropic cube, and an
anisotropic patch (spacing 3,1,1) whose deep stages keep their width (a skip that only pools) and
whose first stage has 1x3x3 kernels.

Needs torch, numpy and the peers' dynamic_network_architectures and nnunetv2 on PYTHONPATH:
  PYTHONPATH=../shared/peers python3 tests/models/reference/make_resenc_unet.py
Writes resenc_unet_<name>.json (shapes, offsets) and .bin (float32, little-endian) beside itself.
"""
import json
import math
import os

import numpy as np
import torch
from torch import nn
from dynamic_network_architectures.architectures.unet import ResidualEncoderUNet
from nnunetv2.experiment_planning.experiment_planners.network_topology import get_pool_and_conv_props

CONFIGS = {
    "cube": dict(patch=(16, 16, 16), spacing=(1.0, 1.0, 1.0), base=4, maxf=16, classes=3),
    "aniso": dict(patch=(8, 32, 32), spacing=(3.0, 1.0, 1.0), base=4, maxf=8, classes=2),
}


def name_phase(name):
    return sum((j + 1) * ord(c) for j, c in enumerate(name)) % 997 / 997.0 * 2.0 * math.pi


def fill(name, shape):
    """The closed formula both sides fill a parameter with (float64, then float32)."""
    n = int(np.prod(shape))
    i = np.arange(n, dtype=np.float64)
    s = np.sin(0.7 * i + name_phase(name))
    if len(shape) == 1:
        v = 1.0 + 0.2 * s if name.endswith("norm.weight") else 0.1 * s
    else:
        v = s * math.sqrt(3.0 / (n // shape[0]))
    return torch.from_numpy(v.reshape(shape).astype(np.float32))



def formula_input(shape):
    """The tests' input: sin(0.013 i) over the flat index (test::input_formula)."""
    return torch.from_numpy(np.sin(0.013 * np.arange(int(np.prod(shape)), dtype=np.float64))
                            .reshape(shape).astype(np.float32))


def save_reference(stem, train_outs, eval_out, manifest, made_by):
    """Writes STEM.bin (the training outputs, then the eval output, float32 little-endian) and
    STEM.json (`manifest` with the outputs' names, shapes and offsets, and `made_by`) beside this
    script (test::ReferenceOutputs reads them). Returns the outputs' entries."""
    blobs, entries, offset = [], [], 0
    for key, t in [(f"train_{i}", o) for i, o in enumerate(train_outs)] + [("eval_0", eval_out)]:
        a = t.numpy().astype("<f4")
        entries.append({"name": key, "shape": list(a.shape), "offset": offset})
        blobs.append(a.tobytes())
        offset += a.nbytes
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, f"{stem}.bin"), "wb") as f:
        f.write(b"".join(blobs))
    with open(os.path.join(here, f"{stem}.json"), "w") as f:
        json.dump({**manifest, "outputs": entries, "made_by": made_by}, f, indent=1)
    return entries


def make_monai_reference(stem, net, config, shape, made_by):
    """A MONAI network's fixture: every parameter filled by the formula, the formula input of
    `shape` run in training (a list of outputs with deep supervision) and then in eval mode, saved
    by save_reference with the config and the parameter count."""
    with torch.no_grad():
        for pname, p in net.named_parameters():
            p.copy_(fill(pname, tuple(p.shape)))
    x = formula_input(shape)
    net.train()
    with torch.no_grad():
        train_outs = net(x)
    train_outs = list(train_outs) if isinstance(train_outs, (list, tuple)) else [train_outs]
    net.eval()
    with torch.no_grad():
        eval_out = net(x)
    entries = save_reference(stem, train_outs, eval_out,
                             {"config": config, "parameters": sum(p.numel() for p in net.parameters())},
                             f"{made_by}, torch {torch.__version__}")
    print(stem, [e["shape"] for e in entries])

def make(name, c):
    npool, pools, convs, patch, _ = get_pool_and_conv_props(list(c["spacing"]), list(c["patch"]), 4, 999999)
    assert tuple(patch) == c["patch"], (patch, c["patch"])
    n = len(pools)
    kw = dict(
        n_stages=n,
        features_per_stage=tuple(min(c["maxf"], c["base"] * 2**i) for i in range(n)),
        conv_op=nn.Conv3d, kernel_sizes=convs, strides=pools,
        n_blocks_per_stage=(1, 3, 4, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6)[:n],
        n_conv_per_stage_decoder=(1,) * (n - 1),
        conv_bias=True, norm_op=nn.InstanceNorm3d, norm_op_kwargs={"eps": 1e-5, "affine": True},
        dropout_op=None, dropout_op_kwargs=None, nonlin=nn.LeakyReLU, nonlin_kwargs={"inplace": True})
    net = ResidualEncoderUNet(input_channels=1, num_classes=c["classes"], deep_supervision=True, **kw)
    with torch.no_grad():
        for pname, p in net.named_parameters():  # canonical names; aliases share the tensors
            p.copy_(fill(pname, tuple(p.shape)))
    count = sum(p.numel() for p in net.parameters())
    shape = (1, 1) + c["patch"]
    x = formula_input(shape)
    with torch.no_grad():
        train_outs = net(x)
        net.decoder.deep_supervision = False
        eval_out = net(x)
    entries = save_reference(
        f"resenc_unet_{name}", train_outs, eval_out,
        {"config": {k: list(v) if isinstance(v, tuple) else v for k, v in c.items()}, "parameters": count,
         "strides": [list(map(int, s)) for s in pools], "kernels": [list(map(int, k)) for k in convs]},
        f"dynamic_network_architectures ResidualEncoderUNet, torch {torch.__version__}")
    print(name, count, [e["shape"] for e in entries])


if __name__ == "__main__":
    for name, c in CONFIGS.items():
        make(name, c)
