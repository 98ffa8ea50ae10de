"""Automatic augmentation policies with an op, magnitude and sign drawn per sample:
TrivialAugmentWide, RandAugment, AutoAugment, AugMix.

torchvision v2's arguments, op lists, magnitude bins and signed magnitudes; where torchvision
draws one op per call, each sample here draws its own. Each op on a sample equals torchvision's
``_apply_image_or_video_transform`` with that op and magnitude (see
:mod:`batchaug.functional._auto_augment` for the kernels and per-op tolerances).

Dispatch (``group_by_branch``) as the containers': grouped by op family on the CPU (eager,
TorchScript), else every family on the whole batch with ``torch.where``; the draws come
first, so both give the same output.

Targets (``with_targets``): the one-op-per-step policies move each sample's masks, boxes and
keypoints by the geometric op it drew (the matrix its image was warped with, step after step;
masks with nearest, ``mask_fill`` outside) and leave them for photometric ops (torchvision's
policies refuse targets). AugMix blends several chains of geometric ops: it refuses them.
"""

from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from .. import _random
from ..functional import _auto_augment as FA
from ..functional._color import check_rgb
from ..functional._targets import check_mask_fill_for, check_targets
from ..functional._utils import group_on_host, on_device
from ._augment import only_labels
from ._base import GeometricTransform, Transform
from .._validation import check_mask_fill as _warp_mask_fill
from .._validation import (INTERPOLATIONS, check_batch, check_bool, check_choice, check_fill,
                           check_fill_for, check_int, check_number)

_WIDE_OPS = ["Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate",
             "Brightness", "Color", "Contrast", "Sharpness", "Posterize", "Solarize",
             "AutoContrast", "Equalize"]
_RAND_OPS = _WIDE_OPS  # RandAugment's space: the same 14 ops, "standard" magnitudes
_AUGMIX_PARTIAL = ["ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Posterize",
                   "Solarize", "AutoContrast", "Equalize"]
_AUGMIX_ALL = _AUGMIX_PARTIAL + ["Brightness", "Color", "Contrast", "Sharpness"]

