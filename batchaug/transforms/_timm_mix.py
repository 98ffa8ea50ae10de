"""timm's RandomErasing (modes const/rand/pixel, several boxes) and Mixup (modes batch/pair/
elem, CutMix min/max boxes, label smoothing), with timm's rules and per-sample draws.
:class:`TimmMixup` keeps timm's pairs (sample i with ``N - 1 - i``, the batch flipped) so that
its ``pair`` mode means what it means there.
"""

import math
from typing import Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor, nn

from .. import _random
from ..functional._misc import box_mask, erase, fitting_boxes
from .._validation import (check_batch, check_bool, check_choice, check_int, check_keys,
                           check_number, check_probability, check_range)
from ._augment import MAX_CLASSES, mixed_labels_only
from ._base import Transform


class TimmRandomErasing(Transform):
    """timm's ``RandomErasing`` per sample: with probability ``probability`` a sample erases
    ``count`` boxes (``count`` uniform in [min_count, max_count]); each box has an area
    uniform in [min_area, max_area] of the image divided by ``count`` and a log-uniform aspect
    ratio in [min_aspect, max_aspect] (default 1 / min_aspect); of 10 candidates the first
    with height and width below the image's is used (none: that box is skipped). ``mode``:
    "const" (zeros), "rand" (one standard-normal value per channel and box) or "pixel"
    (standard-normal per pixel). Meant for the normalised float batch, as timm; uint8 input
    gets uniform bytes for "rand"/"pixel". Identity in ``eval()``. :meth:`with_targets`
    leaves targets as they are (erasing moves no pixel; torchvision's choice).

    Example:
        >>> erase = TimmRandomErasing(0.25, mode="pixel", max_count=2)
        >>> erase(torch.zeros(8, 3, 32, 32)).shape
        torch.Size([8, 3, 32, 32])
    """

    def __init__(self, probability: float = 0.5, min_area: float = 0.02,
                 max_area: float = 1 / 3, min_aspect: float = 0.3,
                 max_aspect: Optional[float] = None, mode: str = "const", min_count: int = 1,
                 max_count: Optional[int] = None) -> None:
        super().__init__()
        self.probability = check_probability(probability, "probability")
        self.min_area = check_number(min_area, "min_area", 0.0, 1.0)
        self.max_area = check_number(max_area, "max_area", self.min_area, 1.0)
        min_aspect = check_number(min_aspect, "min_aspect", 1e-6, 1e6)
        if max_aspect is None:  # timm: [min_aspect, 1 / min_aspect], either way round
            min_aspect, max_aspect = sorted((min_aspect, 1.0 / min_aspect))
        self.min_aspect = min_aspect
        self.max_aspect = check_number(max_aspect, "max_aspect", self.min_aspect, 1e6)
        self.log_aspect: Tuple[float, float] = (math.log(self.min_aspect),
                                                math.log(self.max_aspect))
        self.mode = check_choice(mode.lower() if isinstance(mode, str) else mode, "mode",
                                 ("const", "rand", "pixel"))
        self.min_count = check_int(min_count, "min_count", 1, 64)
        max_count = self.min_count if max_count is None else max_count
        self.max_count = check_int(max_count, "max_count", self.min_count, 64)
        self.attempts = 10

    def make_params(self, x: Tensor, keys: Optional[Tensor] = None) -> Tensor:
        """(N, max_count, 4) int64 boxes ``(top, left, height, width)``; height = width = 0
        for boxes not erased (coin lost, beyond the sample's count, or no candidate fits)."""
        n_boxes, tries = self.max_count, self.attempts
        h, w = x.shape[2], x.shape[3]
        apply = _random.bernoulli(x, self.probability, keys=keys, draw=0)
        count = _random.integers(x, self.min_count, self.max_count + 1, keys=keys, draw=1)
        area = _random._rand64(x, n_boxes * tries, keys, 2) \
            * (self.max_area - self.min_area) + self.min_area
        area = area.view(-1, n_boxes, tries) * float(h * w) / count.to(torch.float64).view(-1, 1, 1)
        log_r = _random._rand64(x, n_boxes * tries, keys, 3) \
            * (self.log_aspect[1] - self.log_aspect[0]) + self.log_aspect[0]
        aspect = torch.exp(log_r).view(-1, n_boxes, tries)
        slot = torch.arange(n_boxes, device=x.device).view(1, -1)
        bh, bw = fitting_boxes(area, aspect, h, w, apply.view(-1, 1) & (slot < count.view(-1, 1)))
        top = _random.integers_below(h - bh + 1, keys=keys, draw=4)
        left = _random.integers_below(w - bw + 1, keys=keys, draw=5)
        return torch.stack([top, left, bh, bw], dim=2)

    def erase_value(self, x: Tensor, keys: Optional[Tensor] = None) -> Tensor:
        """The erasing values, drawn after ``make_params``'s boxes: "pixel" a batch of noise,
        "rand" one value per (sample, channel, box) as (N, C, 1, max_count), "const" zero."""
        if self.mode == "pixel":
            return _random.noise_like(x, keys=keys, draw=6)
        if self.mode == "rand":
            ref = torch.zeros([x.shape[0], x.shape[1], 1, self.max_count], dtype=x.dtype,
                              device=x.device)
            return _random.noise_like(ref, keys=keys, draw=6)
        return torch.zeros([1, 1, 1, 1], dtype=x.dtype, device=x.device)

    def apply_image(self, x: Tensor, params: Tuple[Tensor, Tensor]) -> Tensor:
        """``params``: ``(boxes, value)`` from ``make_params`` and ``erase_value``."""
        boxes, value = params
        return erase_boxes(x, boxes, value, self.mode == "rand")

    def forward(self, x: Tensor, keys: Optional[Tensor] = None) -> Tensor:
        check_batch(x, "TimmRandomErasing")
        check_keys(keys, x, "TimmRandomErasing")
        if not self.training:
            return x
        boxes = self.make_params(x, keys)  # the boxes' draws first, then the values'
        return self.apply_image(x, (boxes, self.erase_value(x, keys)))


