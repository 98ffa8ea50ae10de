"""Label-mixing kernels (MixUp, CutMix): each sample i is mixed with its partner, sample i - 1
of the batch (the batch rolled by one, as torchvision pairs them; sample 0's partner is the last).

Pure functions of the batch and per-sample parameter tensors; no randomness, no host sync.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import torch
from torch import Tensor

from ._misc import box_mask
from ._utils import _needs_grad, cpu_chunk_size, mix_chunk_bytes


def partner(x: Tensor) -> Tensor:
    """The batch rolled by one along dim 0: row i holds sample i - 1 (row 0 the last)."""
    return x.roll(1, 0)


def smooth_targets(labels: Tensor, num_classes: int, label_smoothing: float = 0.0) -> Tensor:
    """(N, num_classes) targets with rows summing to 1: int labels (N,) one-hot in float32, or
    soft labels (N, num_classes) in their floating dtype, smoothed as
    ``(1 - label_smoothing) * t + label_smoothing / num_classes`` (timm's and
    ``F.cross_entropy(label_smoothing=...)``'s rule). Labels must be in range: an integer
    label outside [0, num_classes) fails inside ``scatter`` (a device-side assert on CUDA)."""
    if labels.dim() == 1:
        t = torch.zeros([labels.shape[0], num_classes], dtype=torch.float32, device=labels.device)
        t = t.scatter(1, labels.to(torch.int64).view(-1, 1), 1.0)
    else:
        t = labels
    if label_smoothing > 0.0:
        t = t * (1.0 - label_smoothing) + label_smoothing / num_classes
    return t


def mix_targets(targets: Tensor, lam: Tensor) -> Tensor:
    """``lam[i] * targets[i] + (1 - lam[i]) * targets[i - 1]`` (``lam`` (N,), any float dtype):
    row i keeps ``lam[i]`` of its own label mass and takes the rest from its partner's."""
    w = lam.to(targets.dtype).view(-1, 1)
    # lerp is exact at both ends: lam = 1 returns the sample's own row bit for bit
    return torch.lerp(partner(targets), targets, w)


def blend_with_partner(x: Tensor, lam: Tensor) -> Tensor:
    """MixUp's images: ``lam[i] * x[i] + (1 - lam[i]) * x[i - 1]`` per sample, in x's dtype.

    Computed in float32 (float64 for float64 input) and cast back; uint8 is rounded to the
    nearest integer (half to even), so it is within 0.5 of the exact blend. ``lam = 1`` returns
    the sample exactly (``torch.lerp`` is exact at both ends)."""
    return _blend(x, lam, None)


def blend_and_paste(x: Tensor, lam: Tensor, top: Tensor, left: Tensor, height: Tensor,
                    width: Tensor) -> Tensor:
    """MixUp and CutMix in one pass (``MixUpOrCutMix``): inside each sample's box the partner's
    pixels, elsewhere ``lam[i] * x[i] + (1 - lam[i]) * x[i - 1]``; equal to
    ``paste_from_partner(x, blend_with_partner(x, lam), ...)``. One ``torch.lerp`` with a
    per-pixel weight (0 in the box), exact at weights 0 and 1: pasted pixels and samples with
    ``lam = 1`` are copied bit for bit."""
    return _blend(x, lam, [top, left, height, width])


def _blend(x: Tensor, lam: Tensor, box: Optional[List[Tensor]]) -> Tensor:
    """``torch.lerp(x[i - 1], x[i], w_i)``, ``w_i = lam[i]``, 0 inside the optional box."""
    if _into_fresh(x):
        return _mix_chunks(x, lam, box, x, torch.empty_like(x), False)
    compute = torch.float64 if x.dtype == torch.float64 else torch.float32
    w = lam.to(compute).view(-1, 1, 1, 1)
    if box is not None:
        w = torch.where(box_mask(box[0], box[1], box[2], box[3], x.shape[2], x.shape[3]),
                        0.0, w)
    out = torch.lerp(partner(x).to(compute), x.to(compute), w)
    if x.dtype == torch.uint8:
        return out.round_().clamp_(0.0, 255.0).to(torch.uint8)
    return out.to(x.dtype)


def cutmix_boxes(lam: Tensor, cx: Tensor, cy: Tensor, h: int,
                 w: int) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """torchvision's CutMix box per sample: half sides ``floor(0.5 * sqrt(1 - lam) * W)`` (and
    H) around the centre ``(cx, cy)`` (int64, in [0, W) and [0, H)), clipped to the image.

    Returns ``(top, left, height, width, kept)``: int64 (N,) boxes and ``kept`` (N,) float64,
    the fraction of the image NOT pasted, ``1 - height * width / (H * W)``: the sample's own
    share of the target after clipping (torchvision's ``lam_adjusted``)."""
    r = 0.5 * torch.sqrt((1.0 - lam.to(torch.float64)).clamp_min(0.0))
    half_w = (r * w).floor().to(torch.int64)
    half_h = (r * h).floor().to(torch.int64)
    x1 = (cx - half_w).clamp_min(0)
    y1 = (cy - half_h).clamp_min(0)
    x2 = (cx + half_w).clamp_max(w)
    y2 = (cy + half_h).clamp_max(h)
    height = y2 - y1
    width = x2 - x1
    kept = 1.0 - (height * width).to(torch.float64) / float(h * w)
    return y1, x1, height, width, kept


def paste_from_partner(x: Tensor, base: Tensor, top: Tensor, left: Tensor, height: Tensor,
                       width: Tensor) -> Tensor:
    """CutMix's images: ``base`` (x, or x already blended) with each sample's box
    ``[top, top + height) x [left, left + width)`` taken from the partner ``x[i - 1]``. An empty
    box (height or width 0) leaves the sample as in ``base``. Keeps dtype; never in place."""
    if (not _needs_grad(x) and not _needs_grad(base) and not _compiling() and x.shape[0] > 0
            and base.dtype == x.dtype and base.shape == x.shape):
        return _mix_chunks(x, None, [top, left, height, width], base,
                           torch.empty_like(base), False)
    mask = box_mask(top, left, height, width, x.shape[2], x.shape[3])
    return torch.where(mask, partner(x), base)


def _compiling() -> bool:
    return torch.compiler.is_compiling() and not torch.jit.is_scripting()


def _into_fresh(x: Tensor) -> bool:
    """Whether the blend may write per-chunk slices of one fresh output (``out=``): float32/
    float64 (computed in their own dtype), no autograd (``out=`` is not differentiable), not
    under torch.compile/export (they plan their own buffers)."""
    return ((x.dtype == torch.float32 or x.dtype == torch.float64) and x.shape[0] > 0
            and not _needs_grad(x) and not _compiling())


def mix_with_partner_(x: Tensor, lam: Optional[Tensor], box: Optional[Tensor]) -> Tensor:
    """In place: ``x`` overwritten with its mixed batch and returned, each sample mixed with
    its partner as it was before the call. ``box`` None: MixUp (``blend_with_partner``);
    ``lam`` None: CutMix (``paste_from_partner(x, x, ...)``); both: ``blend_and_paste``; the
    same values as those. ``box``: (N, 4) int64 ``(top, left, height, width)``.

    Saves the batch-sized output buffer (as timm's Mixup, which mixes in place): on CPU, chunk
    by chunk from the last, each chunk's partners copied to a chunk-sized buffer first.
    Refuses a tensor that autograd records (``ValueError``).

    Example:
        >>> x = torch.rand(4, 3, 8, 8)
        >>> y = mix_with_partner_(x, torch.full((4,), 0.7), None)  # y is x, mixed
    """
    if _needs_grad(x):
        raise ValueError("mix_with_partner_ cannot overwrite a tensor that autograd records "
                         "(requires_grad): mix out of place")
    if x.shape[0] == 0 or (lam is None and box is None):
        return x
    boxes: Optional[List[Tensor]] = None if box is None else list(box.unbind(1))
    if not _compiling() and (lam is None or x.dtype == torch.float32
                             or x.dtype == torch.float64):
        return _mix_chunks(x, lam, boxes, x, x, True)
    if lam is None:
        assert boxes is not None
        return x.copy_(paste_from_partner(x, x, boxes[0], boxes[1], boxes[2], boxes[3]))
    return x.copy_(_blend(x, lam, boxes))


def _mix_chunks(x: Tensor, lam: Optional[Tensor], box: Optional[List[Tensor]], base: Tensor,
                out: Tensor, inplace: bool) -> Tensor:
    """Into ``out``, chunk by chunk: with ``lam``, ``_blend``'s lerp (x float32 or float64);
    without, ``torch.where(box_i, x[i - 1], base[i])``. Bit for bit those ops on the rolled
    batch, without the rolled copy and the batch-sized weights and mask, whose page faults cost
    more than the blend (docs/performance.md, "Kernel choices"). ``inplace``: ``out`` is ``x``;
    the chunks go last first, each chunk's partners copied before it is written, sample 0's
    partner (the last sample) before anything is."""
    n, h, w = x.shape[0], x.shape[2], x.shape[3]
    per_sample = 5 * h * w
    if inplace:
        per_sample += x.shape[1] * h * w * x.element_size()
    k = cpu_chunk_size(x, per_sample, mix_chunk_bytes())
    last = x[n - 1:].clone() if inplace else x[n - 1:]
    lam4: Optional[Tensor] = None if lam is None else lam.to(x.dtype).view(-1, 1, 1, 1)
    s = ((n - 1) // k) * k
    while s >= 0:
        e = min(n, s + k)
        if s == 0:  # sample 0's partner is the last one
            p = torch.cat([last, x[:e - 1]])
        elif inplace:
            p = x[s - 1:e - 1].clone()
        else:
            p = x[s - 1:e - 1]
        mask: Optional[Tensor] = None
        if box is not None:
            mask = box_mask(box[0][s:e], box[1][s:e], box[2][s:e], box[3][s:e], h, w)
        if lam4 is None:
            assert mask is not None
            torch.where(mask, p, base[s:e], out=out[s:e])
        else:
            wt = lam4[s:e]
            if mask is not None:
                wt = torch.where(mask, 0.0, wt)
            torch.lerp(p, x[s:e], wt, out=out[s:e])
        s -= k
    return out
