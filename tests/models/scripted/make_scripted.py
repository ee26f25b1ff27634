#!/usr/bin/env python3
"""TorchScript fixtures of tests/models/test_scripted.cpp (issue 49), saved by the torch that runs this.

Small MONAI 1.5 networks scripted as a user scripts theirs (torch.jit.script(net).save(path)), 1 input
channel and 4 classes (the suite's prepared CT), weights from torch.manual_seed(0):
  dynunet.ts     DynUNet, filters 8/16/32: its skip layers alias shared submodules (66 parameter
                 entries in C++ for fewer tensors), one output
  two_scale.ts   a small net returning a list: full-resolution logits and, while training, half-resolution
                 ones (deep supervision; MONAI's DynUNet with deep supervision does not script)
  unetr.ts       UNETR at 32^3, feature size 4, hidden 24, 2 heads
and networks that are wrong in one way each:
  scalar.ts      returns the mean of its input (an output of the wrong rank)
  throws.ts      raises in its forward
  half_size.ts   returns logits at half the input's size
  future.ts      dynunet.ts with the archive's format version raised to 99 (saved by a "future" torch)
  truncated.ts   the first half of dynunet.ts
  not_archive.ts a text file
  weights.pt     torch.save of dynunet's state dict (weights, not a network)
damaged_code.ts (not written here) is half_size.ts with a damaged code record, an input of
tools/fuzz.sh's torchscript target. And scripted.json: per good network, its parameter count (each tensor once, as Python counts) and its
state dict's keys (a shared tensor under each of its names, as Python's state_dict lists them).
  PYTHONPATH=../shared/peers python3 tests/models/scripted/make_scripted.py
"""
import json
import os
import zipfile
from typing import List

import torch
from monai.networks.nets import UNETR, DynUNet
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))


def dynunet():
    return DynUNet(spatial_dims=3, in_channels=1, out_channels=4, kernel_size=[3, 3, 3], strides=[1, 2, 2],
                   upsample_kernel_size=[2, 2], filters=[8, 16, 32], norm_name="instance")


class TwoScale(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv3d(1, 8, 3, padding=1), nn.InstanceNorm3d(8, affine=True), nn.LeakyReLU(0.01))
        self.down = nn.Sequential(nn.Conv3d(8, 16, 3, padding=1, stride=2), nn.InstanceNorm3d(16, affine=True),
                                  nn.LeakyReLU(0.01))
        self.up = nn.ConvTranspose3d(16, 8, 2, stride=2)
        self.head = nn.Conv3d(16, 4, 1)
        self.low_head = nn.Conv3d(16, 4, 1)

    def forward(self, x) -> List[torch.Tensor]:
        a = self.stem(x)
        b = self.down(a)
        out = [self.head(torch.cat([a, self.up(b)], 1))]
        if self.training:
            out.append(self.low_head(b))
        return out


class Scalar(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv3d(1, 4, 3, padding=1)

    def forward(self, x):
        return self.conv(x).mean()


class Throws(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv3d(1, 4, 3, padding=1)

    def forward(self, x):
        if x.shape[2] > 0:
            raise RuntimeError("this network refuses every input")
        return self.conv(x)


class HalfSize(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv3d(1, 4, 3, padding=1, stride=2)

    def forward(self, x):
        return self.conv(x)


META = {}


def save(name, net):
    torch.manual_seed(0)
    net = net()
    path = os.path.join(HERE, name)
    torch.jit.script(net).save(path)
    META[name] = {"parameters": sum(p.numel() for p in net.parameters()), "state_dict_keys": sorted(net.state_dict())}
    return path


def main():
    torch.manual_seed(0)
    dyn = save("dynunet.ts", dynunet)
    save("two_scale.ts", TwoScale)
    save("unetr.ts", lambda: UNETR(in_channels=1, out_channels=4, img_size=(32, 32, 32), feature_size=4,
                                   hidden_size=24, mlp_dim=48, num_heads=2, norm_name="instance"))
    save("scalar.ts", Scalar)
    save("throws.ts", Throws)
    save("half_size.ts", HalfSize)
    with zipfile.ZipFile(dyn) as src, zipfile.ZipFile(os.path.join(HERE, "future.ts"), "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            if item.filename.endswith("/version") or item.filename.endswith("/.data/version"):
                data = b"99\n"
            dst.writestr(item, data)
    with open(dyn, "rb") as f:
        whole = f.read()
    with open(os.path.join(HERE, "truncated.ts"), "wb") as f:
        f.write(whole[: len(whole) // 2])
    torch.manual_seed(0)
    torch.save(dynunet().state_dict(), os.path.join(HERE, "weights.pt"))
    with open(os.path.join(HERE, "not_archive.ts"), "w") as f:
        f.write("this is not a TorchScript archive\n")
    good = {k: v for k, v in META.items() if k in ("dynunet.ts", "two_scale.ts", "unetr.ts")}
    with open(os.path.join(HERE, "scripted.json"), "w") as f:
        json.dump({"torch": torch.__version__, "networks": good}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
