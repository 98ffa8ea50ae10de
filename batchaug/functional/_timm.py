"""timm's auto-augment ops (``timm.data.auto_augment``) with one op and argument per sample.

Pure and TorchScript-compatible. An op's *argument* is what timm passes to its PIL op after
``LEVEL_TO_ARG``: a shear factor, pixels, degrees, an enhance factor, bits, a threshold or an
addition (see :func:`level_to_arg`). Ops are numbered as ``OPS`` lists them:

- ShearX/ShearY/TranslateX/TranslateY/Rotate: PIL's affine matrices (``Image.transform``,
  ``Image.rotate``: output pixel centre -> input point), moved to torchvision's centred
  convention and warped by :func:`._warp.affine` (one warp for any mix of them). timm's
  translations are fractional pixels (torchvision's auto-augment truncates them to ints).
- Brightness/Color/Contrast/Sharpness: torchvision's adjust kernels with timm's factor.
- Posterize (bits 0-8), Solarize (threshold 0-256: values >= it are inverted), SolarizeAdd
  (values below 128 get ``add``, capped at 255), AutoContrast, Equalize, Invert.

Float input is treated as [0, 1]: thresholds and additions are divided by 255.
"""
from __future__ import annotations

import math
from typing import List, Optional

import torch
from torch import Tensor

from ._auto_augment import family_of, posterize_bits, solarize_threshold
from ._color import (
    adjust_brightness,
    adjust_contrast,
    adjust_saturation,
    adjust_sharpness,
    autocontrast,
    equalize,
    invert,
)
from ._warp import affine
from ._misc import group_by_branch, inverse_permutation
from ._utils import match_layout

OPS: List[str] = [
    "Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness",
    "Color", "Contrast", "Sharpness", "Posterize", "Solarize", "SolarizeAdd", "AutoContrast",
    "Equalize", "Invert",
]
# op id -> family: 0 identity, 1 geometry (ids 1-5, one warp), then one per colour op
FAMILY_OF_OP: List[int] = [0, 1, 1, 1, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]
NUM_FAMILIES = 12

# timm op name -> (op id, level-to-argument rule). Rules: 0 none, 1 rotate (30 degrees at
# level 10, signed), 2 posterize int(l * 0.4), 3 posterize increasing 4 - int(l * 0.4),
# 4 posterize original int(l * 0.4) + 4, 5 solarize min(256, int(l * 25.6)), 6 solarize
# increasing 256 - that, 7 solarize-add min(128, int(l * 11)), 8 enhance l * 0.18 + 0.1,
# 9 enhance increasing max(0.1, 1 +- l * 0.09), 10 shear +-l * 0.03, 11 translate pixels
# +-l / 10 * translate_const, 12 translate +-l / 10 * translate_pct of the width,
# 13 the same of the height.
TIMM_NAMES = {
    "AutoContrast": (13, 0), "Equalize": (14, 0), "Invert": (15, 0), "Rotate": (5, 1),
    "Posterize": (10, 2), "PosterizeIncreasing": (10, 3), "PosterizeOriginal": (10, 4),
    "Solarize": (11, 5), "SolarizeIncreasing": (11, 6), "SolarizeAdd": (12, 7),
    "Color": (7, 8), "ColorIncreasing": (7, 9), "Contrast": (8, 8),
    "ContrastIncreasing": (8, 9), "Brightness": (6, 8), "BrightnessIncreasing": (6, 9),
    "Sharpness": (9, 8), "SharpnessIncreasing": (9, 9), "ShearX": (1, 10), "ShearY": (2, 10),
    "TranslateX": (3, 11), "TranslateY": (4, 11), "TranslateXRel": (3, 12),
    "TranslateYRel": (4, 13),
}


