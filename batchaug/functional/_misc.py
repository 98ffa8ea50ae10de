"""Blur, erasing and per-sample branch grouping kernels.

Pure, TorchScript-compatible functions of an (N, C, H, W) batch and per-sample parameters,
never in place on the input.
"""
from __future__ import annotations

import math
from typing import List, Tuple

import torch
import torch.nn.functional as nnf
from torch import Tensor


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


def erase(x: Tensor, top: Tensor, left: Tensor, height: Tensor, width: Tensor,
          value: Tensor) -> Tensor:
    """Replace one box per sample by ``value`` (broadcastable to x: (1 or N, 1 or C, 1 or H,
    1 or W), x's dtype); a box of height or width 0 erases nothing. Never in place."""
    mask = box_mask(top, left, height, width, x.shape[2], x.shape[3])
    return torch.where(mask, value.to(x.dtype), x)


def group_by_branch(branch: Tensor, num_branches: int) -> Tuple[Tensor, List[int]]:
    """Order samples by branch: ``(order, counts)`` with ``order`` (N,) int64 such that
    ``x.index_select(0, order)`` holds branch 0's samples first, then branch 1's, ..., and
    ``counts[k]`` the number in branch k. ``counts`` is read on the host (one device sync):
    the price of computing each branch only on its own samples."""
    order = torch.argsort(branch, stable=True)
    counts: List[int] = torch.bincount(branch, minlength=num_branches).tolist()
    return order, counts


def inverse_permutation(order: Tensor) -> Tensor:
    """``inv`` with ``inv[order[i]] = i``: ``y.index_select(0, inv)`` undoes the ordering."""
    inv = torch.empty_like(order)
    inv.scatter_(0, order, torch.arange(order.shape[0], device=order.device))
    return inv