# torchvision's AutoAugment sub-policies: ((op, probability, magnitude bin), (op, p, bin))
_POLICIES = {
    "imagenet": [
        (("Posterize", 0.4, 8), ("Rotate", 0.6, 9)),
        (("Solarize", 0.6, 5), ("AutoContrast", 0.6, None)),
        (("Equalize", 0.8, None), ("Equalize", 0.6, None)),
        (("Posterize", 0.6, 7), ("Posterize", 0.6, 6)),
        (("Equalize", 0.4, None), ("Solarize", 0.2, 4)),
        (("Equalize", 0.4, None), ("Rotate", 0.8, 8)),
        (("Solarize", 0.6, 3), ("Equalize", 0.6, None)),
        (("Posterize", 0.8, 5), ("Equalize", 1.0, None)),
        (("Rotate", 0.2, 3), ("Solarize", 0.6, 8)),
        (("Equalize", 0.6, None), ("Posterize", 0.4, 6)),
        (("Rotate", 0.8, 8), ("Color", 0.4, 0)),
        (("Rotate", 0.4, 9), ("Equalize", 0.6, None)),
        (("Equalize", 0.0, None), ("Equalize", 0.8, None)),
        (("Invert", 0.6, None), ("Equalize", 1.0, None)),
        (("Color", 0.6, 4), ("Contrast", 1.0, 8)),
        (("Rotate", 0.8, 8), ("Color", 1.0, 2)),
        (("Color", 0.8, 8), ("Solarize", 0.8, 7)),
        (("Sharpness", 0.4, 7), ("Invert", 0.6, None)),
        (("ShearX", 0.6, 5), ("Equalize", 1.0, None)),
        (("Color", 0.4, 0), ("Equalize", 0.6, None)),
        (("Equalize", 0.4, None), ("Solarize", 0.2, 4)),
        (("Solarize", 0.6, 5), ("AutoContrast", 0.6, None)),
        (("Invert", 0.6, None), ("Equalize", 1.0, None)),
        (("Color", 0.6, 4), ("Contrast", 1.0, 8)),
        (("Equalize", 0.8, None), ("Equalize", 0.6, None)),
    ],
    "cifar10": [
        (("Invert", 0.1, None), ("Contrast", 0.2, 6)),
        (("Rotate", 0.7, 2), ("TranslateX", 0.3, 9)),
        (("Sharpness", 0.8, 1), ("Sharpness", 0.9, 3)),
        (("ShearY", 0.5, 8), ("TranslateY", 0.7, 9)),
        (("AutoContrast", 0.5, None), ("Equalize", 0.9, None)),
        (("ShearY", 0.2, 7), ("Posterize", 0.3, 7)),
        (("Color", 0.4, 3), ("Brightness", 0.6, 7)),
        (("Sharpness", 0.3, 9), ("Brightness", 0.7, 9)),
        (("Equalize", 0.6, None), ("Equalize", 0.5, None)),
        (("Contrast", 0.6, 7), ("Sharpness", 0.6, 5)),
        (("Color", 0.7, 7), ("TranslateX", 0.5, 8)),
        (("Equalize", 0.3, None), ("AutoContrast", 0.4, None)),
        (("TranslateY", 0.4, 3), ("Sharpness", 0.2, 6)),
        (("Brightness", 0.9, 6), ("Color", 0.2, 8)),
        (("Solarize", 0.5, 2), ("Invert", 0.0, None)),
        (("Equalize", 0.2, None), ("AutoContrast", 0.6, None)),
        (("Equalize", 0.2, None), ("Equalize", 0.6, None)),
        (("Color", 0.9, 9), ("Equalize", 0.6, None)),
        (("AutoContrast", 0.8, None), ("Solarize", 0.2, 8)),
        (("Brightness", 0.1, 3), ("Color", 0.7, 0)),
        (("Solarize", 0.4, 5), ("AutoContrast", 0.9, None)),
        (("TranslateY", 0.9, 9), ("TranslateY", 0.7, 9)),
        (("AutoContrast", 0.9, None), ("Solarize", 0.8, 3)),
        (("Equalize", 0.8, None), ("Invert", 0.1, None)),
        (("TranslateY", 0.7, 9), ("AutoContrast", 0.9, None)),
    ],
    "svhn": [
        (("ShearX", 0.9, 4), ("Invert", 0.2, None)),
        (("ShearY", 0.9, 8), ("Invert", 0.7, None)),
        (("Equalize", 0.6, None), ("Solarize", 0.6, 6)),
        (("Invert", 0.9, None), ("Equalize", 0.6, None)),
        (("Equalize", 0.6, None), ("Rotate", 0.9, 3)),
        (("ShearX", 0.9, 4), ("AutoContrast", 0.8, None)),
        (("ShearY", 0.9, 8), ("Invert", 0.4, None)),
        (("ShearY", 0.9, 5), ("Solarize", 0.2, 6)),
        (("Invert", 0.9, None), ("AutoContrast", 0.8, None)),
        (("Equalize", 0.6, None), ("Rotate", 0.9, 3)),
        (("ShearX", 0.9, 4), ("Solarize", 0.3, 3)),
        (("ShearY", 0.8, 8), ("Invert", 0.7, None)),
        (("Equalize", 0.9, None), ("TranslateY", 0.6, 6)),
        (("Invert", 0.9, None), ("Equalize", 0.6, None)),
        (("Contrast", 0.3, 3), ("Rotate", 0.8, 4)),
        (("Invert", 0.8, None), ("TranslateY", 0.0, 2)),
        (("ShearY", 0.7, 6), ("Solarize", 0.4, 8)),
        (("Invert", 0.6, None), ("Rotate", 0.8, 4)),
        (("ShearY", 0.3, 7), ("TranslateX", 0.9, 3)),
        (("ShearX", 0.1, 6), ("Invert", 0.6, None)),
        (("Solarize", 0.7, 2), ("TranslateY", 0.6, 7)),
        (("ShearY", 0.8, 4), ("Invert", 0.8, None)),
        (("ShearX", 0.7, 9), ("TranslateY", 0.8, 3)),
        (("ShearY", 0.8, 5), ("AutoContrast", 0.7, None)),
        (("ShearX", 0.7, 2), ("Invert", 0.1, None)),
    ],
}

_MAX_BINS = 1 << 16


