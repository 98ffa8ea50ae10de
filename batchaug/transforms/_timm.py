"""timm's automatic augmentation (``timm.data.auto_augment``) with every draw made per sample:
TimmRandAugment (``rand-m9-mstd0.5-inc1``), TimmAutoAugment (``original``, ``v0``, ...) and
TimmAugMix (``augmix-m5-w4-d2``); ``batchaug.from_timm`` builds them from a timm transform or
config string.

timm's op lists, probabilities, magnitude noise (``mstd``), clipping (``mmax``) and
level-to-argument rules run as data for the one policy engine
(:mod:`batchaug.functional._auto_augment`); each op on a sample equals timm's PIL op with the
same argument up to PIL's own resampling and rounding (the migration guide's tolerances). They
take uint8 (or [0, 1] float) batches; bicubic and timm's "random" interpolation warp
bilinearly. Dispatch and targets as :mod:`._auto_augment`: TimmRandAugment and TimmAutoAugment
move masks, boxes and keypoints with their geometric ops, TimmAugMix refuses them.
"""

import math
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from .. import _random
from ..functional import _auto_augment as FA
from ..functional._utils import on_device
from ._auto_augment import _BlendsChains, _PolicyBase, _StepPolicy
from ._base import GeometricTransform
from .._validation import (check_batch, check_choice, check_int, check_keys, check_number,
                           check_probability, check_weights)

RAND_OPS = ["AutoContrast", "Equalize", "Invert", "Rotate", "Posterize", "Solarize",
            "SolarizeAdd", "Color", "Contrast", "Brightness", "Sharpness", "ShearX", "ShearY",
            "TranslateXRel", "TranslateYRel"]
RAND_INCREASING_OPS = ["AutoContrast", "Equalize", "Invert", "Rotate", "PosterizeIncreasing",
                       "SolarizeIncreasing", "SolarizeAdd", "ColorIncreasing",
                       "ContrastIncreasing", "BrightnessIncreasing", "SharpnessIncreasing",
                       "ShearX", "ShearY", "TranslateXRel", "TranslateYRel"]
