#!/usr/bin/env python3
"""The timm side of the reference benchmark, for side-by-side runs with `voxfit bench`.

Same protocol as voxfit bench (../shared/reference/README.md): timm.create_model(name) in eval
mode, .half() for float16 (pure half, no autocast), one input built in device memory before
timing, `steps` batches per iteration, iteration 0 includes warm-up (cuDNN benchmark), the device
synchronised before each clock read, torch.inference_mode(). Prints, per setting, the reference's
line and the steady-state mean in voxfit's wording, so one parser reads both tools.
"""
import argparse
import time

import timm
import torch


def run(name, precision, args):
    device = torch.device("cuda", args.device)
    dtype = torch.float16 if precision == "float16" else torch.float32
    model = timm.create_model(name, pretrained=False).to(device).eval()
    if precision == "float16":
        model = model.half()
    shape = (args.batch, 3, 224, 224)
    if args.input == "zeros":
        x = torch.zeros(shape, dtype=dtype, device=device)
    else:
        x = torch.randn(shape, dtype=dtype, device=device)
    images = args.batch * args.steps
    items, rates = [], []
    with torch.inference_mode():
        torch.cuda.synchronize(device)
        for i in range(args.iterations):
            start = time.perf_counter()
            for _ in range(args.steps):
                model(x)
            torch.cuda.synchronize(device)
            seconds = time.perf_counter() - start
            rates.append(images / seconds)
            items.append(f"Iteration {i}, {images / seconds:.2f} images/s in {seconds:.3f}s.")
    print(f"Namespace(device={args.device}, model='{name}', precision='{precision}', train=False) "
          + " ".join(items), flush=True)
    last = args.iterations - 1
    span = "iteration 1" if last == 1 else f"iterations 1-{last}"
    print(f"steady state: {sum(rates[1:]) / last:.2f} images/s (mean of {span}, {images} images each)",
          flush=True)
    del model, x
    torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", nargs="+", default=["resnet50"], help="timm model names")
    ap.add_argument("--precision", nargs="+", default=["float16"], choices=["float16", "float32"])
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--iterations", type=int, default=5)
    ap.add_argument("--input", choices=["zeros", "random"], default="random")
    ap.add_argument("--tf32", choices=["on", "off"], default="off",
                    help="TF32 float32 matrix products (PyTorch 2.x default: off)")
    ap.add_argument("--cudnn-tf32", choices=["on", "off"], default="on",
                    help="TF32 float32 cuDNN convolutions (PyTorch default: on)")
    ap.add_argument("--fused-attn", choices=["on", "off"], default="on",
                    help="off: timm's explicit matmul-softmax attention instead of F.scaled_dot_product_attention")
    args = ap.parse_args()
    if args.batch < 1 or args.steps < 1 or args.iterations < 2:
        ap.error("--batch and --steps must be >= 1, --iterations >= 2")
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = args.tf32 == "on"
    torch.backends.cudnn.allow_tf32 = args.cudnn_tf32 == "on"
    # Read by timm's Attention when it is built, so it must be set before create_model.
    timm.layers.set_fused_attn(args.fused_attn == "on")
    for name in args.model:
        for precision in args.precision:
            run(name, precision, args)


if __name__ == "__main__":
    main()