class _PolicyBase(Transform):
    """What the policies of both libraries share: the constructor's and the input's checks and
    the engine's dispatch of ``library``'s ops."""

    library: int
    group: bool

    def __init__(self, library: int, names: List[str], ids: List[int], interpolation: str,
                 group_by_branch: bool, mask_fill: int) -> None:
        super().__init__()
        self.library = library
        self.names: List[str] = list(names)
        self.interpolation = check_choice(interpolation, "interpolation", INTERPOLATIONS)
        self.group = check_bool(group_by_branch, "group_by_branch")
        self.mask_fill = _warp_mask_fill(mask_fill)
        self._constant("_op_ids", ids, torch.int64)
        self.present: List[int] = FA.families(ids + [0], library)  # Identity: a lost coin

    def _fill(self, x: Tensor) -> Optional[List[float]]:
        raise NotImplementedError

    def check_input(self, x: Tensor) -> None:
        check_batch(x, self._name)
        check_rgb(x, self._name)
        fill = self._fill(x)
        if fill is not None:
            check_fill_for(fill, x, self._name)

    def _ops(self, x: Tensor, op: Tensor, magnitude: Tensor) -> Tensor:
        return FA.apply_ops(x, op, magnitude, self.interpolation, self._fill(x), self.present,
                            self.group and group_on_host(x), self.library)

    def _chain(self, x: Tensor, op: Tensor, magnitude: Tensor) -> Tensor:
        """Each sample's ops, (N,) or (N, steps) applied in order."""
        if op.dim() == 1:
            return self._ops(x, op, magnitude)
        for s in range(op.shape[1]):
            x = self._ops(x, op[:, s], magnitude[:, s])
        return x

    def apply_image(self, x: Tensor, params: Tuple[Tensor, Tensor]) -> Tensor:
        return self._chain(x, params[0], params[1])


class _BlendsChains(Transform):
    """AugMix's and TimmAugMix's ``with_targets``."""

    @torch.jit.export
    def with_targets(self, images: Tensor, targets: Dict[str, Tensor],
                     keys: Optional[Tensor] = None) -> Tuple[Tensor, Dict[str, Tensor]]:
        """``(images, targets)`` where ``targets`` holds only ``"labels"`` (passed through):
        AugMix blends several chains of geometric ops into one image, so a mask, box or
        keypoint has no single geometry to follow (ValueError). For dense targets use
        :class:`TrivialAugmentWide`, :class:`RandAugment` or :class:`TimmRandAugment`."""
        only_labels(targets, self._name, "AugMix blends several chains of geometric ops, so a "
                    "target has no single geometry (use TrivialAugmentWide, RandAugment or "
                    "TimmRandAugment for masks, boxes and keypoints)")
        targets = check_targets(targets, list(images.shape))
        return self.forward(images, keys), targets


class _AutoAugmentBase(_PolicyBase):
    """torchvision's policies: arguments (interpolation, fill, group_by_branch, mask_fill)
    and the op space's magnitude tables."""

    fill: Optional[List[float]]

    def __init__(self, names: List[str], space: str, interpolation: str,
                 fill: Union[None, float, Sequence[float]], group_by_branch: bool,
                 mask_fill: int = 0) -> None:
        super().__init__(FA.TORCHVISION, names, [FA.op_id(n) for n in names], interpolation,
                         group_by_branch, mask_fill)
        self.fill = None if fill is None else check_fill(fill, "fill")
        self.space = space
        self.signed: List[bool] = [FA.op_is_signed(n) for n in names]

    def _table(self, num_bins: int, height: int, width: int, device: torch.device) -> Tensor:
        """(len(names), num_bins) float32: each op's magnitude bins, its sign-flip flag in a
        last column (1.0 signed, 0.0 not)."""
        rows: List[Tensor] = []
        for j, name in enumerate(self.names):
            mags = FA.op_magnitudes(name, self.space, num_bins, height, width, device)
            flag = torch.full([1], 1.0 if self.signed[j] else 0.0, device=device)
            rows.append(torch.cat([mags, flag]))
        return torch.stack(rows)

    def _magnitude(self, table: Tensor, k: Tensor, b: Tensor, negate: Tensor) -> Tensor:
        """Signed magnitudes: bin ``b`` of op row ``k``, negated where ``negate`` and the op
        is signed (any shape of int64 ``k``/``b``, bool ``negate``)."""
        bins = table.shape[1] - 1
        mag = table.view(-1).index_select(0, (k * (bins + 1) + b).view(-1)).view(k.shape)
        signed = table[:, bins].index_select(0, k.view(-1)).view(k.shape) > 0.5
        return torch.where(negate & signed, -mag, mag)

    def _fill(self, x: Tensor) -> Optional[List[float]]:
        return self.fill