def level_to_arg(rule: Tensor, level: Tensor, negate: Tensor, translate_const: float,
                 translate_pct: float, height: int, width: int) -> Tensor:
    """timm's ``LEVEL_TO_ARG`` per sample: float64 arguments for rules ``rule`` (int64, any
    shape, see ``TIMM_NAMES``) at magnitude ``level`` (float, already clipped to
    [0, magnitude_max]); ``negate`` (bool) flips the sign of the signed rules, as timm's
    ``_randomly_negate``. Float64, as timm computes in Python floats."""
    lv = level.to(torch.float64) / 10.0
    sign = torch.where(negate, -1.0, 1.0).to(torch.float64)
    zero = torch.zeros_like(lv)
    quarter = torch.trunc(lv * 4.0)
    solar = torch.clamp_max(torch.trunc(lv * 256.0), 256.0)
    enhance_inc = torch.clamp_min(1.0 + sign * (lv * 0.9), 0.1)
    out = zero
    out = torch.where(rule == 1, sign * (lv * 30.0), out)
    out = torch.where(rule == 2, quarter, out)
    out = torch.where(rule == 3, 4.0 - quarter, out)
    out = torch.where(rule == 4, quarter + 4.0, out)
    out = torch.where(rule == 5, solar, out)
    out = torch.where(rule == 6, 256.0 - solar, out)
    out = torch.where(rule == 7, torch.clamp_max(torch.trunc(lv * 110.0), 128.0), out)
    out = torch.where(rule == 8, lv * 1.8 + 0.1, out)
    out = torch.where(rule == 9, enhance_inc, out)
    out = torch.where(rule == 10, sign * (lv * 0.3), out)
    out = torch.where(rule == 11, sign * (lv * translate_const), out)
    out = torch.where(rule == 12, sign * (lv * translate_pct) * float(width), out)
    out = torch.where(rule == 13, sign * (lv * translate_pct) * float(height), out)
    return out


def op_affine_matrix(op: Tensor, arg: Tensor, height: int, width: int) -> Tensor:
    """(N, 2, 3) float64 inverse matrices in torchvision's centred convention (what
    :func:`._warp.affine` takes) of the geometric ops (ids 1-5) with their arguments;
    the identity for the other ops.

    PIL maps an output point ``(x, y)`` (top-left origin, pixel centres at +0.5) to the input
    point ``(a x + b y + c, d x + e y + f)``; with the origin at the image centre the linear
    part stays and the offset becomes ``a w/2 + b h/2 + c - w/2`` (and likewise for y).
    """
    m = arg.to(torch.float64)
    one = torch.ones_like(m)
    zero = torch.zeros_like(m)
    shear_x = op == 1
    shear_y = op == 2
    move_x = op == 3
    move_y = op == 4
    rot = op == 5
    t = torch.where(rot, m, zero) * (math.pi / 180.0)
    cos_t = torch.cos(t)
    sin_t = torch.sin(t)
    # PIL's rotate: counter-clockwise by t about the centre, x_in = cos t x - sin t y, ...
    a = torch.where(rot, cos_t, one)
    b = torch.where(rot, -sin_t, torch.where(shear_x, m, zero))
    d = torch.where(rot, sin_t, torch.where(shear_y, m, zero))
    e = torch.where(rot, cos_t, one)
    c = torch.where(move_x, m, zero)
    f = torch.where(move_y, m, zero)
    hw = 0.5 * width
    hh = 0.5 * height
    # rotation is about the centre already (its offsets cancel); shears pivot on the corner
    cx = torch.where(rot, zero, a * hw + b * hh + c - hw)
    cy = torch.where(rot, zero, d * hw + e * hh + f - hh)
    return torch.stack([torch.stack([a, b, cx], 1), torch.stack([d, e, cy], 1)], 1)


def solarize_add(x: Tensor, add: Tensor, threshold: float = 128.0) -> Tensor:
    """timm's ``solarize_add``: values below ``threshold`` (uint8 scale) get ``add[i]`` (per
    sample, uint8 scale), capped at the dtype's maximum; others unchanged."""
    if x.dtype == torch.uint8:
        a = add.to(torch.int16).view(-1, 1, 1, 1)
        y = torch.clamp_max(x.to(torch.int16) + a, 255).to(torch.uint8)
        return torch.where(x < int(threshold), y, x)
    a = (add.to(torch.float64) / 255.0).to(x.dtype).view(-1, 1, 1, 1)
    return torch.where(x < threshold / 255.0, torch.clamp_max(x + a, 1.0), x)


