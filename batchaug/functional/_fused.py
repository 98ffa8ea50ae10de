"""Fused kernels: two consecutive transforms in one pass, for the pair table's CPU rules
(``batchaug/_fusion.py``). ``crop_flip`` is ``RandomCrop`` then ``RandomHorizontalFlip`` as one
gather; ``rotate_normalize`` is ``RandomRotation`` then ``Normalize`` without the cast to uint8
and back between them. Both are pure, TorchScript-compatible and equal bit for bit to the two
kernels one after the other, which they run wherever the fast path does not apply.
"""
from __future__ import annotations

import functools
from typing import List, Optional

import torch
from torch import Tensor

from ._crop import hflip_where, pad_crop
from ._misc import normalize_affine
from ._warp import _warp
from ._utils import _needs_grad


def crop_flip(
    x: Tensor,
    top: Tensor,
    left: Tensor,
    flip: Tensor,
    height: int,
    width: int,
    padding: List[int],
    fill: Optional[List[float]] = None,
    padding_mode: str = "constant",
) -> Tensor:
    """``hflip_where(pad_crop(x, top, left, height, width, padding, fill, padding_mode), flip)``:
    per-sample crop of the padded image (``top``/``left`` (N,) offsets into it, ``padding`` =
    [left, top, right, bottom]) and a left-right flip where the (N,) bool ``flip`` is true.

    On CPU, for a contiguous uint8 NCHW batch with zero constant padding and a crop as wide as
    the image (CIFAR's ``RandomCrop(32, padding=4)``), the crop and the flip are one gather
    (see ``_crop_flip_flat``); everywhere else it runs the two kernels. Same result either way.

    Example:
        >>> x = torch.arange(16, dtype=torch.uint8).view(1, 1, 4, 4)
        >>> crop_flip(x, torch.tensor([0]), torch.tensor([0]), torch.tensor([True]),
        ...           4, 4, [1, 1, 1, 1])[0, 0]
        tensor([[ 0,  0,  0,  0],
                [ 2,  1,  0,  0],
                [ 6,  5,  4,  0],
                [10,  9,  8,  0]], dtype=torch.uint8)
    """
    if not torch.jit.is_scripting():
        if crop_flip_applies(x, width, padding, fill, padding_mode):
            return _crop_flip_flat(x, top, left, flip, height, padding)
    return hflip_where(pad_crop(x, top, left, height, width, padding, fill, padding_mode), flip)


def crop_flip_applies(
    x: Tensor, width: int, padding: List[int], fill: Optional[List[float]], padding_mode: str
) -> bool:
    """Whether :func:`crop_flip` takes its one-gather fast path for ``x`` (eager CPU only:
    it derives Python ints from the batch size and reads bytes through views)."""
    if torch.compiler.is_compiling() or x.device.type != "cpu" or x.dtype != torch.uint8:
        return False
    if padding_mode != "constant" or _needs_grad(x):
        return False
    if fill is not None:
        for f in fill:
            if f != 0.0:
                return False
    if x.shape[3] != width or x.numel() == 0 or not x.is_contiguous():
        return False
    # the mask table (_window_masks) has one row per (top, shift): keep it small
    m = max(padding[0], padding[2])
    rows = (padding[1] + padding[3] + 1) * (2 * m + 1)
    return rows * width * (x.shape[2] + padding[1] + padding[3]) <= 4 * 1024 * 1024


