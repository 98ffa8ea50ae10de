"""GaussianBlur with a per-sample sigma and RandomErasing with one box per sample.

Modules validate in ``__init__``, draw per-sample parameters through :mod:`batchaug._random`
on the input's device in ``make_params``, and call the kernels of ``functional._misc``.
"""
from __future__ import annotations

import math
import numbers
from typing import List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor, nn

from .. import _random
from ..functional import _misc as FM
from .._validation import (
    MAX_SIZE,
    check_batch,
    check_fill,
    check_fill_for,
    check_probability,
    check_range,
)

MIN_SIGMA = 1e-30  # float32 keeps it non-zero: t / sigma stays defined at t = 0
MAX_SIGMA = 1e30


def _check_kernel_size(kernel_size: Union[int, Sequence[int]]) -> Tuple[int, int]:
    what = "an odd positive int or a sequence of two"
    if isinstance(kernel_size, bool):
        raise TypeError(f"kernel_size must be {what}, got bool")
    if isinstance(kernel_size, numbers.Integral):
        vals = [int(kernel_size)] * 2
    elif isinstance(kernel_size, (list, tuple)) and all(
        isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in kernel_size
    ):
        vals = [int(v) for v in kernel_size]
        if len(vals) == 1:
            vals = vals * 2
        if len(vals) != 2:
            raise ValueError(f"kernel_size must have 1 or 2 elements, got {kernel_size!r}")
    else:
        raise TypeError(f"kernel_size must be {what}, got {kernel_size!r}")
    if any(v <= 0 or v % 2 == 0 for v in vals):
        raise ValueError(f"kernel_size must be odd and positive, got {kernel_size!r}")
    if any(v > 2 * MAX_SIZE + 1 for v in vals):
        raise ValueError(f"kernel_size must be at most {2 * MAX_SIZE + 1}, got {kernel_size!r}")
    return vals[0], vals[1]


class GaussianBlur(nn.Module):
    """Blur each image with a Gaussian whose ``sigma`` is drawn per sample from ``sigma``
    (a number: fixed; (min, max): uniform), as ``v2.GaussianBlur``: ``kernel_size`` is an odd
    int or (x, y) pair, same kernel formula and reflect padding. Differences: one sigma per
    sample (torchvision: one per call); computed as two 1-D passes (float results within
    ~1e-6 of torchvision's 2-D convolution, uint8 within 1). The padding needs each image
    larger than half the kernel (``ValueError`` at call time otherwise).

    Example (SimCLR at 224 px):
        >>> GaussianBlur(23, sigma=(0.1, 2.0))(torch.zeros(4, 3, 32, 32)).shape
        torch.Size([4, 3, 32, 32])
    """

    def __init__(
        self, kernel_size: Union[int, Sequence[int]],
        sigma: Union[float, Sequence[float]] = (0.1, 2.0),
    ) -> None:
        super().__init__()
        self.kernel_size: List[int] = list(_check_kernel_size(kernel_size))
        if isinstance(sigma, (list, tuple)) and len(sigma) == 1:
            sigma = sigma[0]
        if isinstance(sigma, (list, tuple)):
            lo, hi = check_range(sigma, "sigma", MIN_SIGMA, MAX_SIGMA)
        else:
            lo, hi = check_range([sigma, sigma], "sigma", MIN_SIGMA, MAX_SIGMA)
        self.sigma_min = lo
        self.sigma_max = hi
        self._keyed = True

    def make_params(self, x: Tensor, keys: Optional[Tensor] = None) -> Tensor:
        """(N,) float32 sigma per sample, drawn on ``x.device``."""
        return _random.uniform(x, self.sigma_min, self.sigma_max, keys=keys, draw=0)

    def forward(self, x: Tensor, keys: Optional[Tensor] = None) -> Tensor:
        check_batch(x, "GaussianBlur")
        if not self.training:
            return x
        if self.kernel_size[0] // 2 >= x.shape[3] or self.kernel_size[1] // 2 >= x.shape[2]:
            raise ValueError(
                "GaussianBlur: kernel_size {} needs images larger than half the kernel "
                "(reflect padding), got {}x{}".format(self.kernel_size, x.shape[2], x.shape[3])
            )
        return FM.gaussian_blur(x, self.kernel_size, self.make_params(x, keys))

    def extra_repr(self) -> str:
        return f"kernel_size={tuple(self.kernel_size)}, sigma=({self.sigma_min}, {self.sigma_max})"


