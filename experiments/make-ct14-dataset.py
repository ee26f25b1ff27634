#!/usr/bin/env python3
"""Writes a 14-class MSD-layout dataset from the real TotalSegmentator CT crop (standard library only).

TotalSegmentator's label values 1..13 are the abdominal organs of the BTCV / MONAI reference setting
(spleen, kidneys, gallbladder, liver, stomach, aorta, vena cava, portal vein, pancreas, adrenal
glands, ...); every other value becomes background, so networks get the 14 output classes that
MONAI's UNETR / SwinUNETR numbers in shared/reference/peers_h200.md were measured with.

usage: make-ct14-dataset.py TOTALSEG_DIR OUT_DIR
"""
import gzip
import json
import os
import struct
import sys

src, out = sys.argv[1], sys.argv[2]
os.makedirs(os.path.join(out, "labelsTr"), exist_ok=True)
raw = gzip.open(os.path.join(src, "example_seg.nii.gz")).read()
datatype = struct.unpack("<h", raw[70:72])[0]
if datatype != 2:  # DT_UNSIGNED_CHAR
    sys.exit(f"{src}/example_seg.nii.gz: expected uint8 labels, NIfTI datatype {datatype}")
offset = int(struct.unpack("<f", raw[108:112])[0])
body = bytes(v if v <= 13 else 0 for v in raw[offset:])
with gzip.open(os.path.join(out, "labelsTr", "ct14.nii.gz"), "wb") as f:
    f.write(raw[:offset] + body)
manifest = {
    "name": "TotalSegCT14",
    "modality": {"0": "CT"},
    "labels": {str(v): ("background" if v == 0 else f"organ{v}") for v in range(14)},
    "training": [{"image": os.path.abspath(os.path.join(src, "example_ct_sm.nii.gz")),
                  "label": "./labelsTr/ct14.nii.gz"}],
}
with open(os.path.join(out, "dataset.json"), "w") as f:
    json.dump(manifest, f, indent=2)
print(os.path.join(out, "dataset.json"))
