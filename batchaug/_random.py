"""Every random draw of the transforms goes through here: one place to change the source.

Each function draws for a batch ``x`` (one value, or one row of ``size`` values, per sample) on
``x.device``, with torch's global generator. Shapes come from ``x.shape[0]`` without turning it
into a Python int, so a dynamic batch stays symbolic under ``torch.export``; all functions
script with TorchScript and trace under ``torch.compile(fullgraph=True)``.

The plan is to swap the body for a counter-based per-sample generator (sample i's draws a pure
function of a seed and i, independent of the batch size and the device model): callers must
only depend on what these functions promise (distribution, shape, dtype, device).

Example:
    >>> import torch
    >>> from batchaug import _random
    >>> x = torch.zeros(4, 3, 8, 8)
    >>> _random.uniform(x, 0.5, 1.5).shape, _random.bernoulli(x, 0.5).dtype
    (torch.Size([4]), torch.bool)
"""
from __future__ import annotations

from typing import List, Optional

import torch
from torch import Tensor


def _shape(x: Tensor, size: Optional[int]) -> List[int]:
    if size is None:
        return [x.shape[0]]
    return [x.shape[0], size]


def uniform(x: Tensor, low: float, high: float, size: Optional[int] = None) -> Tensor:
    """float32 values uniform in [low, high), shape (N,) or (N, size). ``low == high`` gives
    exactly ``low`` (a degenerate range is a fixed value, as in torchvision)."""
    r = torch.rand(_shape(x, size), device=x.device)
    if low == high:
        return torch.full_like(r, low)
    return r * (high - low) + low


def integers(x: Tensor, low: int, high: int, size: Optional[int] = None) -> Tensor:
    """int64 values uniform in [low, high) (``high > low``), shape (N,) or (N, size)."""
    return torch.randint(low, high, _shape(x, size), device=x.device)


def integers_below(high: Tensor) -> Tensor:
    """int64 values uniform in [0, high) elementwise, for a per-sample bound ``high`` (int64,
    each >= 1); same shape and device as ``high``."""
    r = torch.rand(high.shape, device=high.device, dtype=torch.float64)
    # float64: r * high < high for every float64 r < 1 and high < 2**52, so the floor is in range
    return torch.minimum((r * high.to(torch.float64)).floor().to(torch.int64), high - 1)


def bernoulli(x: Tensor, p: float, size: Optional[int] = None) -> Tensor:
    """bool, True with probability ``p``, shape (N,) or (N, size)."""
    return torch.rand(_shape(x, size), device=x.device) < p


def beta(x: Tensor, alpha: float, beta_: float) -> Tensor:
    """float32 Beta(alpha, beta_) values (both > 0), shape (N,), as G1 / (G1 + G2) with
    G1 ~ Gamma(alpha), G2 ~ Gamma(beta_)."""
    n = _shape(x, None)
    g1 = torch._standard_gamma(torch.full(n, alpha, device=x.device))
    g2 = torch._standard_gamma(torch.full(n, beta_, device=x.device))
    total = g1 + g2
    # both gammas underflow to 0 for tiny alpha/beta: split evenly rather than return nan
    return torch.where(total > 0, g1 / total.clamp_min(1e-38), torch.full_like(g1, 0.5))


def noise_like(x: Tensor) -> Tensor:
    """Random values shaped like ``x``: standard normal in x's floating dtype (drawn in
    float32), uniform bytes 0-255 for uint8."""
    if x.dtype == torch.uint8:
        return torch.randint(0, 256, x.shape, dtype=torch.uint8, device=x.device)
    return torch.randn(x.shape, device=x.device).to(x.dtype)


def permutations(x: Tensor, k: int) -> Tensor:
    """(N, k) int64: an independent uniformly random permutation of ``range(k)`` per sample."""
    return torch.rand(_shape(x, k), device=x.device).argsort(dim=1)


def categorical(x: Tensor, probs: Tensor) -> Tensor:
    """(N,) int64 in [0, len(probs)), index j with probability probs[j] (probs sums to 1,
    float64 on any device: it is moved to ``x.device``)."""
    cdf = probs.to(device=x.device, dtype=torch.float64).cumsum(0)
    r = torch.rand(_shape(x, None), device=x.device, dtype=torch.float64) * cdf[-1]
    # searchsorted(right=True): r in [cdf[j-1], cdf[j]) -> j; a zero-probability branch never
    # wins because its interval is empty
    idx = torch.searchsorted(cdf, r, right=True)
    return idx.clamp_max(probs.shape[0] - 1)
