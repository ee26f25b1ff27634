#!/usr/bin/env python3
"""The training steps of tests/models/test_scripted.cpp (ThreeStepsMatchPyTorch) in PyTorch.

Loads a TorchScript network, trains it STEPS steps with AdamW (lr 1e-3, betas 0.9/0.999, eps 1e-8,
weight decay 1e-5, voxfit's AdamW defaults) on the closed-formula batch the C++ test builds
(image sin(0.1 i), label 7 i mod classes over the flat index i) with voxfit's dice_ce loss
(cross-entropy + negative mean soft Dice over the foreground classes, per sample, smooth 1e-5),
and prints the loss of each step as a JSON list.
  python3 train_steps.py NET.ts STEPS B,C,D,H,W
"""
import json
import math
import sys

import torch


def dice_ce(logits, target):
    ce = torch.nn.functional.cross_entropy(logits, target[:, 0])
    x = torch.softmax(logits, 1)
    y = torch.zeros_like(x, dtype=torch.bool).scatter_(1, target, True)
    axes = list(range(2, x.dim()))
    intersect = (x * y).sum(axes)
    dc = (2.0 * intersect + 1e-5) / (y.sum(axes, dtype=torch.float32) + x.sum(axes) + 1e-5).clamp_min(1e-8)
    return ce - dc[:, 1:].mean()


def main():
    path, steps, shape = sys.argv[1], int(sys.argv[2]), [int(v) for v in sys.argv[3].split(",")]
    torch.set_num_threads(1)
    net = torch.jit.load(path)
    net.train()
    n = math.prod(shape)
    x = (torch.arange(n, dtype=torch.float32) * 0.1).sin().reshape(shape)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-5)
    losses = []
    for _ in range(steps):
        out = net(x)
        logits = out[0] if isinstance(out, (list, tuple)) else out
        classes = logits.shape[1]
        target = (torch.arange(n // shape[1]) * 7 % classes).reshape([shape[0], 1] + shape[2:])
        loss = dice_ce(logits, target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    print(json.dumps(losses))


if __name__ == "__main__":
    main()
