"""Colour transforms: ColorJitter with a per-sample order, grayscale, invert, posterize,
solarize, sharpness, autocontrast, equalize; every random choice drawn per sample, the kernels
in :mod:`batchaug.functional._color`.
"""

import math
import numbers
from typing import List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from .. import _random
from ..functional import _color as FC
from ._base import Transform
from ..functional._utils import (
    color_chunk_bytes,
    cpu_chunk_size,
    group_on_host,
    match_layout,
    on_device,
    select_samples,
)
from ..functional._misc import branch_groups, inverse_permutation
from .._validation import _as_float, check_int, check_number, check_probability

# Factors beyond this are meaningless for images (the result is saturated already) and keep
# float32 products finite: 0 * factor must stay 0, never nan.
MAX_FACTOR = 1e6


def _jitter_range(
    value: Union[float, Sequence[float]], name: str, center: float, lower: float, upper: float
) -> Tuple[float, float]:
    """torchvision's ColorJitter argument rule: a number v >= 0 means [center - v, center + v]
    (clipped at ``lower``), a pair is (min, max) within [lower, upper]."""
    if isinstance(value, (list, tuple)):
        if len(value) != 2:
            raise TypeError(f"{name} must be a number or a sequence (min, max), got {value!r}")
        lo = _as_float(value[0], name, "a number or a sequence (min, max)")
        hi = _as_float(value[1], name, "a number or a sequence (min, max)")
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise ValueError(f"{name} values must be finite, got {value!r}")
        if not lower <= lo <= hi <= upper:
            raise ValueError(
                f"{name} must be (min, max) with {lower:g} <= min <= max <= {upper:g}, "
                f"got {value!r}"
            )
        return lo, hi
    v = check_number(value, name, 0.0, upper - center)
    return max(center - v, lower), center + v


