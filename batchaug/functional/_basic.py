"""Basic kernels: per-sample flips, padding, per-sample crop, center crop, normalize, dtype.

Every function here is pure (no randomness, no state), TorchScript-compatible, and takes an
(N, C, H, W) batch plus explicit per-sample parameter tensors. Nothing here reads a tensor's
values on the host (no ``.item()``/``.tolist()``), so a CUDA forward never waits for the device.

Speed notes (measured on the 2-core CPU this was written on, batch 256 of 3x32x32 uint8):
- ``torch.where(mask[:, None, None, None], a, b)`` on uint8 costs ~5x a plain copy (the select
  kernel is not vectorised for a broadcast condition), so per-sample selection views each
  sample's bytes as int64 words: 8x fewer elements, same result.
- A per-sample crop is one ``index_select`` over an overlapping ``as_strided`` view whose rows
  are "the window starting at storage offset k": a memcpy per window, ~35x faster than a 4-D
  advanced-indexing gather.
- Constant padding writes into a preallocated tensor (fill + one strided copy), ~2x faster
  than ``F.pad`` here and it keeps channels_last.
- ``index_select`` copies a window with one memcpy only when the window is contiguous; hence
  ``pad_crop`` (pad + crop without the padded batch, one contiguous run per channel plane).
- Flips blend into their fresh flipped tensor with int64 xor/and/xor (faster than ``where``).
- Ops that make several passes over a float buffer (``normalize``) run per chunk of samples
  on CPU (``cpu_chunk_size``, ``_l2_chunk_bytes``); accelerators and compiled graphs get one.
- Each small op costs ~1-3 us of dispatch here, so fixed per-call overhead matters at batch 256
  (~100 us of a ~850 us CIFAR recipe); big allocations can also page-fault depending on glibc's
  heap state, which makes single measurements noisy: compare interleaved medians.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import torch
from torch import Tensor


# Working-set size for CPU kernels that make several passes over a buffer (normalize). It was
# 384 KiB (inside one core's L2, so later passes hit the cache); re-measured for issue 13 at
# 1 thread (thread CPU time, min of 30 rounds of 5 calls), Normalize of a 256x3x32x32 uint8
# batch: 8 chunks of 384 KiB 276 us, 2 of 1.5 MiB 216 us, one chunk 205 us (each chunk costs
# ~10 us of op dispatch, more than the cache saves); 64x3x224x224: 384 KiB to 4 MiB chunks and
# one chunk all 33-36 ms, within noise. 4 MiB keeps CIFAR-sized batches in one chunk.
def _l2_chunk_bytes() -> int:
    return 4 * 1024 * 1024  # a function, not a global: TorchScript cannot read module globals


def cpu_chunk_size(
    x: Tensor, bytes_per_sample: int, chunk_bytes: int, per_thread: bool = False
) -> int:
    """How many samples of ``x`` a kernel should process per chunk: ``chunk_bytes`` worth on
    CPU (eager or TorchScript), the whole batch anywhere else. ``per_thread``: ``chunk_bytes``
    per intra-op thread (for cache-sized chunks, each thread has its own L2; TorchScript,
    which cannot query the thread count, counts one).

    Compiled/exported graphs (``torch.compile``, ``torch.export``) and accelerators get one
    chunk: they plan their own buffers and fusions, and one static call keeps the graph small.
    Always at least 1, so ``range(0, n, k)`` loops are safe for empty batches.
    """
    n = x.shape[0]
    if x.device.type != "cpu":
        return max(1, n)
    if torch.compiler.is_compiling() and not torch.jit.is_scripting():
        return max(1, n)
    if not torch.jit.is_scripting():
        if per_thread:
            chunk_bytes *= torch.get_num_threads()
    return max(1, min(n, chunk_bytes // max(1, bytes_per_sample)))


def _needs_grad(x: Tensor) -> bool:
    """True when autograd records ops on ``x``: then only the plain (differentiable) path may run.

    The bit-level fast paths reinterpret bytes (``view(dtype)``) or write in place through such a
    view, which autograd cannot see: they would detach the output or give wrong gradients.
    """
    return x.requires_grad and torch.is_grad_enabled()


def _is_channels_last(x: Tensor) -> bool:
    # A tensor that is both (e.g. C == 1) is treated as contiguous.
    return (not x.is_contiguous()) and x.is_contiguous(memory_format=torch.channels_last)


def _empty_like_layout(x: Tensor, shape: List[int], dtype: torch.dtype) -> Tensor:
    """A new tensor of ``shape`` on x's device, channels_last iff x is channels_last."""
    if _is_channels_last(x):
        return torch.empty(shape, dtype=dtype, device=x.device, memory_format=torch.channels_last)
    return torch.empty(shape, dtype=dtype, device=x.device)


