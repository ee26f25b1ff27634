"""The learning peer of issue 30: MONAI 1.5 trains UNETR, or a DynUNet set up as nnU-Net's
3d_fullres, on the cases of a voxfit / MSD dataset.json, with MONAI's standard pipeline for
abdominal CT (the BTCV UNETR tutorial's), and logs the mean validation Dice by sliding window
every --validate-every steps: one JSON object per line, as voxfit's log.jsonl has them
({"step", "loss"} and {"step", "val_mean_dice", "val_dice_per_class"}). The class count is the
dataset.json's labels (14 for the CT, 7 for the demo MR), as voxfit takes it from its plan.

Pipeline (train): LoadImaged (nibabel), EnsureChannelFirst, Orientation RAS, Spacing --spacing mm
(bilinear / nearest; --spacing none: each case's own grid), ScaleIntensityRange --window (CT) to
0..1 (--window none: z-score over the non-zero voxels, nnU-Net's non-CT scheme and voxfit's, for
MR), CropForeground, SpatialPad to the patch (the CT is smaller than 96 along one axis, the MR is
62 slices deep), RandCropByPosNegLabel --patch (pos 1, neg 1, --batch samples a step), RandFlip
on each axis (p 0.1), RandRotate90 (p 0.1), RandShiftIntensity (0.1, p 0.5). Loss DiceCE
(softmax, one-hot labels). UNETR (MONAI 1.5 defaults: convolutional patch embedding, as
peer_seg.py and voxfit build it): AdamW 1e-4, weight decay 1e-5, constant. DynUNet: SGD 1e-2,
momentum 0.99, Nesterov, weight decay 3e-5, poly 0.9, deep supervision (4 heads, weights 1/2^i
normalised). fp16 autocast with a GradScaler. Validation: the same deterministic transforms,
sliding_window_inference(patch, sw_batch_size 4, overlap 0.25, the tutorial's), argmax, and
DiceMetric(include_background=False) with MONAI's default ignore_empty=True (voxfit's semantics).

--patch and --spacing take one value for every axis or three in MONAI's axis order after
Orientation RAS (R, A, S). voxfit keeps the file's voxel axes (its D, H, W are the file's k, j, i),
so a non-cubic patch means different axes to the two tools unless it is reordered: for the demo MR
(stored L, S, A) voxfit's D, H, W are A, S, L, and MONAI's R, A, S are voxfit's W, D, H.

  PYTHONPATH=DIR_HOLDING_monai_AND_nibabel python3 peer_learn.py --dataset ct14/dataset.json \
      --model unetr --steps 2000 --validate-every 200 --seed 0 --output monai_unetr_s0.jsonl
  ... --dataset mr/dataset.json --window none --spacing none --patch 64 ...   (the demo MR)
"""
import argparse
import json
import os
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--dataset", required=True, help="dataset.json with a 'training' list of {image, label}")
p.add_argument("--model", default="unetr", choices=["unetr", "dynunet"])
p.add_argument("--steps", type=int, default=2000)
p.add_argument("--validate-every", type=int, default=200)
p.add_argument("--batch", type=int, default=2)
p.add_argument("--patch", default="96", help="patch edge (96), or one per axis in MONAI's RAS order (96,48,96)")
p.add_argument("--spacing", default="1.5", help="target spacing in mm: one value, one per RAS axis (2,3,2), "
               "or 'none' (keep each case's own grid, as voxfit keeps a one-case dataset's median spacing)")
p.add_argument("--window", default="-175,250", help="CT intensity window, or 'none' (z-score)")
p.add_argument("--seed", type=int, default=0)
p.add_argument("--workers", type=int, default=4)
p.add_argument("--device", default="cuda", help="cuda, or cpu for a smoke test (fp32 there)")
p.add_argument("--output", required=True)
a = p.parse_args()