class RandomErasing(nn.Module):
    """Erase one random box per sample with probability ``p``, as ``v2.RandomErasing``: the box
    area is a ``scale`` fraction of the image, its aspect ratio log-uniform in ``ratio``; of
    10 candidate boxes the first that fits strictly inside the image is used (none fits: the
    sample is unchanged). ``value`` is a number, one number per channel, or ``"random"``
    (standard normal noise for float input, as torchvision; uniform bytes 0-255 for uint8,
    where torchvision casts the normal noise). Never in place (torchvision's ``inplace`` is
    not offered). Differences: one box per sample (torchvision: one per call).

    Example:
        >>> RandomErasing(p=0.5, value="random")(torch.zeros(8, 3, 32, 32)).shape
        torch.Size([8, 3, 32, 32])
    """

    def __init__(
        self,
        p: float = 0.5,
        scale: Sequence[float] = (0.02, 0.33),
        ratio: Sequence[float] = (0.3, 3.3),
        value: Union[float, Sequence[float], str] = 0,
    ) -> None:
        super().__init__()
        self.p = check_probability(p, "p")
        self.attempts = 10  # torchvision's number of candidate boxes
        self.scale: Tuple[float, float] = check_range(scale, "scale", 0.0, 1.0)
        self.ratio: Tuple[float, float] = check_range(ratio, "ratio", 1e-6, 1e6)
        self.log_ratio: Tuple[float, float] = (math.log(self.ratio[0]), math.log(self.ratio[1]))
        if isinstance(value, str):
            if value != "random":
                raise ValueError(f"value must be a number, a sequence or 'random', got {value!r}")
            self.random_value = True
            self.value: List[float] = [0.0]
        else:
            self.random_value = False
            self.value = check_fill(value, "value")
        self._keyed = True

    def make_params(self, x: Tensor, keys: Optional[Tensor] = None
                    ) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        """``(top, left, height, width)`` int64 (N,) tensors; height = width = 0 for samples
        not erased (coin lost, or no candidate box fits)."""
        h, w = x.shape[2], x.shape[3]
        apply = _random.bernoulli(x, self.p, keys=keys, draw=0)
        area = _random.uniform(x, self.scale[0], self.scale[1], self.attempts,
                               keys=keys, draw=1) * float(h * w)
        aspect = torch.exp(_random.uniform(x, self.log_ratio[0], self.log_ratio[1],
                                           self.attempts, keys=keys, draw=2))
        # torchvision: int(round(sqrt(...))), Python's round half to even, as torch.round
        bh = torch.round(torch.sqrt(area * aspect)).to(torch.int64)
        bw = torch.round(torch.sqrt(area / aspect)).to(torch.int64)
        fits = (bh < h) & (bw < w)
        # the first fitting attempt: argmax over a bool row finds the first True
        first = fits.to(torch.int64).argmax(dim=1, keepdim=True)
        ok = fits.any(dim=1) & apply
        zero = torch.zeros_like(ok, dtype=torch.int64)
        bh = torch.where(ok, bh.gather(1, first).squeeze(1), zero)
        bw = torch.where(ok, bw.gather(1, first).squeeze(1), zero)
        top = _random.integers_below(h - bh + 1, keys=keys, draw=3)
        left = _random.integers_below(w - bw + 1, keys=keys, draw=4)
        return top, left, bh, bw

    def forward(self, x: Tensor, keys: Optional[Tensor] = None) -> Tensor:
        check_batch(x, "RandomErasing")
        if not self.training:
            return x
        if not self.random_value:
            check_fill_for(self.value, x, "RandomErasing")
        top, left, bh, bw = self.make_params(x, keys)
        if self.random_value:
            value = _random.noise_like(x, keys=keys, draw=5)  # draws 5 and 6
        else:
            value = torch.tensor(self.value, device=x.device).view(1, -1, 1, 1)
            if x.dtype == torch.uint8:
                value = value.trunc()  # torchvision assigns the float value: truncation
        return FM.erase(x, top, left, bh, bw, value)

    def extra_repr(self) -> str:
        value = "'random'" if self.random_value else str(self.value)
        return f"p={self.p}, scale={self.scale}, ratio={self.ratio}, value={value}"