def select_samples(mask: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """Per-sample ``a[i] if mask[i] else b[i]`` for same-shape, same-dtype batches.

    ``mask`` is a (N,) bool tensor. Equivalent to ``torch.where(mask[:, None, None, None], a, b)``.
    """
    if a.numel() == 0:  # also an empty batch; numel() keeps a dynamic batch size symbolic
        return a.clone()
    if _is_channels_last(a) and _is_channels_last(b):
        # channels_last memory is a contiguous (N, H, W, C) tensor: select on that view.
        return _select_dense(mask, a.permute(0, 2, 3, 1), b.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
    return _select_dense(mask, a, b)


def _select_dense(mask: Tensor, a: Tensor, b: Tensor) -> Tensor:
    if torch.jit.is_scripting():
        # TorchScript has no dtype view: pick rows of [b; a] instead (one memcpy per sample,
        # still ~3x faster than the broadcast torch.where on uint8). Differentiable.
        n = a.shape[0]
        index = torch.arange(n, device=a.device) + mask.to(torch.int64) * n
        return torch.cat([b, a]).index_select(0, index)
    # The int64 word view is a fast path for plain data only: a dtype view is not
    # differentiable (it would return a detached result).
    if a.is_contiguous() and b.is_contiguous() and not (_needs_grad(a) or _needs_grad(b)):
        row_bytes = a.shape[1] * a.shape[2] * a.shape[3] * a.element_size()
        if row_bytes % 8 == 0:
            # Select whole 8-byte words: the values are only copied, never interpreted.
            a64 = a.reshape(a.shape[0], -1).view(torch.uint8).view(torch.int64)
            b64 = b.reshape(b.shape[0], -1).view(torch.uint8).view(torch.int64)
            out = torch.where(mask.view(-1, 1), a64, b64)
            return out.view(torch.uint8).view(a.dtype).view(a.shape)
    return torch.where(mask.view(-1, 1, 1, 1), a, b)


def _select_into(mask: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """``select_samples(mask, a, b)``, allowed to write the result into ``a`` (a fresh tensor
    the caller owns, same layout as ``b``).

    On CPU, for dense rows of whole 8-byte words, it blends in place with bitwise ops on int64
    words, ``a = b ^ ((a ^ b) & m)`` with ``m`` all ones where ``mask``: three vectorised passes
    beat one broadcast ``torch.where`` (CIFAR flip, batch 256: ~140 -> ~115 us per call).
    """
    if torch.jit.is_scripting():
        return select_samples(mask, a, b)
    # Eager CPU only, and only on plain data: the in-place write goes through a dtype view
    # that autograd cannot see (it gave flip's gradient for an unflipped sample).
    if (a.device.type != "cpu" or a.numel() == 0 or _needs_grad(a) or _needs_grad(b)
            or torch.compiler.is_compiling()):
        return select_samples(mask, a, b)
    n = a.shape[0]
    if _is_channels_last(a) and _is_channels_last(b):
        a_d, b_d = a.permute(0, 2, 3, 1), b.permute(0, 2, 3, 1)
    else:
        a_d, b_d = a, b
    row_bytes = a.shape[1] * a.shape[2] * a.shape[3] * a.element_size()
    if not (a_d.is_contiguous() and b_d.is_contiguous()) or row_bytes % 8 != 0:
        return select_samples(mask, a, b)
    a64 = a_d.reshape(n, -1).view(torch.uint8).view(torch.int64)
    b64 = b_d.reshape(n, -1).view(torch.uint8).view(torch.int64)
    m = mask.to(torch.int64).neg_().view(n, 1)  # -1 = all bits set
    a64.bitwise_xor_(b64).bitwise_and_(m).bitwise_xor_(b64)
    return a


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


def _max_value(dtype: torch.dtype) -> float:
    # Only uint8 among integer dtypes is supported by batchaug.
    return 255.0 if dtype == torch.uint8 else 1.0


def normalize(
    x: Tensor, mean: Tensor, std: Tensor, dtype: torch.dtype = torch.float32
) -> Tensor:
    """``(x - mean) / std`` per channel, output in floating ``dtype``.

    uint8 input is first scaled to [0, 1] (divided by 255), as ``to_dtype(..., scale=True)``
    does; the scale is folded into the per-channel factors, so the whole kernel is one
    conversion and one multiply-add. ``mean``/``std`` are (C,) or (1,) float tensors on x's
    device (kept as module buffers so nothing is copied per call). The arithmetic is float32
    (float64 when ``dtype`` is float64); float16/bfloat16 outputs are rounded once at the end.
    Differentiable in ``x``.

    Example:
        >>> x = torch.full((1, 3, 2, 2), 255, dtype=torch.uint8)
        >>> normalize(x, torch.tensor([.5, .5, .5]), torch.tensor([.5, .5, .5]))[0, :, 0, 0]
        tensor([1., 1., 1.])
    """
    factor, shift = normalize_factors(mean, std, x.dtype, dtype)
    return normalize_affine(x, factor, shift, dtype)


def normalize_factors(
    mean: Tensor, std: Tensor, in_dtype: torch.dtype, dtype: torch.dtype = torch.float32
) -> Tuple[Tensor, Tensor]:
    """``(factor, shift)``, each ``(1, C, 1, 1)`` (or ``(1, 1, 1, 1)``), such that
    ``normalize(x, mean, std, dtype) == normalize_affine(x, factor, shift, dtype)`` for input of
    ``in_dtype``: ``factor = scale / std``, ``shift = -mean / std`` in the compute dtype.
    A module computes them once (4 small ops cost ~40 us per call on a CPU, ~5% of the CIFAR
    recipe at batch 256)."""
    ct = torch.float64 if dtype == torch.float64 else torch.float32
    scale = 1.0 / _max_value(in_dtype)
    std_c = std.to(ct)
    factor = (scale / std_c).view(1, -1, 1, 1)  # (C,) or (1,): one value for all
    shift = (-mean.to(ct) / std_c).view(1, -1, 1, 1)
    return factor, shift


def normalize_affine(
    x: Tensor, factor: Tensor, shift: Tensor, dtype: torch.dtype = torch.float32
) -> Tensor:
    """``x * factor + shift`` computed in ``factor``'s dtype (float32 or float64), output in
    ``dtype``: the arithmetic of :func:`normalize` with its factors from
    :func:`normalize_factors`. Differentiable in ``x``."""
    ct = factor.dtype
    if x.device.type == "cpu" and not _needs_grad(x) and not torch.compiler.is_compiling():
        out = _normalize_chunked(x, factor, shift, ct)
    else:
        # The same two roundings as the chunked path (convert, x * factor, + shift), so eager,
        # compiled and exported results agree; x.to(ct) may be x itself, hence mul, not mul_.
        out = x.to(ct).mul(factor).add_(shift)
    if dtype != ct:
        out = out.to(dtype)
    return out


def _normalize_chunked(x: Tensor, factor: Tensor, shift: Tensor, ct: torch.dtype) -> Tensor:
    """Eager/TorchScript CPU path of :func:`normalize` for inputs that need no gradient.

    Convert, multiply, add: three passes over the float buffer, per chunk of samples of
    ``_l2_chunk_bytes`` per thread (a CIFAR batch is one chunk: see there why). The loop
    derives Python ints from the batch size, so compiled/exported graphs (dynamic batch) never
    come here.
    """
    n, c = x.shape[0], x.shape[1]
    out = _empty_like_layout(x, [n, c, x.shape[2], x.shape[3]], ct)
    es = 8 if ct == torch.float64 else 4
    k = cpu_chunk_size(x, es * c * x.shape[2] * x.shape[3], _l2_chunk_bytes(), True)
    if k >= n:
        return out.copy_(x).mul_(factor).add_(shift)
    for s in range(0, n, k):
        o = out[s:s + k]
        o.copy_(x[s:s + k])
        o.mul_(factor).add_(shift)
    return out


def to_dtype(x: Tensor, dtype: torch.dtype, scale: bool = False) -> Tensor:
    """Convert to ``dtype``; with ``scale=True`` rescale between uint8 [0, 255] and float [0, 1]
    exactly like ``torchvision.transforms.v2.functional.to_dtype`` (supported: uint8 and floats).

    Always returns a new tensor (never the input itself), so callers can modify it freely.

    float16/bfloat16 are scaled in float32 and rounded once (float64 in float64), so eager and
    TorchScript agree bit for bit: TorchScript rounds a scalar multiplier to the tensor's dtype
    first, so ``x.to(bfloat16).mul_(1 / 255)`` differed from eager in 126 of 256 values. uint8 to
    float16/bfloat16 equals torchvision's result (the correctly rounded ``v / 255``). float16/
    bfloat16 to uint8 equals torchvision's float32 rule applied to the (exactly widened) value;
    torchvision itself computes it in the half type, where ``1.0 * 255.999`` rounds to 256 and
    wraps to 0.

    Example:
        >>> to_dtype(torch.full((1, 1, 1, 1), 255, dtype=torch.uint8), torch.float32, True)
        tensor([[[[1.]]]])
    """
    if x.dtype == dtype:
        return x.clone()
    if not scale:
        return x.to(dtype)
    in_float = x.is_floating_point()
    out_float = dtype != torch.uint8
    if in_float and out_float:
        return x.to(dtype)
    if in_float:
        # torchvision's float -> int rule: multiply by max + 1 - eps, then truncate.
        ct = torch.float64 if x.dtype == torch.float64 else torch.float32
        return x.to(ct).mul(_max_value(dtype) + 1.0 - 1e-3).to(dtype)  # never in place on x
    if dtype == torch.float32 or dtype == torch.float64:
        return x.to(dtype).mul_(1.0 / _max_value(x.dtype))
    return x.to(torch.float32).mul_(1.0 / _max_value(x.dtype)).to(dtype)