from monai.data import CacheDataset, DataLoader
from monai.inferers import sliding_window_inference
from monai.losses import DiceCELoss
from monai.metrics import DiceMetric
from monai.networks.nets import UNETR, DynUNet
from monai.networks.utils import one_hot
from monai.transforms import (Compose, CropForegroundd, EnsureChannelFirstd, LoadImaged, NormalizeIntensityd,
                              Orientationd, RandCropByPosNegLabeld, RandFlipd, RandRotate90d, RandShiftIntensityd,
                              ScaleIntensityRanged, Spacingd, SpatialPadd)
from monai.utils import set_determinism

set_determinism(seed=a.seed)
dev = torch.device(a.device)
amp = dev.type == "cuda"
torch.backends.cudnn.benchmark = True

root = os.path.dirname(os.path.abspath(a.dataset))
manifest = json.load(open(a.dataset))
cases = [{k: os.path.join(root, c[k]) for k in ("image", "label")} for c in manifest["training"]]
# One case (the real CT): validation on the training volume, as voxfit does with one case.
validation = [{k: os.path.join(root, c[k]) for k in ("image", "label")} for c in manifest.get("validation", [])] or cases
classes = len(manifest["labels"])
if sorted(int(k) for k in manifest["labels"]) != list(range(classes)):
    raise SystemExit(f"{a.dataset}: label values must be 0..{classes - 1} (one-hot targets); got {sorted(manifest['labels'])}")
keys = ["image", "label"]


def triple(text, kind):
    values = [kind(v) for v in text.split(",")]
    if len(values) == 1:
        values *= 3
    if len(values) != 3 or min(values) <= 0:
        p.error(f"expected one positive value or three, comma-separated: {text!r}")
    return tuple(values)


patch = triple(a.patch, int)
resample = [] if a.spacing == "none" else [Spacingd(keys=keys, pixdim=triple(a.spacing, float), mode=("bilinear", "nearest"))]
if a.window == "none":
    intensity = NormalizeIntensityd(keys=["image"], nonzero=True, channel_wise=True)
else:
    lo, hi = (float(v) for v in a.window.split(","))
    intensity = ScaleIntensityRanged(keys=["image"], a_min=lo, a_max=hi, b_min=0.0, b_max=1.0, clip=True)
base = [
    LoadImaged(keys=keys),
    EnsureChannelFirstd(keys=keys),
    Orientationd(keys=keys, axcodes="RAS"),
    *resample,
    intensity,
    CropForegroundd(keys=keys, source_key="image", allow_smaller=True),
]
train_tf = Compose(base + [
    # The CT is 60 voxels deep at 1.5 mm, the MR 62: padded to the patch, as voxfit's loader pads.
    SpatialPadd(keys=keys, spatial_size=patch),
    RandCropByPosNegLabeld(keys=keys, label_key="label", spatial_size=patch, pos=1, neg=1, num_samples=a.batch,
                           image_key="image", image_threshold=0, allow_smaller=True),
    RandFlipd(keys=keys, spatial_axis=[0], prob=0.10),
    RandFlipd(keys=keys, spatial_axis=[1], prob=0.10),
    RandFlipd(keys=keys, spatial_axis=[2], prob=0.10),
    RandRotate90d(keys=keys, prob=0.10, max_k=3),
    RandShiftIntensityd(keys=["image"], offsets=0.10, prob=0.50),
])
val_tf = Compose(base)
# One volume yields --batch patches a step (num_samples), as the tutorial's batch of 1 x 4 samples.
train_ds = CacheDataset(cases, train_tf, cache_rate=1.0, num_workers=a.workers)


class Repeated(torch.utils.data.Dataset):
    """The cached cases, repeated to one pass of --steps items: with one case an epoch is a single
    item, and each of the 2,000 epochs waited for one worker's random crop (MONAI's UNETR took about
    8 minutes for 2,000 steps). Repeating the list lets the workers prefetch; each item is still a
    fresh random transform of a cached case, so the samples are drawn as before."""

    def __init__(self, data, length):
        self.data, self.length = data, length

    def __len__(self):
        return self.length

    def __getitem__(self, i):
        return self.data[i % len(self.data)]


train_dl = DataLoader(Repeated(train_ds, max(a.steps, len(train_ds))), batch_size=1, shuffle=True,
                      num_workers=a.workers, persistent_workers=a.workers > 0)