def erase_boxes(x: Tensor, boxes: Tensor, value: Tensor, per_box: bool) -> Tensor:
    """Erase boxes ``(N, K, 4)`` (top, left, height, width; empty boxes erase nothing) in
    order, a later box over an earlier one. ``value``: broadcastable to x, or with
    ``per_box`` a (N, C, 1, K) tensor whose column k fills box k. Never in place."""
    for k in range(boxes.shape[1]):
        b = boxes[:, k]
        v = value[:, :, :, k:k + 1] if per_box else value
        x = erase(x, b[:, 0], b[:, 1], b[:, 2], b[:, 3], v)
    return x


class TimmMixup(nn.Module):
    """timm's ``Mixup``: MixUp and/or CutMix with timm's arguments, pairing sample i with
    sample ``N - 1 - i``. ``mode``: "batch" (one draw for the batch), "pair" (one per pair
    i, N - 1 - i) or "elem" (one per sample). ``prob``: probability of mixing (per batch, pair
    or sample); ``switch_prob``: CutMix instead of MixUp when both alphas are > 0;
    ``cutmix_minmax``: CutMix boxes with sides uniform in [min, max) of the image's (then
    ``cutmix_alpha`` is 1, as timm); ``correct_lam``: the label weight from the box area
    actually pasted. ``forward(images, labels) -> (images, targets)``: targets
    ``lam * y + (1 - lam) * y[N - 1 - i]`` of one-hot labels smoothed as timm (off value
    ``label_smoothing / num_classes``). MixUp blends as timm (float32 weights ``lam`` and
    ``1 - lam``); uint8 blends are rounded (as timm's collate mixup). In ``eval()``: images
    unchanged, smoothed one-hot targets. Never in place (timm mixes in place).

    Example:
        >>> mix = TimmMixup(mixup_alpha=0.8, cutmix_alpha=1.0, num_classes=10, mode="elem")
        >>> x, targets = mix(torch.rand(8, 3, 32, 32), torch.randint(0, 10, (8,)))
        >>> targets.shape
        torch.Size([8, 10])
    """

    cutmix_minmax: Optional[List[float]]

    def __init__(self, mixup_alpha: float = 1.0, cutmix_alpha: float = 0.0,
                 cutmix_minmax: Optional[Sequence[float]] = None, prob: float = 1.0,
                 switch_prob: float = 0.5, mode: str = "batch", correct_lam: bool = True,
                 label_smoothing: float = 0.1, num_classes: int = 1000) -> None:
        super().__init__()
        self.mixup_alpha = check_number(mixup_alpha, "mixup_alpha", 0.0, 1e4)
        self.cutmix_alpha = check_number(cutmix_alpha, "cutmix_alpha", 0.0, 1e4)
        self.cutmix_minmax = None
        if cutmix_minmax is not None:
            self.cutmix_minmax = list(check_range(cutmix_minmax, "cutmix_minmax", 0.0, 1.0))
            self.cutmix_alpha = 1.0  # timm forces it
        if self.mixup_alpha == 0.0 and self.cutmix_alpha == 0.0:
            raise ValueError("mixup_alpha or cutmix_alpha must be > 0 (or cutmix_minmax set)")
        for a, name in ((self.mixup_alpha, "mixup_alpha"), (self.cutmix_alpha, "cutmix_alpha")):
            if 0.0 < a < 0.05:
                raise ValueError(f"{name} must be 0 or >= 0.05 (float32 Beta draws underflow "
                                 f"below), got {a}")
        self.prob = check_probability(prob, "prob")
        self.switch_prob = check_probability(switch_prob, "switch_prob")
        self.mode = check_choice(mode, "mode", ("batch", "pair", "elem"))
        self.correct_lam = check_bool(correct_lam, "correct_lam")
        self.label_smoothing = check_number(label_smoothing, "label_smoothing", 0.0, 1.0)
        self.num_classes = check_int(num_classes, "num_classes", 1, MAX_CLASSES)
        self._mixes_labels = True  # Augment refuses modules with this mark

    def make_params(self, x: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        """``(lam, cut, box)``: (N,) float64 ``lam`` (the image's own weight; for CutMix the
        label weight: 1 - pasted area / image area when corrected), (N,) bool ``cut`` and
        (N, 4) int64 boxes ``(top, bottom, left, right)`` (timm's yl, yh, xl, xh)."""
        n, h, w = x.shape[0], x.shape[2], x.shape[3]
        m = 1 if self.mode == "batch" else (n + 1) // 2 if self.mode == "pair" else n
        ref = torch.zeros(m, device=x.device)
        one = torch.ones(m, dtype=torch.float64, device=x.device)
        apply = _random._rand64(ref, None, None, 0) < self.prob
        if self.mixup_alpha > 0.0 and self.cutmix_alpha > 0.0:
            cut = _random._rand64(ref, None, None, 0) < self.switch_prob
        else:
            cut = torch.full([m], self.cutmix_alpha > 0.0, dtype=torch.bool, device=x.device)
        lam = one
        if self.mixup_alpha > 0.0:
            lam = _random.beta(ref, self.mixup_alpha, self.mixup_alpha).to(torch.float64)
        if self.cutmix_alpha > 0.0:
            lam_c = _random.beta(ref, self.cutmix_alpha, self.cutmix_alpha).to(torch.float64)
            lam = torch.where(cut, lam_c, lam)
        lam = torch.where(apply, lam, one)
        cut = cut & apply & (lam < 1.0)
        minmax = self.cutmix_minmax
        if minmax is not None:
            ch = torch.randint(int(h * minmax[0]), max(int(h * minmax[1]), int(h * minmax[0]) + 1),
                               [m], device=x.device)
            cw = torch.randint(int(w * minmax[0]), max(int(w * minmax[1]), int(w * minmax[0]) + 1),
                               [m], device=x.device)
            yl = _random.integers_below(h - ch + 1)
            xl = _random.integers_below(w - cw + 1)
            yh = yl + ch
            xh = xl + cw
        else:
            ratio = torch.sqrt(1.0 - lam)
            ch = torch.trunc(h * ratio).to(torch.int64)
            cw = torch.trunc(w * ratio).to(torch.int64)
            cy = torch.randint(0, h, [m], device=x.device)
            cx = torch.randint(0, w, [m], device=x.device)
            yl = (cy - torch.div(ch, 2, rounding_mode="floor")).clamp(0, h)
            yh = (cy + torch.div(ch + 1, 2, rounding_mode="floor")).clamp(0, h)
            xl = (cx - torch.div(cw, 2, rounding_mode="floor")).clamp(0, w)
            xh = (cx + torch.div(cw + 1, 2, rounding_mode="floor")).clamp(0, w)
        box = torch.stack([yl, yh, xl, xh], dim=1)
        if self.correct_lam or minmax is not None:
            area = ((yh - yl) * (xh - xl)).to(torch.float64)
            lam = torch.where(cut, 1.0 - area / float(h * w), lam)
        if self.mode != "batch":
            # timm keeps per-sample lambdas in a float32 array
            lam = lam.to(torch.float32).to(torch.float64)
        return _spread(lam, cut, box, self.mode, n)

    def forward(self, images: Tensor, labels: Tensor) -> Tuple[Tensor, Tensor]:
        check_batch(images, "TimmMixup")
        if labels.dim() != 1 or labels.shape[0] != images.shape[0] or labels.is_floating_point():
            raise ValueError("TimmMixup: labels must be (N,) integer class indices, one per "
                             "image, got {} {}".format(labels.dtype, list(labels.shape)))
        targets = mix_targets(labels, None, self.num_classes, self.label_smoothing)
        if not self.training:
            return images, targets
        lam, cut, box = self.make_params(images)
        return mix_images(images, lam, cut, box), mix_targets(labels, lam, self.num_classes,
                                                              self.label_smoothing)

    @torch.jit.export
    def with_targets(self, images: Tensor, targets: Dict[str, Tensor],
                     keys: Optional[Tensor] = None) -> Tuple[Tensor, Dict[str, Tensor]]:
        """``forward(images, targets["labels"])`` in the targets API's form: returns
        ``(images, {"labels": mixed targets})``. Only ``"labels"`` is accepted (ValueError
        for masks, boxes or keypoints: two images' dense targets have no defined mix).
        ``keys`` must be None: timm's draws are per batch, pair or sample, not keyed."""
        labels = mixed_labels_only(targets, "TimmMixup")
        if keys is not None:
            raise ValueError("TimmMixup draws are not keyed (timm's batch/pair/elem modes); "
                             "call with_targets without keys")
        out, mixed = self.forward(images, labels)
        return out, {"labels": mixed}

    def extra_repr(self) -> str:
        return (f"mixup_alpha={self.mixup_alpha}, cutmix_alpha={self.cutmix_alpha}, "
                f"cutmix_minmax={self.cutmix_minmax}, prob={self.prob}, "
                f"switch_prob={self.switch_prob}, mode={self.mode!r}, "
                f"correct_lam={self.correct_lam}, label_smoothing={self.label_smoothing}, "
                f"num_classes={self.num_classes}")


def _spread(lam: Tensor, cut: Tensor, box: Tensor, mode: str, n: int
            ) -> Tuple[Tensor, Tensor, Tensor]:
    """Per-batch or per-pair draws to one row per sample (sample N - 1 - i shares pair i's)."""
    if mode == "batch":
        return lam.expand(n), cut.expand(n), box.expand(n, 4)
    if mode == "pair":
        i = torch.arange(n, device=lam.device)
        row = torch.minimum(i, n - 1 - i)
        return lam.index_select(0, row), cut.index_select(0, row), box.index_select(0, row)
    return lam, cut, box


def mix_images(x: Tensor, lam: Tensor, cut: Tensor, box: Tensor) -> Tensor:
    """timm's mixing with partner ``x.flip(0)``: where ``cut``, the box ``(top, bottom, left,
    right)`` from the partner; elsewhere ``x * f32(lam) + partner * f32(1 - lam)`` where
    ``lam < 1`` (float32, float64 for float64 input; uint8 rounded); samples with ``lam = 1``
    unchanged."""
    partner = x.flip(0)
    ct = torch.float64 if x.dtype == torch.float64 else torch.float32
    w1 = lam.to(ct).view(-1, 1, 1, 1)
    w2 = (1.0 - lam).to(ct).view(-1, 1, 1, 1)
    blend = x.to(ct) * w1 + partner.to(ct) * w2
    if x.dtype == torch.uint8:
        blend = blend.round().clamp(0.0, 255.0)
    blend = blend.to(x.dtype)
    mixed = torch.where(((lam < 1.0) & ~cut).view(-1, 1, 1, 1), blend, x)
    inside = box_mask(box[:, 0], box[:, 2], box[:, 1] - box[:, 0], box[:, 3] - box[:, 2],
                      x.shape[2], x.shape[3]) & cut.view(-1, 1, 1, 1)
    return torch.where(inside, partner, mixed)


def mix_targets(labels: Tensor, lam: Optional[Tensor], num_classes: int,
                smoothing: float) -> Tensor:
    """timm's ``mixup_target``: one-hot with off value ``smoothing / num_classes`` and on value
    ``1 - smoothing + off``, then ``y * f32(lam) + y.flip(0) * f32(1 - lam)`` (float32)."""
    off = smoothing / num_classes
    y = torch.full([labels.shape[0], num_classes], off, dtype=torch.float32,
                   device=labels.device)
    y = y.scatter(1, labels.to(torch.int64).view(-1, 1), 1.0 - smoothing + off)
    if lam is None:
        return y
    w1 = lam.to(torch.float32).view(-1, 1)
    w2 = (1.0 - lam).to(torch.float32).view(-1, 1)
    return y * w1 + y.flip(0) * w2

