"""Crop kernels: per-sample flips, padding, crops (with and without padding) and center crop
for a whole batch with per-sample parameters.

Pure and TorchScript-compatible: tensors and per-sample parameter tensors in, tensor out, no
randomness, no state, no host sync (no ``.item()``/``.tolist()``). Output sizes are Python ints,
so every graph is static. Speed notes on these kernels are in :mod:`._utils`.
"""

from __future__ import annotations

from typing import List, Optional

import torch
from torch import Tensor

from ._utils import _empty_like_layout, _is_channels_last, _needs_grad, _select_into


def hflip_where(x: Tensor, mask: Tensor) -> Tensor:
    """Flip left-right the samples where the (N,) bool ``mask`` is true.

    Example:
        >>> x = torch.arange(8.).view(2, 1, 2, 2)
        >>> hflip_where(x, torch.tensor([True, False]))[:, 0, 0]
        tensor([[1., 0.],
                [4., 5.]])
    """
    return _select_into(mask, x.flip(-1), x)


def vflip_where(x: Tensor, mask: Tensor) -> Tensor:
    """Flip top-bottom the samples where the (N,) bool ``mask`` is true."""
    return _select_into(mask, x.flip(-2), x)


def _pad_index(size: int, before: int, after: int, mode: str, device: torch.device) -> Tensor:
    """Source index for each output position of a padded axis (edge/reflect/symmetric).

    Reflect and symmetric continue the mirror pattern periodically, so padding wider than the
    image is defined (torchvision rejects it for both modes).
    """
    i = torch.arange(-before, size + after, device=device)
    if mode == "edge" or size == 1:
        return i.clamp(0, size - 1)
    if mode == "reflect":  # ... 2 1 | 0 1 2 ... (edge not repeated)
        period = 2 * size - 2
        i = torch.remainder(i, period)
        return torch.where(i < size, i, period - i)
    # symmetric: ... 1 0 | 0 1 2 ... (edge repeated)
    period = 2 * size
    i = torch.remainder(i, period)
    return torch.where(i < size, i, period - 1 - i)


def pad(
    x: Tensor,
    padding: List[int],
    fill: Optional[List[float]] = None,
    padding_mode: str = "constant",
) -> Tensor:
    """Pad a batch by ``padding = [left, top, right, bottom]`` (non-negative ints).

    ``padding_mode`` is one of "constant" (with ``fill``: one value or one per channel),
    "edge", "reflect" or "symmetric", as in torchvision. ``fill=None`` means 0.

    Example:
        >>> pad(torch.zeros(2, 3, 4, 4), [1, 2, 1, 2]).shape
        torch.Size([2, 3, 8, 6])
    """
    left, top, right, bottom = padding[0], padding[1], padding[2], padding[3]
    n, c, h, w = x.shape[0], x.shape[1], x.shape[2], x.shape[3]
    if left == 0 and top == 0 and right == 0 and bottom == 0:
        return x.clone()
    if padding_mode == "constant":
        out = _empty_like_layout(x, [n, c, h + top + bottom, w + left + right], x.dtype)
        if fill is None:
            out.fill_(0)
        elif len(fill) == 1:
            out.fill_(fill[0])
        else:
            for ch in range(c):  # loop over channels (a few), never over the batch
                out[:, ch].fill_(fill[ch])
        out[:, :, top:top + h, left:left + w].copy_(x)
        return out
    rows = _pad_index(h, top, bottom, padding_mode, x.device)
    cols = _pad_index(w, left, right, padding_mode, x.device)
    y = x.index_select(2, rows)
    if x.device.type != "cpu":
        return y.index_select(3, cols)
    # CPU: index_select along the last dim copies element by element through a slow path; a
    # gather with a broadcast index is an order of magnitude faster (docs/performance.md, "Kernel choices")
    return y.gather(3, cols.view(1, 1, 1, -1).expand(n, c, y.shape[2], cols.shape[0]))


def crop(x: Tensor, top: Tensor, left: Tensor, height: int, width: int) -> Tensor:
    """Per-sample crop: sample i becomes ``x[i, :, top[i]:top[i]+height, left[i]:left[i]+width]``.

    ``top``/``left`` are (N,) integer tensors; the windows must lie inside the image (the caller
    pads first). The output size is static, so this traces, scripts and compiles to one graph.

    Example:
        >>> x = torch.arange(32.).view(2, 1, 4, 4)
        >>> crop(x, torch.tensor([0, 2]), torch.tensor([1, 0]), 2, 2)[:, 0]
        tensor([[[ 1.,  2.],
                 [ 5.,  6.]],
        <BLANKLINE>
                [[24., 25.],
                 [28., 29.]]])
    """
    c = x.shape[1]
    if _is_channels_last(x):
        out = _window_select(x.permute(0, 2, 3, 1), top, left, [height, width, c], [1, 2, 3])
        return out.permute(0, 3, 1, 2)
    return _window_select(x, top, left, [c, height, width], [2, 3, 1])


