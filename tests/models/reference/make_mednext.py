#!/usr/bin/env python3
"""Reference outputs of MONAI 1.5's MedNeXt for tests/models/test_mednext.cpp.

Builds monai.networks.nets.MedNeXt as create_mednext configures it (group norm, residuals, no GRN)
at a small width, fills every parameter by the closed formula of make_resenc_unet.py (the C++
test fills voxfit's network by the same one, by parameter name), runs a closed-formula input
through it (16 x 32 x 32) and writes the outputs: deep supervision in training (highest resolution first) and
the single output in eval. Two configurations: kernel 3 with deep supervision, kernel 5 without.
  PYTHONPATH=../shared/peers python3 tests/models/reference/make_mednext.py
Writes mednext_<name>.json (config, shapes, offsets) and .bin (float32, little-endian) beside itself.
"""
import os
import sys


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_resenc_unet import make_monai_reference  # noqa: E402  (shared with the other fixtures)
from monai.networks.nets import MedNeXt  # noqa: E402

CONFIGS = {
    "k3_ds": dict(init_filters=4, kernel_size=3, deep_supervision=True, classes=2,
                  encoder_expansion=[2, 3, 4, 4], decoder_expansion=[4, 4, 3, 2], bottleneck_expansion=4,
                  blocks_down=[1, 2, 1, 1], blocks_bottleneck=1, blocks_up=[1, 1, 2, 1]),
    "k5": dict(init_filters=4, kernel_size=5, deep_supervision=False, classes=2,
               encoder_expansion=[2, 2, 2, 2], decoder_expansion=[2, 2, 2, 2], bottleneck_expansion=2,
               blocks_down=[1, 1, 1, 1], blocks_bottleneck=1, blocks_up=[1, 1, 1, 1]),
}


def make(name, c):
    net = MedNeXt(spatial_dims=3, init_filters=c["init_filters"], in_channels=1, out_channels=c["classes"],
                  encoder_expansion_ratio=c["encoder_expansion"], decoder_expansion_ratio=c["decoder_expansion"],
                  bottleneck_expansion_ratio=c["bottleneck_expansion"], kernel_size=c["kernel_size"],
                  deep_supervision=c["deep_supervision"], use_residual_connection=True,
                  blocks_down=c["blocks_down"], blocks_bottleneck=c["blocks_bottleneck"], blocks_up=c["blocks_up"],
                  norm_type="group", global_resp_norm=False)
    # 16 x 32 x 32: GroupNorm in training needs more than one value at the deepest level.
    make_monai_reference(f"mednext_{name}", net, c, (1, 1, 16, 32, 32), "MONAI MedNeXt")


if __name__ == "__main__":
    for name, c in CONFIGS.items():
        make(name, c)