AUGMIX_OPS = ["AutoContrast", "ColorIncreasing", "ContrastIncreasing", "BrightnessIncreasing",
              "SharpnessIncreasing", "Equalize", "Rotate", "PosterizeIncreasing",
              "SolarizeIncreasing", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel"]
# timm's "tweights" op set (_RAND_WEIGHTED_0): drawn without replacement by these weights
RAND_WEIGHTS = {"Rotate": 3, "ShearX": 2, "ShearY": 2, "TranslateXRel": 1, "TranslateYRel": 1,
                "ColorIncreasing": 0.25, "SharpnessIncreasing": 0.25, "AutoContrast": 0.25,
                "SolarizeIncreasing": 0.05, "SolarizeAdd": 0.05, "ContrastIncreasing": 0.05,
                "BrightnessIncreasing": 0.05, "Equalize": 0.05, "PosterizeIncreasing": 0.05,
                "Invert": 0.05}

# timm's AutoAugment policies: ((op, probability, magnitude), (op, probability, magnitude))
_V0 = [
    (("Equalize", 0.8, 1), ("ShearY", 0.8, 4)), (("Color", 0.4, 9), ("Equalize", 0.6, 3)),
    (("Color", 0.4, 1), ("Rotate", 0.6, 8)), (("Solarize", 0.8, 3), ("Equalize", 0.4, 7)),
    (("Solarize", 0.4, 2), ("Solarize", 0.6, 2)), (("Color", 0.2, 0), ("Equalize", 0.8, 8)),
    (("Equalize", 0.4, 8), ("SolarizeAdd", 0.8, 3)), (("ShearX", 0.2, 9), ("Rotate", 0.6, 8)),
    (("Color", 0.6, 1), ("Equalize", 1.0, 2)), (("Invert", 0.4, 9), ("Rotate", 0.6, 0)),
    (("Equalize", 1.0, 9), ("ShearY", 0.6, 3)), (("Color", 0.4, 7), ("Equalize", 0.6, 0)),
    (("Posterize", 0.4, 6), ("AutoContrast", 0.4, 7)), (("Solarize", 0.6, 8), ("Color", 0.6, 9)),
    (("Solarize", 0.2, 4), ("Rotate", 0.8, 9)), (("Rotate", 1.0, 7), ("TranslateYRel", 0.8, 9)),
    (("ShearX", 0.0, 0), ("Solarize", 0.8, 4)), (("ShearY", 0.8, 0), ("Color", 0.6, 4)),
    (("Color", 1.0, 0), ("Rotate", 0.6, 2)), (("Equalize", 0.8, 4), ("Equalize", 0.0, 8)),
    (("Equalize", 1.0, 4), ("AutoContrast", 0.6, 2)),
    (("ShearY", 0.4, 7), ("SolarizeAdd", 0.6, 7)),
    (("Posterize", 0.8, 2), ("Solarize", 0.6, 10)), (("Solarize", 0.6, 8), ("Equalize", 0.6, 1)),
    (("Color", 0.8, 6), ("Rotate", 0.4, 5)),
]
_ORIGINAL = [
    (("PosterizeOriginal", 0.4, 8), ("Rotate", 0.6, 9)),
    (("Solarize", 0.6, 5), ("AutoContrast", 0.6, 5)), (("Equalize", 0.8, 8), ("Equalize", 0.6, 3)),
    (("PosterizeOriginal", 0.6, 7), ("PosterizeOriginal", 0.6, 6)),
    (("Equalize", 0.4, 7), ("Solarize", 0.2, 4)), (("Equalize", 0.4, 4), ("Rotate", 0.8, 8)),
    (("Solarize", 0.6, 3), ("Equalize", 0.6, 7)),
    (("PosterizeOriginal", 0.8, 5), ("Equalize", 1.0, 2)),
    (("Rotate", 0.2, 3), ("Solarize", 0.6, 8)),
    (("Equalize", 0.6, 8), ("PosterizeOriginal", 0.4, 6)),
    (("Rotate", 0.8, 8), ("Color", 0.4, 0)), (("Rotate", 0.4, 9), ("Equalize", 0.6, 2)),
    (("Equalize", 0.0, 7), ("Equalize", 0.8, 8)), (("Invert", 0.6, 4), ("Equalize", 1.0, 8)),
    (("Color", 0.6, 4), ("Contrast", 1.0, 8)), (("Rotate", 0.8, 8), ("Color", 1.0, 2)),
    (("Color", 0.8, 8), ("Solarize", 0.8, 7)), (("Sharpness", 0.4, 7), ("Invert", 0.6, 8)),
    (("ShearX", 0.6, 5), ("Equalize", 1.0, 9)), (("Color", 0.4, 0), ("Equalize", 0.6, 3)),
    (("Equalize", 0.4, 7), ("Solarize", 0.2, 4)), (("Solarize", 0.6, 5), ("AutoContrast", 0.6, 5)),
    (("Invert", 0.6, 4), ("Equalize", 1.0, 8)), (("Color", 0.6, 4), ("Contrast", 1.0, 8)),
    (("Equalize", 0.8, 8), ("Equalize", 0.6, 3)),
]


def _research_posterize(policy):
    # timm's "r" variants: the research posterize (bits kept decrease with the magnitude)
    return [tuple(("PosterizeIncreasing" if op.startswith("Posterize") else op, p, m)
                  for op, p, m in sub) for sub in policy]


POLICIES = {"v0": _V0, "v0r": _research_posterize(_V0), "original": _ORIGINAL,
            "originalr": _research_posterize(_ORIGINAL)}


def _check_names(names: Sequence[str], name: str) -> List[str]:
    if isinstance(names, str) or not isinstance(names, (list, tuple)) or len(names) == 0 \
            or not all(isinstance(n, str) for n in names):
        raise TypeError(f"{name} must be a non-empty list of timm op names, got {names!r}")
    unknown = [n for n in names if n not in FA.TIMM_NAMES]
    if unknown:
        raise ValueError(f"{name}: unknown timm ops {unknown}; known: {sorted(FA.TIMM_NAMES)}")
    return list(names)


class _TimmOps(_PolicyBase):
    """timm's policies: the op rows (timm name -> op id and level rule), magnitude noise,
    fill, interpolation and ``mask_fill``."""

    fill: List[float]
    fill_unit: List[float]

    def __init__(self, names: List[str], magnitude_std: float, magnitude_max: Optional[float],
                 translate_const: float, translate_pct: float, interpolation: str,
                 fill: Sequence[float], group_by_branch: bool, mask_fill: int = 0) -> None:
        super().__init__(FA.TIMM, names, [FA.TIMM_NAMES[n][0] for n in names], interpolation,
                         group_by_branch, mask_fill)
        # inf (timm: mstd > 100) means uniform in [0, magnitude]
        self.magnitude_std = math.inf if magnitude_std == math.inf or (
            isinstance(magnitude_std, (int, float)) and magnitude_std > 100) else check_number(
            magnitude_std, "magnitude_std", 0.0, 100.0)
        self.magnitude_max = 10.0 if magnitude_max is None else check_number(
            magnitude_max, "magnitude_max", 0.0, 1e6)
        self.translate_const = check_number(translate_const, "translate_const", 0.0, 1e6)
        self.translate_pct = check_number(translate_pct, "translate_pct", 0.0, 10.0)
        if not isinstance(fill, (list, tuple)):
            fill = [fill]
        if len(fill) not in (1, 3):
            raise TypeError(f"fill must be a number or 3 numbers (uint8 units), got {fill!r}")
        self.fill = [float(check_number(f, "fill", 0.0, 255.0)) for f in fill]
        # the [0, 1] fill of float input, rounded to float32 values: the warp's fill then has
        # the same value whether a path keeps it in float64 or float32 (TorchScript differs)
        self.fill_unit: List[float] = [float(torch.tensor(f / 255.0, dtype=torch.float32))
                                       for f in self.fill]
        self._constant("_rules", [FA.TIMM_NAMES[n][1] for n in names], torch.int64)

    def _levels(self, x: Tensor, magnitude: Tensor, size: int, keys: Optional[Tensor],
                draw: int) -> Tensor:
        """(N, size) float64 levels: ``magnitude`` (broadcastable) with timm's noise, clipped
        to [0, magnitude_max]. Draws ``draw`` and ``draw + 1``."""
        mag = magnitude.to(torch.float64)
        if self.magnitude_std > 0.0:
            u1 = _random._rand64(x, size, keys, draw)
            if self.magnitude_std == math.inf:  # timm: uniform in [0, magnitude]
                mag = u1 * mag
            else:
                u2 = _random._rand64(x, size, keys, draw + 1)
                z = torch.sqrt(-2.0 * torch.log(u1.clamp_min(1e-300))) \
                    * torch.cos(2.0 * math.pi * u2)
                mag = mag + self.magnitude_std * z
        return mag.expand(x.shape[0], size).clamp(0.0, self.magnitude_max)

    def _args(self, rows: Tensor, level: Tensor, negate: Tensor, x: Tensor) -> Tensor:
        rules = on_device(self._rules, x)
        return FA.level_to_arg(rules.index_select(0, rows.reshape(-1)).view(rows.shape),
                               level, negate, self.translate_const, self.translate_pct,
                               x.shape[2], x.shape[3])

    def _fill(self, x: Tensor) -> Optional[List[float]]:
        fill = self.fill if x.dtype == torch.uint8 else self.fill_unit
        if x.shape[1] == 1 and len(fill) == 3:
            fill = fill[:1]
        return fill


class TimmRandAugment(_TimmOps, _StepPolicy):
    """timm's RandAugment (``rand_augment_transform``) with per-sample draws: ``num_layers``
    times, each sample picks an op of ``ops`` (uniformly with replacement, or by
    ``choice_weights`` without replacement, as timm's ``np.random.choice``), applies it with
    probability ``prob`` at magnitude ``magnitude`` plus N(0, ``magnitude_std``) noise
    (``inf``: uniform in [0, magnitude]) clipped to [0, ``magnitude_max``], with a random sign
    for signed ops. ``fill``: uint8 value(s) for uncovered pixels (timm's ``img_mean``);
    ``translate_pct``: the Rel translations' range as a fraction of the side. ``mask_fill``:
    the label of mask pixels from outside the image (:meth:`with_targets`: geometric ops move
    masks, boxes and keypoints). Identity in ``eval()``.

    Example:
        >>> aug = TimmRandAugment(magnitude=9, magnitude_std=0.5, ops=RAND_INCREASING_OPS)
        >>> aug(torch.zeros(8, 3, 32, 32, dtype=torch.uint8)).shape
        torch.Size([8, 3, 32, 32])
    """

    # the generic repr: ops are stored as self.names
    _repr_attrs = {"group_by_branch": "group", "ops": "names"}

    def __init__(self, magnitude: float = 10.0, num_layers: int = 2, prob: float = 0.5,
                 magnitude_std: float = 0.0, magnitude_max: Optional[float] = None,
                 ops: Sequence[str] = tuple(RAND_OPS),
                 choice_weights: Optional[Sequence[float]] = None,
                 translate_const: float = 250.0, translate_pct: float = 0.45,
                 interpolation: str = "bilinear", fill: Sequence[float] = (128, 128, 128),
                 group_by_branch: bool = True, *, mask_fill: int = 0) -> None:
        names = _check_names(ops, "ops")
        super().__init__(names, magnitude_std, magnitude_max, translate_const, translate_pct,
                         interpolation, fill, group_by_branch, mask_fill)
        self.magnitude = check_number(magnitude, "magnitude", 0.0, 1e6)
        self.num_layers = check_int(num_layers, "num_layers", 0, 64)
        self.prob = check_probability(prob, "prob")
        self.weighted = choice_weights is not None
        weights = [1.0] * len(names)
        if choice_weights is not None:
            weights = check_weights(choice_weights, len(names), "choice_weights", "op")
            if self.num_layers > sum(1 for w in weights if w > 0):
                raise ValueError("num_layers must not exceed the number of ops with a positive "
                                 "weight (timm draws them without replacement)")
        self.weights: List[float] = [w / sum(weights) for w in weights]
        self._constant("_logw", torch.tensor(self.weights, dtype=torch.float64).log().tolist(),
                       torch.float64)

    def make_params(self, x: Tensor, keys: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
        """``(op, arg)``: (N, num_layers) int64 op ids (``functional._auto_augment.TIMM_OPS``;
        Identity where the layer's coin lost) and float64 op arguments, drawn on
        ``x.device``."""
        n_layers = max(self.num_layers, 1)
        if self.weighted:
            # Gumbel top-k: the same law as drawing without replacement by the weights
            u = _random._rand64(x, len(self.names), keys, 0).clamp_min(1e-300)
            logw = on_device(self._logw, x)
            rows = torch.topk(logw - torch.log(-torch.log(u)), n_layers, dim=1).indices
        else:
            rows = _random.integers(x, 0, len(self.names), size=n_layers, keys=keys, draw=0)
        applied = _random._rand64(x, n_layers, keys, 1) < self.prob
        level = self._levels(x, torch.full([1, 1], self.magnitude, device=x.device), n_layers,
                             keys, 2)
        negate = _random.bernoulli(x, 0.5, size=n_layers, keys=keys, draw=4)
        arg = self._args(rows, level, negate, x)
        op = on_device(self._op_ids, x).index_select(0, rows.reshape(-1)).view(rows.shape)
        op = torch.where(applied, op, torch.zeros_like(op))
        return op[:, :self.num_layers], arg[:, :self.num_layers]

    def is_identity(self, x: Tensor) -> bool:
        return not self.training or self.num_layers == 0


class TimmAutoAugment(_TimmOps, _StepPolicy):
    """timm's AutoAugment (``auto_augment_transform``) with one sub-policy per sample: each
    sample draws one of the 25 sub-policies of ``policy`` ("original", "originalr", "v0",
    "v0r"), then applies each of its two ops with the op's probability at the op's magnitude
    (plus N(0, ``magnitude_std``) noise, as timm's ``mstd``), with random signs. Other
    arguments (``mask_fill``, targets) as :class:`TimmRandAugment`. Identity in ``eval()``.

    Example:
        >>> aug = TimmAutoAugment("original")
        >>> aug(torch.zeros(8, 3, 32, 32, dtype=torch.uint8)).shape
        torch.Size([8, 3, 32, 32])
    """

    def __init__(self, policy: str = "v0", magnitude_std: float = 0.0,
                 magnitude_max: Optional[float] = None, translate_const: float = 250.0,
                 translate_pct: float = 0.45, interpolation: str = "bilinear",
                 fill: Sequence[float] = (128, 128, 128), group_by_branch: bool = True, *,
                 mask_fill: int = 0) -> None:
        policy = check_choice(policy, "policy", list(POLICIES))
        subs = POLICIES[policy]
        names = sorted({op for sub in subs for op, _, _ in sub})
        super().__init__(names, magnitude_std, magnitude_max, translate_const, translate_pct,
                         interpolation, fill, group_by_branch, mask_fill)
        self.policy = policy
        self.probs: List[List[float]] = [[float(p) for _, p, _ in sub] for sub in subs]
        self._constant("_rows", [[names.index(op) for op, _, _ in sub] for sub in subs],
                       torch.int64)
        self._constant("_probs", self.probs, torch.float64)
        self._constant("_mags", [[float(m) for _, _, m in sub] for sub in subs], torch.float64)

    def make_params(self, x: Tensor, keys: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
        """``(op, arg)``: (N, 2) int64 op ids (Identity where the op's coin lost) and float64
        arguments."""
        sub = _random.integers(x, 0, len(self.probs), keys=keys, draw=0)
        rows = on_device(self._rows, x).index_select(0, sub)
        probs = on_device(self._probs, x).index_select(0, sub)
        mags = on_device(self._mags, x).index_select(0, sub)
        # timm: skipped when random() > prob
        applied = _random._rand64(x, 2, keys, 1) <= probs
        level = self._levels(x, mags, 2, keys, 2)
        negate = _random.bernoulli(x, 0.5, size=2, keys=keys, draw=4)
        arg = self._args(rows, level, negate, x)
        op = on_device(self._op_ids, x).index_select(0, rows.reshape(-1)).view(rows.shape)
        return torch.where(applied, op, torch.zeros_like(op)), arg


class TimmAugMix(_TimmOps, _BlendsChains):
    """timm's AugMix (``augment_and_mix_transform``, not blended) per sample: each sample
    runs ``width`` chains of ``depth`` ops (``depth`` <= 0: 1-3 per chain) drawn uniformly
    from timm's 13 AugMix ops at a magnitude uniform in [0, ``magnitude``] (``magnitude_std``
    inf, timm's default; finite: Gaussian noise), sums them with Dirichlet(``alpha``) weights
    in float32, clips (uint8: truncates) and blends the original towards the sum by a
    Beta(``alpha``, ``alpha``) weight as PIL's ``Image.blend``. ``translate_pct`` 0.3 as
    timm's ``create_transform``. Identity in ``eval()``.

    Example:
        >>> aug = TimmAugMix(magnitude=5, width=4, depth=2)
        >>> aug(torch.zeros(8, 3, 32, 32, dtype=torch.uint8)).shape
        torch.Size([8, 3, 32, 32])
    """

    def __init__(self, magnitude: float = 3.0, width: int = 3, depth: int = -1,
                 alpha: float = 1.0, magnitude_std: float = math.inf,
                 magnitude_max: Optional[float] = None, translate_pct: float = 0.3,
                 interpolation: str = "bilinear", fill: Sequence[float] = (128, 128, 128),
                 group_by_branch: bool = True) -> None:
        super().__init__(list(AUGMIX_OPS), magnitude_std, magnitude_max, 250.0, translate_pct,
                         interpolation, fill, group_by_branch)
        self.magnitude = check_number(magnitude, "magnitude", 0.0, 1e6)
        self.width = check_int(width, "width", 1, 64)
        self.depth = check_int(depth, "depth", -(1 << 31), 64)
        self.alpha = check_number(alpha, "alpha", 1e-3, 1e3)

    def make_params(self, x: Tensor, keys: Optional[Tensor] = None
                    ) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        """``(weights, m, op, arg)``: (N, width) float32 chain weights, (N,) float32 blend
        weight of the mix, (N, width, depth) int64 op ids (Identity past a chain's depth) and
        float64 arguments."""
        width, depth = self.width, self.depth if self.depth > 0 else 3
        weights = _random.dirichlet(x, self.alpha, width, keys=keys, draw=0)
        m = _random.beta(x, self.alpha, self.alpha, keys=keys, draw=10)
        rows = _random.integers(x, 0, len(self.names), size=width * depth, keys=keys, draw=20)
        level = self._levels(x, torch.full([1, 1], self.magnitude, device=x.device),
                             width * depth, keys, 21)
        negate = _random.bernoulli(x, 0.5, size=width * depth, keys=keys, draw=23)
        arg = self._args(rows, level, negate, x).view(-1, width, depth)
        op = on_device(self._op_ids, x).index_select(0, rows.reshape(-1)).view(-1, width, depth)
        if self.depth <= 0:
            d = _random.integers(x, 1, 4, size=width, keys=keys, draw=24)
            step = torch.arange(depth, device=x.device).view(1, 1, depth)
            op = torch.where(step < d.unsqueeze(2), op, torch.zeros_like(op))
        return weights, m, op, arg

    def apply_image(self, x: Tensor, params: Tuple[Tensor, Tensor, Tensor, Tensor]) -> Tensor:
        """The chains (``params`` from ``make_params``) summed and blended with ``x``."""
        weights, m, op, arg = params
        ct = torch.float64 if x.dtype == torch.float64 else torch.float32
        mixed = torch.zeros(x.shape, dtype=ct, device=x.device)
        for i in range(self.width):
            aug = self._chain(x, op[:, i], arg[:, i])
            mixed = mixed + weights[:, i].to(ct).view(-1, 1, 1, 1) * aug.to(ct)
        return FA.augmix_blend(x, mixed, m)


class TimmRandomResizedCrop(GeometricTransform):
    """timm's ``RandomResizedCropAndInterpolation(interpolation="random")``: a
    :class:`RandomResizedCrop` whose interpolation is drawn per sample among
    ``interpolations`` (timm: bilinear or bicubic, uniformly); each sample's box is drawn as
    :class:`RandomResizedCrop` draws it. In ``eval()`` the first interpolation's eval
    behaviour (a centre crop + resize at ``eval_crop_pct``; None: the identity). Built as a
    :class:`RandomChoice` of one :class:`RandomResizedCrop` per interpolation (``choice``),
    which runs forward, :meth:`with_targets` and ragged batches.

    Example:
        >>> crop = TimmRandomResizedCrop(16)
        >>> crop(torch.zeros(8, 3, 32, 32, dtype=torch.uint8)).shape
        torch.Size([8, 3, 16, 16])
    """

    takes_sizes = True  # a ragged batch goes through its branches' sized crops

    def __init__(self, size: Union[int, Sequence[int]], scale: Sequence[float] = (0.08, 1.0),
                 ratio: Sequence[float] = (3.0 / 4.0, 4.0 / 3.0),
                 interpolations: Sequence[str] = ("bilinear", "bicubic"),
                 eval_crop_pct: Optional[float] = 0.875) -> None:
        super().__init__()
        from ._container import RandomChoice
        from ._geometry import RandomResizedCrop

        if not isinstance(interpolations, (list, tuple)) or len(interpolations) == 0 or not all(
                i in ("nearest", "bilinear", "bicubic") for i in interpolations):
            raise ValueError(f"interpolations must be a non-empty list of 'nearest', "
                             f"'bilinear', 'bicubic', got {interpolations!r}")
        crops = [RandomResizedCrop(size, scale=scale, ratio=ratio, interpolation=i,
                                   eval_crop_pct=eval_crop_pct) for i in interpolations]
        self.first = crops[0]
        self.choice = RandomChoice(crops)
        self.interpolations: List[str] = list(interpolations)

    def make_params(self, x: Tensor, keys: Optional[Tensor] = None) -> Tensor:
        """(N,) int64: each sample's interpolation (index into ``interpolations``)."""
        return self.choice.make_params(x, keys)

    def fixes_size(self) -> bool:
        return True

    def output_size(self, height: int, width: int) -> List[int]:
        return [self.first.size[0], self.first.size[1]]

    def forward(self, x: Tensor, keys: Optional[Tensor] = None) -> Tensor:
        check_keys(keys, x, "TimmRandomResizedCrop")
        if not self.training:
            return self.first(x)
        return self.choice(x, keys)

    def crop_params(self, x: Tensor, keys: Optional[Tensor] = None,
                    sizes: Optional[Tensor] = None
                    ) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """``(branch, top, left, height, width)``, (N,) int64 each: every draw of a training
        ``forward`` in its order (the branch, then each branch's boxes, drawn on the samples
        ``forward`` draws them for), the window decode's draw (:meth:`window`). With ``sizes``
        (``(N, 2)``, a ragged batch) the boxes are drawn from each image's own size."""
        from ._container import _rows, _take

        c, branch = self.choice, self.make_params(x, keys)
        ks, rows, order = c._branches(branch, c._runs_static(x))
        parts: List[Tensor] = []
        for j, k in enumerate(ks):  # as RandomChoice runs its branches
            idx = rows[j]
            box = c.transforms[k].make_params(_rows(x, idx), c._child_keys(_take(keys, idx), k),
                                              _take(sizes, idx))
            c._gather(parts, torch.stack(box, 1), k, branch, order)
        box = c._join(parts, order).t().contiguous()
        return branch, box[0], box[1], box[2], box[3]  # each a contiguous (N,) tensor

    def window(self, sizes: Tensor, keys: Optional[Tensor] = None, channels: int = 3
               ) -> Tensor:
        """``(N, 5)`` int64 ``(branch, top, left, height, width)``: each image's interpolation
        (index into ``interpolations``) and the box of it (of size ``sizes[i]``) that
        :meth:`with_sizes` resizes, with the same draws, the same random numbers consumed, but
        no pixels (see :meth:`batchaug.RandomResizedCrop.window`). ``eval()``: the
        first interpolation's eval box.

        Example:
            >>> TimmRandomResizedCrop(16).window(torch.tensor([[40, 50]])).shape
            torch.Size([1, 5])
        """
        if not self.training:
            box = self.first.window(sizes, None, channels)
            return torch.cat((torch.zeros_like(box[:, :1]), box), 1)
        x = torch.empty((sizes.shape[0], channels, 0, 0), dtype=torch.uint8, device=sizes.device)
        return torch.stack(self.crop_params(x, keys, sizes), 1)

    @torch.jit.export
    def with_targets(self, images: Tensor, targets: Dict[str, Tensor],
                     keys: Optional[Tensor] = None) -> Tuple[Tensor, Dict[str, Tensor]]:
        """``(images, targets)``: masks (nearest), boxes and keypoints cropped and resized with
        their image's box, through the chosen branch's ``with_targets`` (in ``eval()`` the
        first's eval box); images as ``forward``; a ragged batch (``targets["sizes"]``) as
        :meth:`with_sizes`. ``targets`` as :meth:`batchaug.GeometricTransform.with_targets`."""
        check_batch(images, "TimmRandomResizedCrop")
        check_keys(keys, images, "TimmRandomResizedCrop")
        if not self.training:
            return self.first.with_targets(images, targets)
        return self.choice.with_targets(images, targets, keys)

    def extra_repr(self) -> str:
        c = self.first
        return (f"size={tuple(c.size)}, scale={c.scale}, ratio=({c.ratio[0]:.4g}, "
                f"{c.ratio[1]:.4g}), interpolations={self.interpolations}, "
                f"eval_crop_pct={c.eval_crop_pct}")
