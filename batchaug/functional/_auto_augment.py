"""Auto-augment kernels: torchvision's and timm's auto-augment ops with one op and magnitude
per sample, through one engine.

Each policy library is data for the engine (``library``): its op numbering (``OPS``,
``TIMM_OPS``: the same ids 0-11, then timm's SolarizeAdd at 12), the rule that turns a
magnitude into a kernel argument (torchvision: the signed value its
``_apply_image_or_video_transform`` receives; timm: the argument its PIL op gets after
``LEVEL_TO_ARG``, :func:`level_to_arg`) and its geometric matrices (:func:`op_affine_matrix`,
:func:`pil_affine_matrix`). The ops run as *families* of kernels (identity, one warp for the
five geometric ops, then one per colour op, :func:`family_of`), grouped (each family on its
own samples, one host read) or static (every family on the whole batch, ``torch.where`` per
sample: fixed shapes for compile and export) in :func:`apply_ops`, with the same values.
Targets move by each step's op matrix (:func:`move_policy_targets`).
"""
from __future__ import annotations

import math
from typing import Dict, List, Optional

import torch
from torch import Tensor

from ._color import (
    adjust_brightness,
    adjust_contrast,
    adjust_saturation,
    adjust_sharpness,
    autocontrast,
    equalize,
    invert,
)
from ._utils import cpu_chunk_size, dispatch_chunk_bytes, group_on_host, match_layout
from ._misc import branch_groups, ungroup
from ._targets import (affine_to_matrix, compose_matrices, identity_matrix, move_targets,
                       warp_masks)
from ._warp import affine, affine_matrix

# The policy libraries: their op numbering, magnitude rule and geometric matrices
TORCHVISION = 0
TIMM = 1