def _family(x: Tensor, family: int, op: Tensor, arg: Tensor, interpolation: str,
            fill: Optional[List[float]]) -> Tensor:
    if family == 0:
        return x
    if family == 1:
        return affine(x, op_affine_matrix(op, arg, x.shape[2], x.shape[3]), interpolation, fill)
    factor = arg.to(torch.float64)
    if family == 2:
        return adjust_brightness(x, factor)
    if family == 3:
        return adjust_saturation(x, factor)
    if family == 4:
        return adjust_contrast(x, factor)
    if family == 5:
        return adjust_sharpness(x, factor)
    if family == 6:
        return posterize_bits(x, torch.trunc(factor).to(torch.int64))
    if family == 7:
        scale = 1.0 if x.dtype == torch.uint8 else 1.0 / 255.0
        return solarize_threshold(x, factor * scale)
    if family == 8:
        return solarize_add(x, factor)
    if family == 9:
        return autocontrast(x)
    if family == 10:
        return equalize(x)
    return invert(x)


def families(ops: List[int]) -> List[int]:
    """The sorted families the op ids ``ops`` belong to."""
    fam = [0, 1, 1, 1, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]  # FAMILY_OF_OP
    return sorted({fam[o] for o in ops})


def apply_ops(x: Tensor, op: Tensor, arg: Tensor, interpolation: str,
              fill: Optional[List[float]], present: List[int], grouped: bool) -> Tensor:
    """Sample i gets op ``op[i]`` (int64 id, see ``OPS``) with argument ``arg[i]``.

    ``grouped``: samples sorted by family and each family computed on its own samples (CPU
    eager and TorchScript; one host read of the counts); otherwise every family in ``present``
    runs on the whole batch and ``torch.where`` picks (fixed shapes, no host read:
    compile/export and other devices). Both give the same values.

    Example:
        >>> x = torch.randint(0, 256, (2, 3, 8, 8), dtype=torch.uint8)
        >>> apply_ops(x, torch.tensor([5, 12]), torch.tensor([20.0, 40.0]), "bilinear",
        ...           None, [1, 8], True).shape
        torch.Size([2, 3, 8, 8])
    """
    fam = family_of(op)  # FAMILY_OF_OP by arithmetic: no table copied to the device
    if not grouped:
        out = x
        for f in present:
            if f != 0:
                out = torch.where((fam == f).view(-1, 1, 1, 1),
                                  _family(x, f, op, arg, interpolation, fill), out)
        return match_layout(out, x)  # as the grouped path
    order, counts = group_by_branch(fam, 12)
    if counts[0] == x.shape[0]:
        return x
    parts: List[Tensor] = []
    start = 0
    for f in range(12):
        count = counts[f]
        if count > 0:
            idx = order.narrow(0, start, count)
            parts.append(_family(x.index_select(0, idx), f, op.index_select(0, idx),
                                 arg.index_select(0, idx), interpolation, fill))
        start += count
    out = torch.cat(parts).index_select(0, inverse_permutation(order))
    if x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous():
        out = out.contiguous(memory_format=torch.channels_last)
    return out


def augmix_blend(x: Tensor, mixed: Tensor, m: Tensor) -> Tensor:
    """timm's AugMix ending: ``mixed`` (float32 sum of the weighted chains) clipped to the
    value range (uint8: and truncated, as timm's ``astype(np.uint8)``), then PIL's
    ``Image.blend(x, mixed, m)``: ``x + m (mixed - x)`` in float32, truncated for uint8."""
    bound = 255.0 if x.dtype == torch.uint8 else 1.0
    mix = mixed.clamp(0.0, bound)
    ct = torch.float64 if x.dtype == torch.float64 else torch.float32
    if x.dtype == torch.uint8:
        mix = torch.trunc(mix)
    xf = x.to(ct)
    out = xf + m.to(ct).view(-1, 1, 1, 1) * (mix.to(ct) - xf)
    if x.dtype == torch.uint8:
        return torch.trunc(out).clamp(0.0, 255.0).to(torch.uint8)
    return out.to(x.dtype)