def pad_crop(
    x: Tensor,
    top: Tensor,
    left: Tensor,
    height: int,
    width: int,
    padding: List[int],
    fill: Optional[List[float]] = None,
    padding_mode: str = "constant",
) -> Tensor:
    """``crop(pad(x, padding, fill, padding_mode), top, left, height, width)``.

    ``top``/``left`` are (N,) offsets into the padded image (``padding`` as in :func:`pad`).
    On CPU, for a contiguous batch with zero constant padding and a crop as wide as the image
    (the CIFAR ``RandomCrop(32, padding=4)``), the padded batch is never built: see
    ``_pad_crop_flat``. Same result as pad + crop in every case.

    Example:
        >>> x = torch.ones(2, 3, 32, 32, dtype=torch.uint8)
        >>> y = pad_crop(x, torch.tensor([4, 4]), torch.tensor([0, 8]), 32, 32, [4, 4, 4, 4])
        >>> y[:, 0, 0, :6]  # sample 0 starts 4 columns left of the image, sample 1 inside it
        tensor([[0, 0, 0, 0, 1, 1],
                [1, 1, 1, 1, 1, 1]], dtype=torch.uint8)
    """
    if not torch.jit.is_scripting():
        if _flat_crop_applies(x, width, padding, fill, padding_mode):
            return _pad_crop_flat(x, top, left, height, padding)
    if padding[0] + padding[1] + padding[2] + padding[3] > 0:
        x = pad(x, padding, fill, padding_mode)
    return crop(x, top, left, height, width)


def _flat_crop_applies(
    x: Tensor, width: int, padding: List[int], fill: Optional[List[float]], padding_mode: str
) -> bool:
    if torch.compiler.is_compiling() or x.device.type != "cpu" or padding_mode != "constant":
        return False
    if _needs_grad(x):
        return False  # the masked copy goes through a dtype view: it would detach the output
    if padding[0] + padding[1] + padding[2] + padding[3] == 0:
        return False  # nothing to pad: crop reads x directly
    if fill is not None:
        for f in fill:
            if f != 0.0:
                return False
    return x.shape[3] == width and x.numel() > 0 and x.is_contiguous()


def _pad_crop_flat(x: Tensor, top: Tensor, left: Tensor, height: int, padding: List[int]) -> Tensor:
    """Zero-padded per-sample crop of a contiguous NCHW batch whose crop width is the image width.

    The padded batch is never built. Each channel plane is copied once into a buffer where
    planes are separated by ``G`` zeros (bottom padding + a gap + top padding); a crop window
    is then, per plane, ONE contiguous run of ``height * W`` elements starting
    ``(top - pad_top) * W + (left - pad_left)`` elements into the plane, which
    ``index_select`` copies with one memcpy (vs one strided copy per window). Columns left or
    right of the image read the neighbouring row instead of padding, so that row's columns the
    window never shows for real are zeroed by the copy itself: ``x & keep`` with a per-sample
    column byte mask. Rows above/below the image read the zero gaps. (The masked copy, a
    broadcast over 32-byte rows, is most of its time.)
    """
    pl, pt, pr, pb = padding[0], padding[1], padding[2], padding[3]
    n, c, h, w = x.shape[0], x.shape[1], x.shape[2], x.shape[3]
    es = x.element_size()
    row_bytes = w * es
    word_bytes = 1
    offset_bytes = x.storage_offset() * es  # a view into a larger buffer may start anywhere
    for size in (8, 4, 2):
        if word_bytes == 1 and row_bytes % size == 0 and offset_bytes % size == 0:
            word_bytes = size
    gap = (pt + pb) * w + max(pl, pr)
    while (gap * es) % word_bytes != 0:  # keep every plane word-aligned for the masked copy
        gap += 1
    hw = h * w
    stride = hw + gap
    q = n * c
    buf = torch.empty([gap + q * stride], dtype=x.dtype, device=x.device)
    buf.as_strided([q + 1, gap], [stride, 1]).zero_()
    planes = buf.as_strided([n, c, h, w], [c * stride, stride, w, 1], gap)
    if pl > 0 or pr > 0:
        # keep[i, col] = 255 where col - (left[i] - pl) lies in [0, W): the columns sample i
        # shows; a window into the pattern [0]*pr + [255]*W + [0]*pl, one byte per byte.
        pattern = torch.zeros([pr + w + pl, es], dtype=torch.uint8, device=x.device)
        pattern[pr:pr + w].fill_(255)
        windows = pattern.view(-1).as_strided([pl + pr + 1, row_bytes], [es, 1])
        keep = windows.index_select(0, (pl + pr) - left.to(torch.int64))
        word = _word_dtype(word_bytes)
        # reshape -> view: standard strides, whatever size-1 dims had (a dtype view checks them)
        torch.bitwise_and(
            x.reshape(-1).view(n, c, h, w).view(torch.uint8).view(word),
            keep.view(n, 1, 1, row_bytes).view(word),
            out=planes.view(torch.uint8).view(word),
        )
    else:
        planes.copy_(x)
    # Row k of `runs` is the height*w elements starting k elements into buf.
    runs = buf.as_strided([buf.numel() - height * w + 1, height * w], [1, 1])
    first = torch.arange(gap - pt * w - pl, gap + q * stride - pt * w - pl, c * stride,
                         device=x.device)
    first = first.add_(top.to(torch.int64), alpha=w).add_(left.to(torch.int64))
    index = (first.view(n, 1) + torch.arange(0, c * stride, stride, device=x.device)).view(-1)
    return runs.index_select(0, index).view(n, c, height, w)