def _crop_flip_flat(
    x: Tensor, top: Tensor, left: Tensor, flip: Tensor, height: int, padding: List[int]
) -> Tensor:
    """The fast path of :func:`crop_flip`. A buffer holds [zeros | the batch | the samples to
    flip, mirrored | zeros]. A window of the padded image, flipped or not, is then one
    contiguous run of ``height * W`` bytes per channel plane in that buffer (starting ``(top -
    pad_top) * W + d`` bytes into its plane, ``d`` the column shift), so one ``index_select``
    over an overlapping view copies every window with one memcpy per plane, flipped ones from
    the mirror. What a run reads outside the image (neighbouring rows or planes) is zeroed
    afterwards by one AND with the window's mask of valid bytes (a row of a cached table per
    (top, shift) pair). Every small op costs its dispatch: the index arithmetic is a few ops,
    the masks and zeros cached constants of the geometry.
    """
    pl, pt, pr, pb = padding[0], padding[1], padding[2], padding[3]
    n, c, h, w = x.shape[0], x.shape[1], x.shape[2], x.shape[3]
    chw = c * h * w
    run = height * w
    m = max(pl, pr)
    lead = pt * w + m  # the farthest a run reaches before its plane (rows above, shift -m)
    tail = pb * w + m
    flip = flip.to(torch.bool)
    top = top.to(torch.int64)
    zeros = _zeros(max(lead, tail), str(x.device))
    buf = torch.cat([zeros[:lead], x.reshape(-1),
                     x.index_select(0, flip.nonzero().view(-1)).flip(-1).reshape(-1),
                     zeros[:tail]])
    # flip(crop(pad(x))) is a crop of the mirror padded the other way round: the window's column
    # shift relative to its (mirrored) image is left - pl unflipped, pl - left flipped, and a
    # flipped sample reads the planes of its rank among the mirrored ones
    left = left.to(torch.int64)
    shift = torch.where(flip, pl - left, left - pl)
    own = torch.arange(0, n * chw, chw, device=x.device)
    plane = torch.where(flip, flip.cumsum(0).mul_(chw).add_((n - 1) * chw), own)
    start = plane.add_(shift).add_(top, alpha=w).add_(lead - pt * w)
    index = (start.view(n, 1) + torch.arange(0, chw, h * w, device=x.device)).view(-1)
    runs = buf.as_strided([buf.numel() - run + 1, run], [1, 1])
    out = runs.index_select(0, index).view(n, c, run)
    # row (top, shift) of the mask table
    masks = _window_masks(h, w, height, pt, pb, m, str(x.device))
    keep = masks.index_select(0, shift.add(top, alpha=2 * m + 1).add_(m))
    word = torch.uint8
    for size, dt in ((8, torch.int64), (4, torch.int32), (2, torch.int16)):
        if word == torch.uint8 and run % size == 0:
            word = dt
    out.view(word).bitwise_and_(keep.view(n, 1, run).view(word))
    return out.view(n, c, height, w)


@functools.lru_cache(maxsize=8)
def _zeros(size: int, device: str) -> Tensor:
    """A cached zero vector (read only: torch.cat copies it)."""
    return torch.zeros([size], dtype=torch.uint8, device=device)


@functools.lru_cache(maxsize=32)
def _window_masks(h: int, w: int, height: int, pt: int, pb: int, m: int, device: str) -> Tensor:
    """``((pt + pb + h - height + 1) * (2m + 1), height * w)`` uint8: row ``top * (2m + 1) +
    shift + m`` is 255 where a window at ``top`` with column shift ``shift`` shows the image
    (image row ``r + top - pt`` and column ``j + shift`` exist), 0 where it shows padding.
    Cached: never written (index_select copies)."""
    rows = torch.arange(pt + pb + h - height + 1, device=device).view(-1, 1) + (
        torch.arange(height, device=device) - pt)
    cols = torch.arange(-m, m + 1, device=device).view(-1, 1) + torch.arange(w, device=device)
    row_ok = (rows >= 0) & (rows < h)  # (T, height)
    col_ok = (cols >= 0) & (cols < w)  # (U, w)
    ok = row_ok.view(-1, 1, height, 1) & col_ok.view(1, -1, 1, w)
    return ok.to(torch.uint8).mul_(255).view(-1, height * w)


def rotate_normalize(
    x: Tensor,
    angle: Tensor,
    interpolation: str,
    fill: Optional[List[float]],
    center: Optional[List[float]],
    factor: Tensor,
    shift: Tensor,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """``normalize_affine(rotate(x, angle, interpolation, fill, center), factor, shift, dtype)``
    (``factor``/``shift`` from ``normalize_factors`` for the rotation's output dtype, float32).

    For uint8 ``x`` the rotation's result is rounded in float32 and normalised there: the same
    values as casting it to uint8 and converting back (they are integers in [0, 255]), so the
    same output bit for bit, minus two casts and a conversion over the batch.

    Example:
        >>> x = torch.randint(0, 256, (2, 3, 8, 8), dtype=torch.uint8)
        >>> f, s = torch.full((1, 3, 1, 1), 1 / 255), torch.zeros(1, 3, 1, 1)
        >>> y = rotate_normalize(x, torch.tensor([10.0, -5.0]), "bilinear", [0.0], None, f, s)
        >>> y.dtype, y.shape
        (torch.float32, torch.Size([2, 3, 8, 8]))
    """
    if x.dtype != torch.uint8 or factor.dtype != torch.float32:
        rotated = _warp(x, angle, "rotation", center, interpolation, fill)
        return normalize_affine(rotated, factor, shift, dtype)
    y = _warp(x, angle, "rotation", center, interpolation, fill, True)
    y = y.mul_(factor).add_(shift)  # normalize_affine's two roundings, on our own buffer
    if dtype != torch.float32:
        y = y.to(dtype)
    return y
