#!/usr/bin/env python3
"""Summarises `voxfit cards profile` JSON files (standard library only): per profile the step
time, the FLOPs a step does (the profiler's counts and voxfit's shape-based estimates per kernel),
the achieved TFLOP/s against a ceiling, and the top kernels by time with their share.

usage: profile-summary.py [--ceiling TFLOPS] [--top N] PROFILE.json...
Markdown goes to stdout. The default ceiling, 790 TFLOP/s, is the H200's measured dense bf16
matrix-product rate (shared/reference/README.md).
"""
import argparse
import json
import re


def short(name):
    name = re.sub(r"\(.*", "", name)  # drop argument lists
    name = re.sub(r"<.*>", "<...>", name)  # and template arguments
    return name[:90]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ceiling", type=float, default=790.0)
    ap.add_argument("--top", type=int, default=6)
    ap.add_argument("profiles", nargs="+")
    a = ap.parse_args()
    for path in a.profiles:
        p = json.load(open(path))
        kernels = [k for k in p["kernels"] if k.get("kind") == "kernel"]
        flops = sum(k["flops"] for k in p["kernels"])  # the profile's kernels are per step
        wall = p["wall_s_per_step"]
        kind = "training step" if p["train"] else "inference"
        if p.get("cuda_graph"): kind += " replayed as a CUDA graph (kernels from eager steps)"
        if p.get("channels_last"): kind += ", channels-last"
        print(f"### {p['model']} {p['precision']} {kind}, batch {p['batch']} ({p['device_name']}, LibTorch {p['torch_version']})")
        print()
        print(f"- wall {wall * 1e3:.2f} ms a step ({p['samples_per_s']:.1f} samples/s), of which GPU kernels "
              f"{p['kernel_s_per_step'] * 1e3:.2f} ms, host/launch gaps {p['overhead_s_per_step'] * 1e3:.2f} ms")
        print(f"- {flops / 1e12:.3f} TFLOP a step: {flops / wall / 1e12:.1f} TFLOP/s achieved = "
              f"{100 * flops / wall / 1e12 / a.ceiling:.1f}% of {a.ceiling:.0f} TFLOP/s")
        print()
        print("| kernel | op | share of kernel time | ms a step | TFLOP/s in it |")
        print("|---|---|---:|---:|---:|")
        total = sum(k["time_us"] for k in p["kernels"])
        by = {}
        for k in kernels:
            key = (short(k["name"]), k.get("op", ""))
            t, f = by.get(key, (0.0, 0.0))
            by[key] = (t + k["time_us"], f + k["flops"])
        for (name, op), (t, f) in sorted(by.items(), key=lambda kv: -kv[1][0])[: a.top]:
            rate = f / (t * 1e-6) / 1e12 if t > 0 else 0.0
            print(f"| `{name}` | {op} | {100 * t / total:.1f}% | {t / 1e3:.2f} | {rate:.1f} |")
        print()


if __name__ == "__main__":
    main()