def _word_dtype(word_bytes: int) -> torch.dtype:
    if word_bytes == 8:
        return torch.int64
    if word_bytes == 4:
        return torch.int32
    if word_bytes == 2:
        return torch.int16
    return torch.uint8


def _window_select(
    x: Tensor, top: Tensor, left: Tensor, win: List[int], dims: List[int]
) -> Tensor:
    """Gather one window per sample of a 4-D strided tensor.

    ``win`` is the window size along dims 1..3 of ``x``; ``dims`` says which of x's dims are
    (row, col, channel), so the same code serves NCHW and NHWC memory.
    """
    n = x.shape[0]
    if n == 0:
        return torch.empty([0] + win, dtype=x.dtype, device=x.device)
    s = x.stride()
    # Offset of the last element of x and of a window, relative to x's first element.
    last = 0
    for d in range(4):
        last += (x.shape[d] - 1) * s[d]
    extent = (win[0] - 1) * s[1] + (win[1] - 1) * s[2] + (win[2] - 1) * s[3]
    # Row k of this view is the window whose first element sits k elements after x[0,0,0,0].
    # (storage_offset left as None keeps x's own offset, so views of a bigger tensor work.)
    windows = x.as_strided([last - extent + 1, win[0], win[1], win[2]], [1, s[1], s[2], s[3]])
    offsets = (
        torch.arange(n, device=x.device) * s[0]
        + top.to(torch.int64) * s[dims[0]]
        + left.to(torch.int64) * s[dims[1]]
    )
    return windows.index_select(0, offsets)


def _center_anchor(size: int, crop_size: int) -> int:
    # torchvision: int(round((size - crop_size) / 2.0)) with Python's round-half-to-even.
    d = size - crop_size
    k = d // 2
    if d % 2 == 1 and k % 2 == 1:
        k += 1
    return k


def center_crop(x: Tensor, height: int, width: int) -> Tensor:
    """Crop the center ``height x width`` of every sample; zero-pads first where the output is
    larger than the image, exactly like ``torchvision.transforms.v2.functional.center_crop``.

    Example:
        >>> center_crop(torch.zeros(2, 3, 32, 32), 24, 20).shape
        torch.Size([2, 3, 24, 20])
    """
    h, w = x.shape[2], x.shape[3]
    if height > h or width > w:
        pad_l = (width - w) // 2 if width > w else 0
        pad_t = (height - h) // 2 if height > h else 0
        pad_r = (width - w + 1) // 2 if width > w else 0
        pad_b = (height - h + 1) // 2 if height > h else 0
        x = pad(x, [pad_l, pad_t, pad_r, pad_b], [0.0], "constant")
        h, w = x.shape[2], x.shape[3]
        if height == h and width == w:
            return x
    top = _center_anchor(h, height)
    left = _center_anchor(w, width)
    # A copy, not a view: outputs never alias the caller's input.
    return x[:, :, top:top + height, left:left + width].clone()
