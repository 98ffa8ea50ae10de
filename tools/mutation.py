"""A small mutation run: plausible one-line bugs, each applied to a copy of the repository and
run against the tests that should catch it. A mutant that every listed test passes "survived":
the tests let that bug through.

The repository itself is never modified: its tracked and untracked (not ignored) files are
copied to a temporary directory once, and each mutant edits, tests and restores one file there.

    python tools/mutation.py                  # every mutant (minutes: survivors run their files)
    python tools/mutation.py --only C1 TA1    # some of them
    python tools/mutation.py --list           # what each mutant changes
    python tools/mutation.py --check          # exit 1 if a mutant's text is no longer found
    python tools/mutation.py --json out.json  # also write the results
    python tools/mutation.py --rev HEAD~3     # the repository as committed at a revision
                                              # (e.g. the tests before new ones: the score then)

Exit status 0 whatever the score; the table lists caught/survived per mutant. A mutant whose
text is no longer found in the file (the code moved on) is reported as "stale", not run.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List, NamedTuple, Optional


class Mutant(NamedTuple):
    id: str
    path: str  # file, relative to the repository root
    old: str  # exact text; must occur at least `nth` + 1 times
    new: str
    tests: List[str]  # pytest arguments (files, -k ...)
    why: str  # the bug it stands for
    nth: int = 0  # which occurrence of `old` (0: the first)


COLOR_T = ["tests/transforms/test_color.py", "tests/transforms/test_functional_basic.py"]
MIX_T = ["tests/transforms/test_mix.py"]
AUTO_T = ["tests/transforms/test_auto_augment.py"]
WARP_T = ["tests/transforms/test_warp.py", "tests/transforms/test_geometry.py",
          "tests/transforms/test_warps.py", "tests/transforms/test_functional_basic.py"]
ORDER_T = ["tests/data/test_loader.py", "tests/data/test_placement.py", "tests/data/test_distributed.py"]
# issue 28 item 9: the selections for the mutants below (the new tests match these -k words)
INDEX_T = ["tests/data/test_ragged_cache.py", "tests/data/test_cache_targets.py", "-k",
           "index or round_trip or ragged or mask or negative or voc"]
BOX_T = ["tests/transforms/test_geometry.py", "-k",
         "resized_crop and (box or fall or offset or width)"]
CROP_T = ["tests/data/test_crop.py", "-k", "rrc or fallback or box"]
ERASE_T = ["tests/transforms/test_misc.py", "-k", "erasing"]
TIMM_ERASE_T = ["tests/integrations/test_timm.py", "-k", "erasing"]
TIMM_AUGMIX_T = ["tests/integrations/test_timm.py", "-k", "augmix"]
PAD_T = ["tests/data/test_crop.py", "-k", "padding or pad or random_crop"]
TIMM_CONV_T = ["tests/integrations/test_timm.py", "-k",
               "from_timm or timm_augment or magnitude or mixup or keyed"]
KEYED_T = ["tests/transforms/test_keyed.py", "tests/transforms/test_random.py", "tests/integrations/test_timm.py", "-k",
           "reference or pinned or beta or draws"]

# issue 35: the selections for the mutants below (its new tests match these -k words)
ROI_T = ["tests/data/test_roi_crop.py", "tests/data/test_roi_decode.py", "-k",
         "flips_before or one_pixel or set_crop or picks_the_scale or rounded or zero_size "
         "or threads_above_one or window_decode_gives"]
JPEG_T = ["tests/data/test_original_jpeg.py"]
SRC_T = ["tests/data/test_sources.py"]
WRITE_T = ["tests/data/test_writer.py", "tests/data/test_original_jpeg.py",
           "tests/data/test_cache_targets.py", "-k",
           "one_height or changed_byte or part_of_a_cache or no_boxes"]
SIZED_T = ["tests/transforms/test_sizes.py", "tests/transforms/test_geometry.py",
           "tests/transforms/test_warps.py", "-k",
           "right_angle or far_edge or padding_mode or too_extreme or torchvisions_of_each "
           "or list_names"]
LOADER_T = ["tests/data/test_loader.py", "tests/data/test_resume.py", "tests/data/test_crop.py",
            "-k", "kept_without_clone or mismatches or refused_crops"]
SHOW_T = ["tests/cli/test_show_pipeline.py", "tests/cli/test_recipes_show.py", "-k",
          "restores_the_augments_mode or past_the_end"]
VIEW_T = ["tests/transforms/test_offset_views.py"]

MUTANTS = [
    # ---- migrate.py
    Mutant("M1", "batchaug/migrate.py",
           'return _is_float(t.dtype) and bool(getattr(t, "scale", False))',
           "return _is_float(t.dtype)", ["tests/integrations/test_migrate.py"],
           "ToDtype(float, scale=False) treated as a [0, 1] conversion (folded into Normalize)"),
    Mutant("M2", "batchaug/migrate.py",
           'out.append(BT.ToDtype(t.dtype, scale=bool(getattr(t, "scale", True))))',
           "out.append(BT.ToDtype(t.dtype, scale=True))", ["tests/integrations/test_migrate.py"],
           "a non-folded ToDtype always scales"),
    Mutant("M3", "batchaug/migrate.py",
           "    if scaled:\n        out.append(BT.ToDtype(torch.float32, scale=True))\n"
           "    return out",
           "    return out", ["tests/integrations/test_migrate.py"],
           "a trailing ToTensor/ConvertImageDtype (no Normalize after it) is dropped"),
    # ---- data/order.py
    Mutant("O1", "batchaug/data/order.py", "perm = perm[torch.arange(total) % n]",
           "perm = perm[torch.arange(total) % max(1, n - 1)]", ORDER_T,
           "padding repeats the wrong entries (a row lost, another duplicated)"),
    Mutant("O2", "batchaug/data/order.py",
           "return perm[rank * num_samples:(rank + 1) * num_samples]",
           "return perm[rank * num_samples + 1:(rank + 1) * num_samples + 1]", ORDER_T,
           "contiguous rank slices off by one"),
    Mutant("O3", "batchaug/data/order.py", "g.manual_seed(epoch_seed(seed, epoch))",
           "g.manual_seed(epoch_seed(seed, 0))", ORDER_T, "the same order every epoch"),
    Mutant("O4", "batchaug/data/order.py",
           "torch.repeat_interleave(torch.arange(n_blocks) // window_blocks, sizes)",
           "torch.repeat_interleave(torch.arange(n_blocks) % window_blocks, sizes)", ORDER_T,
           "quasi-random windows interleave blocks from the whole file (no read locality)"),
    Mutant("O5", "batchaug/data/order.py", "rows = rows[rows < n]", "rows = rows[rows <= n]",
           ORDER_T, "the partial last block's bound off by one"),
    Mutant("O6", "batchaug/data/order.py", "return perm[rank:total:world_size]",
           "return perm[rank + 1:total:world_size]", ORDER_T,
           "strided rank split starts one late"),
    # ---- functional/_color.py
    Mutant("C1", "batchaug/functional/_color.py",
           "step = torch.div(h * w - hist.gather(1, last), 255,",
           "step = torch.div(h * w - hist.gather(1, last), 256,", COLOR_T,
           "equalize's step divides by 256"),
    Mutant("C2", "batchaug/functional/_color.py",
           "lut = torch.div(cum[:, :-1] + torch.div(step, 2, rounding_mode=\"floor\"),",
           "lut = torch.div(cum[:, :-1],", COLOR_T, "equalize's lookup table without PIL's "
           "half-step rounding"),
    Mutant("C3", "batchaug/functional/_color.py",
           "return x & (((1 << bits) - 1) << (8 - bits))",
           "return x & (((1 << bits) - 1) << (7 - bits))", COLOR_T, "posterize keeps the "
           "wrong bits"),
    Mutant("C4", "batchaug/functional/_color.py",
           "return torch.where(x >= threshold, invert(x), x)",
           "return torch.where(x > threshold, invert(x), x)", COLOR_T,
           "solarize leaves values equal to the threshold"),
    Mutant("C5", "batchaug/functional/_color.py",
           "return r.mul(0.2989).add_(g, alpha=0.587).add_(b, alpha=0.114).unsqueeze(1)",
           "return r.mul(0.2989).add_(g, alpha=0.578).add_(b, alpha=0.114).unsqueeze(1)",
           COLOR_T, "luma weight typo"),
    Mutant("C6", "batchaug/functional/_color.py", "s = 255.999 / 255.0", "s = 256.0 / 255.0",
           COLOR_T, "uint8 hue's float -> uint8 scale"),
    Mutant("C7", "batchaug/functional/_color.py",
           "blurred = total.add_(inner, alpha=4.0).div_(13.0).round_()",
           "blurred = total.add_(inner, alpha=5.0).div_(13.0).round_()", COLOR_T,
           "uint8 sharpness kernel centre weight"),
    Mutant("C8", "batchaug/functional/_color.py",
           "c0 = torch.arange(0, 6, 2, dtype=xf.dtype, device=xf.device)",
           "c0 = torch.tensor([0.0, 4.0, 2.0], dtype=xf.dtype, device=xf.device)", COLOR_T,
           "hue channel centres swapped (G/B)"),
    Mutant("C9", "batchaug/functional/_color.py",
           "t = torch.sub(r, g, out=t).add_(chroma, alpha=4.0)",
           "t = torch.sub(r, g, out=t).add_(chroma, alpha=3.0)", COLOR_T,
           "in-place float hue: blue sector offset"),
    Mutant("C10", "batchaug/functional/_color.py",
           "return (xf * _per_sample(factor, xf.dtype)).clamp_(0.0, 255.0).floor_()",
           "return (xf * _per_sample(factor, xf.dtype)).clamp_(0.0, 255.0).round_()", COLOR_T,
           "uint8 brightness rounds instead of truncating"),
    # ---- functional/_augment.py
    Mutant("A1", "batchaug/functional/_augment.py", "half_w = (r * w).floor()",
           "half_w = (r * h).floor()", MIX_T, "CutMix box width from the height"),
    Mutant("A2", "batchaug/functional/_augment.py", "x2 = (cx + half_w).clamp_max(w)",
           "x2 = (cx + half_w).clamp_max(w - 1)", MIX_T, "CutMix box never reaches the last "
           "column"),
    Mutant("A3", "batchaug/functional/_augment.py", "return x.roll(1, 0)",
           "return x.roll(-1, 0)", MIX_T, "partner is sample i + 1 (targets still i - 1)"),
    Mutant("A4", "batchaug/functional/_augment.py",
           "return torch.lerp(partner(targets), targets, w)",
           "return torch.lerp(targets, partner(targets), w)", MIX_T, "targets' weights swapped"),
    Mutant("A5", "batchaug/functional/_augment.py",
           "return out.round_().clamp_(0.0, 255.0).to(torch.uint8)",
           "return out.clamp_(0.0, 255.0).to(torch.uint8)", MIX_T,
           "uint8 MixUp truncates instead of rounding"),
    Mutant("A6", "batchaug/functional/_augment.py", "            p = x[s - 1:e - 1]\n",
           "            p = x[s:e]\n", MIX_T, "chunked blend: partner off by one"),
    Mutant("A7", "batchaug/functional/_augment.py",
           "t = t * (1.0 - label_smoothing) + label_smoothing / num_classes",
           "t = t * (1.0 - label_smoothing) + label_smoothing / (num_classes - 1)", MIX_T,
           "label smoothing spreads over num_classes - 1"),
    # ---- transforms/_augment.py
    Mutant("TA1", "batchaug/transforms/_augment.py",
           "_random.beta(ref, self.cutmix_alpha, self.cutmix_alpha, keys=k, draw=10)",
           "_random.beta(ref, self.cutmix_alpha, self.mixup_alpha, keys=k, draw=10)", MIX_T,
           "CutMix's lambda from Beta(cutmix_alpha, mixup_alpha)"),
    Mutant("TA2", "batchaug/transforms/_augment.py",
           "cx = _random.integers(ref, 0, w, keys=k, draw=20)",
           "cx = _random.integers(ref, 0, w - 1, keys=k, draw=20)", MIX_T,
           "CutMix centre never in the last column"),
    Mutant("TA3", "batchaug/transforms/_augment.py",
           "cut = _random.bernoulli(ref, self.switch_prob, keys=k, draw=22) & apply",
           "cut = _random.bernoulli(ref, 1.0 - self.switch_prob, keys=k, draw=22) & apply",
           MIX_T, "switch_prob means MixUp's share"),
    Mutant("TA4", "batchaug/transforms/_augment.py",
           "lam = torch.where(apply & ~cut, lam, one)", "lam = torch.where(apply, lam, one)",
           MIX_T, "CutMix samples also blended"),
    Mutant("TA5", "batchaug/transforms/_augment.py",
           "mass = torch.where(cut, kept, lam.to(torch.float64))",
           "mass = torch.where(cut, 1.0 - kept, lam.to(torch.float64))", MIX_T,
           "CutMix target weight is the pasted share"),
    # ---- functional/_auto_augment.py
    Mutant("FA1", "batchaug/functional/_auto_augment.py",
           'top = 4 if space == "augmix" else 8', "top = 8", AUTO_T,
           "AugMix posterize keeps 8..5 bits instead of 4..1"),
    Mutant("FA2", "batchaug/functional/_auto_augment.py", "end = side / 3.0",
           "end = side / 2.0", AUTO_T, "AugMix translate range"),
    Mutant("FA3", "batchaug/functional/_auto_augment.py",
           'return torch.linspace(0.0, 135.0 if space == "wide" else 30.0, num_bins',
           'return torch.linspace(0.0, 135.0 if space == "wide" else 45.0, num_bins', AUTO_T,
           "standard rotate range"),
    # ---- transforms/_auto_augment.py
    Mutant("AA1", "batchaug/transforms/_auto_augment.py",
           '(("Posterize", 0.4, 8), ("Rotate", 0.6, 9)),',
           '(("Posterize", 0.4, 8), ("Rotate", 0.6, 8)),', AUTO_T, "imagenet policy typo"),
    Mutant("AA2", "batchaug/transforms/_auto_augment.py",
           '(("Invert", 0.1, None), ("Contrast", 0.2, 6)),',
           '(("Invert", 0.1, None), ("Contrast", 0.2, 5)),', AUTO_T, "cifar10 policy typo"),
    Mutant("AA3", "batchaug/transforms/_auto_augment.py",
           "k = _random.integers(x, 1, n_ops + 1, size=width * depth",
           "k = _random.integers(x, 1, n_ops, size=width * depth", AUTO_T,
           "AugMix never draws its last op"),
    Mutant("AA4", "batchaug/transforms/_auto_augment.py",
           "d = _random.integers(x, 1, 4, size=width", "d = _random.integers(x, 1, 3, size=width",
           AUTO_T, "AugMix chain depth never 3"),
    Mutant("AA5", "batchaug/transforms/_auto_augment.py",
           "return mix.to(torch.int16).to(torch.uint8)",
           "return mix.round().to(torch.int16).to(torch.uint8)", AUTO_T,
           "AugMix uint8 rounds (torchvision truncates)"),
    Mutant("AA6", "batchaug/transforms/_auto_augment.py",
           "b = _random.integers(x, 0, self.num_magnitude_bins, keys=keys, draw=1)",
           "b = _random.integers(x, 0, self.num_magnitude_bins - 1, keys=keys, draw=1)", AUTO_T,
           "TrivialAugmentWide never draws the last bin"),
    Mutant("AA7", "batchaug/transforms/_auto_augment.py",
           "return torch.where(negate & signed, -mag, mag)",
           "return torch.where(negate, -mag, mag)", AUTO_T, "unsigned ops negated too"),
    Mutant("AA8", "batchaug/transforms/_auto_augment.py",
           "w = _random.dirichlet(x, self.alpha, width, keys=keys, draw=4) * m[:, 1:2]",
           "w = _random.dirichlet(x, self.alpha, width, keys=keys, draw=4) * m[:, :1]", AUTO_T,
           "AugMix chain weights scaled by the original's weight"),
    # ---- functional/_crop.py, _warp.py, _resize.py and RandomResizedCrop
    Mutant("G1", "batchaug/functional/_crop.py", "if d % 2 == 1 and k % 2 == 1:",
           "if d % 2 == 1:", WARP_T, "centre crop rounds half up, not half to even"),
    Mutant("G2", "batchaug/functional/_warp.py", "b = -(a * tan_sx + torch.sin(rot))",
           "b = -(a * tan_sx - torch.sin(rot))", WARP_T, "affine matrix sign"),
    Mutant("G3", "batchaug/functional/_warp.py", "cx = center[0] - width * 0.5",
           "cx = center[0] - (width - 1) * 0.5", WARP_T, "affine centre off by half a pixel"),
    Mutant("G4", "batchaug/functional/_crop.py",
           "return torch.where(i < size, i, period - i)",
           "return torch.where(i < size, i, period - 1 - i)", WARP_T + ["tests/transforms/test_misc.py"],
           "reflect padding repeats the edge"),
    Mutant("G5", "batchaug/functional/_resize.py",
           "src = torch.minimum(((j + 0.5) * scale - 0.5).clamp_min(0.0), len_f - 1.0)",
           "src = torch.minimum((j * scale).clamp_min(0.0), len_f - 1.0)", WARP_T,
           "bilinear resized crop samples at corners (align_corners=True-like)"),
    Mutant("G6", "batchaug/transforms/_geometry.py",
           "* (width - w + 1).to(torch.float32))", "* (width - w).to(torch.float32))", WARP_T,
           "RandomResizedCrop's left offset never the rightmost position"),
    Mutant("G7", "batchaug/transforms/_geometry.py",
           "hs = torch.sqrt(target_area / aspect).round()",
           "hs = torch.sqrt(target_area * aspect).round()", WARP_T,
           "RandomResizedCrop box height from the wrong aspect"),
    Mutant("G8", "batchaug/transforms/_geometry.py",
           "left = _random.integers(x, 0, pw - self.width + 1, keys=keys, draw=1)",
           "left = _random.integers(x, 0, pw - self.width, keys=keys, draw=1)",
           ["tests/transforms/test_geometry.py", "tests/transforms/test_transforms_basic.py",
            "tests/transforms/test_keyed.py"],
           "RandomCrop's left offset never the rightmost position"),
    Mutant("G9", "batchaug/transforms/_warps.py",
           "bound_w = int(self.distortion_scale * (width // 2)) + 1",
           "bound_w = int(self.distortion_scale * (width // 2))",
           ["tests/transforms/test_warps.py", "-k", "TestRandomPerspective"],
           "RandomPerspective's corner range one short"),
    Mutant("G10", "batchaug/transforms/_warps.py",
           "(_random.uniform(x, -max_dx, max_dx, keys=keys, draw=1).round(),",
           "(_random.uniform(x, -max_dx, max_dx, keys=keys, draw=1).trunc(),", WARP_T,
           "RandomAffine's shift truncated (0 twice as likely) instead of rounded"),
    # ---- issue 28 item 9: the ragged index (data/ragged.py, target_writer.py, targets.py)
    Mutant("R1", "batchaug/data/ragged.py", "(off[1:] != ends[:-1]).any()",
           "(off[1:] < ends[:-1]).any()", INDEX_T, "index.npy: a gap between images accepted"),
    Mutant("R2", "batchaug/data/ragged.py", "(off[1:] != ends[:-1]).any()",
           "(off[1:] > ends[:-1]).any()", INDEX_T, "index.npy: overlapping images accepted"),
    Mutant("R3", "batchaug/data/ragged.py", " or off[0] != 0:", ":", INDEX_T,
           "index.npy: a first offset past 0 accepted"),
    Mutant("R4", "batchaug/data/ragged.py", "int(ends.max()) > data_size",
           "int(ends.max()) > data_size + 1", INDEX_T,
           "index.npy: the last image may end one byte past the data file"),
    Mutant("R5", "batchaug/data/ragged.py", "(h < 1).any() or (w < 1).any()",
           "(h < 0).any() or (w < 0).any()", INDEX_T, "index.npy: an empty image accepted"),
    Mutant("R6", "batchaug/data/ragged.py", "if not -len(self) <= i < len(self):",
           "if not -len(self) < i < len(self):", INDEX_T,
           "RaggedImages.image(-len) refused"),
    Mutant("R7", "batchaug/data/ragged.py", "if not -len(self) <= i < len(self):",
           "if not -len(self) - 1 <= i < len(self):", INDEX_T,
           "RaggedImages.image(-len - 1) wraps instead of IndexError"),
    # one range check (targets.check_ragged_mask_range) for from_dataset and write_cache
    Mutant("R8", "batchaug/data/target_writer.py", "admit_sample(self, label, where, self.ragged)",
           "admit_sample(self, label, where)", INDEX_T, "write_cache wraps ragged mask ids"),
    Mutant("R9", "batchaug/data/targets.py", "if lo < 0 or hi > 255:",
           "if hi > 255:", INDEX_T, "both writers wrap negative ragged mask ids"),
    Mutant("R10", "batchaug/data/targets.py", "if lo < 0 or hi > 255:",
           "if lo < 0 or hi >= 255:", INDEX_T,
           "both writers refuse VOC's ignore label 255 in a ragged mask"),
    Mutant("R11", "batchaug/data/targets.py", "if lo < 0 or hi > 255:",
           "if lo < 0 or hi > 256:", INDEX_T, "both writers wrap mask id 256 to 0"),
    Mutant("R13", "batchaug/data/ragged.py",
           'if meta.get("storage") == "raw" and (nb != c * h * w).any():',
           'if meta.get("storage") == "raw" and (nb > c * h * w).any():', INDEX_T,
           "index.npy: a raw image shorter than C * h * w accepted"),
    # ---- issue 28 item 9: boxes drawn by the transforms at their boundaries
    Mutant("B1", "batchaug/transforms/_geometry.py",
           "fits = (ws > 0) & (ws <= width) & (hs > 0) & (hs <= height)",
           "fits = (ws > 0) & (ws < width) & (hs > 0) & (hs <= height)", BOX_T,
           "RandomResizedCrop: a box as wide as the image never fits"),
    Mutant("B2", "batchaug/transforms/_geometry.py",
           "fits = (ws > 0) & (ws <= width) & (hs > 0) & (hs <= height)",
           "fits = (ws > 0) & (ws <= width) & (hs > 0) & (hs < height)", BOX_T,
           "RandomResizedCrop: a box as tall as the image never fits"),
    Mutant("B3", "batchaug/transforms/_geometry.py",
           'top = torch.where(found, top, torch.div(height - h, 2, rounding_mode="floor"))',
           'top = torch.where(found, top, torch.div(height - h + 1, 2, rounding_mode="floor"))',
           BOX_T,
           "RandomResizedCrop: the fallback centre rounds up on an odd margin"),
    Mutant("B4", "batchaug/transforms/_geometry.py",
           'left = torch.where(found, left, torch.div(width - w, 2, rounding_mode="floor"))',
           'left = torch.where(found, left, torch.div(width - w + 1, 2, rounding_mode="floor"))',
           BOX_T,
           "RandomResizedCrop: the fallback centre rounds up on an odd margin (left)"),
    # the crop stage's draws are RandomResizedCrop's (make_params with sizes: the same rule)
    Mutant("B5", "batchaug/transforms/_geometry.py",
           "fits = (ws > 0) & (ws <= width) & (hs > 0) & (hs <= height)",
           "fits = (ws > 0) & (ws < width) & (hs > 0) & (hs <= height)", CROP_T,
           "crop stage RandomResizedCrop: a box as wide as the image never fits"),
    Mutant("B6", "batchaug/transforms/_geometry.py",
           'top = torch.where(found, top, torch.div(height - h, 2, rounding_mode="floor"))',
           'top = torch.where(found, top, torch.div(height - h + 1, 2, rounding_mode="floor"))',
           CROP_T, "crop stage: the fallback centre rounds up on an odd margin"),
    Mutant("B7", "batchaug/transforms/_misc.py",
           "top = _random.integers_below(h - bh + 1, keys=keys, draw=3)",
           "top = _random.integers_below(h - bh, keys=keys, draw=3)", ERASE_T,
           "RandomErasing never reaches the last row"),
    Mutant("B8", "batchaug/functional/_misc.py", "fits = (bh < h) & (bw < w)",
           "fits = (bh <= h) & (bw < w)", ERASE_T,
           "RandomErasing accepts a box as tall as the image (torchvision does not)"),
    Mutant("B9", "batchaug/transforms/_timm_mix.py",
           "top = _random.integers_below(h - bh + 1, keys=keys, draw=4)",
           "top = _random.integers_below(h - bh, keys=keys, draw=4)", TIMM_ERASE_T,
           "TimmRandomErasing never reaches the last row"),
    Mutant("B10", "batchaug/functional/_misc.py", "fits = (bh < h) & (bw < w)",
           "fits = (bh < h) & (bw <= w)", TIMM_ERASE_T,
           "TimmRandomErasing accepts a box as wide as the image (timm does not)"),
    Mutant("B11", "batchaug/transforms/_timm.py",
           "d = _random.integers(x, 1, 4, size=width, keys=keys, draw=24)",
           "d = _random.integers(x, 1, 3, size=width, keys=keys, draw=24)", TIMM_AUGMIX_T,
           "TimmAugMix chain depth never 3"),
    Mutant("B12", "batchaug/transforms/_timm.py",
           "op = torch.where(step < d.unsqueeze(2), op, torch.zeros_like(op))",
           "op = torch.where(step <= d.unsqueeze(2), op, torch.zeros_like(op))", TIMM_AUGMIX_T,
           "TimmAugMix chains one op longer than drawn"),
    # ---- issue 28 item 9: the crop stage's padding (functional/_sized.py, RandomCrop's sized draws)
    Mutant("P1", "batchaug/functional/_sized.py",
           "idx = torch.where(r < n, r, period - r)",
           "idx = torch.where(r < n, r, period - 1 - r)", PAD_T,
           "crop stage reflect padding repeats the edge"),
    Mutant("P2", "batchaug/functional/_sized.py",
           "period = torch.clamp(2 * (n - 1), min=1)", "period = torch.clamp(2 * n - 1, min=1)",
           PAD_T, "crop stage reflect padding's period one too long"),
    Mutant("P3", "batchaug/functional/_sized.py",
           "idx = torch.where(r < n, r, 2 * n - 1 - r)", "idx = torch.where(r < n, r, 2 * n - r)",
           PAD_T, "crop stage symmetric padding skips the edge"),
    Mutant("P4", "batchaug/functional/_sized.py", "r = torch.remainder(pos, 2 * n)",
           "r = torch.remainder(pos, 2 * n - 1)", PAD_T,
           "crop stage symmetric padding's period one too short"),
    Mutant("P5", "batchaug/transforms/_geometry.py",
           "return _random.integers_below(padded - crop + 1, keys, draw) - pad_before",
           "return _random.integers_below((padded - crop).clamp_min(1), keys, draw) - pad_before",
           PAD_T, "crop stage RandomCrop never at the last position"),
    Mutant("P6", "batchaug/transforms/_geometry.py", "        pad_before = extra + before\n",
           "        pad_before = before\n", PAD_T,
           "crop stage pad_if_needed pads only after the image"),
    # ---- issue 29 item 2: the loader's crop as an Augment (the sized pairs of steps)
    Mutant("S1", "batchaug/_fusion.py",
           "matrix = resized_crop_matrix_each(top.to(torch.float64) * sy, left.to(torch.float64) "
           "* sx,",
           "matrix = resized_crop_matrix_each(top.to(torch.float64), left.to(torch.float64) * sx,",
           ["tests/data/test_ragged_boxes.py", "-k", "resize"],
           "Resize(int) + crop moves boxes by the window's top unscaled"),
    Mutant("S2", "batchaug/_fusion.py",
           "resized = S.resized_sizes(sizes, resize.size[0] if len(resize.size) == 1 else None,",
           "resized = S.resized_sizes(sizes.flip(1), resize.size[0] if len(resize.size) == 1 "
           "else None,",
           ["tests/data/test_crop.py", "-k", "resize"],
           "Resize(int) + crop resizes each image to its transposed size"),
    Mutant("S3", "batchaug/functional/_sized.py",
           "box = warp_window(x[i:i + 1, :, :h, :w], mat, b_t, b_l, b_h, b_w, interpolation,",
           "box = warp_window(x[i:i + 1, :, :h, :w], mat, b_t, b_l + 1, b_h, b_w, "
           "interpolation,",
           ["tests/data/test_crop.py", "-k", "warp_on_the_box"],
           "the fused warp + RandomResizedCrop warps a box one pixel to the right"),
    # ---- issue 28 item 9: the timm conversion (migrate_timm.py, transforms/_timm*.py)
    Mutant("T1", "batchaug/migrate_timm.py",
           'translate_const=float(hparams.get("translate_const", 250)),',
           "translate_const=250.0,", TIMM_CONV_T, "from_timm drops timm's translate_const"),
    Mutant("T2", "batchaug/migrate_timm.py", 'magnitude_max=hparams.get("magnitude_max"),',
           "magnitude_max=None,", TIMM_CONV_T, "from_timm drops timm's magnitude_max"),
    Mutant("T3", "batchaug/migrate_timm.py", "correct_lam=bool(t.correct_lam),",
           "correct_lam=True,", TIMM_CONV_T, "from_timm drops Mixup's correct_lam"),
    Mutant("T4", "batchaug/migrate_timm.py",
           "common = dict(translate_const=float(int(img_size * 0.45)),",
           "common = dict(translate_const=float(round(img_size * 0.45)),", TIMM_CONV_T,
           "timm_augment rounds translate_const (timm truncates)"),
    Mutant("T5", "batchaug/migrate_timm.py", "alpha=1.0, magnitude_std=math.inf)",
           "alpha=1.0, magnitude_std=0.0)", TIMM_CONV_T,
           "timm_augment augmix: magnitude fixed instead of uniform in [0, m]"),
    Mutant("T6", "batchaug/transforms/_timm.py",
           "return mag.expand(x.shape[0], size).clamp(0.0, self.magnitude_max)",
           "return mag.expand(x.shape[0], size).clamp(0.0, 10.0)", TIMM_CONV_T,
           "magnitude_max ignored (levels clipped at 10)"),
    Mutant("T7", "batchaug/transforms/_timm.py", "mag = mag + self.magnitude_std * z",
           "mag = mag + z", TIMM_CONV_T, "magnitude noise ignores magnitude_std"),
    Mutant("T8", "batchaug/transforms/_timm.py",
           "* torch.cos(2.0 * math.pi * u2)", "* torch.sin(2.0 * math.pi * u2)", TIMM_CONV_T,
           "magnitude noise: Box-Muller's other (same-law) variate: keyed values change"),
    Mutant("T9", "batchaug/transforms/_timm_mix.py",
           "if self.correct_lam or minmax is not None:", "if minmax is not None:", TIMM_CONV_T,
           "TimmMixup ignores correct_lam=True"),
    Mutant("T10", "batchaug/transforms/_timm_mix.py",
           "if self.correct_lam or minmax is not None:", "if True:", TIMM_CONV_T,
           "TimmMixup ignores correct_lam=False"),
    # ---- issue 28 item 9: keyed draws (_random.py) whose law is right but values change
    Mutant("K1", "batchaug/_random.py", "    d = a - 1.0 / 3.0\n", "    d = a - 1.0 / 2.0\n",
           KEYED_T, "Marsaglia-Tsang's d"),
    Mutant("K2", "batchaug/_random.py", "g = g * u.select(2, per - 1) ** (1.0 / alpha)",
           "g = g * u.select(2, per - 1) ** alpha", KEYED_T, "the alpha < 1 boost's exponent"),
    Mutant("K3", "batchaug/_random.py", "    tries = 8\n", "    tries = 6\n", KEYED_T,
           "gamma tries (same law, other values: keyed streams change)"),
    Mutant("K4", "batchaug/_random.py",
           "first = torch.where(ok, torch.arange(tries, 0, -1, device=keys.device), 0)",
           "first = torch.where(ok, torch.arange(1, tries + 1, device=keys.device), 0)",
           KEYED_T, "the last accepted gamma try instead of the first (same law)"),
    Mutant("K5", "batchaug/_random.py",
           "g2 = _keyed_gammas(k, draw + 1, beta_, 1).squeeze(1)",
           "g2 = _keyed_gammas(k, draw, beta_, 1).squeeze(1)", KEYED_T,
           "Beta(a, b): both gammas from one stream"),
    Mutant("K6", "batchaug/_random.py",
           "z = torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(2.0 * math.pi * u2)\n"
           "        return z.view",
           "z = torch.sqrt(-2.0 * torch.log(u1)) * torch.sin(2.0 * math.pi * u2)\n"
           "        return z.view", KEYED_T, "keyed normal noise: sin variate (same law)"),
    Mutant("K7", "batchaug/_random.py", "w = _words(k, draw, per) >> 24",
           "w = _words(k, draw, per) & 0xFF", KEYED_T, "keyed uint8 noise: low byte (same law)"),
    Mutant("K8", "batchaug/_random.py",
           "return (_words(keys, draw, size).to(torch.float64) + 0.5) * (1.0 / 4294967296.0)",
           "return (_words(keys, draw, size).to(torch.float64) + 1.0) * (1.0 / 4294967296.0)",
           KEYED_T, "open uniforms shifted half a step"),
    Mutant("K9", "batchaug/_random.py", "u2 = keyed_rand(k, draw + 1, per)",
           "u2 = keyed_rand(k, draw + 2, per)", KEYED_T,
           "keyed normal noise reads the next call site's stream"),
    # ---- issue 35: window crop and decode
    Mutant("W1", "batchaug/data/roi_crop.py", "hflip = hflip ^ drawn", "hflip = hflip | drawn",
           ROI_T, "two horizontal flips before the crop: OR instead of XOR"),
    Mutant("W2", "batchaug/data/roi_crop.py", "dct_denominator(bh, bw, oh, ow)",
           "dct_denominator(bw, bh, oh, ow)", ROI_T,
           "decode_scale='auto': the window's height and width swapped"),
    Mutant("W3", "batchaug/data/roi_crop.py",
           "t0, t1 = round(t * sh / h), round((t + bh) * sh / h)",
           "t0, t1 = int(t * sh / h), int((t + bh) * sh / h)", ROI_T,
           "the scaled window's edges truncated instead of rounded"),
    Mutant("W4", "batchaug/data/roi_decode.py", "if ok and win[3] > 1:", "if ok:", ROI_T,
           "1-pixel-wide windows through libjpeg-turbo's cropped decode (4:2:0 differs)"),
    Mutant("W5", "batchaug/data/roi_decode.py", "if t < 0 or l < 0 or h < 1 or w < 1:",
           "if t < 0 or l < 0 or h < 0 or w < 0:", ROI_T, "zero-size windows accepted"),
    Mutant("W6", "batchaug/data/loader.py",
           "if m_item is not None and m_item[0] is crop:", "if m_item is not None:",
           ROI_T, "a keyed batch made ahead with the old crop kept after set_crop"),
    Mutant("W7", "batchaug/data/loader.py", "            if seen[0] is not crop:",
           "            if seen is None:", ROI_T, "set_crop mid-epoch ignored (window decode)"),
    # ---- issue 35: the JPEG codec
    Mutant("J1", "batchaug/data/jpeg.py", "        if marker != 0xDA:\n            continue\n",
           "        if marker != 0xDA:\n            continue\n"
           "        return data.rfind(b'\\xff\\xd9') + 2\n", JPEG_T,
           "the stream cut at the last FF D9 in the file"),
    Mutant("J2", "batchaug/data/jpeg.py", "        if nxt == 0x00 or 0xD0 <= nxt <= 0xD7:",
           "        if nxt == 0x00:", JPEG_T, "restart markers end the scan"),
    Mutant("J3", "batchaug/data/jpeg.py", "    end = _jpeg_end(data)",
           "    end = data.rfind(b'\\xff\\xd9') + 2", JPEG_T,
           "the last FF D9 of the file ends the stream"),
    Mutant("J4", "batchaug/data/jpeg.py",
           "return lambda data, device: tc_decode([without_orientation(b) for b in data],",
           "return lambda data, device: tc_decode([b for b in data],", JPEG_T,
           "TorchCodec applies EXIF orientation"),
    Mutant("J5", "batchaug/data/jpeg.py",
           "            return (entry + 8, little) if value != 1 else None",
           "            return (entry + 8, not little) if value != 1 else None", JPEG_T,
           "orientation written with the wrong byte order"),
    Mutant("J6", "batchaug/data/jpeg.py",
           "    if decoded.shape != image.shape or not torch.equal(decoded, image.cpu()):",
           "    if decoded.shape != image.shape:", JPEG_T,
           "a pre_transform that keeps the shape keeps the original bytes"),
    Mutant("J7", "batchaug/data/jpeg.py",
           "        out[a::threads] = _decode_cpu(data[a::threads], names[a::threads])",
           "        out[a::threads] = _decode_cpu(data[a::threads], names[::threads])", ROI_T,
           "a corrupt sample at threads > 1 named wrongly"),
    Mutant("J8", "batchaug/data/jpeg.py",
           "while i + 4 <= n and d[i] == 0xFF and 0xE0 <= d[i + 1] <= 0xEF:",
           "while i + 4 <= n and d[i] == 0xFF and d[i + 1] == 0xE1:", JPEG_T,
           "the orientation looked for only in a first APP1 (not after JFIF's APP0)"),
    Mutant("J9", "batchaug/data/loader.py",
           "                        out, y = self._crop_batch(x, sizes, y, k, None)",
           "                        out = self._roi_batch(self._window_plan()[0], images, item, k, "
           "True)", ROI_T, "set_crop to a crop that decodes whole images, mid-epoch"),
    # ---- issue 35: sources
    Mutant("SR1", "batchaug/data/sources.py",
           "                if not samples or samples[-1][0] != key:",
           "                if not any(k == key for k, _ in samples):", SRC_T,
           "a key seen again later joins its first sample (a sample lost)"),
    Mutant("SR2", "batchaug/data/sources.py", "                if ext.lower() in parts:",
           "                if False:", SRC_T, "a suffix twice in a sample: the last wins"),
    Mutant("SR3", "batchaug/data/sources.py", 'stem, ext = base.split(".", 1)',
           'stem, ext = base.rsplit(".", 1)', SRC_T, "a dotted member name KEY.seg.png"),
    Mutant("SR4", "batchaug/data/sources.py", "        if len(data) != size:",
           "        if len(data) > size:", SRC_T, "a truncated member read short"),
    Mutant("SR5", "batchaug/data/sources.py", "        if int(b) < int(a):",
           "        if int(b) <= int(a):", SRC_T, "{n..n} refused as running backwards"),
    Mutant("SR6", "batchaug/data/sources.py",
           "            if len(found) == 1:\n                return found[0]\n        raise",
           "            if found:\n                return found[0]\n        raise", SRC_T,
           "both label and labels columns: the first used silently"),
    Mutant("SR7", "batchaug/data/sources.py", 'dtype.startswith(("int", "uint"))',
           'dtype.startswith("int")', SRC_T, "unsigned label columns refused"),
    Mutant("SR8", "batchaug/data/sources.py",
           '        data = value.get("bytes")\n        if data is None and value.get("path"):',
           '        data = None\n        if value.get("path"):', SRC_T,
           "the stored path read when bytes are stored"),
    Mutant("SR9", "batchaug/data/sources.py",
           '        return to_8bit(img, name).convert("RGB")',
           "        return to_8bit(img, name)", SRC_T, "grayscale tar images not made RGB"),
    Mutant("SR10", "batchaug/data/sources.py", '        if fmt.get("type") == "custom":',
           "        if False:", SRC_T, "a dataset's with_transform run on undecoded rows"),
    Mutant("SR11", "batchaug/data/sources.py",
           '        if not getattr(self.feature, "decode", True):',
           "        if False:", SRC_T, "Image(decode=False) columns not decoded"),
    Mutant("SR12", "batchaug/data/sources.py",
           "    if isinstance(dataset, (str, os.PathLike)):",
           "    if False:", SRC_T, "a .tar.gz path passed on as a dataset"),
    # ---- issue 35: the ragged writer, targets
    Mutant("RW1", "batchaug/data/writer.py",
           "ragged = bool((index[:, 2:4] != index[0, 2:4]).any())",
           "ragged = bool((index[:, 2] != index[0, 2]).any())", WRITE_T,
           "photos of equal height and different widths called dense"),
    Mutant("RW2", "batchaug/data/writer.py",
           "if h is None or (resumed and h.hexdigest() != digests[k]):", "if h is None:",
           WRITE_T, "a resume after a byte of the written part changed"),
    Mutant("RW3", "batchaug/data/cache.py",
           'originals = meta.get("originals") if end - start == n else None',
           'originals = meta.get("originals")', WRITE_T,
           "a shard keeps the whole cache's originals count"),
    Mutant("RW4", "batchaug/data/cache.py",
           'originals = meta.get("originals") if end - start == n else None',
           'originals = meta.get("originals")', WRITE_T,
           "a shard keeps the whole cache's originals count"),
    Mutant("RW5", "batchaug/data/format.py",
           '    return memoryview(part.reshape(-1).numpy()).cast("B")',
           '    return memoryview(part.numpy()).cast("B")', WRITE_T,
           "a cache whose images all have zero boxes cannot be saved"),
    # ---- issue 35: ragged geometry, check_crop, loader, show
    Mutant("RG1", "batchaug/functional/_sized.py",
           "limit = out_sizes.flip(1).unsqueeze(1).to(k.dtype)",
           "limit = out_sizes.unsqueeze(1).to(k.dtype)", SIZED_T,
           "keypoint validity against (h, w) instead of (w, h)"),
    Mutant("RG2", "batchaug/functional/_sized.py",
           'ok = out["keypoint_valid"] & (k < limit).all(dim=2)',
           'ok = out["keypoint_valid"] & (k <= limit).all(dim=2)', SIZED_T,
           "a keypoint on the far edge kept"),
    Mutant("RG3", "batchaug/_fusion.py", "mode, fill = crop.padding_mode, crop.fill",
           'mode, fill = "constant", crop.fill', SIZED_T, "Resize(int) + RandomCrop ignores padding_mode"),
    Mutant("RG4", "batchaug/transforms/_geometry.py", "        if out[0] < 1 or out[1] < 1:",
           "        if out[0] < 1:", SIZED_T, "output_size accepts a zero width"),
    Mutant("RG5", "batchaug/_fusion.py",
           "    if S.eager_cpu(resized) and resized.numel() > 0 and bool((resized < 1).any()):",
           "    if False:", SIZED_T, "Resize(int, max_size) to a zero side: torch's error"),
    Mutant("RG6", "batchaug/functional/_sized.py",
           'if eager_cpu(x) and interpolation == "bilinear" and not antialias and x.shape[0] > 0:',
           "if False:", SIZED_T, "antialias=False on a ragged batch: +-1 from torchvision"),
    Mutant("RG7", "batchaug/functional/_targets.py",
           "        if not isinstance(t, torch.Tensor):",
           "        if False:", SIZED_T, "with_sizes given a list: AttributeError"),
    Mutant("CC1", "batchaug/data/crop.py",
           "        elif final is None and _keeps_aspect(m) and resize is None:",
           "        elif final is None and _keeps_aspect(m):", LOADER_T,
           "Resize(int), Resize(int), CenterCrop accepted"),
    Mutant("CC2", "batchaug/data/crop.py",
           "            if resize is not None and flat[i][1] is not flat[i - 1][1]:",
           "            if False:", LOADER_T, "Resize(int) + crop split by a nested Augment"),
    Mutant("L1", "batchaug/data/loader.py",
           "            if state[key] != mine[key] or type(state[key]) is not type(mine[key]):",
           "            if state[key] != mine[key]:", LOADER_T,
           "state fields of another type accepted on resume"),
    Mutant("L2", "batchaug/data/loader.py",
           "            if out.untyped_storage().data_ptr() == x.untyped_storage().data_ptr():",
           "            if False:", LOADER_T, "a view of the reused host buffer handed out"),
    Mutant("SH1", "batchaug/pipeline.py", "        augment.train(was_training)", "        pass",
           SHOW_T, "replay leaves the augment in train mode"),
    Mutant("SH2", "batchaug/show_command.py", "        bad = [i for i in index if i >= total]",
           "        bad = [i for i in index if i > total]", SHOW_T,
           "--index == len(cache): IndexError"),
    Mutant("SH3", "batchaug/pipeline.py", "(index_t >= len(cache))).any()):",
           "(index_t > len(cache))).any()):", SHOW_T, "replay(index=len(cache)): IndexError"),
    # ---- issue 35: word views at any offset
    Mutant("V1", "batchaug/functional/_utils.py",
           "    return (x.storage_offset() * x.element_size()) % 8 == 0",
           "    return True", VIEW_T, "int64 word views of uint8 at an odd offset"),
    Mutant("V2", "batchaug/functional/_crop.py",
           "x.reshape(-1).view(n, c, h, w).view(torch.uint8).view(word),",
           "x.view(torch.uint8).view(word),", VIEW_T,
           "a size-1 channel dim with stride 1 (decoded grayscale) in the pad+crop word view"),
    Mutant("V3", "batchaug/functional/_crop.py",
           "if word_bytes == 1 and row_bytes % size == 0 and offset_bytes % size == 0:",
           "if word_bytes == 1 and row_bytes % size == 0:", VIEW_T,
           "pad+crop words at an offset not a multiple of the word"),
]


def _copy_repo(root: Path, dest: Path, rev: Optional[str]) -> None:
    if rev is not None:
        archive = subprocess.run(["git", "archive", rev], cwd=root, check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
        return
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=root,
                           check=True, capture_output=True).stdout.decode().split("\0")
    for f in filter(None, files):
        src = root / f
        if src.is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / f)


def _run(mutant: Mutant, copy: Path, python: str, timeout: float) -> dict:
    target = copy / mutant.path
    original = target.read_text()
    parts = original.split(mutant.old)
    if len(parts) <= mutant.nth + 1:
        return {"id": mutant.id, "result": "stale", "seconds": 0.0}
    mutated = (mutant.old.join(parts[:mutant.nth + 1]) + mutant.new
               + mutant.old.join(parts[mutant.nth + 1:]))
    env = dict(os.environ, PYTHONPATH=str(copy), OMP_NUM_THREADS="1",
               HYPOTHESIS_PROFILE=os.environ.get("HYPOTHESIS_PROFILE", "ci"))
    cmd = [python, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *mutant.tests]
    # a failing example hypothesis saved for the previous mutant must not be replayed here
    shutil.rmtree(copy / ".hypothesis", ignore_errors=True)
    t0 = time.time()
    try:
        target.write_text(mutated)
        proc = subprocess.run(cmd, cwd=copy, env=env, capture_output=True, text=True,
                              timeout=timeout)
        rc, tail = proc.returncode, (proc.stdout + proc.stderr).strip().splitlines()
    except subprocess.TimeoutExpired:
        rc, tail = -1, ["timeout"]
    finally:
        target.write_text(original)
    failed = [line for line in tail if line.startswith(("FAILED", "ERROR"))]
    # 0: every test passed (survived); 1: a test failed (caught); others: collection errors,
    # crashes, timeouts, reported as caught but marked
    result = "survived" if rc == 0 else "caught" if rc == 1 else f"caught (rc {rc})"
    return {"id": mutant.id, "result": result, "seconds": round(time.time() - t0, 1),
            "by": failed[0] if failed else (tail[-1] if tail else "")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="*", help="mutant ids to run")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("--check", action="store_true",
                    help="name each stale mutant (its file or text no longer found) and exit "
                         "1 if there is one, else 0; runs nothing")
    ap.add_argument("--json", help="write the results to this file")
    ap.add_argument("--rev", help="test the repository as committed at this git revision "
                    "instead of the working tree")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per mutant")
    args = ap.parse_args(argv)
    mutants = [m for m in MUTANTS if not args.only or m.id in args.only]
    root = Path(__file__).resolve().parent.parent
    if args.check:
        stale = [m for m in mutants if not (root / m.path).is_file()
                 or (root / m.path).read_text().count(m.old) <= m.nth]
        for m in stale:
            print(f"stale: {m.id} {m.path}: {m.old!r} not found")
        print(f"{len(stale)} of {len(mutants)} mutants stale")
        return 1 if stale else 0
    if args.list:
        for m in mutants:
            found = (root / m.path).read_text().count(m.old) > m.nth
            print(f"{m.id:5} {m.path}: {m.why}{'' if found else ' [stale]'}\n"
                  f"      - {m.old!r}\n      + {m.new!r}")
        return 0
    results = []
    with tempfile.TemporaryDirectory(prefix="batchaug-mutants-") as tmp:
        copy = Path(tmp)
        _copy_repo(root, copy, args.rev)
        for m in mutants:
            r = _run(m, copy, sys.executable, args.timeout)
            r["why"] = m.why
            results.append(r)
            print(f"{r['id']:5} {r['result']:16} {r['seconds']:7.1f}s  {m.why}  {r.get('by', '')}",
                  flush=True)
    ran = [r for r in results if r["result"] != "stale"]
    caught = sum(r["result"].startswith("caught") for r in ran)
    print(f"\n{caught} of {len(ran)} mutants caught"
          + (f" ({100 * caught / len(ran):.0f} %)" if ran else "")
          + f"; {len(results) - len(ran)} stale")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
