#!/usr/bin/env python3
"""Issue 26's table from the logs of experiments/speed-vs-compile/run.sh: voxfit against its compiled
peer, one row a workload, with the ratio.

    python3 experiments/speed-vs-compile/table.py LOGDIR [LOGDIR ...]

Each LOGDIR is one call's unpacked issue26.tar.gz (run.sh writes it there as it goes). A ratio is
only formed inside one LOGDIR, so each comes from one device command; a row whose peer (or voxfit)
did not run in that call shows '-'. Read from each LOGDIR:
- k_*/kernels.md (experiments/kernels/run.sh): training samples/s of the fused+graph variant;
  the patch is 128 where the folder name says so (run.sh names it after the train options);
- peer_MODEL_PATCH[_bBATCHES]_compile.log: peer_seg.py's JSON lines (MONAI + torch.compile);
- bench_MODEL_PRECISION_fused.log / peer_ref_MODEL_PRECISION.log: images/s per iteration of
  `voxfit bench` and of peer_ref.py (timm channels-last + compile). As in the results READMEs,
  voxfit's iterations 1-3 (0 is its capture) and the peer's 0-3 are averaged; their range is shown.
- t_<row>_r<round>_{voxfit,peer}.log (the table phase, issue 52): each workload run ROUNDS times,
  voxfit then its --fast peer alternating; every round's value is shown, the ratio is of the
  means, and its range is the lowest and highest of voxfit's over the peer's rounds. The peer's
  compile + warm-up seconds (wall_s less its timed steps) are printed beside it. A row's variant
  (t_..._voxfit-v.log, its options on the log's first line) is one more row against the same peer rounds.
"""
import glob
import json
import os
import re
import sys

PEER_OF = {"unet3d": "dynunet", "unetr": "unetr", "swin_unetr": "swin_unetr"}


def training_rows(d):
    """{(model, patch, batch): samples/s} of voxfit's fused+graph runs in one call."""
    rows = {}
    for md in sorted(glob.glob(os.path.join(d, "k_*", "kernels.md"))):
        patch = 128 if "patch_128" in os.path.basename(os.path.dirname(md)) else 96
        for line in open(md):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) < 4 or cells[2] != "fused+graph":
                continue
            try:
                rows[(cells[0], patch, int(cells[1]))] = float(cells[3])
            except ValueError:
                continue  # the header, or a run that failed ('-')
    return rows


def peer_training_rows(d):
    """{(peer model, patch, batch): samples/s} from peer_seg.py's JSON lines in one call."""
    rows = {}
    for log in sorted(glob.glob(os.path.join(d, "peer_*_compile.log"))):
        for line in open(log, errors="replace"):
            if not line.startswith("{"):
                continue
            try:
                j = json.loads(line)
                rows[(j["model"], int(j["patch"]), int(j["batch"]))] = float(j["samples_per_s"])
            except (ValueError, KeyError):
                continue
    return rows


def iterations(path):
    """Images/s of each 'Iteration i, X images/s' in a bench or peer_ref log, by i."""
    if not os.path.exists(path):
        return {}
    text = open(path, errors="replace").read()
    return {int(i): float(x) for i, x in re.findall(r"Iteration (\d+), ([0-9.]+) images/s", text)}


def mean_range(values):
    if not values:
        return None
    return sum(values) / len(values), min(values), max(values)


def fmt(x):
    return f"{x:,.0f}" if x >= 1000 else f"{x:.2f}"


def voxfit_train_rate(path):
    """Median samples/s of a `voxfit train` log's 'trained ...' line."""
    if not os.path.exists(path):
        return None
    m = re.search(r"^trained .* median ([0-9.]+) samples/s", open(path, errors="replace").read(), re.M)
    return float(m.group(1)) if m else None


def peer_train_rate(path):
    """(samples/s, compile + warm-up s) from peer_seg.py's JSON line."""
    if not os.path.exists(path):
        return None
    for line in open(path, errors="replace"):
        if line.startswith("{"):
            try:
                j = json.loads(line)
                if "samples_per_s" in j:
                    return float(j["samples_per_s"]), float(j["wall_s"]) - 20 * float(j["step_s"])
            except (ValueError, KeyError):
                continue
    return None


