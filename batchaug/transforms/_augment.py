"""Label mixing: MixUp, CutMix and MixUpOrCutMix, with a λ (and a box) drawn per sample.

These take ``(images, labels)`` and return ``(images, targets)``, so they do not go inside
:class:`batchaug.Augment` (which maps images to images; it refuses them). Use them in the
training step, after the augmentation::

    x = augment(images)                    # crops, flips, ..., Normalize
    x, targets = mix(x, labels)            # targets: (N, num_classes) float, rows sum to 1
    loss = F.cross_entropy(model(x), targets)

Sample i is mixed with its partner, sample i - 1 (the batch rolled by one, as torchvision; the
batch should be shuffled). ``with_targets(images, {"labels": labels}, keys)`` is the same call
in the targets API's form; masks, boxes and keypoints are refused (two images' dense targets
have no defined mix).
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

import torch
from torch import Tensor, nn

from .. import _random
from ..functional import _augment as FA
from ..functional._targets import check_targets_type
from .._validation import (check_batch, check_bool, check_int, check_keys, check_number,
                           check_probability)

# Beta(alpha, alpha) is G1 / (G1 + G2) with float32 gammas: below ~0.05 both underflow to 0 for
# a measurable share of samples, which _random.beta turns into lambda = 0.5
MIN_ALPHA = 0.05
MAX_ALPHA = 1e4
MAX_CLASSES = 1 << 20  # targets are (N, num_classes) floats: beyond this is a mistake


def only_labels(targets: Dict[str, Tensor], name: str, why: str) -> None:
    """Raise a ValueError naming ``why`` unless ``targets`` holds nothing but "labels"
    (scriptable)."""
    for key in targets.keys():
        if key != "labels":
            raise ValueError("{}.with_targets: targets['{}'] is not supported: {}; only "
                             "targets['labels'] passes".format(name, key, why))


def mixed_labels_only(targets: Dict[str, Tensor], name: str) -> Tensor:
    """``targets["labels"]`` of a mixer's ``with_targets``; ValueError for any other key or
    without labels. Scriptable."""
    if not torch.jit.is_scripting():
        check_targets_type(targets)
    only_labels(targets, name, "mixing two images' masks, boxes or keypoints is not defined")
    if "labels" not in targets:
        raise ValueError("{}.with_targets needs targets['labels'] (the labels to mix with "
                         "the images)".format(name))
    return targets["labels"]


class _LabelMix(nn.Module):
    """The shared implementation; ``mode`` is "mixup", "cutmix" or "both" (switch per sample).

    Draw numbers (keyed randomness): 0 the coin ``p``, 1-8 MixUp's Beta, 10-17 CutMix's Beta,
    20/21 the box centre (x, y), 22 the MixUp-or-CutMix switch.
    """

    # containers pass keys (__constants__: TorchScript sees the class attribute)
    __constants__ = ["takes_keys"]
    takes_keys: bool = True

    def __init__(self, name: str, mode: str, num_classes: int, mixup_alpha: float,
                 cutmix_alpha: float, switch_prob: float, p: float, per_sample: bool,
                 label_smoothing: float, inplace: bool = False) -> None:
        super().__init__()
        self.name = name
        self.mode = mode
        self.num_classes = check_int(num_classes, "num_classes", 1, MAX_CLASSES)
        self.mixup_alpha = mixup_alpha
        self.cutmix_alpha = cutmix_alpha
        self.switch_prob = switch_prob
        self.p = check_probability(p, "p")
        self.per_sample = check_bool(per_sample, "per_sample")
        self.label_smoothing = check_number(label_smoothing, "label_smoothing", 0.0, 1.0)
        self.inplace = check_bool(inplace, "inplace")
        self._mixes_labels = True  # Augment refuses modules with this mark

    def _check_labels(self, labels: Tensor, n: int) -> None:
        if labels.dim() == 1:
            if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
                raise TypeError(
                    "{}: class-index labels (N,) must have an integer dtype (int64), got {}; "
                    "soft labels are (N, num_classes) floats".format(self.name, labels.dtype))
        elif labels.dim() == 2:
            if not labels.is_floating_point():
                raise TypeError(
                    "{}: soft labels (N, num_classes) must be floating, got {}; class indices "
                    "are (N,) int64".format(self.name, labels.dtype))
            if labels.shape[1] != self.num_classes:
                raise ValueError(
                    "{}: soft labels have {} classes but num_classes is {}".format(
                        self.name, labels.shape[1], self.num_classes))
        else:
            raise ValueError(
                "{}: labels must be class indices (N,) or soft labels (N, num_classes), got "
                "shape {}".format(self.name, labels.shape))
        if labels.shape[0] != n:
            raise ValueError("{}: {} labels for a batch of {} images".format(
                self.name, labels.shape[0], n))
        if labels.device.type == "cpu" and labels.dim() == 1 and labels.numel() > 0 \
                and not torch.compiler.is_compiling():
            # free to read on the CPU; on an accelerator scatter's device-side assert catches it
            if bool(((labels < 0) | (labels >= self.num_classes)).any()):
                raise ValueError("{}: labels must be in [0, {}), got values from {} to {}".format(
                    self.name, self.num_classes, int(labels.min()), int(labels.max())))

    def make_params(self, x: Tensor, keys: Optional[Tensor] = None
                    ) -> Tuple[Tensor, Tensor, Tensor]:
        """``(lam, box, mass)`` per sample, on ``x.device``:

        - ``lam`` (N,) float32: the blend weight of the sample's own image (MixUp; 1 for
          samples not blended),
        - ``box`` (N, 4) int64: ``(top, left, height, width)`` of the region pasted from the
          partner (CutMix; empty for samples not cut),
        - ``mass`` (N,) float64: the share of the sample's own label in its target (MixUp's
          lam, CutMix's unpasted area after clipping; 1 for samples not mixed).

        ``per_sample=False`` draws one coin, lam, switch and box centre for the batch (keyed:
        from the sum of a hash of each key, the same for the same set of keys in any order).
        """
        n = x.shape[0]
        h, w = x.shape[2], x.shape[3]
        ref = x
        k = keys
        if not self.per_sample:
            ref = torch.zeros(1, device=x.device)
            sub = _random.substream(keys, 0x7B)
            if sub is not None:
                # < 2**31 terms below 2**32 each: the sum stays a valid non-negative key
                k = (sub & 0xFFFFFFFF).sum().view(1)
        one = torch.ones(ref.shape[0], dtype=torch.float32, device=x.device)
        apply = _random.bernoulli(ref, self.p, keys=k, draw=0)
        cut = torch.zeros_like(apply)
        lam = one
        if self.mode != "cutmix":
            lam = _random.beta(ref, self.mixup_alpha, self.mixup_alpha, keys=k, draw=1)
        if self.mode != "mixup":
            lam_c = _random.beta(ref, self.cutmix_alpha, self.cutmix_alpha, keys=k, draw=10)
            cx = _random.integers(ref, 0, w, keys=k, draw=20)
            cy = _random.integers(ref, 0, h, keys=k, draw=21)
            if self.mode == "both":
                cut = _random.bernoulli(ref, self.switch_prob, keys=k, draw=22) & apply
            else:
                cut = apply
            top, left, bh, bw, kept = FA.cutmix_boxes(torch.where(cut, lam_c, one), cx, cy, h, w)
            box = torch.stack([top, left, bh, bw], dim=1)
        else:
            box = torch.zeros([ref.shape[0], 4], dtype=torch.int64, device=x.device)
            kept = one.to(torch.float64)
        lam = torch.where(apply & ~cut, lam, one)
        mass = torch.where(cut, kept, lam.to(torch.float64))
        if not self.per_sample:
            lam = lam.expand(n)
            box = box.expand(n, 4)
            mass = mass.expand(n)
        return lam, box, mass

    def forward(self, images: Tensor, labels: Tensor,
                keys: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
        check_batch(images, self.name)
        n = images.shape[0]
        self._check_labels(labels, n)
        targets = FA.smooth_targets(labels, self.num_classes, self.label_smoothing)
        if not self.training:
            return images, targets
        check_keys(keys, images, self.name)
        if self.inplace and images.requires_grad and torch.is_grad_enabled():
            raise ValueError(f"{self.name}(inplace=True) cannot overwrite images that autograd "
                             f"records (requires_grad=True): use inplace=False")
        if self.inplace:
            for d in range(images.dim()):
                if images.stride(d) == 0 and images.shape[d] > 1:
                    raise ValueError(f"{self.name}(inplace=True) cannot overwrite images whose "
                                     f"elements share memory (an expanded tensor, stride 0 in "
                                     f"dim {d}): pass a materialised batch or use inplace=False")
        lam, box, mass = self.make_params(images, keys)
        if self.inplace:
            lam_arg: Optional[Tensor] = None
            box_arg: Optional[Tensor] = None
            if self.mode != "cutmix":
                lam_arg = lam
            if self.mode != "mixup":
                box_arg = box
            return FA.mix_with_partner_(images, lam_arg, box_arg), FA.mix_targets(targets, mass)
        if self.mode == "mixup":
            out = FA.blend_with_partner(images, lam)
        elif self.mode == "cutmix":  # pixels copied, no arithmetic: any dtype as is
            out = FA.paste_from_partner(images, images, box[:, 0], box[:, 1], box[:, 2],
                                        box[:, 3])
        else:
            out = FA.blend_and_paste(images, lam, box[:, 0], box[:, 1], box[:, 2], box[:, 3])
        return out, FA.mix_targets(targets, mass)

    @torch.jit.export
    def with_targets(self, images: Tensor, targets: Dict[str, Tensor],
                     keys: Optional[Tensor] = None) -> Tuple[Tensor, Dict[str, Tensor]]:
        """``forward(images, targets["labels"], keys)`` in the targets API's form: returns
        ``(images, {"labels": mixed targets})``. Only ``"labels"`` is accepted (ValueError
        for masks, boxes or keypoints: two images' dense targets have no defined mix)."""
        labels = mixed_labels_only(targets, self.name)
        out, mixed = self.forward(images, labels, keys)
        return out, {"labels": mixed}

    def extra_repr(self) -> str:
        alphas = {"mixup": f"alpha={self.mixup_alpha}", "cutmix": f"alpha={self.cutmix_alpha}",
                  "both": f"mixup_alpha={self.mixup_alpha}, cutmix_alpha={self.cutmix_alpha}, "
                          f"switch_prob={self.switch_prob}"}[self.mode]
        return (f"num_classes={self.num_classes}, {alphas}, p={self.p}, "
                f"per_sample={self.per_sample}, label_smoothing={self.label_smoothing}"
                + (", inplace=True" if self.inplace else ""))


class MixUp(_LabelMix):
    """MixUp (Zhang et al. 2018) with its own λ per sample: image i becomes
    ``λ_i x_i + (1 - λ_i) x_j`` and its target ``λ_i y_i + (1 - λ_i) y_j``, j = i - 1 (the batch
    rolled by one), λ_i ~ Beta(alpha, alpha).

    ``forward(images, labels, keys=None) -> (images, targets)``. ``labels``: int (N,) class
    indices or soft (N, num_classes) floats; ``targets``: (N, num_classes), rows summing to 1,
    float32 for class indices, the soft labels' dtype otherwise, smoothed by
    ``label_smoothing`` (``(1 - ε) y + ε / num_classes``; so do not pass ``label_smoothing``
    to the loss again). ``p``: the probability that a sample is mixed at all (others keep
    their image and target). ``per_sample=False``: one coin and one λ per batch (torchvision's
    behaviour). In ``eval()``: images unchanged, one-hot (smoothed) targets.

    Images keep their dtype: uint8 blends are rounded to the nearest integer (torchvision v2's
    MixUp raises on uint8); float16/bfloat16 are blended in float32. Differences from
    ``v2.MixUp``: λ per sample (torchvision: one per call), ``p``, ``label_smoothing``,
    ``keys``; ``num_classes`` is required; ``alpha`` in [0.05, 1e4] (float32 Beta draws
    underflow below); no host sync (out-of-range class indices are checked on CPU, and by a
    device-side assert on GPUs).

    ``inplace=True`` overwrites ``images`` with the mixed batch and returns it (timm's Mixup
    mixes in place too): it saves a batch-sized buffer and its page faults, most of the mix's
    time on CPU (docs/performance.md, "Kernel choices"). Only for a
    batch nothing else reads afterwards, e.g. ``mix(augment(x), labels)``; never for a view of
    a cache or dataset. Refuses images that autograd records (``ValueError``).

    Example:
        >>> mix = MixUp(num_classes=10, alpha=0.2)
        >>> x, targets = mix(torch.rand(8, 3, 32, 32), torch.randint(0, 10, (8,)))
        >>> targets.shape
        torch.Size([8, 10])
    """

    def __init__(self, num_classes: int, alpha: float = 1.0, p: float = 1.0,
                 per_sample: bool = True, label_smoothing: float = 0.0,
                 inplace: bool = False) -> None:
        alpha = check_number(alpha, "alpha", MIN_ALPHA, MAX_ALPHA)
        super().__init__("MixUp", "mixup", num_classes, alpha, 1.0, 0.0, p, per_sample,
                         label_smoothing, inplace)


class CutMix(_LabelMix):
    """CutMix (Yun et al. 2019) with its own λ and box per sample: a box of sample i's image is
    replaced by the same box of its partner j = i - 1 (the batch rolled by one); the target is
    ``m_i y_i + (1 - m_i) y_j`` with m_i the fraction of the image NOT pasted.

    The box is torchvision's rule per sample: λ_i ~ Beta(alpha, alpha), centre uniform over the
    pixels, half sides ``floor(0.5 * sqrt(1 - λ_i) * W)`` (and H), clipped to the image, and
    the label weight corrected to the area actually pasted after clipping. Arguments, targets,
    ``p``, ``per_sample`` (one box per batch, as torchvision), ``label_smoothing``, ``keys``,
    ``inplace`` and ``eval()`` as in :class:`MixUp`. Images keep their dtype (pixels are
    copied, not blended). Differences from ``v2.CutMix``: those of :class:`MixUp`, and a box
    per sample.

    Example:
        >>> cut = CutMix(num_classes=10)
        >>> x, targets = cut(torch.zeros(8, 3, 32, 32, dtype=torch.uint8),
        ...                  torch.randint(0, 10, (8,)))
        >>> x.dtype, targets.shape
        (torch.uint8, torch.Size([8, 10]))
    """

    def __init__(self, num_classes: int, alpha: float = 1.0, p: float = 1.0,
                 per_sample: bool = True, label_smoothing: float = 0.0,
                 inplace: bool = False) -> None:
        alpha = check_number(alpha, "alpha", MIN_ALPHA, MAX_ALPHA)
        super().__init__("CutMix", "cutmix", num_classes, 1.0, alpha, 0.0, p, per_sample,
                         label_smoothing, inplace)


class MixUpOrCutMix(_LabelMix):
    """MixUp or CutMix chosen per sample (timm's ``Mixup(switch_prob=...)``, elementwise): a
    mixed sample takes CutMix with probability ``switch_prob``, MixUp otherwise, each with its
    own λ (Beta(cutmix_alpha) / Beta(mixup_alpha)) and box. The DeiT recipe is
    ``MixUpOrCutMix(1000, 0.8, 1.0, switch_prob=0.5, label_smoothing=0.1)``.

    ``p``: the probability that a sample is mixed at all; ``per_sample=False``: one coin,
    switch, λ and box per batch (timm's ``mode="batch"``). Targets, dtypes, ``keys``,
    ``inplace`` and ``eval()`` as in :class:`MixUp`; both alphas in [0.05, 1e4] (for one
    method alone use :class:`MixUp` or :class:`CutMix`).

    Example:
        >>> mix = MixUpOrCutMix(num_classes=10, mixup_alpha=0.8, cutmix_alpha=1.0)
        >>> x, targets = mix(torch.rand(8, 3, 32, 32), torch.randint(0, 10, (8,)))
        >>> bool(torch.allclose(targets.sum(1), torch.ones(8)))
        True
    """

    def __init__(self, num_classes: int, mixup_alpha: float = 0.8, cutmix_alpha: float = 1.0,
                 switch_prob: float = 0.5, p: float = 1.0, per_sample: bool = True,
                 label_smoothing: float = 0.0, inplace: bool = False) -> None:
        mixup_alpha = check_number(mixup_alpha, "mixup_alpha", MIN_ALPHA, MAX_ALPHA)
        cutmix_alpha = check_number(cutmix_alpha, "cutmix_alpha", MIN_ALPHA, MAX_ALPHA)
        switch_prob = check_probability(switch_prob, "switch_prob")
        super().__init__("MixUpOrCutMix", "both", num_classes, mixup_alpha, cutmix_alpha,
                         switch_prob, p, per_sample, label_smoothing, inplace)