val_ds = CacheDataset(validation, val_tf, cache_rate=1.0, num_workers=a.workers)
print(f"{a.model}: {classes} classes, patch {patch} (RAS), validation volume {tuple(val_ds[0]['image'].shape[1:])}",
      flush=True)

if a.model == "unetr":
    net = UNETR(in_channels=1, out_channels=classes, img_size=patch, feature_size=16, hidden_size=768, mlp_dim=3072,
                num_heads=12, proj_type="conv", norm_name="instance", res_block=True, dropout_rate=0.0)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4, weight_decay=1e-5)
    schedule = lambda step: 1.0
    heads = 1
else:
    heads = 4
    net = DynUNet(spatial_dims=3, in_channels=1, out_channels=classes, kernel_size=[3] * 6,
                  strides=[1, 2, 2, 2, 2, 2], upsample_kernel_size=[2] * 5, filters=[32, 64, 128, 256, 320, 320],
                  norm_name=("INSTANCE", {"affine": True}), act_name=("leakyrelu", {"negative_slope": 0.01, "inplace": True}),
                  deep_supervision=True, deep_supr_num=heads - 1)
    opt = torch.optim.SGD(net.parameters(), lr=1e-2, momentum=0.99, nesterov=True, weight_decay=3e-5)
    schedule = lambda step: (1 - step / a.steps) ** 0.9
net = net.to(dev)
lr0 = opt.param_groups[0]["lr"]
loss_fn = DiceCELoss(to_onehot_y=True, softmax=True)
weights = torch.tensor([0.5 ** i for i in range(heads)])
weights = (weights / weights.sum()).tolist()
scaler = torch.amp.GradScaler("cuda", enabled=amp)
metric = DiceMetric(include_background=False, reduction="none")


def validate():
    net.eval()
    per_case = []
    with torch.no_grad(), torch.autocast(dev.type, dtype=torch.float16, enabled=amp):
        for item in val_ds:
            image = item["image"].unsqueeze(0).to(dev)
            label = item["label"].unsqueeze(0).to(dev)
            logits = sliding_window_inference(image, patch, 4, net, overlap=0.25)
            pred = one_hot(logits.argmax(1, keepdim=True), classes)
            metric.reset()
            metric(y_pred=pred, y=one_hot(label.long(), classes))
            per_case.append(metric.aggregate()[0])  # [classes - 1], NaN where the class is absent
    net.train()
    scores = torch.stack(per_case)
    case_means = torch.nanmean(scores, dim=1)
    return torch.nanmean(case_means).item(), torch.nanmean(scores, dim=0).tolist()


out = open(a.output, "w")
step, start = 0, time.time()
net.train()
while step < a.steps:
    for batch in train_dl:
        if step >= a.steps:
            break
        image, label = batch["image"].to(dev), batch["label"].to(dev)
        for g in opt.param_groups:
            g["lr"] = lr0 * schedule(step)
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.float16, enabled=amp):
            out_t = net(image)
            if heads == 1:
                loss = loss_fn(out_t, label)
            else:  # [B, heads, C, ...], every head at full resolution
                loss = sum(w * loss_fn(out_t[:, i], label) for i, w in enumerate(weights))
        scaler.scale(loss).backward()
        if heads > 1:  # nnU-Net clips the gradient norm at 12
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(net.parameters(), 12)
        scaler.step(opt)
        scaler.update()
        step += 1
        out.write(json.dumps({"step": step, "loss": loss.item(), "lr": opt.param_groups[0]["lr"],
                              "seconds": round(time.time() - start, 2)}) + "\n")
        if step % a.validate_every == 0 or step == a.steps:
            mean, per_class = validate()
            out.write(json.dumps({"step": step, "val_mean_dice": mean, "val_dice_per_class": per_class}) + "\n")
            print(f"{a.model} seed {a.seed} step {step}: loss {loss.item():.4f} val mean Dice {mean:.4f}", flush=True)
        out.flush()
out.close()