def rounds_table(dirs):
    """The table phase's rows: every round of each side, the ratio of the means and its range."""
    out = ["| workload | voxfit, each round | --fast peer, each round | ratio (range) | peer compile + warm-up s | call |",
           "|---|---:|---:|---:|---:|---|"]
    for d in dirs:
        call = os.path.basename(os.path.normpath(d))
        rows = {}
        for log in glob.glob(os.path.join(d, "t_*_r*_voxfit*.log")):
            row, r, variant = re.match(r"t_(.*)_r(\d+)_voxfit(-v)?\.log$", os.path.basename(log)).groups()
            peer_log = re.sub(r"voxfit(-v)?\.log$", "peer.log", log)
            if variant:  # the variant's options, from the log's first line
                row += "|" + open(log, errors="replace").readline().removeprefix("# voxfit train").strip()
            if row.startswith("ref_"):  # inference: iterations 1-3 of voxfit (0 is its capture), 0-3 of the peer
                v = mean_range([x for i, x in iterations(log).items() if 1 <= i <= 3])
                p = mean_range([x for i, x in iterations(peer_log).items() if i <= 3])
                v, p = (v[0] if v else None), ((p[0], None) if p else None)
            else:
                v, p = voxfit_train_rate(log), peer_train_rate(peer_log)
            rows.setdefault(row, []).append((int(r), v, p))
        for row in sorted(rows):
            rounds = sorted(rows[row])
            vs = [v for _, v, _ in rounds if v]
            ps = [p[0] for _, _, p in rounds if p]
            compiles = [f"{p[1]:.0f}" for _, _, p in rounds if p and p[1] is not None]
            if row.startswith("ref_"):
                model, precision = row[len("ref_"):].rsplit("_", 1)
                name = f"{model} {precision} inference b64 (images/s)"
            else:
                base, _, options = row.partition("|")
                model, patch, batch = re.match(r"(.*)_(\d+)_b(\d+)$", base).groups()
                name = f"{model} train fp16 {patch}^3, batch {batch} (samples/s)"
                if options:
                    name += f", voxfit {options}"
            cell = lambda xs: " / ".join(fmt(x) for x in xs) if xs else "-"
            ratio = "-"
            if vs and ps:
                ratio = f"{(sum(vs) / len(vs)) / (sum(ps) / len(ps)):.2f}x ({min(vs) / max(ps):.2f}-{max(vs) / min(ps):.2f})"
            out.append(f"| {name} | {cell(vs)} | {cell(ps)} | {ratio} | {', '.join(compiles) or '-'} | {call} |")
    return "\n".join(out) if len(out) > 2 else ""


def table(dirs):
    out = ["| workload | voxfit | compiled peer | ratio | call |", "|---|---:|---:|---:|---|"]
    for d in dirs:
        call = os.path.basename(os.path.normpath(d))
        ours, theirs = training_rows(d), peer_training_rows(d)
        for (model, patch, batch), v in sorted(ours.items()):
            p = theirs.get((PEER_OF.get(model, model), patch, batch))
            name = f"{model} train fp16 {patch}^3, batch {batch} (samples/s)"
            ratio = f"{v / p:.2f}x" if p else "-"
            out.append(f"| {name} | {fmt(v)} | {fmt(p) if p else '-'} | {ratio} | {call} |")
        for log in sorted(glob.glob(os.path.join(d, "bench_*_fused.log"))):
            spec = os.path.basename(log)[len("bench_"):-len("_fused.log")]  # MODEL_PRECISION
            model, precision = spec.rsplit("_", 1)
            v = mean_range([x for i, x in iterations(log).items() if 1 <= i <= 3])
            p = mean_range([x for i, x in iterations(os.path.join(d, f"peer_ref_{spec}.log")).items() if i <= 3])
            if v is None:
                continue
            name = f"{model} {precision} inference b64 (images/s)"
            ours_cell = f"{fmt(v[1])}-{fmt(v[2])}"
            peer_cell = f"{fmt(p[1])}-{fmt(p[2])}" if p else "-"
            ratio = f"{v[0] / p[0]:.2f}x" if p else "-"
            out.append(f"| {name} | {ours_cell} | {peer_cell} | {ratio} | {call} |")
    return "\n".join(out)


if __name__ == "__main__":
    if len(sys.argv) < 2 or not all(os.path.isdir(d) for d in sys.argv[1:]):
        sys.exit("usage: table.py LOGDIR [LOGDIR ...] (each an unpacked issue26.tar.gz of run.sh)")
    print(table(sys.argv[1:]))
    rounds = rounds_table(sys.argv[1:])
    if rounds:
        print("\nEach workload ROUNDS times, voxfit and its --fast peer alternating:\n")
        print(rounds)
