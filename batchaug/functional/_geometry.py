"""Geometry kernels: per-sample flips, padding, crops, center crop, rotate, affine,
perspective, resized crop and resize for a whole batch with per-sample parameters.

Pure and TorchScript-compatible: tensors and per-sample parameter tensors in, tensor out, no
randomness, no state, no host sync (no ``.item()``/``.tolist()``). Output sizes are Python ints,
so every graph is static. Speed notes on the crop/flip/pad kernels are in :mod:`._utils`.

Dtypes: uint8 in gives uint8 out (computed in float32, rounded, clamped). Floating input gives the
same dtype out; float16/bfloat16 are computed in float32 (the sampling grid needs sub-pixel
precision that half types lack) and cast back, float64 is computed in float64.
"""

from __future__ import annotations

import math
from typing import List, Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from ._utils import (
    _empty_like_layout,
    _is_channels_last,
    _needs_grad,
    _select_into,
    cpu_chunk_size,
    small_tensor,
)


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
    return x.index_select(2, rows).index_select(3, cols)


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
    column byte mask. Rows above/below the image read the zero gaps. CIFAR recipe, batch 256,
    one thread, interleaved medians: pad + crop ~245 -> ~230 us, whole recipe ~857 -> ~825 us.
    (The masked copy, a broadcast over 32-byte rows, is most of what is left.)
    """
    pl, pt, pr, pb = padding[0], padding[1], padding[2], padding[3]
    n, c, h, w = x.shape[0], x.shape[1], x.shape[2], x.shape[3]
    es = x.element_size()
    row_bytes = w * es
    word_bytes = 1
    for size in (8, 4, 2):
        if word_bytes == 1 and row_bytes % size == 0:
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
        torch.bitwise_and(
            x.view(torch.uint8).view(word),
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


def _compute_dtype(x: Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _to_input_dtype(y: Tensor, dtype: torch.dtype, clamp: bool = True) -> Tensor:
    """Cast a float result we own back to ``dtype`` (in place where possible: big CPU
    allocations cost page faults, so fewer temporaries is measurably faster)."""
    if dtype == torch.uint8:
        # round-half-to-even, as torchvision does
        y = y.round_()
        if clamp:
            y = y.clamp_(0.0, 255.0)
        # via int16 (exact for 0..255): float32 -> uint8 directly is not vectorised on CPU
        # (~5x slower at batch 256 of 3x32x32: 0.5 vs 0.1 ms)
        return y.to(torch.int16).to(torch.uint8)
    return y.to(dtype)


def _fill_tensor(
    fill: List[float], channels: int, dtype: torch.dtype, device: torch.device
) -> Tensor:
    if len(fill) != 1 and len(fill) != channels:
        raise ValueError(
            "fill has {} values but the batch has {} channels; give one value or one per "
            "channel".format(len(fill), channels)
        )
    return small_tensor(fill, dtype, device).view(1, -1, 1, 1)


def _grid_sample_fill(
    x: Tensor, grid: Tensor, interpolation: str, fill: Optional[List[float]],
    as_float: bool = False,
) -> Tensor:
    """``grid_sample`` with zero padding, then torchvision's fill rule.

    Mirrors ``torchvision.transforms.v2.functional._geometry._apply_grid_transform`` with one
    grid per sample: a ones channel rides along through ``grid_sample`` to tell how much of each
    output pixel came from inside the image; nearest replaces pixels whose mask < 0.5 by ``fill``,
    bilinear blends ``mask * (img - fill) + fill``. (For bilinear this attenuates the image near
    the border even when fill is 0, exactly as torchvision does.) Where the mask cannot change
    the result (nearest with an all-zero fill, or no fill) it is skipped.
    """
    dtype = x.dtype
    ct = _compute_dtype(x)
    n, c, h, w = x.shape[0], x.shape[1], x.shape[2], x.shape[3]
    zero_fill = True
    in_range = True
    integral = True
    if fill is not None:
        for f in fill:
            if f != 0.0:
                zero_fill = False
            if f < 0.0 or f > 255.0:
                in_range = False
            if f != math.floor(f):
                integral = False
    use_mask = fill is not None and not (interpolation == "nearest" and zero_fill)
    if use_mask:
        # one buffer instead of convert + cat: the mask channel rides along in the same call
        img = torch.empty((n, c + 1, h, w), dtype=ct, device=x.device)
        img[:, :c].copy_(x)
        img[:, c].fill_(1.0)
    else:
        img = x.to(ct)
    out = F.grid_sample(img, grid, mode=interpolation, padding_mode="zeros", align_corners=False)
    if fill is not None and use_mask:
        mask = out[:, c:]
        if interpolation == "nearest":
            fill_img = _fill_tensor(fill, c, ct, out.device)
            out = torch.where(mask < 0.5, fill_img, out[:, :c])
        elif zero_fill:
            out = out[:, :c] * mask  # == (img - 0) * mask + 0, bit for bit
        else:
            fill_img = _fill_tensor(fill, c, ct, out.device)
            out = (out[:, :c] - fill_img).mul_(mask).add_(fill_img)
    if as_float and dtype == torch.uint8:
        # the uint8 result's values, still in float32 (for a fused Normalize; see _warp)
        # (out is always a fresh result here: grid_sample's, or the fill rule's)
        out = out.round_()
        return out.clamp_(0.0, 255.0) if not in_range else out
    if dtype == torch.uint8 and interpolation == "nearest" and in_range and integral:
        # nearest copies integers: nothing to round (int16: see _to_input_dtype)
        return out.to(torch.int16).to(torch.uint8)
    # bilinear results are convex blends of pixels and in-range fills: clamping is a no-op then
    return _to_input_dtype(out, dtype, clamp=not in_range)


def _chunked(x: Tensor) -> bool:
    """Whether a warp may split the batch into CPU chunks: eager or TorchScript on CPU only.
    The chunk loop derives Python ints from the batch size, which would specialise a compiled
    or exported graph's dynamic batch; those (and accelerators) warp the batch in one call."""
    return x.device.type == "cpu" and not torch.compiler.is_compiling()