class _StepPolicy(GeometricTransform):
    """The policies with one op per sample and step (all but the AugMixes): ``make_params``
    gives ``(op, magnitude)``, (N,) or (N, steps); targets move with the geometric ops."""

    library: int
    mask_fill: int
    group: bool

    def _steps(self, params: Tuple[Tensor, Tensor], size: List[int]
               ) -> Tuple[Tensor, Tensor]:
        """``(op, theta)``: (N, S) op ids and (N, S, 2, 3) the image kernel's matrices."""
        op, magnitude = params
        if op.dim() == 1:
            op, magnitude = op.unsqueeze(1), magnitude.unsqueeze(1)
        theta = FA.op_matrix(op.reshape(-1), magnitude.reshape(-1), size[0], size[1],
                             self.library)
        return op, theta.view(op.shape[0], op.shape[1], 2, 3)

    def target_matrix(self, params: Tuple[Tensor, Tensor], in_size: List[int],
                      out_size: List[int]) -> Tensor:
        """(N, 3, 3) output -> input matrices: each sample's geometric ops composed in order
        (the identity where it drew photometric ops)."""
        return FA.compose_steps(self._steps(params, in_size)[1])

    def apply_targets(self, targets: Dict[str, Tensor], params: Tuple[Tensor, Tensor],
                      in_size: List[int], out_size: List[int]) -> Dict[str, Tensor]:
        op, theta = self._steps(params, in_size)
        if "masks" in targets:
            check_mask_fill_for(self.mask_fill, targets["masks"], self._name)
        return FA.move_policy_targets(targets, op, theta, in_size, self.mask_fill,
                                      self.group and group_on_host(op))


