#!/usr/bin/env python3
"""Where the compiled peer's time goes (issue 26): torch.profiler over steps of the peer at its fastest
setting, the GPU kernels grouped by name, per step, largest first. The counterpart of `voxfit cards
profile` + `voxfit cards utilisation`, for the workloads voxfit must beat:

  peer-profile.py vit       # timm vit_base_patch16_224, .half(), batch 64 inference, channels-last + compile
  peer-profile.py resnet50  # the same for ResNet50
  peer-profile.py dynunet   # MONAI DynUNet fp16 (autocast) training step, batch 2, 96^3, AdamW, compile
  peer-profile.py mednext_s # MONAI MedNeXt-S as peer_seg.py --fast trains it: forward + loss compiled
                            # (reduce-overhead), fused AdamW, fp16 autocast, batch 2
  peer-profile.py segresnet # the same for MONAI's SegResNetDS as peer_seg.py builds it (batch norm, dsdepth 1)
  options: --batch N --patch N --precision float16|float32 --steps N --top N --json FILE

The models are built as ../shared/peers/peer_ref.py and peer_seg.py build them (MONAI from PYTHONPATH).
Markdown goes to stdout.
"""
import argparse
import json
import re
import time

import torch


def reference(a):
    import timm
    dt = torch.float16 if a.precision == "float16" else torch.float32
    m = timm.create_model(a.model, pretrained=False).cuda().to(dt).eval()
    x = torch.randn(a.batch or 64, 3, 224, 224, device="cuda", dtype=dt)
    m = m.to(memory_format=torch.channels_last)
    x = x.to(memory_format=torch.channels_last)
    m = torch.compile(m)

    def step():
        with torch.no_grad():
            m(x)
    return step, a.batch or 64


def dynunet(a):
    from monai.networks.nets import DynUNet
    m = DynUNet(spatial_dims=3, in_channels=1, out_channels=14, kernel_size=[3] * 6, strides=[1, 2, 2, 2, 2, 2],
                upsample_kernel_size=[2] * 5, filters=[32, 64, 128, 256, 320, 320],
                norm_name=("INSTANCE", {"affine": True})).cuda()
    m = torch.compile(m)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4, weight_decay=1e-5)
    scaler = torch.amp.GradScaler("cuda")
    b = a.batch or 2
    x = torch.randn(b, 1, a.patch, a.patch, a.patch, device="cuda")
    y = torch.randint(0, 14, (b, 1, a.patch, a.patch, a.patch), device="cuda")
    from monai.losses import DiceCELoss
    loss_fn = DiceCELoss(to_onehot_y=True, softmax=True)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = loss_fn(m(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    return step, b


def fast_seg(a):
    """peer_seg.py --fast's step for MedNeXt (kernel 3) and SegResNetDS: torch.compile(mode="reduce-overhead")
    over forward + loss, fused AdamW, GradScaler."""
    from monai.losses import DiceCELoss
    if a.model == "segresnet":
        from monai.networks.nets import SegResNetDS
        m = SegResNetDS(spatial_dims=3, init_filters=32, in_channels=1, out_channels=14,
                        blocks_down=(1, 2, 2, 4, 4)).cuda()
    else:
        from monai.networks.nets.mednext import create_mednext
        m = create_mednext(a.model[-1], spatial_dims=3, in_channels=1, out_channels=14, kernel_size=3).cuda()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4, weight_decay=1e-5, fused=True)
    scaler = torch.amp.GradScaler("cuda")
    b = a.batch or 2
    x = torch.randn(b, 1, a.patch, a.patch, a.patch, device="cuda")
    y = torch.randint(0, 14, (b, 1, a.patch, a.patch, a.patch), device="cuda")
    loss_fn = DiceCELoss(to_onehot_y=True, softmax=True)

    @torch.compile(mode="reduce-overhead")
    def fwd_loss(x, y):
        with torch.autocast("cuda", dtype=torch.float16):
            return loss_fn(m(x), y)

    def step():
        torch.compiler.cudagraph_mark_step_begin()
        opt.zero_grad(set_to_none=True)
        loss = fwd_loss(x, y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    return step, b


def short(name):
    name = re.sub(r"\(.*", "", name)
    name = re.sub(r"<.*>", "<...>", name)
    return name[:100]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", choices=["vit", "resnet50", "dynunet", "mednext_s", "mednext_b", "mednext_m", "mednext_l",
                                       "segresnet"])
    ap.add_argument("--batch", type=int, default=0)
    ap.add_argument("--patch", type=int, default=96)
    ap.add_argument("--precision", default="float16")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    a.model = {"vit": "vit_base_patch16_224"}.get(a.model, a.model)
    seg = a.model == "dynunet" or a.model.startswith("mednext") or a.model == "segresnet"
    step, batch = (dynunet(a) if a.model == "dynunet" else fast_seg(a) if seg else reference(a))
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(20):
        step()
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t) / 20
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(a.steps):
            step()
        torch.cuda.synchronize()
    per = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            k = short(e.name)
            n, us = per.get(k, (0, 0.0))
            per[k] = (n + 1, us + e.device_time)
    total = sum(us for _, us in per.values()) / a.steps
    rows = sorted(per.items(), key=lambda kv: -kv[1][1])
    print(f"### peer {a.model} {a.precision} batch {batch}{' patch ' + str(a.patch) if seg else ''}"
          f" + torch.compile ({torch.cuda.get_device_name()}, torch {torch.__version__})\n")
    print(f"- wall {wall * 1e3:.3f} ms a step ({batch / wall:.1f} samples/s), GPU kernels {total / 1e3:.3f} ms a step\n")
    print("| kernel | launches a step | ms a step | share |")
    print("|---|---:|---:|---:|")
    for k, (n, us) in rows[:a.top]:
        print(f"| `{k}` | {n / a.steps:.1f} | {us / a.steps / 1e3:.3f} | {100 * us / a.steps / total:.1f}% |")
    if a.json:
        json.dump({"model": a.model, "batch": batch, "wall_s": wall, "kernel_ms": total / 1e3,
                   "kernels": [{"name": k, "launches": n / a.steps, "ms": us / a.steps / 1e3} for k, (n, us) in rows]},
                  open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