def _chunk_size(x: Tensor, out_h: int, out_w: int) -> int:
    """How many samples to warp per ``grid_sample`` call: all of them, except on CPU (eager or
    TorchScript) where big batches go in chunks with a working set of about 24 MiB.

    Why: large CPU allocations are fresh mmaps whose page faults cost more than the arithmetic;
    chunks below glibc's 32 MiB mmap threshold are recycled instead. Measured on 2 cores:
    RandomResizedCrop 256->224, batch 256, from ~850 to ~2,400 img/s single-threaded.
    """
    c = x.shape[1]
    # float32 input (+ mask channel), grid, output (+ mask channel)
    per_sample = 4 * ((c + 1) * x.shape[2] * x.shape[3] + (c + 3) * out_h * out_w)
    return cpu_chunk_size(x, per_sample, 24 * 1024 * 1024)


def rotation_grid(
    angle: Tensor, height: int, width: int, center: Optional[List[float]] = None,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """The ``(B, height, width, 2)`` ``grid_sample`` grid that rotates each sample by ``angle``
    (a view of ``(B, 2, height, width)`` planes; ``.contiguous()`` it if you need dense pairs).

    Builds the same inverse affine matrix as torchvision's ``rotate`` (in float64, then cast to
    ``dtype``, as torchvision computes it in Python floats) and the same normalised grid.
    """
    a = torch.remainder(angle.to(torch.float64), 360.0)
    # torchvision: "due to current incoherence of rotation angle direction between affine and
    # rotate implementations we need to set -angle"
    rot = -a * (math.pi / 180.0)
    cos_r = torch.cos(rot)
    sin_r = torch.sin(rot)
    if center is None:
        cx, cy = 0.0, 0.0
    else:
        cx = center[0] - width * 0.5
        cy = center[1] - height * 0.5
    # inverse of a pure rotation about (cx, cy): [cos, sin, tx; -sin, cos, ty]
    tx = cx - cos_r * cx - sin_r * cy
    ty = cy + sin_r * cx - cos_r * cy
    theta = torch.stack((cos_r, sin_r, tx, -sin_r, cos_r, ty), dim=1).view(-1, 2, 3)
    return matrix_grid(theta, height, width, dtype)


def matrix_grid(
    matrix: Tensor, height: int, width: int, dtype: torch.dtype = torch.float32
) -> Tensor:
    """The ``(B, height, width, 2)`` ``grid_sample`` grid of per-sample inverse affine
    matrices ``(B, 2, 3)`` in torchvision's convention (output pixel -> input pixel, both
    relative to the image centre), as torchvision's ``_affine_grid`` builds it; a view of
    ``(B, 2, height, width)`` planes. The matrix is cast to ``dtype`` first (torchvision
    computes it in Python floats and casts it to the image's float dtype).
    """
    theta = matrix.to(dtype)
    scale = small_tensor([0.5 * width, 0.5 * height], dtype, matrix.device)
    rescaled = theta.transpose(1, 2) / scale  # (B, 3, 2): the x, y and 1 rows of the map
    # grid[b, i, j] = xs[j] * row_x[b] + (ys[i] * row_y[b] + row_1[b]): torchvision's
    # base_grid @ rescaled, as one broadcast add of a (B, 2, 1, W) and a (B, 2, H, 1) term into
    # planes (B, 2, H, W), returned as a (B, H, W, 2) view, which grid_sample reads as fast.
    # (On CPU, batch 256 of 32x32: the batched (B, HW, 3) @ (3, 2) bmm took ~2.3 ms, more than
    # grid_sample itself; a broadcast whose innermost dim is the pair ~0.9 ms; this ~0.1 ms.
    # Sums may round in the last bit differently from torchvision's matmul.)
    xs = torch.linspace((1.0 - width) * 0.5, (width - 1.0) * 0.5, steps=width,
                        dtype=dtype, device=matrix.device).view(1, 1, 1, width)
    ys = torch.linspace((1.0 - height) * 0.5, (height - 1.0) * 0.5, steps=height,
                        dtype=dtype, device=matrix.device).view(1, 1, height, 1)
    n = rescaled.shape[0]
    row_x = rescaled[:, 0].reshape(n, 2, 1, 1)
    row_y = rescaled[:, 1].reshape(n, 2, 1, 1)
    row_1 = rescaled[:, 2].reshape(n, 2, 1, 1)
    return ((xs * row_x) + (ys * row_y + row_1)).permute(0, 2, 3, 1)


def affine_matrix(
    angle: Tensor,
    translate: Tensor,
    scale: Tensor,
    shear: Tensor,
    height: int,
    width: int,
    center: Optional[List[float]] = None,
) -> Tensor:
    """Per-sample inverse affine matrices ``(B, 2, 3)`` (float64), torchvision's
    ``_get_inverse_affine_matrix`` for ``v2.functional.affine(img, angle, translate, scale,
    shear, center=center)`` on ``height x width`` images, one row of parameters per sample:
    ``angle`` (B,) degrees, ``translate`` (B, 2) pixels (x, y), ``scale`` (B,), ``shear``
    (B, 2) degrees (x, y). The explicit per-sample transform: :func:`matrix_grid` turns it into
    a sampling grid, and boxes or keypoints can be moved by the same matrices.

    Example:
        >>> m = affine_matrix(torch.tensor([30.0]), torch.zeros(1, 2), torch.ones(1),
        ...                   torch.zeros(1, 2), 32, 32)
        >>> m.shape
        torch.Size([1, 2, 3])
    """
    deg = math.pi / 180.0  # math.radians
    rot = angle.to(torch.float64) * deg
    sx = shear[:, 0].to(torch.float64) * deg
    sy = shear[:, 1].to(torch.float64) * deg
    if center is None:
        cx, cy = 0.0, 0.0
    else:
        cx = center[0] - width * 0.5
        cy = center[1] - height * 0.5
    s = scale.to(torch.float64)
    cos_sy = torch.cos(sy)
    tan_sx = torch.tan(sx)
    rot_minus_sy = rot - sy
    cx_plus_tx = translate[:, 0].to(torch.float64) + cx
    cy_plus_ty = translate[:, 1].to(torch.float64) + cy
    # rotate-scale-shear without the scale; its determinant is 1, so the inverse is cheap
    a = torch.cos(rot_minus_sy) / cos_sy
    b = -(a * tan_sx + torch.sin(rot))
    c = torch.sin(rot_minus_sy) / cos_sy
    d = torch.cos(rot) - c * tan_sx
    m0 = d / s
    m1 = -b / s
    m3 = -c / s
    m4 = a / s
    # C * RSS^-1 * C^-1 * T^-1, in torchvision's order of operations
    m2 = cx - m0 * cx_plus_tx - m1 * cy_plus_ty
    m5 = cy - m3 * cx_plus_tx - m4 * cy_plus_ty
    return torch.stack((m0, m1, m2, m3, m4, m5), dim=1).view(-1, 2, 3)


def _warp_grid(
    kind: str, params: Tensor, h: int, w: int, center: Optional[List[float]], dtype: torch.dtype
) -> Tensor:
    """The per-sample sampling grid of a ``kind`` of warp from its ``(B, ...)`` parameters.
    (A string switch rather than a grid-builder argument: TorchScript takes no functions.)"""
    if kind == "rotation":
        return rotation_grid(params, h, w, center, dtype)
    if kind == "matrix":
        return matrix_grid(params, h, w, dtype)
    return perspective_grid(params, h, w, dtype)


def _warp(
    x: Tensor,
    params: Tensor,
    kind: str,
    center: Optional[List[float]],
    interpolation: str,
    fill: Optional[List[float]],
    as_float: bool = False,
) -> Tensor:
    """Warp each sample of ``x`` by its own parameters: one ``grid_sample`` for the batch, or on
    CPU (eager/TorchScript) per chunk of samples (``_chunk_size``), building each chunk's grid
    from its slice of ``params`` so the whole batch's grid never exists at once.

    ``as_float`` (uint8 ``x``): return float32 holding exactly the values of the uint8 result,
    without the casts to uint8 and back that a following Normalize would make."""
    n, h, w = x.shape[0], x.shape[-2], x.shape[-1]
    out_dtype = torch.float32 if as_float and x.dtype == torch.uint8 else x.dtype
    if n == 0:
        return x.to(out_dtype, copy=True)
    ct = _compute_dtype(x)
    # (no Python int from the batch size unless chunking: see _chunked)
    if not _chunked(x) or _chunk_size(x, h, w) >= n:
        return _grid_sample_fill(x, _warp_grid(kind, params, h, w, center, ct), interpolation,
                                 fill, as_float)
    k = _chunk_size(x, h, w)
    out = torch.empty((n, x.shape[1], h, w), dtype=out_dtype, device=x.device)
    for s in range(0, n, k):
        e = min(n, s + k)
        grid = _warp_grid(kind, params[s:e], h, w, center, ct)
        out[s:e].copy_(_grid_sample_fill(x[s:e], grid, interpolation, fill, as_float))
    return out


def affine(
    x: Tensor,
    matrix: Tensor,
    interpolation: str = "nearest",
    fill: Optional[List[float]] = None,
) -> Tensor:
    """Warp each image of ``x`` by its own inverse affine ``matrix`` (``(B, 2, 3)``, from
    :func:`affine_matrix`), with torchvision's grid and fill rule (``fill``: one value or one
    per channel, ``None`` = plain zero padding); one ``grid_sample`` call per CPU chunk.

    Example:
        >>> x = torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8)
        >>> m = affine_matrix(torch.tensor([0.0, 30.0]), torch.tensor([[2.0, 0.0], [0.0, -3.0]]),
        ...                   torch.tensor([1.0, 0.8]), torch.zeros(2, 2), 32, 32)
        >>> affine(x, m, "bilinear", [0.0]).shape
        torch.Size([2, 3, 32, 32])
    """
    return _warp(x, matrix, "matrix", None, interpolation, fill)


def _cross(a: Tensor, b: Tensor, c: Tensor) -> Tensor:
    """z of (b - a) x (c - a) for (B, 2) points: 0 when the three are collinear (exact for
    integer coordinates)."""
    return (b[:, 0] - a[:, 0]) * (c[:, 1] - a[:, 1]) - (b[:, 1] - a[:, 1]) * (c[:, 0] - a[:, 0])


def perspective_coefficients(endpoints: Tensor, height: int, width: int) -> Tensor:
    """Per-sample perspective coefficients ``(B, 8)`` (float32, as torchvision rounds them)
    mapping the output corners ``endpoints`` ``(B, 4, 2)`` (x, y; top-left, top-right,
    bottom-right, bottom-left) back to the image corners, torchvision's
    ``_get_perspective_coeffs(startpoints, endpoints)`` with startpoints the corners of a
    ``height x width`` image. The 8x8 systems are solved batched in float64 with torchvision's
    solver on the CPU (``torch.linalg.lstsq``, driver "gels"); under ``torch.compile``/
    ``torch.export`` (whose graphs refuse lstsq's data-dependent shapes) and on other devices
    (where lstsq reads its error flags on the host, a sync) ``torch.linalg.solve_ex``, which
    may differ in the 1e-15 residues of coefficients that should be 0. A non-finite solution
    gives the identity coefficients, as do corners of which three are collinear (torchvision
    raises).

    Example:
        >>> ends = torch.tensor([[[1, 0], [30, 2], [31, 31], [0, 29]]])
        >>> perspective_coefficients(ends, 32, 32).shape
        torch.Size([1, 8])
    """
    identity = perspective_identity(torch.float64, endpoints.device)
    if height < 2 or width < 2:  # the image corners are collinear: no perspective exists
        return identity.to(torch.float32).expand(endpoints.shape[0], 8).clone()
    w1, h1 = width - 1.0, height - 1.0
    start = small_tensor([0.0, 0.0, w1, 0.0, w1, h1, 0.0, h1], torch.float64,
                         endpoints.device).view(4, 2)
    # Three collinear corners (possible on small images) make the system singular, where
    # torchvision's lstsq raises: solve the identity system there and keep the identity.
    e = endpoints.to(torch.float64)
    p0, p1, p2, p3 = e[:, 0], e[:, 1], e[:, 2], e[:, 3]
    degenerate = ((_cross(p0, p1, p2) == 0) | (_cross(p0, p1, p3) == 0)
                  | (_cross(p0, p2, p3) == 0) | (_cross(p1, p2, p3) == 0)).view(-1, 1, 1)
    e = torch.where(degenerate, start.unsqueeze(0), e)
    ex, ey = e[:, :, 0], e[:, :, 1]  # (B, 4)
    sx, sy = start[:, 0], start[:, 1]  # (4,)
    one = torch.ones_like(ex)
    zero = torch.zeros_like(ex)
    # rows 2i (x) and 2i+1 (y) of torchvision's a_matrix, for the four corners at once
    row_x = torch.stack((ex, ey, one, zero, zero, zero, -sx * ex, -sx * ey), dim=2)
    row_y = torch.stack((zero, zero, zero, ex, ey, one, -sy * ex, -sy * ey), dim=2)
    a = torch.stack((row_x, row_y), dim=2).reshape(-1, 8, 8)
    b = start.reshape(1, 8).expand(a.shape[0], 8)
    if torch.compiler.is_compiling() or endpoints.device.type != "cpu":
        # lstsq's outputs have data-dependent shapes, which compile/export refuse, and off the
        # CPU lstsq (and linalg.solve) read the solver's error flags on the host: LU without
        # the check (a failed solve gives non-finite values, replaced by the identity below)
        sol = torch.linalg.solve_ex(a, b)[0]
    else:
        # torchvision's solver (QR least squares), not LU: coefficients that should be 0 come
        # out as different 1e-15 residues, which move nearest samples on a pixel boundary
        sol = torch.linalg.lstsq(a, b.unsqueeze(2), driver="gels").solution.squeeze(2)
    ok = torch.isfinite(sol).all(dim=1, keepdim=True) & ~degenerate.view(-1, 1)
    return torch.where(ok, sol, identity).to(torch.float32)


def perspective_identity(dtype: torch.dtype, device: torch.device) -> Tensor:
    """(8,) the identity perspective coefficients ``[1, 0, 0, 0, 1, 0, 0, 0]``, made by device
    ops (the first 8 entries of a flattened 3x3 identity), not copied from the host."""
    return torch.eye(3, dtype=dtype, device=device).view(9)[:8]


def perspective_grid(
    coefficients: Tensor, height: int, width: int, dtype: torch.dtype = torch.float32
) -> Tensor:
    """The ``(B, height, width, 2)`` ``grid_sample`` grid of per-sample perspective
    ``coefficients`` ``(B, 8)``, torchvision's ``_perspective_grid``: output pixel centre
    (x, y) samples ``((c0 x + c1 y + c2), (c3 x + c4 y + c5)) / (c6 x + c7 y + 1)``."""
    c = coefficients.to(dtype)
    n = c.shape[0]
    scale = small_tensor([0.5 * width, 0.5 * height], dtype, c.device)
    rescaled = c[:, :6].reshape(n, 2, 3).transpose(1, 2) / scale  # (B, 3, 2)
    xs = torch.linspace(0.5, width - 0.5, steps=width, dtype=dtype,
                        device=c.device).view(1, 1, 1, width)
    ys = torch.linspace(0.5, height - 0.5, steps=height, dtype=dtype,
                        device=c.device).view(1, 1, height, 1)
    # (x * c0 + y * c1) + c2: the order of torchvision's matmul. Nearest sampling on an
    # integer-cornered perspective lands many points exactly on pixel boundaries, where the
    # last bit decides the pixel
    num = (xs * rescaled[:, 0].reshape(n, 2, 1, 1) + ys * rescaled[:, 1].reshape(n, 2, 1, 1)
           ) + rescaled[:, 2].reshape(n, 2, 1, 1)
    den = (xs * c[:, 6].reshape(n, 1, 1, 1) + ys * c[:, 7].reshape(n, 1, 1, 1)) + 1.0
    grid = num / den - 1.0
    # Where the horizon of the perspective crosses the image (a crossed quadrilateral, drawn
    # at distortion_scale near 1 on even sides) den is 0: torchvision samples nan there. Such
    # pixels get the fill: a point far outside the image.
    grid = torch.where(torch.isfinite(grid), grid, torch.full_like(grid, -4.0))
    return grid.permute(0, 2, 3, 1)


def perspective(
    x: Tensor,
    coefficients: Tensor,
    interpolation: str = "bilinear",
    fill: Optional[List[float]] = None,
) -> Tensor:
    """Warp each image of ``x`` by its own perspective ``coefficients`` ``(B, 8)`` (from
    :func:`perspective_coefficients`), as ``v2.functional.perspective(img, None, None,
    interpolation, fill, coefficients=...)`` per sample.

    Example:
        >>> x = torch.rand(1, 3, 32, 32)
        >>> ends = torch.tensor([[[1, 0], [30, 2], [31, 31], [0, 29]]])
        >>> perspective(x, perspective_coefficients(ends, 32, 32), "bilinear", [0.0]).shape
        torch.Size([1, 3, 32, 32])
    """
    return _warp(x, coefficients, "perspective", None, interpolation, fill)


def rotate(
    x: Tensor,
    angle: Tensor,
    interpolation: str = "nearest",
    fill: Optional[List[float]] = None,
    center: Optional[List[float]] = None,
) -> Tensor:
    """Rotate each image of ``x`` by its own ``angle`` (degrees, ``(B,)``), counter-clockwise.

    Same geometry and fill rule as ``torchvision.transforms.v2.functional.rotate`` with
    ``expand=False``: ``center`` is ``(x, y)`` in pixel coordinates (default: the image centre),
    pixels from outside the image get ``fill`` (one value or one per channel; ``None`` = plain
    zero padding), ``interpolation`` is ``"nearest"`` or ``"bilinear"``. One ``grid_sample``
    call for the whole batch.

    Example:
        >>> x = torch.randint(0, 256, (4, 3, 32, 32), dtype=torch.uint8)
        >>> y = rotate(x, torch.tensor([0.0, 90.0, -15.0, 30.0]), "bilinear", [0.0])
    """
    return _warp(x, angle, "rotation", center, interpolation, fill)


def _box_scale(length: Tensor, out_len: int, dtype: torch.dtype) -> Tensor:
    """``length / out_len`` per sample, rounded once to ``dtype`` (interpolate's scale), the
    same value on every device and backend. A division by a Python number is a multiplication
    by its reciprocal on CUDA (eager, and Inductor for constants) and Triton's float32 division
    is approximate: either can move the quotient by an ulp, and a nearest sample
    ``floor(j * scale)`` across a pixel boundary. float32: divided in float64 and rounded,
    which is the correctly rounded float32 quotient whatever the float64 division's last bit
    (integers below 2**24: a float32 rounding tie is never that close); float64: divided by a
    tensor, which CUDA divides exactly (compiled float64 graphs may still multiply)."""
    if dtype == torch.float64:
        return length.to(dtype) / small_tensor([float(out_len)], dtype, length.device)
    return (length.to(torch.float64) / float(out_len)).to(dtype)


def _crop_axis_coords(
    start: Tensor, length: Tensor, out_len: int, in_len: int, interpolation: str, dtype: torch.dtype
) -> Tensor:
    """Normalised ``grid_sample`` coordinates ``(B, out_len)`` along one axis of a crop.

    Reproduces where ``F.interpolate`` samples when it resizes the cropped window (what
    ``v2.functional.resized_crop`` does): bilinear (align_corners=False) samples at
    ``(j + 0.5) * len / out - 0.5`` clamped to ``[0, len - 1]`` (the window's edge is repeated,
    nothing outside the window leaks in); nearest takes pixel ``floor(j * len / out)``.
    """
    # in the compute dtype, as interpolate's scale: float32, or float64 for float64 input
    j = torch.arange(out_len, device=start.device, dtype=dtype)
    len_f = length.to(dtype).unsqueeze(1)
    scale = _box_scale(length, out_len, dtype).unsqueeze(1)
    if interpolation == "nearest":
        src = torch.minimum(torch.floor(j * scale), len_f - 1.0)
    else:
        src = torch.minimum(((j + 0.5) * scale - 0.5).clamp_min(0.0), len_f - 1.0)
    src = src.to(dtype) + start.to(dtype).unsqueeze(1)
    # grid_sample (align_corners=False) unnormalises with ((g + 1) * in_len - 1) / 2
    return (2.0 * src + 1.0) / float(in_len) - 1.0


def resized_crop(
    x: Tensor,
    top: Tensor,
    left: Tensor,
    height: Tensor,
    width: Tensor,
    size: List[int],
    interpolation: str = "bilinear",
    antialias: bool = False,
) -> Tensor:
    """Crop box ``(top[i], left[i], height[i], width[i])`` from sample ``i``, resize to ``size``.

    Boxes are ``(B,)`` integer tensors and must lie inside the image. Per sample the result is
    ``v2.functional.resized_crop(img, top, left, height, width, size, interpolation, antialias)``:

    * ``antialias=False`` (or nearest): one ``grid_sample`` call for the batch; each output pixel
      interpolates the 2x2 (bilinear) or 1 (nearest) nearest pixels of its box, so a strongly
      shrunk box can alias. Equal to torchvision up to float rounding (uint8: +-1).
    * ``antialias=True`` with bilinear: the box is low-pass filtered as it shrinks (PyTorch's
      antialiased bilinear, torchvision's default). On CPU in eager mode or TorchScript each box
      is resized by ``F.interpolate`` (torch's SIMD uint8 kernel for uint8, no float round trip):
      **exactly** torchvision's CPU result, for every dtype. Under ``torch.compile``/
      ``torch.export`` and on accelerators the same filter runs batched as two per-sample
      matrix products (float32, uint8 rounded), equal to torchvision's float result up to float
      rounding: uint8 may differ by 1 from torchvision's CPU uint8 kernel, which rounds its
      fixed-point weights. Both are differentiable.
    * ``"bicubic"`` (either ``antialias``): on CPU in eager mode or TorchScript the same per-box
      ``F.interpolate`` call, **exactly** torchvision's CPU result (uint8 through torch's native
      kernel). Elsewhere two per-sample matrix products with torch's weights: antialiased cubic
      (a = -0.5, stretched when shrinking) for ``antialias=True``, and for ``antialias=False``
      the 4-tap cubic convolution (a = -0.75) with taps clamped into the box (the edge repeats,
      as interpolate on the cropped box); a ``grid_sample`` would read pixels outside the box.
      Floats equal torchvision to float rounding and keep the overshoot. uint8 follows torch's
      CPU uint8 kernel: the width pass is rounded and clamped to [0, 255] before the height
      pass, so within 2 steps of torchvision on CPU; torchvision on GPU resizes uint8 in one
      float pass and differs from its own CPU result (and from ours) by up to ~30 steps at
      sharp edges where the overshoot is clamped.

    Example:
        >>> x = torch.randint(0, 256, (2, 3, 64, 64), dtype=torch.uint8)
        >>> t, l = torch.tensor([0, 10]), torch.tensor([0, 5])
        >>> h, w = torch.tensor([64, 30]), torch.tensor([64, 40])
        >>> y = resized_crop(x, t, l, h, w, [32, 32])  # (2, 3, 32, 32)
        >>> y = resized_crop(x, t, l, h, w, [32, 32], antialias=True)  # as torchvision's default
    """
    oh, ow = size[0], size[1]
    n = x.shape[0]
    if n == 0:
        return torch.empty((0, x.shape[1], oh, ow), dtype=x.dtype, device=x.device)
    if resized_crop_per_sample_applies(x, interpolation, antialias):
        return _resized_crop_per_sample(
            x, top, left, height, width, oh, ow, interpolation, antialias)
    if interpolation == "bicubic":
        return _resized_crop_aa_batched(
            x, top, left, height, width, oh, ow, "bicubic", antialias)
    if antialias and interpolation == "bilinear":
        return _resized_crop_aa_batched(x, top, left, height, width, oh, ow)
    ct = _compute_dtype(x)
    gx = _crop_axis_coords(left, width, ow, x.shape[-1], interpolation, ct)
    gy = _crop_axis_coords(top, height, oh, x.shape[-2], interpolation, ct)
    # Every sampling point lies inside the image, so no fill/mask is needed.
    if not _chunked(x):
        return _grid_sample_fill(x, _separable_grid(gx, gy), interpolation, None)
    k = _chunk_size(x, oh, ow)
    if k >= n:
        return _grid_sample_fill(x, _separable_grid(gx, gy), interpolation, None)
    out = torch.empty((n, x.shape[1], oh, ow), dtype=x.dtype, device=x.device)
    for s in range(0, n, k):
        e = min(n, s + k)
        grid = _separable_grid(gx[s:e], gy[s:e])
        out[s:e].copy_(_grid_sample_fill(x[s:e], grid, interpolation, None))
    return out


def _resized_crop_per_sample(
    x: Tensor, top: Tensor, left: Tensor, height: Tensor, width: Tensor, oh: int, ow: int,
    mode: str = "bilinear", antialias: bool = True, flip: Optional[Tensor] = None,
) -> Tensor:
    """CPU eager/TorchScript path of the antialiased (bilinear) or bicubic :func:`resized_crop`:
    one ``F.interpolate`` per box, on a view of it, exactly as torchvision resizes one image.

    A Python loop over the batch, taken because it measured faster on CPU than every batched
    path (torch's uint8 antialiased kernel is SIMD and reads only the box; the batched filter
    is a dense matrix product over the whole image): RandomResizedCrop(224) + flip + normalize
    from 256x256, batch 256, one thread, see benchmarks/bench_speed_gaps.py. Differentiable
    (slices, interpolate and copies into a fresh tensor are all tracked by autograd).
    ``flip`` ((N,) bool, optional): flip those samples' results left-right as they are
    written (``RandomHorizontalFlip`` fused in: the same bytes as flipping afterwards).
    """
    n, c = x.shape[0], x.shape[1]
    dtype = x.dtype
    # torchvision resizes uint8 (native kernel), float32 and float64 as they are, and other
    # floats in float32, cast back without rounding
    native = dtype == torch.uint8 or dtype == torch.float32 or dtype == torch.float64
    out = torch.empty((n, c, oh, ow), dtype=dtype, device=x.device)
    if _is_channels_last_4d(x):
        out = out.contiguous(memory_format=torch.channels_last)
    # boxes as Python ints: a CPU tensor, so no device sync
    t_l: List[int] = top.tolist()
    l_l: List[int] = left.tolist()
    h_l: List[int] = height.tolist()
    w_l: List[int] = width.tolist()
    f_l: List[bool] = [False] * n if flip is None else flip.tolist()
    for i in range(n):
        t, l, h, w = t_l[i], l_l[i], h_l[i], w_l[i]
        box = x[i:i + 1, :, t:t + h, l:l + w]
        if h == oh and w == ow:
            y = box  # torchvision returns a same-size image unchanged
        elif native and not (dtype == torch.uint8 and oh * ow == 1):
            y = F.interpolate(
                box, size=[oh, ow], mode=mode, align_corners=False, antialias=antialias)
        else:
            # (PyTorch's uint8 kernel fails an internal assert for a 1x1 output; torchvision
            # then fails too. Float32 + round (+ clamp: bicubic overshoots) is what its non-AVX
            # path does.)
            y = F.interpolate(box.to(torch.float32), size=[oh, ow], mode=mode,
                              align_corners=False, antialias=antialias)
            if dtype == torch.uint8:
                y = _to_input_dtype(y, dtype)
        # the flip of one cache-resident image instead of a pass over the batch
        out[i:i + 1].copy_(y.flip(-1) if f_l[i] else y)
    return out


def resized_crop_per_sample_applies(x: Tensor, interpolation: str, antialias: bool) -> bool:
    """Whether :func:`resized_crop` resizes ``x`` box by box (see there): CPU eager or
    TorchScript, antialiased bilinear or bicubic."""
    return _chunked(x) and (interpolation == "bicubic"
                            or (antialias and interpolation == "bilinear"))


def _is_channels_last_4d(x: Tensor) -> bool:
    return (not x.is_contiguous()) and x.is_contiguous(memory_format=torch.channels_last)


def _cubic(t: Tensor, a: float) -> Tensor:
    """Keys' cubic convolution kernel at distance ``t`` (ATen's cubic_convolution1/2)."""
    t = torch.abs(t)
    near = ((a + 2.0) * t - (a + 3.0)) * t * t + 1.0
    far = ((a * t - 5.0 * a) * t + 8.0 * a) * t - 4.0 * a
    return torch.where(t < 1.0, near, torch.where(t < 2.0, far, torch.zeros_like(t)))


def _aa_weights(
    start: Tensor, length: Tensor, out_len: int, in_len: int, dtype: torch.dtype,
    interpolation: str = "bilinear",
) -> Tensor:
    """``(B, out_len, in_len)`` weights of PyTorch's antialiased bilinear or bicubic resize of
    the window ``[start, start + length)`` of an axis (zero outside the window).

    As ``_compute_weights_aa`` in ATen's UpSampleKernel: scale = length / out, a triangle
    (bilinear) or cubic a = -0.5 (bicubic) filter of half-width 1 or 2, stretched by the scale
    when shrinking, taps from ``int(centre -+ support + 0.5)`` clipped to the window,
    normalised to sum 1.
    """
    ln = length.to(dtype).view(-1, 1, 1)
    scale = _box_scale(length, out_len, dtype).view(-1, 1, 1)
    stretch = torch.clamp(scale, min=1.0)
    half = 2.0 if interpolation == "bicubic" else 1.0
    support = stretch * half
    invscale = 1.0 / stretch
    centre = scale * (torch.arange(out_len, device=start.device, dtype=dtype).view(1, -1, 1) + 0.5)
    # taps relative to the window start
    k = (torch.arange(in_len, device=start.device, dtype=dtype).view(1, 1, -1)
         - start.to(dtype).view(-1, 1, 1))
    lo = torch.clamp(torch.trunc(centre - support + 0.5), min=0.0)
    hi = torch.minimum(torch.trunc(centre + support + 0.5), ln)
    if interpolation == "bicubic":
        w = _cubic((k - centre + 0.5) * invscale, -0.5)
    else:
        w = torch.clamp(1.0 - torch.abs((k - centre + 0.5) * invscale), min=0.0)
    w = torch.where((k >= lo) & (k < hi), w, torch.zeros_like(w))
    return w / w.sum(dim=2, keepdim=True)


def _cubic_weights(
    start: Tensor, length: Tensor, out_len: int, in_len: int, dtype: torch.dtype
) -> Tensor:
    """``(B, out_len, in_len)`` weights of PyTorch's non-antialiased bicubic resize
    (align_corners=False) of the window ``[start, start + length)``: 4 taps around
    ``(j + 0.5) * scale - 0.5`` (not clamped at 0, as ATen's cubic source index), weights of
    the a = -0.75 cubic, tap indices clamped into the window (its edge repeats)."""
    ln = length.to(dtype).view(-1, 1, 1)
    scale = _box_scale(length, out_len, dtype).view(-1, 1, 1)
    src = scale * (torch.arange(out_len, device=start.device, dtype=dtype).view(1, -1, 1) + 0.5)
    src = src - 0.5
    base = torch.floor(src)
    frac = src - base
    k = torch.arange(in_len, device=start.device, dtype=dtype).view(1, 1, -1)
    s0 = start.to(dtype).view(-1, 1, 1)
    w = torch.zeros((start.shape[0], out_len, in_len), dtype=dtype, device=start.device)
    for tap in range(4):
        idx = torch.minimum(torch.clamp(base + float(tap - 1), min=0.0), ln - 1.0) + s0
        coef = _cubic(frac - float(tap - 1), -0.75)
        w = w + torch.where(k == idx, coef, torch.zeros_like(coef))
    return w


def _resized_crop_aa_batched(
    x: Tensor, top: Tensor, left: Tensor, height: Tensor, width: Tensor, oh: int, ow: int,
    interpolation: str = "bilinear", antialias: bool = True,
) -> Tensor:
    """Batched antialiased (bilinear) or bicubic resized crop (accelerators, torch.compile,
    torch.export): the separable filter as per-sample matrices, ``Wy @ x @ Wx^T``. Dense over
    the whole image, which a GPU does in batched GEMMs; no Python int depends on the batch
    size.

    Each pass is one ``bmm`` of a sample's weights with all of its channels side by side
    (``(B, oh, H) @ (B, H, C * W)``), not a ``matmul`` of ``(B, 1, oh, H)`` with
    ``(B, C, H, W)``, which would materialise the weights broadcast over the channels (176 MB
    at batch 256 to 224 px); the products are the same dot products. The passes run in full
    float32 even where float32 matmuls may use TF32 or bfloat16 (``_bmm_ieee``)."""
    dtype = x.dtype
    ct = _compute_dtype(x)
    n, c, h, w = x.shape[0], x.shape[1], x.shape[2], x.shape[3]
    if interpolation == "bicubic" and not antialias:
        wy = _cubic_weights(top, height, oh, h, ct)
        wx = _cubic_weights(left, width, ow, w, ct)
    else:
        wy = _aa_weights(top, height, oh, h, ct, interpolation)
        wx = _aa_weights(left, width, ow, w, ct, interpolation)
    # wy: (B, oh, H), wx: (B, ow, W)
    # dense (B, W, ow): BLAS sums a transposed operand in another order (float64 last bits)
    wxt = wx.transpose(1, 2).contiguous()
    if dtype == torch.uint8 and interpolation == "bicubic":
        # torch's CPU uint8 kernel (torchvision's CPU path, and our per-box one) resizes the
        # width first and stores that pass as uint8: clamping the overshoot there moves sharp
        # edges by up to ~30 steps against one float pass. The same two passes keep this
        # within 2 steps of it (fixed-point vs float weights, rounded twice).
        xw = _bmm_ieee(x.to(ct, memory_format=torch.contiguous_format).view(n, c * h, w), wxt)
        xw = xw.round_().clamp_(0.0, 255.0).view(n, c, h, ow)
        # height pass: rows of all channels side by side, (B, H, C * ow)
        y = _bmm_ieee(wy, xw.transpose(1, 2).reshape(n, h, c * ow))
        y = y.view(n, oh, c, ow).transpose(1, 2)
    else:
        # height pass first (as before), on the image transposed to (B, H, C, W) in the
        # same copy that converts it to the compute dtype
        # (.to returns its input unchanged when the dtype already matches: then .contiguous
        # makes the one copy)
        xt = x.transpose(1, 2).to(ct, memory_format=torch.contiguous_format).contiguous()
        t = _bmm_ieee(wy, xt.view(n, h, c * w))  # (B, oh, C * W) = (B, oh * C, W)
        y = _bmm_ieee(t.view(n, oh * c, w), wxt).view(n, oh, c, ow).transpose(1, 2)
    # y: (B, C, oh, ow) as a view of (B, oh, C, ow) memory
    if _is_channels_last_4d(x):
        y = y.contiguous(memory_format=torch.channels_last)
    else:
        y = y.contiguous()
    if dtype == torch.uint8:
        # bilinear weights are convex: the result stays in [0, 255]; cubic ones overshoot
        return _to_input_dtype(y, dtype, clamp=interpolation == "bicubic")
    return y.to(dtype)


def _bmm_ieee(a: Tensor, b: Tensor) -> Tensor:
    """``torch.bmm(a, b)`` in full float32 precision even where the user let float32 matmuls
    run in TF32 or bfloat16 (``torch.set_float32_matmul_precision("high"/"medium")``, which
    keep ~10 or 8 bits of the weights: uint8 results would move by several steps). Eager
    only: TorchScript and compiled graphs follow the global setting."""
    if a.dtype != torch.float32 or torch.jit.is_scripting() or torch.compiler.is_compiling():
        return torch.bmm(a, b)
    return _bmm_ieee_eager(a, b)


@torch.jit.unused
def _bmm_ieee_eager(a: Tensor, b: Tensor) -> Tensor:
    # The backend's precision is a process-wide setting read when the kernel is launched:
    # set "ieee" for this call and restore the user's value (legacy and new API alike).
    backend = torch.backends.cuda.matmul if a.is_cuda else torch.backends.mkldnn.matmul
    saved = backend.fp32_precision
    if saved == "ieee":
        return torch.bmm(a, b)
    backend.fp32_precision = "ieee"
    try:
        return torch.bmm(a, b)
    finally:
        backend.fp32_precision = saved


def _separable_grid(gx: Tensor, gy: Tensor) -> Tensor:
    """``(B, H, W, 2)`` grid from per-sample x ``(B, W)`` and y ``(B, H)`` coordinates."""
    n, oh, ow = gx.shape[0], gy.shape[1], gx.shape[1]
    # stacked as planes (B, 2, H, W) and viewed as (B, H, W, 2): a stack along the last dim
    # copies pairs, several times slower on CPU; grid_sample reads the view as fast
    return torch.stack(
        (gx.unsqueeze(1).expand(n, oh, ow), gy.unsqueeze(2).expand(n, oh, ow)), dim=1
    ).permute(0, 2, 3, 1)


def resize(
    x: Tensor, size: List[int], interpolation: str = "bilinear", antialias: bool = True
) -> Tensor:
    """Resize the whole batch to ``size`` = ``[height, width]``, like ``v2.functional.resize``.

    ``interpolation``: "nearest", "bilinear" or "bicubic"; ``antialias`` applies to bilinear
    and bicubic (as in torchvision). uint8 bilinear/bicubic on CPU uses PyTorch's native uint8
    path (what torchvision picks: always for bicubic, on AVX2/AVX-512 and ARM CPUs for
    bilinear); otherwise uint8 is resized in float32, clamped (bicubic overshoots), rounded and
    cast back, as torchvision does on GPU. Floating bicubic output keeps its overshoot, as
    torchvision's. Same size in returns ``x`` itself.

    Example:
        >>> y = resize(torch.zeros(8, 3, 64, 48, dtype=torch.uint8), [32, 24])
    """
    oh, ow = size[0], size[1]
    if x.shape[-2] == oh and x.shape[-1] == ow:
        return x
    if x.shape[0] == 0:
        return torch.empty((0, x.shape[1], oh, ow), dtype=x.dtype, device=x.device)
    dtype = x.dtype
    if interpolation == "nearest":
        # nearest is exact on every dtype; no float round trip needed for uint8
        if dtype == torch.uint8 or dtype == torch.float32 or dtype == torch.float64:
            return F.interpolate(x, size=[oh, ow], mode="nearest")
        return F.interpolate(x.float(), size=[oh, ow], mode="nearest").to(dtype)
    # (PyTorch 2.14's native uint8 path fails an internal assert for a 1x1 output of a
    # 3-channel batch, so that case takes the float path)
    if dtype == torch.uint8 and x.device.type == "cpu" and oh * ow > 1:
        return F.interpolate(
            x, size=[oh, ow], mode=interpolation, align_corners=False, antialias=antialias
        )
    ct = _compute_dtype(x)
    y = F.interpolate(
        x.to(ct), size=[oh, ow], mode=interpolation, align_corners=False, antialias=antialias
    )
    return _to_input_dtype(y, dtype)


def resized_output_size(
    height: int, width: int, size: List[int], max_size: Optional[int] = None
) -> List[int]:
    """Output ``[h, w]`` for ``size`` as torchvision reads it: ``[h, w]``; one int = the
    shorter side, the longer one then capped at ``max_size`` (both scaled down, as
    torchvision); an empty ``size`` (torchvision's ``None``) = the longer side is ``max_size``.
    """
    if len(size) == 2:
        return [size[0], size[1]]
    short, long = (width, height) if width <= height else (height, width)
    if len(size) == 0:
        if max_size is None:
            raise ValueError("resized_output_size: an empty size needs max_size")
        new_short, new_long = int(max_size * short / long), max_size
    else:
        new_short, new_long = size[0], int(size[0] * long / short)
        if max_size is not None and new_long > max_size:
            new_short, new_long = int(max_size * new_short / new_long), max_size
    if width <= height:
        return [new_long, new_short]
    return [new_short, new_long]
