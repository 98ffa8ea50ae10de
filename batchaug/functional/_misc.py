"""Normalize, dtype conversion, blur, erasing and per-sample branch grouping kernels."""
from __future__ import annotations

import math
from typing import List, Tuple

import torch
import torch.nn.functional as nnf
from torch import Tensor

from ._utils import _empty_like_layout, l2_chunk_bytes, _max_value, _needs_grad, cpu_chunk_size


def gaussian_kernel1d(kernel_size: int, sigma: Tensor, dtype: torch.dtype) -> Tensor:
    """(N, kernel_size) normalised Gaussian weights, one row per sample's ``sigma`` ((N,)),
    with torchvision v2's formula (softmax of -(t / sigma)^2 on a scaled linspace)."""
    lim = (kernel_size - 1) / (2.0 * math.sqrt(2.0))
    t = torch.linspace(-lim, lim, steps=kernel_size, dtype=dtype, device=sigma.device)
    return torch.softmax((t / sigma.to(dtype).view(-1, 1)).pow(2).neg(), dim=1)


def gaussian_blur(x: Tensor, kernel_size: List[int], sigma: Tensor) -> Tensor:
    """Blur each image with its own Gaussian: ``kernel_size = [kx, ky]`` (odd), ``sigma`` an
    (N,) tensor (the same sigma on both axes, as torchvision's GaussianBlur draws it) or (N, 2)
    (x, y). Reflect padding as torchvision; separable (two 1-D passes), so float results
    differ from torchvision's single 2-D convolution by rounding (~1e-7) and uint8 by at most 1.

    Example:
        >>> gaussian_blur(torch.zeros(2, 3, 8, 8), [3, 3], torch.tensor([0.5, 1.5])).shape
        torch.Size([2, 3, 8, 8])
    """
    if x.numel() == 0:
        return x.clone()
    kx, ky = kernel_size[0], kernel_size[1]
    n, c, h, w = x.shape[0], x.shape[1], x.shape[2], x.shape[3]
    ct = torch.float64 if x.dtype == torch.float64 else torch.float32
    if sigma.dim() == 1:
        sx, sy = sigma, sigma
    else:
        sx, sy = sigma[:, 0], sigma[:, 1]
    wx = gaussian_kernel1d(kx, sx, ct)
    wy = gaussian_kernel1d(ky, sy, ct)
    y = nnf.pad(x.to(ct), [kx // 2, kx // 2, ky // 2, ky // 2], mode="reflect")
    # per-sample kernels as a grouped convolution over the (sample, channel) planes
    y = y.reshape(1, n * c, h + 2 * (ky // 2), w + 2 * (kx // 2))
    y = nnf.conv2d(y, wx.repeat_interleave(c, dim=0).view(n * c, 1, 1, kx), groups=n * c)
    y = nnf.conv2d(y, wy.repeat_interleave(c, dim=0).view(n * c, 1, ky, 1), groups=n * c)
    y = y.view(n, c, h, w)
    if x.dtype == torch.uint8:
        return y.round().clamp(0, 255).to(torch.uint8)
    return y.to(x.dtype)


def box_mask(top: Tensor, left: Tensor, height: Tensor, width: Tensor, h: int, w: int) -> Tensor:
    """(N, 1, h, w) bool: True inside each sample's box [top, top + height) x [left, left +
    width) (int64 (N,) tensors)."""
    rows = torch.arange(h, device=top.device).view(1, h)
    cols = torch.arange(w, device=top.device).view(1, w)
    in_rows = (rows >= top.view(-1, 1)) & (rows < (top + height).view(-1, 1))
    in_cols = (cols >= left.view(-1, 1)) & (cols < (left + width).view(-1, 1))
    return (in_rows.unsqueeze(2) & in_cols.unsqueeze(1)).unsqueeze(1)


def fitting_boxes(area: Tensor, aspect: Tensor, h: int, w: int, apply: Tensor
                  ) -> Tuple[Tensor, Tensor]:
    """torchvision's and timm's erasing box rule: of the candidates along the last dim (an
    ``area`` and an ``aspect`` each), the first whose height ``round(sqrt(area * aspect))`` and
    width ``round(sqrt(area / aspect))`` (half to even, as Python's ``round``) are below
    ``h`` and ``w``. ``(height, width)``, int64, 0 where ``apply`` is false or none fits."""
    bh = torch.round(torch.sqrt(area * aspect)).to(torch.int64)
    bw = torch.round(torch.sqrt(area / aspect)).to(torch.int64)
    fits = (bh < h) & (bw < w)
    first = fits.to(torch.int64).argmax(dim=-1, keepdim=True)  # the first True
    ok = fits.any(dim=-1) & apply
    zero = torch.zeros_like(ok, dtype=torch.int64)
    return (torch.where(ok, bh.gather(-1, first).squeeze(-1), zero),
            torch.where(ok, bw.gather(-1, first).squeeze(-1), zero))


def erase(x: Tensor, top: Tensor, left: Tensor, height: Tensor, width: Tensor,
          value: Tensor) -> Tensor:
    """Replace one box per sample by ``value`` (broadcastable to x: (1 or N, 1 or C, 1 or H,
    1 or W), x's dtype); a box of height or width 0 erases nothing. Never in place."""
    if _erase_by_loop(x):
        return erase_(x.clone(), top, left, height, width, value)
    mask = box_mask(top, left, height, width, x.shape[2], x.shape[3])
    return torch.where(mask, value.to(x.dtype), x)


def _erase_by_loop(x: Tensor) -> bool:
    # CPU eager/TorchScript without autograd: a loop writing only the erased boxes, cheaper
    # than a where over the batch at 224 px (docs/performance.md, "Fast paths, on and off")
    return (x.device.type == "cpu" and not _needs_grad(x)
            and not (torch.compiler.is_compiling() and not torch.jit.is_scripting()))


def erase_(x: Tensor, top: Tensor, left: Tensor, height: Tensor, width: Tensor,
           value: Tensor) -> Tensor:
    """:func:`erase` in place on ``x`` (which it returns), a tensor the caller owns and autograd
    does not record (not checked here)."""
    if not _erase_by_loop(x):
        mask = box_mask(top, left, height, width, x.shape[2], x.shape[3])
        return torch.where(mask, value.to(x.dtype), x, out=x)
    v = value.to(x.dtype)
    per_sample = v.shape[0] != 1
    tops: List[int] = top.tolist()
    lefts: List[int] = left.tolist()
    heights: List[int] = height.tolist()
    widths: List[int] = width.tolist()
    for i in range(x.shape[0]):
        t, l, h, w = tops[i], lefts[i], heights[i], widths[i]
        if h > 0 and w > 0:
            src = v[i] if per_sample else v[0]
            if src.shape[1] != 1:
                src = src[:, t:t + h]
            if src.shape[2] != 1:
                src = src[:, :, l:l + w]
            x[i, :, t:t + h, l:l + w].copy_(src)
    return x


def group_by_branch(branch: Tensor, num_branches: int) -> Tuple[Tensor, List[int]]:
    """Order samples by branch: ``(order, counts)``, ``x.index_select(0, order)`` holding
    branch 0's samples first, then branch 1's, ..., ``counts[k]`` (read on the host: one
    device sync) the number in branch k."""
    order = torch.argsort(branch, stable=True)
    counts: List[int] = torch.bincount(branch, minlength=num_branches).tolist()
    return order, counts


def inverse_permutation(order: Tensor) -> Tensor:
    """``inv`` with ``inv[order[i]] = i``: ``y.index_select(0, inv)`` undoes the ordering."""
    inv = torch.empty_like(order)
    inv.scatter_(0, order, torch.arange(order.shape[0], device=order.device))
    return inv


def branch_groups(branch: Tensor, num_branches: int
                  ) -> Tuple[List[int], List[Tensor], Tensor]:
    """The samples of each branch: ``(ks, idxs, order)``, the branches that have samples
    (ascending), each one's sample indices (``idxs[j]`` for branch ``ks[j]``) and ``order``,
    the indices concatenated (:func:`ungroup` puts the results back). One host read.

    Example:
        >>> ks, idxs, order = branch_groups(torch.tensor([2, 0, 2]), 3)
        >>> ks, [i.tolist() for i in idxs]
        ([0, 2], [[1], [0, 2]])
    """
    order, counts = group_by_branch(branch, num_branches)
    ks: List[int] = []
    idxs: List[Tensor] = []
    start = 0
    for k in range(num_branches):
        if counts[k] > 0:
            ks.append(k)
            idxs.append(order.narrow(0, start, counts[k]))
        start += counts[k]
    return ks, idxs, order


def ungroup(parts: List[Tensor], order: Tensor) -> Tensor:
    """The per-branch results ``parts`` (:func:`branch_groups` order) in sample order."""
    return torch.cat(parts).index_select(0, inverse_permutation(order))


def normalize(
    x: Tensor, mean: Tensor, std: Tensor, dtype: torch.dtype = torch.float32
) -> Tensor:
    """``(x - mean) / std`` per channel, output in floating ``dtype``.

    uint8 input is first scaled to [0, 1] (divided by 255, folded into the per-channel
    factors: one conversion and one multiply-add). ``mean``/``std`` are (C,) or (1,) float
    tensors on x's device. The arithmetic is float32 (float64 when ``dtype`` is float64);
    float16/bfloat16 outputs are rounded once at the end. Differentiable in ``x``.

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
    """``(factor, shift)``, each ``(1, C, 1, 1)`` (or ``(1, 1, 1, 1)``): ``factor = scale /
    std``, ``shift = -mean / std`` in the compute dtype, for input of ``in_dtype``. A module
    computes them once (per call they are a visible share of a small recipe on CPU)."""
    ct = torch.float64 if dtype == torch.float64 else torch.float32
    scale = 1.0 / _max_value(in_dtype)
    std_c = std.to(ct)
    factor = (scale / std_c).view(1, -1, 1, 1)  # (C,) or (1,): one value for all
    shift = (-mean.to(ct) / std_c).view(1, -1, 1, 1)
    return factor, shift


def normalize_affine(
    x: Tensor, factor: Tensor, shift: Tensor, dtype: torch.dtype = torch.float32
) -> Tensor:
    """``x * factor + shift`` computed in ``factor``'s dtype, output in ``dtype``: :func:`normalize`
    with its factors from :func:`normalize_factors`."""
    ct = factor.dtype
    if x.device.type == "cpu" and not _needs_grad(x) and not torch.compiler.is_compiling():
        if not torch.jit.is_scripting():
            out = _normalize_threads(x, factor, shift, ct)
        else:
            out = _normalize_chunked(x, factor, shift, ct)
    else:
        # The same two roundings as the chunked path (convert, x * factor, + shift), so eager,
        # compiled and exported results agree; x.to(ct) may be x itself, hence mul, not mul_.
        out = x.to(ct).mul(factor).add_(shift)
    if dtype != ct:
        out = out.to(dtype)
    return out


def _normalize_chunked(x: Tensor, factor: Tensor, shift: Tensor, ct: torch.dtype) -> Tensor:
    """Eager/TorchScript CPU path of :func:`normalize` without autograd: convert, multiply,
    add per chunk of ``l2_chunk_bytes`` per thread (never compiled: the loop reads the batch
    size)."""
    n, c = x.shape[0], x.shape[1]
    out = _empty_like_layout(x, [n, c, x.shape[2], x.shape[3]], ct)
    es = 8 if ct == torch.float64 else 4
    k = cpu_chunk_size(x, es * c * x.shape[2] * x.shape[3], l2_chunk_bytes(), True)
    if k >= n:
        return out.copy_(x).mul_(factor).add_(shift)
    for s in range(0, n, k):
        o = out[s:s + k]
        o.copy_(x[s:s + k])
        o.mul_(factor).add_(shift)
    return out


@torch.jit.unused
def _normalize_threads(x: Tensor, factor: Tensor, shift: Tensor, ct: torch.dtype) -> Tensor:
    """:func:`_normalize_chunked` with its chunks split over ``torch.get_num_threads()``
    single-threaded workers (``functional._utils``) instead of OpenMP per chunk, whose
    regions spun on the loader's decoding cores (docs/performance.md, "The seed's whole
    pipeline on every core"); the same values whatever the chunk."""
    from . import _utils

    threads = torch.get_num_threads()
    if threads <= 1 or x.dim() != 4 or _utils.current_threads() > 1:
        return _normalize_chunked(x, factor, shift, ct)  # (already split by images)
    n, c = x.shape[0], x.shape[1]
    out = _empty_like_layout(x, [n, c, x.shape[2], x.shape[3]], ct)
    es = 8 if ct == torch.float64 else 4
    # each chunk on one thread: the per-thread budget, not times the thread count
    k = cpu_chunk_size(x, es * c * x.shape[2] * x.shape[3], l2_chunk_bytes(), False)
    starts = list(range(0, n, k))

    def one(j: int) -> None:
        s = starts[j]
        o = out[s:s + k]
        o.copy_(x[s:s + k])
        o.mul_(factor).add_(shift)

    with _utils.image_threads(threads):
        _utils.for_each(one, len(starts))
    return out


def to_dtype(x: Tensor, dtype: torch.dtype, scale: bool = False) -> Tensor:
    """Convert to ``dtype``; with ``scale=True`` rescale between uint8 [0, 255] and float [0, 1]
    exactly like ``torchvision.transforms.v2.functional.to_dtype`` (supported: uint8 and floats).

    Always returns a new tensor (never the input itself).

    float16/bfloat16 are scaled in float32 and rounded once, so eager and TorchScript (which
    rounds a scalar multiplier to the tensor's dtype first) agree bit for bit; uint8 to them
    is the correctly rounded ``v / 255``, as torchvision. They go to uint8 by torchvision's
    float32 rule (torchvision computes it in the half type, where ``1.0 * 255.999`` rounds to
    256 and wraps to 0).

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