class TrivialAugmentWide(_AutoAugmentBase, _StepPolicy):
    """TrivialAugment Wide with one op per sample: each sample gets one of torchvision's 14
    ops (Identity, ShearX/Y, TranslateX/Y, Rotate, Brightness, Color, Contrast, Sharpness,
    Posterize, Solarize, AutoContrast, Equalize) uniformly, a magnitude bin uniform in
    ``[0, num_magnitude_bins)`` and, for signed ops, a sign, all drawn per sample (torchvision
    draws one per call). ``interpolation``: "nearest" or "bilinear"; ``fill``: None (zero
    padding, as torchvision), a number or one per channel. ``group_by_branch``: see the module
    doc. ``mask_fill``: the label of mask pixels from outside the image (:meth:`with_targets`:
    geometric ops move masks, boxes and keypoints, see the module doc). Identity in ``eval()``.

    Example:
        >>> aug = TrivialAugmentWide()
        >>> aug(torch.zeros(8, 3, 32, 32, dtype=torch.uint8)).shape
        torch.Size([8, 3, 32, 32])
    """

    def __init__(self, num_magnitude_bins: int = 31, interpolation: str = "nearest",
                 fill: Union[None, float, Sequence[float]] = None,
                 group_by_branch: bool = True, *, mask_fill: int = 0) -> None:
        super().__init__(_WIDE_OPS, "wide", interpolation, fill, group_by_branch, mask_fill)
        self.num_magnitude_bins = check_int(num_magnitude_bins, "num_magnitude_bins", 2,
                                            _MAX_BINS)

    def make_params(self, x: Tensor, keys: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
        """``(op, magnitude)``: (N,) int64 op ids (``functional._auto_augment.OPS``) and (N,)
        float32 signed magnitudes, drawn on ``x.device``."""
        k = _random.integers(x, 0, len(self.names), keys=keys, draw=0)
        b = _random.integers(x, 0, self.num_magnitude_bins, keys=keys, draw=1)
        negate = _random.bernoulli(x, 0.5, keys=keys, draw=2)
        table = self._table(self.num_magnitude_bins, x.shape[2], x.shape[3], x.device)
        op = on_device(self._op_ids, x).index_select(0, k)
        return op, self._magnitude(table, k, b, negate)


class RandAugment(_AutoAugmentBase, _StepPolicy):
    """RandAugment with ops drawn per sample: ``num_ops`` times in a row, each sample applies
    one of torchvision's 14 ops (uniformly) at bin ``magnitude`` of ``num_magnitude_bins``
    ("standard" bins: translate up to 150/331 of the side, rotate 30 degrees, factors 0.9),
    with a per-sample sign for signed ops. Other arguments as :class:`TrivialAugmentWide`.

    Example:
        >>> aug = RandAugment(num_ops=2, magnitude=9)
        >>> aug(torch.zeros(8, 3, 32, 32, dtype=torch.uint8)).shape
        torch.Size([8, 3, 32, 32])
    """

    def __init__(self, num_ops: int = 2, magnitude: int = 9, num_magnitude_bins: int = 31,
                 interpolation: str = "nearest",
                 fill: Union[None, float, Sequence[float]] = None,
                 group_by_branch: bool = True, *, mask_fill: int = 0) -> None:
        super().__init__(_RAND_OPS, "standard", interpolation, fill, group_by_branch,
                         mask_fill)
        self.num_ops = check_int(num_ops, "num_ops", 0, 1000)
        self.num_magnitude_bins = check_int(num_magnitude_bins, "num_magnitude_bins", 2,
                                            _MAX_BINS)
        # the bound comes from num_magnitude_bins, so the message names both
        self.magnitude = check_int(magnitude, "magnitude", 0, self.num_magnitude_bins - 1,
                                   "num_magnitude_bins - 1")

    def make_params(self, x: Tensor, keys: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
        """``(op, magnitude)``: (N, num_ops) int64 op ids and float32 signed magnitudes."""
        n_ops = max(self.num_ops, 1)  # (drawn for one step when num_ops is 0, then unused)
        k = _random.integers(x, 0, len(self.names), size=n_ops, keys=keys, draw=0)
        negate = _random.bernoulli(x, 0.5, size=n_ops, keys=keys, draw=1)
        table = self._table(self.num_magnitude_bins, x.shape[2], x.shape[3], x.device)
        mag = self._magnitude(table, k, torch.full_like(k, self.magnitude), negate)
        op = on_device(self._op_ids, x).index_select(0, k.view(-1)).view(k.shape)
        return op[:, :self.num_ops], mag[:, :self.num_ops]

    def is_identity(self, x: Tensor) -> bool:
        return not self.training or self.num_ops == 0


class AutoAugment(_AutoAugmentBase, _StepPolicy):
    """AutoAugment with one sub-policy per sample: each sample draws one of the 25
    sub-policies of ``policy`` ("imagenet", "cifar10", "svhn", or torchvision's
    ``AutoAugmentPolicy``), then applies each of its two ops with the op's probability, at the
    op's magnitude bin of 10 ("standard" bins), with a per-sample sign for signed ops, all as
    torchvision but per sample. Other arguments as :class:`TrivialAugmentWide`.

    Example:
        >>> aug = AutoAugment("cifar10")
        >>> aug(torch.zeros(8, 3, 32, 32, dtype=torch.uint8)).shape
        torch.Size([8, 3, 32, 32])
    """

    def __init__(self, policy: str = "imagenet", interpolation: str = "nearest",
                 fill: Union[None, float, Sequence[float]] = None,
                 group_by_branch: bool = True, *, mask_fill: int = 0) -> None:
        policy = check_choice(policy, "policy", list(_POLICIES))
        subs = _POLICIES[policy]
        names = sorted({op for sub in subs for op, _, _ in sub} | {"Identity"}, key=FA.op_id)
        super().__init__(names, "standard", interpolation, fill, group_by_branch, mask_fill)
        self.policy = policy
        # per sub-policy and slot: the op's row in names, its probability, its magnitude bin
        self._constant("_rows", [[names.index(op) for op, _, _ in sub] for sub in subs],
                       torch.int64)
        self._constant("_bins", [[0 if b is None else b for _, _, b in sub] for sub in subs],
                       torch.int64)
        self.probs: List[List[float]] = [[p for _, p, _ in sub] for sub in subs]
        self._constant("_probs", self.probs, torch.float64)

    def make_params(self, x: Tensor, keys: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
        """``(op, magnitude)``: (N, 2) int64 op ids (Identity where the sub-policy's op was not
        applied) and float32 signed magnitudes."""
        sub = _random.integers(x, 0, self._rows.shape[0], keys=keys, draw=0)
        u = _random.uniform(x, 0.0, 1.0, size=2, keys=keys, draw=1)
        negate = _random.bernoulli(x, 0.5, size=2, keys=keys, draw=2)
        rows = on_device(self._rows, x).index_select(0, sub)
        # torchvision: <=
        applied = u.to(torch.float64) <= on_device(self._probs, x).index_select(0, sub)
        rows = torch.where(applied, rows, torch.zeros_like(rows))  # row 0 is Identity
        table = self._table(10, x.shape[2], x.shape[3], x.device)
        bins = on_device(self._bins, x).index_select(0, sub)
        mag = self._magnitude(table, rows, bins, negate)
        op = on_device(self._op_ids, x).index_select(0, rows.view(-1)).view(rows.shape)
        return op, mag


class AugMix(_AutoAugmentBase, _BlendsChains):
    """AugMix per sample: each sample mixes ``mixture_width`` chains of 1-3 ops
    (``chain_depth``, or a per-sample depth in [1, 3] when it is <= 0) with Dirichlet(alpha)
    chain weights, and the result with the original by a Beta(alpha, alpha) weight, all drawn
    per sample (torchvision draws the ops and depths once per call, the weights per image).
    Ops from torchvision's AugMix space (``all_ops=False``: without Brightness, Color,
    Contrast, Sharpness), magnitude bin uniform in ``[0, severity)`` of 10, per-sample signs.
    Mixed in float32 (float64 for float64 input) and converted back as torchvision (uint8
    truncated). Other arguments as :class:`TrivialAugmentWide` (default bilinear).

    Example:
        >>> aug = AugMix()
        >>> aug(torch.zeros(8, 3, 32, 32, dtype=torch.uint8)).shape
        torch.Size([8, 3, 32, 32])
    """

    def __init__(self, severity: int = 3, mixture_width: int = 3, chain_depth: int = -1,
                 alpha: float = 1.0, all_ops: bool = True, interpolation: str = "bilinear",
                 fill: Union[None, float, Sequence[float]] = None,
                 group_by_branch: bool = True) -> None:
        all_ops = check_bool(all_ops, "all_ops")
        names = ["Identity"] + (_AUGMIX_ALL if all_ops else _AUGMIX_PARTIAL)
        super().__init__(names, "augmix", interpolation, fill, group_by_branch)
        self.severity = check_int(severity, "severity", 1, 10)
        self.mixture_width = check_int(mixture_width, "mixture_width", 1, 64)
        self.chain_depth = check_int(chain_depth, "chain_depth", -(1 << 31), 64)
        # gamma draws below ~1e-3 underflow float32 everywhere (weights 0/0)
        self.alpha = check_number(alpha, "alpha", 1e-3, 1e3)
        self.all_ops = all_ops

    def make_params(self, x: Tensor, keys: Optional[Tensor] = None
                    ) -> Tuple[Tensor, Tensor, Tensor]:
        """``(weights, op, magnitude)``: (N, 1 + mixture_width) float32 weights (the
        original's, then each chain's), (N, mixture_width, depth) int64 op ids (Identity past
        a sample's chain depth) and float32 signed magnitudes."""
        width = self.mixture_width
        depth = self.chain_depth if self.chain_depth > 0 else 3
        m = _random.dirichlet(x, self.alpha, 2, keys=keys, draw=0)
        w = _random.dirichlet(x, self.alpha, width, keys=keys, draw=4) * m[:, 1:2]
        weights = torch.cat([m[:, :1], w], dim=1)
        n_ops = len(self.names) - 1  # Identity (row 0) is not drawn
        k = _random.integers(x, 1, n_ops + 1, size=width * depth, keys=keys, draw=10)
        b = _random.integers(x, 0, self.severity, size=width * depth, keys=keys, draw=11)
        negate = _random.bernoulli(x, 0.5, size=width * depth, keys=keys, draw=12)
        k = k.view(-1, width, depth)
        if self.chain_depth <= 0:
            d = _random.integers(x, 1, 4, size=width, keys=keys, draw=13)
            step = torch.arange(depth, device=x.device).view(1, 1, depth)
            k = torch.where(step < d.unsqueeze(2), k, torch.zeros_like(k))
        table = self._table(10, x.shape[2], x.shape[3], x.device)
        mag = self._magnitude(table, k, b.view(-1, width, depth), negate.view(-1, width, depth))
        op = on_device(self._op_ids, x).index_select(0, k.reshape(-1)).view(k.shape)
        return weights, op, mag

    def apply_image(self, x: Tensor, params: Tuple[Tensor, Tensor, Tensor]) -> Tensor:
        """The chains (``params`` from ``make_params``) mixed with the original."""
        weights, op, magnitude = params
        ct = torch.float64 if x.dtype == torch.float64 else torch.float32
        # torchvision: float32 weights times the image, accumulated, then cast back
        mix = weights[:, 0].view(-1, 1, 1, 1) * x.to(ct)
        for i in range(self.mixture_width):
            aug = self._chain(x, op[:, i], magnitude[:, i])
            mix = mix + weights[:, i + 1].view(-1, 1, 1, 1) * aug.to(ct)
        if x.dtype == torch.uint8:
            # float -> uint8 truncates (as torchvision's .to); int16 first: the direct
            # conversion is not vectorised on CPU
            return mix.to(torch.int16).to(torch.uint8)
        return mix.to(x.dtype)