class ColorJitter(Transform):
    """Randomly change brightness, contrast, saturation and hue, per sample, in a random order
    per sample (torchvision draws one order and one set of factors per call).

    Arguments as ``torchvision.transforms.v2.ColorJitter``: a number ``v`` draws the factor
    from ``[max(0, 1 - v), 1 + v]`` (hue: ``[-v, v]``, in turns, v <= 0.5); a pair is the
    range itself (a degenerate range such as ``brightness=(1.5, 1.5)`` is a fixed factor). An
    adjustment whose range is the identity (0, or (1, 1); hue 0) is skipped and takes no part
    in the order. Each sample applies the enabled adjustments in its own uniformly random
    order, with the arithmetic of torchvision's ``adjust_*`` kernels (see
    :mod:`batchaug.functional._color` for the rounding). Factors are at most 1e6.

    Contrast, saturation and hue need 1- or 3-channel input (saturation and hue leave 1-channel
    images unchanged, as torchvision). On the CPU in eager mode and TorchScript the samples are
    grouped by the adjustment they apply at each step; under ``torch.compile``/``torch.export``
    and on other devices every enabled adjustment runs on the whole batch and ``torch.where``
    selects (static shapes, nothing read back).

    Example (SimCLR's jitter):
        >>> aug = ColorJitter(0.4, 0.4, 0.4, 0.1)
        >>> aug(torch.zeros(8, 3, 32, 32, dtype=torch.uint8)).shape
        torch.Size([8, 3, 32, 32])
    """

    # typed for TorchScript, which cannot infer an empty list (hence no postponed annotations)
    ops: List[int]

    def __init__(
        self,
        brightness: Union[float, Sequence[float]] = 0,
        contrast: Union[float, Sequence[float]] = 0,
        saturation: Union[float, Sequence[float]] = 0,
        hue: Union[float, Sequence[float]] = 0,
    ) -> None:
        super().__init__()
        ranges = [
            _jitter_range(brightness, "brightness", 1.0, 0.0, MAX_FACTOR),
            _jitter_range(contrast, "contrast", 1.0, 0.0, MAX_FACTOR),
            _jitter_range(saturation, "saturation", 1.0, 0.0, MAX_FACTOR),
            _jitter_range(hue, "hue", 0.0, -0.5, 0.5),
        ]
        self.lows: List[float] = [r[0] for r in ranges]
        self.highs: List[float] = [r[1] for r in ranges]
        identity = [1.0, 1.0, 1.0, 0.0]
        # torchvision skips an adjustment whose range is only the identity
        self.ops: List[int] = [
            j for j in range(4) if not (self.lows[j] == self.highs[j] == identity[j])
        ]
        # a buffer follows .to(device): make_params copies nothing per call
        self.register_buffer("_op_table", torch.tensor(self.ops, dtype=torch.int64),
                             persistent=False)

    def _apply(self, fn, recurse=True):  # type: ignore[override]
        super()._apply(fn, recurse)
        self._op_table = self._op_table.to(torch.int64)  # ids stay ids under any cast
        return self

    def make_params(self, x: Tensor, keys: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
        """``(factors, order)``: (N, 4) float32 factors (brightness, contrast, saturation, hue;
        identity for skipped ones) and (N, k) int64 adjustment ids (0-3) in each sample's
        order, k the number of enabled adjustments. With no enabled adjustment nothing is
        drawn (the transform is the identity)."""
        k = len(self.ops)
        if k == 0:
            ones = torch.ones([x.shape[0], 3], dtype=torch.float32, device=x.device)
            return (torch.cat([ones, torch.zeros_like(ones[:, :1])], dim=1),
                    torch.zeros([x.shape[0], 0], dtype=torch.int64, device=x.device))
        if self.ops != [0]:
            FC.check_rgb(x, "ColorJitter")
        cols: List[Tensor] = []
        for j in range(4):
            cols.append(_random.uniform(x, self.lows[j], self.highs[j], keys=keys, draw=j))
        factors = torch.stack(cols, dim=1)
        ops = on_device(self._op_table, x)
        order = ops[_random.permutations(x, k, keys=keys, draw=4)]
        return factors, order

    def _adjust(self, x: Tensor, op: int, factor: Tensor) -> Tensor:
        if op == 0:
            return FC.adjust_brightness(x, factor)
        if op == 1:
            return FC.adjust_contrast(x, factor)
        if op == 2:
            return FC.adjust_saturation(x, factor)
        return FC.adjust_hue(x, factor)

    def apply_image(self, x: Tensor, params: Tuple[Tensor, Tensor]) -> Tensor:
        """``x`` adjusted with ``make_params``' factors in each sample's order."""
        if len(self.ops) == 0:
            return x
        factors, order = params
        if group_on_host(x):
            # CPU: a chunk of samples goes through every step while its float copies are in
            # the cache
            k = cpu_chunk_size(x, 4 * x.shape[1] * x.shape[2] * x.shape[3],
                               color_chunk_bytes(), per_thread=True)
            if k >= x.shape[0]:
                return match_layout(self._grouped(x, factors, order), x)
            parts: List[Tensor] = []
            for i in range(0, x.shape[0], k):
                parts.append(self._grouped(x[i:i + k], factors[i:i + k], order[i:i + k]))
            return match_layout(torch.cat(parts), x)
        if x.dtype == torch.uint8 and x.shape[0] > 0:
            return match_layout(self._static_u8(x, factors, order), x)
        return match_layout(self._static(x, factors, order), x)

    def _static(self, x: Tensor, factors: Tensor, order: Tensor) -> Tensor:
        """Every enabled adjustment on every sample at each step, selected per sample."""
        for s in range(len(self.ops)):
            for op in self.ops:
                y = self._adjust(x, op, factors[:, op])
                x = select_samples(order[:, s] == op, y, x)
        return x

    def _u8_weights(self, x: Tensor, factors: Tensor, order: Tensor
                    ) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        """(N, k) per step: ``FC.mix_u8f_``'s factor, gray and mean weights (the identity
        blend (1, 0, 0) where the step rotates the hue) and whether it rotates the hue."""
        fsel = factors.gather(1, order)  # each step's factor, (N, k)
        rest = 1.0 - fsel  # as _blend_u8f's (1 - f), in float32
        zero = torch.zeros_like(fsel)
        is_hue = order == 3
        if x.shape[1] == 3:
            gray_w = torch.where(order == 2, rest, zero)
        else:  # 1 channel: saturation and hue are the identity (f = 1, no gray term)
            is_hue = is_hue | (order == 2)
            gray_w = zero
        f = torch.where(is_hue, torch.ones_like(fsel), fsel)
        mean_w = torch.where(order == 1, rest, zero)
        return f, gray_w, mean_w, is_hue

    def _static_u8(self, x: Tensor, factors: Tensor, order: Tensor) -> Tensor:
        """``_static``'s values on one float32 working buffer holding integers (each u8f kernel
        truncates as the uint8 conversion would), nothing read on the host: brightness,
        contrast and saturation are one blend with per-sample weights (``FC.mix_u8f_``), run
        k - 1 times before the hue rotation and k - 1 times after it, each sample's steps in
        its slots; an empty slot blends with the identity (1, 0, 0), which changes nothing."""
        f, gray_w, mean_w, is_hue = self._u8_weights(x, factors, order)
        k = order.shape[1]
        xf = x.to(torch.float32)
        if not (x.shape[1] == 3 and 3 in self.ops):  # no hue rotation: k blends
            for s in range(k):
                FC.mix_u8f_(xf, f[:, s], gray_w[:, s], mean_w[:, s])
            return FC.u8f_to_uint8(xf)
        hue_step = is_hue.to(torch.int64).argmax(dim=1, keepdim=True)  # (N, 1)
        r = torch.arange(k - 1, device=x.device).view(1, -1)
        one, zero = torch.ones_like(f[:, :k - 1]), torch.zeros_like(f[:, :k - 1])
        before = r < hue_step  # step r comes before the hue rotation
        after = hue_step + 1 + r  # the r-th step after it, if any
        valid = after < k
        after = after.clamp_(max=k - 1)
        phases = [
            (torch.where(before, f[:, :k - 1], one), torch.where(before, gray_w[:, :k - 1], zero),
             torch.where(before, mean_w[:, :k - 1], zero)),
            (torch.where(valid, f.gather(1, after), one),
             torch.where(valid, gray_w.gather(1, after), zero),
             torch.where(valid, mean_w.gather(1, after), zero)),
        ]
        for p in range(2):
            if p == 1:
                FC.rotate_hue_(xf, factors[:, 3], True, True)
            fp, gp, mp = phases[p]
            for s in range(k - 1):
                FC.mix_u8f_(xf, fp[:, s], gp[:, s], mp[:, s])
        return FC.u8f_to_uint8(xf)

    def _grouped(self, x: Tensor, factors: Tensor, order: Tensor) -> Tensor:
        """Each step sorts the samples by the adjustment they apply and runs each kernel once
        on its contiguous group; ``rows`` tracks which input sample each row holds."""
        if x.shape[0] == 0:
            return x.clone()
        rows = torch.arange(x.shape[0], device=x.device)
        for s in range(len(self.ops)):
            # order holds ids 0-3: step s's adjustment of the samples (rows) in their order
            ops, idxs, perm = branch_groups(order.index_select(0, rows)[:, s], 4)
            parts: List[Tensor] = []
            for j, op in enumerate(ops):
                idx = idxs[j]
                f = factors.index_select(0, rows.index_select(0, idx))
                parts.append(self._adjust(x.index_select(0, idx), op, f[:, op]))
            x = torch.cat(parts)
            rows = rows.index_select(0, perm)
        return x.index_select(0, inverse_permutation(rows))

    def extra_repr(self) -> str:
        parts = []
        for j, name in enumerate(("brightness", "contrast", "saturation", "hue")):
            if j in self.ops:
                parts.append(f"{name}=({self.lows[j]}, {self.highs[j]})")
        return ", ".join(parts)


class Grayscale(Transform):
    """Convert to grayscale with torchvision's weights (0.2989, 0.587, 0.114), giving
    ``num_output_channels`` (1 or 3) equal channels, as ``v2.Grayscale``. Deterministic: runs
    in train and eval. Input: 1 or 3 channels.

    Example:
        >>> Grayscale()(torch.zeros(8, 3, 4, 4)).shape
        torch.Size([8, 1, 4, 4])
    """

    takes_sizes = True  # pointwise: on a ragged batch the padding is never read

    random = False
    takes_keys = False

    def __init__(self, num_output_channels: int = 1) -> None:
        super().__init__()
        n = num_output_channels
        if isinstance(n, bool) or not isinstance(n, numbers.Integral):
            raise TypeError(f"num_output_channels must be 1 or 3, got {n!r}")
        if n not in (1, 3):
            raise ValueError(f"num_output_channels must be 1 or 3, got {n!r}")
        self.num_output_channels = int(n)

    def make_params(self, x: Tensor, keys: Optional[Tensor] = None) -> int:
        """The output channel count (checks that ``x`` has 1 or 3 channels)."""
        FC.check_rgb(x, "Grayscale")
        return self.num_output_channels

    def apply_image(self, x: Tensor, params: int) -> Tensor:
        return FC.rgb_to_grayscale(x, params)


class _RandomPerSample(Transform):
    """A transform applied to each sample with probability ``p``: ``make_params`` draws the
    (N,) coin, ``_transform`` is the deterministic kernel on the whole batch (``rgb``: on 1-
    or 3-channel input only)."""

    def __init__(self, p: float, rgb: bool = False) -> None:
        super().__init__()
        self.p = check_probability(p, "p")
        self.rgb = rgb

    def make_params(self, x: Tensor, keys: Optional[Tensor] = None) -> Tensor:
        """(N,) bool: which samples to transform, drawn on ``x.device``."""
        if self.rgb:
            FC.check_rgb(x, self._name)
        self._check(x)
        return _random.bernoulli(x, self.p, keys=keys, draw=0)

    def apply_image(self, x: Tensor, params: Tensor) -> Tensor:
        return select_samples(params, self._transform(x), x)

    def _transform(self, x: Tensor) -> Tensor:
        raise NotImplementedError

    def _check(self, x: Tensor) -> None:
        pass


class RandomGrayscale(_RandomPerSample):
    """Make each image gray with probability ``p`` (keeping its channel count), per sample, as
    ``v2.RandomGrayscale``. 1-channel images are unchanged; other counts than 1 or 3 raise.

    Example:
        >>> RandomGrayscale(0.2)(torch.zeros(8, 3, 4, 4)).shape
        torch.Size([8, 3, 4, 4])
    """

    takes_sizes = True  # pointwise: on a ragged batch the padding is never read

    def __init__(self, p: float = 0.1) -> None:
        super().__init__(p, rgb=True)

    def _transform(self, x: Tensor) -> Tensor:
        return FC.rgb_to_grayscale(x, x.shape[1])


class RandomInvert(_RandomPerSample):
    """Invert each image (``255 - x`` for uint8, ``1 - x`` for floats) with probability ``p``,
    per sample, as ``v2.RandomInvert``.

    Example:
        >>> RandomInvert()(torch.zeros(8, 3, 4, 4)).shape
        torch.Size([8, 3, 4, 4])
    """

    takes_sizes = True  # pointwise: on a ragged batch the padding is never read

    def __init__(self, p: float = 0.5) -> None:
        super().__init__(p)

    def _transform(self, x: Tensor) -> Tensor:
        return FC.invert(x)


class RandomPosterize(_RandomPerSample):
    """Keep the ``bits`` (0-8) most significant bits of each value, with probability ``p`` per
    sample, as ``v2.RandomPosterize`` (floats: ``floor(x * 2**bits) / 2**bits``).

    Example:
        >>> RandomPosterize(bits=2)(torch.zeros(8, 3, 4, 4, dtype=torch.uint8)).shape
        torch.Size([8, 3, 4, 4])
    """

    takes_sizes = True  # pointwise: on a ragged batch the padding is never read

    def __init__(self, bits: int, p: float = 0.5) -> None:
        super().__init__(p)
        self.bits = check_int(bits, "bits", 0, 8)

    def _transform(self, x: Tensor) -> Tensor:
        return FC.posterize(x, self.bits)


class RandomSolarize(_RandomPerSample):
    """Invert the values ``>= threshold`` with probability ``p`` per sample, as
    ``v2.RandomSolarize``. ``threshold`` is in the input's value range ([0, 255] for uint8,
    [0, 1] for floats); one above that range is a ``ValueError`` at call time (torchvision:
    TypeError).

    Example:
        >>> RandomSolarize(threshold=128)(torch.zeros(8, 3, 4, 4, dtype=torch.uint8)).shape
        torch.Size([8, 3, 4, 4])
    """

    takes_sizes = True  # pointwise: on a ragged batch the padding is never read

    def __init__(self, threshold: float, p: float = 0.5) -> None:
        super().__init__(p)
        self.threshold = check_number(threshold, "threshold", 0.0, 255.0)

    def _check(self, x: Tensor) -> None:
        bound = 255.0 if x.dtype == torch.uint8 else 1.0
        if self.threshold > bound:
            raise ValueError(
                "RandomSolarize: threshold {} is above the maximum value {} of {} input".format(
                    self.threshold, bound, x.dtype))

    def _transform(self, x: Tensor) -> Tensor:
        return FC.solarize(x, self.threshold)


class RandomAdjustSharpness(_RandomPerSample):
    """Sharpen (factor > 1) or soften (< 1) with torchvision's 3x3 kernel, with probability
    ``p`` per sample, as ``v2.RandomAdjustSharpness``; ``sharpness_factor`` in [0, 1e6].
    1- or 3-channel input.

    Example:
        >>> RandomAdjustSharpness(2.0)(torch.zeros(8, 3, 8, 8)).shape
        torch.Size([8, 3, 8, 8])
    """

    def __init__(self, sharpness_factor: float, p: float = 0.5) -> None:
        super().__init__(p, rgb=True)
        self.sharpness_factor = check_number(sharpness_factor, "sharpness_factor", 0.0,
                                             MAX_FACTOR)

    def _transform(self, x: Tensor) -> Tensor:
        factor = torch.full([x.shape[0]], self.sharpness_factor, device=x.device)
        return FC.adjust_sharpness(x, factor)


class RandomAutocontrast(_RandomPerSample):
    """Stretch each channel to the full value range with probability ``p`` per sample, as
    ``v2.RandomAutocontrast``. 1- or 3-channel input.

    Example:
        >>> RandomAutocontrast()(torch.zeros(8, 3, 4, 4)).shape
        torch.Size([8, 3, 4, 4])
    """

    def __init__(self, p: float = 0.5) -> None:
        super().__init__(p, rgb=True)

    def _transform(self, x: Tensor) -> Tensor:
        return FC.autocontrast(x)


class RandomEqualize(_RandomPerSample):
    """Histogram-equalize each channel with probability ``p`` per sample, as
    ``v2.RandomEqualize`` (batched histograms). Float input is binned through uint8, as
    torchvision; no gradient flows through an equalized sample.

    Example:
        >>> RandomEqualize()(torch.zeros(8, 3, 4, 4, dtype=torch.uint8)).shape
        torch.Size([8, 3, 4, 4])
    """

    def __init__(self, p: float = 0.5) -> None:
        super().__init__(p)

    def _transform(self, x: Tensor) -> Tensor:
        return FC.equalize(x)