# Op ids (torchvision's names). Written as literals in the code below as well: TorchScript
# cannot read module-level lists.
OPS: List[str] = [
    "Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness",
    "Color", "Contrast", "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize",
    "Invert",
]
# timm's ops: torchvision's ids 0-11, then SolarizeAdd
TIMM_OPS: List[str] = OPS[:12] + ["SolarizeAdd", "AutoContrast", "Equalize", "Invert"]
# op id -> family: 0 identity, 1 geometry (ids 1-5, one warp), then one per colour op:
# 2 brightness, 3 saturation, 4 contrast, 5 sharpness, 6 posterize, 7 solarize,
# 8 autocontrast, 9 equalize, 10 invert, 11 solarize-add
FAMILY_OF_OP: List[int] = [0, 1, 1, 1, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
TIMM_FAMILY_OF_OP: List[int] = [0, 1, 1, 1, 1, 1, 2, 3, 4, 5, 6, 7, 11, 8, 9, 10]
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


def op_id(name: str) -> int:
    """The id of torchvision's op ``name`` (``"Rotate"`` -> 5); ValueError for unknown."""
    ops = ["Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness",
           "Color", "Contrast", "Sharpness", "Posterize", "Solarize", "AutoContrast",
           "Equalize", "Invert"]  # OPS
    for i, o in enumerate(ops):
        if o == name:
            return i
    raise ValueError("op must be one of {}, got {!r}".format(ops, name))


def family_of(op: Tensor, library: int = TORCHVISION) -> Tensor:
    """``FAMILY_OF_OP[op]`` (``TIMM_FAMILY_OF_OP`` for timm) elementwise for int64 op ids, by
    arithmetic (identity 0, ids 1-5 the geometry family 1, id k >= 6 family k - 4; timm's
    SolarizeAdd 11 and the ids after it one less): no table to copy to the device per call."""
    fam = torch.clamp(op - 4, min=1) * (op > 0).to(op.dtype)
    if library == 1:  # TIMM (TorchScript reads no module globals)
        fam = fam - (op > 12).to(op.dtype) + 3 * (op == 12).to(op.dtype)
    return fam


def families(ops: List[int], library: int = TORCHVISION) -> List[int]:
    """The sorted families the op ids ``ops`` belong to (what ``apply_ops`` must handle)."""
    table = TIMM_FAMILY_OF_OP if library == TIMM else FAMILY_OF_OP
    return sorted({table[o] for o in ops})


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


def op_magnitudes(name: str, space: str, num_bins: int, height: int, width: int,
                  device: torch.device) -> Tensor:
    """(num_bins,) float32 magnitude bins of op ``name`` in torchvision's augmentation
    ``space``: "wide" (TrivialAugmentWide), "standard" (RandAugment and AutoAugment) or
    "augmix"; zeros for ops without a magnitude. The same ``torch.linspace``/``arange`` calls
    as torchvision, so the values are bit for bit its ``magnitudes``.

    Example:
        >>> op_magnitudes("Rotate", "wide", 31, 32, 32, torch.device("cpu"))[-1].item()
        135.0
    """
    if name == "ShearX" or name == "ShearY":
        return torch.linspace(0.0, 0.99 if space == "wide" else 0.3, num_bins, device=device)
    if name == "TranslateX" or name == "TranslateY":
        side = width if name == "TranslateX" else height
        if space == "wide":
            end = 32.0
        elif space == "augmix":
            end = side / 3.0
        else:
            end = 150.0 / 331.0 * side
        return torch.linspace(0.0, end, num_bins, device=device)
    if name == "Rotate":
        return torch.linspace(0.0, 135.0 if space == "wide" else 30.0, num_bins, device=device)
    if name == "Brightness" or name == "Color" or name == "Contrast" or name == "Sharpness":
        return torch.linspace(0.0, 0.99 if space == "wide" else 0.9, num_bins, device=device)
    if name == "Posterize":
        top = 4 if space == "augmix" else 8
        steps = 6 if space == "wide" else 4
        bins = torch.arange(num_bins, device=device) / ((num_bins - 1) / steps)
        return (top - bins).round().int().to(torch.float32)
    if name == "Solarize":
        return torch.linspace(1.0, 0.0, num_bins, device=device)
    return torch.zeros(num_bins, device=device)


def op_is_signed(name: str) -> bool:
    """Whether torchvision flips the sign of ``name``'s magnitude with probability 1/2."""
    return name in ("ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness",
                    "Color", "Contrast", "Sharpness")


def op_affine_matrix(op: Tensor, magnitude: Tensor, height: int, width: int) -> Tensor:
    """(N, 2, 3) float64 inverse affine matrices of the geometric ops (ids 1-5) with their
    magnitudes, torchvision's matrices for ``affine``/``rotate``; the identity for other ops."""
    m = magnitude.to(torch.float64)
    zero = torch.zeros_like(m)
    shear_deg = torch.atan(m) * (180.0 / math.pi)  # math.degrees(math.atan(m))
    moves = torch.trunc(m)  # int(m)
    shear = torch.stack((torch.where(op == 1, shear_deg, zero),
                         torch.where(op == 2, shear_deg, zero)), dim=1)
    translate = torch.stack((torch.where(op == 3, moves, zero),
                             torch.where(op == 4, moves, zero)), dim=1)
    # rotate(angle) is torchvision's inverse affine matrix of -(angle % 360)
    angle = torch.where(op == 5, -torch.remainder(m, 360.0), zero)
    scale = torch.ones_like(m)
    about_centre = affine_matrix(angle, translate, scale, zero.unsqueeze(1).expand(-1, 2),
                                 height, width, None)
    # shears are about the top-left corner (torchvision passes center=[0, 0])
    about_corner = affine_matrix(zero, zero.unsqueeze(1).expand(-1, 2), scale, shear,
                                 height, width, [0.0, 0.0])
    is_shear = ((op == 1) | (op == 2)).view(-1, 1, 1)
    return torch.where(is_shear, about_corner, about_centre)


def pil_affine_matrix(op: Tensor, arg: Tensor, height: int, width: int) -> Tensor:
    """(N, 2, 3) float64 inverse matrices in torchvision's centred convention (what
    :func:`._warp.affine` takes) of timm's geometric ops (ids 1-5) with their arguments;
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


def posterize_bits(x: Tensor, bits: Tensor) -> Tensor:
    """Keep each sample's ``bits`` (int (N,), 0-8) most significant bits, as torchvision's
    ``posterize`` with that sample's bits."""
    b = bits.to(torch.int64).clamp(0, 8)
    if x.dtype == torch.uint8:
        shift = 8 - b
        mask = torch.bitwise_left_shift(torch.full_like(shift, 255) >> shift, shift)
        return x & mask.to(torch.uint8).view(-1, 1, 1, 1)
    levels = torch.pow(2.0, b.to(x.dtype)).view(-1, 1, 1, 1)
    return torch.minimum((x * levels).floor().clamp_min(0.0), levels - 1.0) * (1.0 / levels)


def solarize_threshold(x: Tensor, threshold: Tensor) -> Tensor:
    """Invert each sample's values ``>= threshold`` (per sample, (N,), in the input's value
    range), as torchvision's ``solarize``; the comparison is in float32 for uint8 and in the
    input's dtype for floats, as torchvision compares with a Python float."""
    if x.dtype == torch.uint8:
        # integer x >= t  <=>  x >= ceil(t) (t rounded to float32 first, as torchvision's
        # comparison): a uint8 comparison, and inversion as x ^ 255 (torch.where is slow on
        # CPU); t above 255 inverts nothing (flip 0)
        t = torch.ceil(threshold.to(torch.float32)).clamp(0.0, 256.0).view(-1, 1, 1, 1)
        flip = torch.where(t <= 255.0, 255, 0).to(torch.uint8)
        hit = (x >= t.clamp_max(255.0).to(torch.uint8)).to(torch.uint8)
        return x.bitwise_xor(hit * flip)
    t = threshold.to(x.dtype).view(-1, 1, 1, 1)
    return torch.where(x >= t, invert(x), x)


def solarize_add(x: Tensor, add: Tensor, threshold: float = 128.0) -> Tensor:
    """timm's ``solarize_add``: values below ``threshold`` (uint8 scale) get ``add[i]`` (per
    sample, uint8 scale), capped at the dtype's maximum; others unchanged."""
    if x.dtype == torch.uint8:
        a = add.to(torch.int16).view(-1, 1, 1, 1)
        y = torch.clamp_max(x.to(torch.int16) + a, 255).to(torch.uint8)
        return torch.where(x < int(threshold), y, x)
    a = (add.to(torch.float64) / 255.0).to(x.dtype).view(-1, 1, 1, 1)
    return torch.where(x < threshold / 255.0, torch.clamp_max(x + a, 1.0), x)


def op_matrix(op: Tensor, magnitude: Tensor, height: int, width: int,
              library: int = TORCHVISION) -> Tensor:
    """:func:`op_affine_matrix` or, for timm, :func:`pil_affine_matrix`."""
    if library == 1:  # TIMM (TorchScript reads no module globals)
        return pil_affine_matrix(op, magnitude, height, width)
    return op_affine_matrix(op, magnitude, height, width)


def _family(x: Tensor, family: int, op: Tensor, magnitude: Tensor, interpolation: str,
            fill: Optional[List[float]], library: int) -> Tensor:
    """Family ``family``'s op on every sample of ``x`` (ops and magnitudes per sample)."""
    if family == 0:
        return x
    if family == 1:
        return affine(x, op_matrix(op, magnitude, x.shape[2], x.shape[3], library),
                      interpolation, fill)
    # the enhance factor: torchvision's 1 + m, timm's argument itself
    factor = magnitude.to(torch.float64)
    if library == 0:  # TORCHVISION
        factor = 1.0 + factor
    if family == 2:
        return adjust_brightness(x, factor)
    if family == 3:
        return adjust_saturation(x, factor)
    if family == 4:
        return adjust_contrast(x, factor)
    if family == 5:
        return adjust_sharpness(x, factor)
    if family == 6:
        return posterize_bits(x, torch.trunc(magnitude).to(torch.int64))
    if family == 7:
        # torchvision: a fraction of the dtype's bound; timm: uint8 units
        scale = 255.0 if x.dtype == torch.uint8 else 1.0
        if library == 1:  # TIMM (TorchScript reads no module globals)
            scale = scale / 255.0
        return solarize_threshold(x, magnitude.to(torch.float64) * scale)
    if family == 8:
        return autocontrast(x)
    if family == 9:
        return equalize(x)
    if family == 10:
        return invert(x)
    return solarize_add(x, magnitude.to(torch.float64))


def apply_op(x: Tensor, op: str, magnitude: Tensor, interpolation: str = "nearest",
             fill: Optional[List[float]] = None) -> Tensor:
    """torchvision's auto-augment op ``op`` (a name from ``OPS``) on every sample of ``x``,
    sample i with ``magnitude[i]`` ((N,) float, signed).

    Example:
        >>> x = torch.randint(0, 256, (2, 3, 8, 8), dtype=torch.uint8)
        >>> apply_op(x, "Rotate", torch.tensor([30.0, -10.0])).shape
        torch.Size([2, 3, 8, 8])
    """
    k = op_id(op)
    ops = torch.full(magnitude.shape, k, dtype=torch.int64, device=magnitude.device)
    fam = [0, 1, 1, 1, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]  # FAMILY_OF_OP
    # through apply_ops: the same CPU chunking as a policy's dispatch
    return apply_ops(x, ops, magnitude, interpolation, fill, [fam[k]], group_on_host(x))


def apply_ops(x: Tensor, op: Tensor, magnitude: Tensor, interpolation: str,
              fill: Optional[List[float]], present: List[int], grouped: bool,
              library: int = TORCHVISION) -> Tensor:
    """Sample i gets op ``op[i]`` (int64 id of ``library``'s ops: ``OPS``, or ``TIMM_OPS``
    for ``library=TIMM``) with ``magnitude[i]``. ``present``: the families the ops can come
    from (:func:`families`); others are not computed.

    ``grouped``: samples sorted by family, each family computed on its own samples (one host
    read of the counts per call: CPU eager/TorchScript, see ``group_on_host``). Otherwise every
    present family runs on the whole batch and ``torch.where`` picks per sample (fixed shapes,
    no host read: compile/export and accelerators).

    Example:
        >>> x = torch.randint(0, 256, (2, 3, 8, 8), dtype=torch.uint8)
        >>> apply_ops(x, torch.tensor([5, 12]), torch.tensor([20.0, 40.0]), "bilinear",
        ...           None, [1, 11], True, 1).shape  # library 1: TIMM
        torch.Size([2, 3, 8, 8])
    """
    if library != 0 and library != 1:
        raise ValueError("apply_ops: library must be 0 (TORCHVISION) or 1 (TIMM), got {}"
                         .format(library))
    fam = family_of(op, library)
    if not grouped:
        out = x
        for f in present:
            if f != 0:
                out = torch.where((fam == f).view(-1, 1, 1, 1),
                                  _family(x, f, op, magnitude, interpolation, fill, library),
                                  out)
        return match_layout(out, x)  # as the grouped path
    n = x.shape[0]
    # CPU chunks: every copy and float temporary stays under glibc's mmap threshold and is
    # recycled, where a fresh batch-sized buffer faults its pages in on every call
    # (docs/performance.md, "Kernel choices")
    k = cpu_chunk_size(x, x.shape[1] * x.shape[2] * x.shape[3] * x.element_size(),
                       dispatch_chunk_bytes(), per_thread=True)
    if k >= n:
        return _grouped(x, fam, op, magnitude, interpolation, fill, library)
    out = torch.empty_like(x)
    for s in range(0, n, k):
        e = min(n, s + k)
        out[s:e].copy_(_grouped(x[s:e], fam[s:e], op[s:e], magnitude[s:e], interpolation,
                                fill, library))
    return out


def _grouped(x: Tensor, fam: Tensor, op: Tensor, magnitude: Tensor, interpolation: str,
             fill: Optional[List[float]], library: int) -> Tensor:
    """:func:`apply_ops` grouped, on one chunk of samples."""
    ks, idxs, order = branch_groups(fam, 12)  # NUM_FAMILIES
    if len(ks) == 0 or (len(ks) == 1 and ks[0] == 0):
        return x
    # index_select in, cat + index_select out: faster on CPU than index_copy_ into a fresh batch
    parts: List[Tensor] = []
    for j, f in enumerate(ks):
        idx = idxs[j]
        parts.append(_family(x.index_select(0, idx), f, op.index_select(0, idx),
                             magnitude.index_select(0, idx), interpolation, fill, library))
    return match_layout(ungroup(parts, order), x)


def move_policy_targets(targets: Dict[str, Tensor], op: Tensor, theta: Tensor,
                        size: List[int], mask_fill: int, grouped: bool) -> Dict[str, Tensor]:
    """The targets (checked) moved step after step as the image by ``move_targets``: ``op``
    (N, S) op ids (geometric: ids 1-5 in both libraries), ``theta`` (N, S, 2, 3) each step's
    inverse affine (what the image was warped with), ``mask_fill`` checked by the caller.
    ``grouped`` (as ``apply_ops``): only the geometric samples' masks are warped (one host
    read); otherwise every sample's, the identity's nearest warp being exact."""
    for s in range(op.shape[1]):
        o = op[:, s]
        matrix = affine_to_matrix(theta[:, s])
        masks: Optional[Tensor] = None
        if grouped and "masks" in targets:
            m = targets["masks"]
            idx = torch.nonzero((o >= 1) & (o <= 5)).view(-1)  # CPU: the read is free
            masks = m
            if idx.shape[0] > 0:
                masks = m.index_copy(0, idx, warp_masks(m.index_select(0, idx),
                                                        matrix.index_select(0, idx), size,
                                                        mask_fill))
        targets = move_targets(targets, matrix, size, size, mask_fill, masks)
    return targets


def compose_steps(theta: Tensor) -> Tensor:
    """(N, 3, 3) output -> input matrices of (N, S, 2, 3) steps applied in order (step 0
    first): the product of their matrices (``compose_matrices`` order)."""
    m = identity_matrix(theta)
    for s in range(theta.shape[1]):
        m = compose_matrices(m, affine_to_matrix(theta[:, s]))
    return m


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
