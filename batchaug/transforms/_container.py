"""Per-sample random containers: RandomApply, RandomChoice, RandomOrder.

Each sample makes its own choice, run one of two ways, picked automatically:

- grouped (on the CPU, eager and TorchScript): the samples are sorted by branch and each branch
  runs once on its own samples (one host read of the branch counts per step).
- static (``torch.compile``/``torch.export``, other devices, or ``group_by_branch=False``):
  every branch runs on the whole batch and ``torch.where`` picks per sample; shapes stay fixed
  and nothing is read back (on an accelerator that read would be a device sync per step).
  The inner transforms then draw for other batch sizes: equally distributed results, identical
  only with keys (:mod:`batchaug._random`).

Child ``j`` gets ``_random.substream(keys, j)``; a child whose ``takes_keys`` class attribute
is not true is called as ``t(x)``. Random torchvision/kornia transforms are refused as in
:class:`batchaug.Augment`.

``with_targets`` makes the same choices as ``forward`` and moves each sample's targets with
its images (a child without ``with_targets`` only if it moves no pixel). In training every
sample's targets follow the geometric transforms' output rules, whichever branch it takes:
non-finite or inverted boxes and non-finite keypoints come back invalid, invalid ones zeros.
"""
from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor, nn

from .. import _fusion, _random
from .._validation import (check_batch, check_bool, check_keys, check_probability,
                           check_target_children, check_transform, check_weights)
from ..functional._targets import (cat_targets, check_targets, put_targets,
                                   select_targets, take_targets, zero_invalid_targets)
from ..functional._utils import group_on_host, match_layout, select_samples
from ..functional._misc import branch_groups, inverse_permutation, ungroup
from ._base import Transform


def _module_list(transforms: Union[nn.Module, Sequence[nn.Module]], owner: str) -> nn.ModuleList:
    if isinstance(transforms, nn.Module) and not isinstance(transforms, nn.ModuleList):
        transforms = [transforms]
    if not isinstance(transforms, (list, tuple, nn.ModuleList)):
        raise TypeError(
            f"transforms must be a module or a sequence of modules, got {transforms!r}"
        )
    if len(transforms) == 0:
        raise ValueError("transforms must not be empty")
    for i, t in enumerate(transforms):
        check_transform(t, f"transforms[{i}]", owner)
    return nn.ModuleList(list(transforms))


def _check_same(y: Tensor, x: Tensor, name: str) -> None:
    """Raise unless a branch output can stand in for the input (shape[1:] and dtype)."""
    if y.shape[1:] != x.shape[1:] or y.dtype != x.dtype:
        raise ValueError(
            "{}: the transforms must keep each image's shape and dtype, got {} {} from "
            "{} {}".format(name, list(y.shape[1:]), y.dtype, list(x.shape[1:]), x.dtype)
        )


def _take(keys: Optional[Tensor], idx: Optional[Tensor]) -> Optional[Tensor]:
    """The keys (sizes, ...) of the samples ``idx`` (None: all); None stays None."""
    if keys is None or idx is None:
        return keys
    return keys.index_select(0, idx)


def _rows(x: Tensor, idx: Optional[Tensor]) -> Tensor:
    """The samples ``idx`` of ``x`` (None: all of them)."""
    return x if idx is None else x.index_select(0, idx)


# The targets' index operations, None (forward: no targets) staying None
def _take_t(targets: Optional[Dict[str, Tensor]], idx: Optional[Tensor]
            ) -> Optional[Dict[str, Tensor]]:
    if targets is None or idx is None:
        return targets
    return take_targets(targets, idx)


def _select_t(mask: Tensor, a: Optional[Dict[str, Tensor]],
              b: Optional[Dict[str, Tensor]]) -> Optional[Dict[str, Tensor]]:
    if a is None or b is None:
        return None
    return select_targets(mask, a, b)


def _put_t(targets: Optional[Dict[str, Tensor]], idx: Tensor,
           moved: Optional[Dict[str, Tensor]]) -> Optional[Dict[str, Tensor]]:
    if targets is None or moved is None:
        return None
    return put_targets(targets, idx, moved)


class _Container(Transform):
    """What the three containers share: ``forward`` and ``with_targets`` are one algorithm,
    ``_run`` (``targets`` None for ``forward``), and child ``j`` is called in one place,
    ``_step``, found in an unrolled loop (TorchScript cannot index a ModuleList with a
    variable)."""

    def _child_keys(self, keys: Optional[Tensor], j: int) -> Optional[Tensor]:
        """The keys child ``j`` draws with for samples of ``keys``."""
        return _random.substream(keys, j)

    def _runs_static(self, x: Tensor) -> bool:
        """Whether a training call on ``x`` runs static, every child on the whole batch
        (module doc), rather than grouped."""
        return not (self.group and group_on_host(x)) or x.shape[0] == 0

    def _step(self, j: int, x: Tensor, targets: Optional[Dict[str, Tensor]],
              keys: Optional[Tensor]) -> Tuple[Tensor, Optional[Dict[str, Tensor]]]:
        """Child ``j`` on ``x``, and on ``targets`` when given: its ``with_targets``, or the
        images only for a child that moves no pixel (``check_target_children``)."""
        y, ty = x, targets
        for i, t in enumerate(self.transforms):
            if i == j:
                # hasattr first: TorchScript then compiles no with_targets call for a child
                # without one
                if hasattr(t, "with_targets") and targets is not None:
                    y, ty = t.with_targets(x, targets, self._child_keys(keys, i))
                elif getattr(t, "takes_keys", False):
                    y = t(x, self._child_keys(keys, i))
                else:
                    y = t(x)
        return y, ty

    def _checked(self, x: Tensor, targets: Optional[Dict[str, Tensor]], keys: Optional[Tensor]
                 ) -> Optional[Dict[str, Tensor]]:
        """The input checks: the targets checked (in training with invalid ones zeroed, see
        the module doc), or None for ``forward``."""
        check_batch(x, self._name)
        check_keys(keys, x, self._name)
        if targets is None:
            return None
        if not torch.jit.is_scripting():
            check_target_children(self.transforms, self._name, "transforms")
        targets = check_targets(targets, list(x.shape), True)
        if self.training:
            targets = zero_invalid_targets(targets)
        return targets

    def _run(self, x: Tensor, targets: Optional[Dict[str, Tensor]], keys: Optional[Tensor]
             ) -> Tuple[Tensor, Optional[Dict[str, Tensor]]]:
        targets = self._checked(x, targets, keys)
        if not self.training:
            return x, targets
        return self._dispatch(x, targets, keys, self.make_params(x, keys),
                              self._runs_static(x))

    def forward(self, x: Tensor, keys: Optional[Tensor] = None) -> Tensor:
        return self._run(x, None, keys)[0]

    @torch.jit.export
    def with_targets(self, images: Tensor, targets: Dict[str, Tensor],
                     keys: Optional[Tensor] = None) -> Tuple[Tensor, Dict[str, Tensor]]:
        """``(images, targets)``: each sample's targets go through the ``with_targets`` of the
        transforms its images get (RandomApply: all or none; RandomChoice: the chosen one;
        RandomOrder: all, in the sample's order). Same draws and images as ``forward``;
        ``targets`` as in :meth:`batchaug.Augment.with_targets`.

        Example:
            >>> from batchaug import RandomHorizontalFlip, RandomVerticalFlip
            >>> aug = RandomChoice([RandomHorizontalFlip(1.0), RandomVerticalFlip(1.0)], p=[1, 0])
            >>> t = {"boxes": torch.tensor([[[1.0, 2.0, 5.0, 6.0]]])}
            >>> aug.with_targets(torch.zeros(1, 3, 8, 10), t)[1]["boxes"]
            tensor([[[5., 2., 9., 6.]]])
        """
        y, ty = self._run(images, targets, keys)
        assert ty is not None  # targets in, targets out
        return y, ty


class RandomApply(_Container):
    """Apply the whole sequence ``transforms`` to each sample with probability ``p`` (else
    nothing), as ``v2.RandomApply`` but one coin per sample. The transforms must keep the
    image shape and dtype. See the module doc for ``group_by_branch``.

    Example:
        >>> from batchaug import ColorJitter
        >>> aug = RandomApply([ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8)
        >>> aug(torch.zeros(8, 3, 32, 32, dtype=torch.uint8)).shape
        torch.Size([8, 3, 32, 32])
    """

    def __init__(
        self, transforms: Union[nn.Module, Sequence[nn.Module]], p: float = 0.5,
        group_by_branch: bool = True,
    ) -> None:
        super().__init__()
        self.transforms = _module_list(transforms, "RandomApply")
        self.p = check_probability(p, "p")
        self.group = check_bool(group_by_branch, "group_by_branch")

    def make_params(self, x: Tensor, keys: Optional[Tensor] = None) -> Tensor:
        """(N,) bool: which samples get the transforms."""
        return _random.bernoulli(x, self.p, keys=keys, draw=0)

    def _sequence(self, x: Tensor, targets: Optional[Dict[str, Tensor]], keys: Optional[Tensor]
                  ) -> Tuple[Tensor, Optional[Dict[str, Tensor]]]:
        if targets is None and not torch.jit.is_scripting():
            if _fusion.fusable(self.transforms, x):
                # eager CPU: Augment's plan runner, so its fusions fire here too
                return _fusion.run(self.transforms, x, keys), None
        for j, t in enumerate(self.transforms):
            x, targets = self._step(j, x, targets, keys)
        return x, targets

    def _dispatch(self, x: Tensor, targets: Optional[Dict[str, Tensor]],
                  keys: Optional[Tensor], mask: Tensor, static: bool
                  ) -> Tuple[Tensor, Optional[Dict[str, Tensor]]]:
        if static:
            y, ty = self._sequence(x, targets, keys)
            _check_same(y, x, "RandomApply")
            return select_samples(mask, y, x), _select_t(mask, ty, targets)
        idx = torch.nonzero(mask).view(-1)
        if idx.shape[0] == 0:
            return x, targets
        y, ty = self._sequence(x.index_select(0, idx), _take_t(targets, idx), _take(keys, idx))
        _check_same(y, x, "RandomApply")
        return x.index_copy(0, idx, y), _put_t(targets, idx, ty)



class RandomChoice(_Container):
    """Apply one of ``transforms`` to each sample, chosen per sample with probabilities ``p``
    (weights, normalised; ``None``: uniform), as ``v2.RandomChoice`` but one choice per
    sample. All branches must give the same image shape and dtype. See the module doc for
    ``group_by_branch``.

    Example:
        >>> from batchaug import RandomHorizontalFlip, RandomVerticalFlip
        >>> aug = RandomChoice([RandomHorizontalFlip(1.0), RandomVerticalFlip(1.0)], p=[3, 1])
        >>> aug(torch.zeros(8, 3, 32, 32)).shape
        torch.Size([8, 3, 32, 32])
    """

    def __init__(
        self, transforms: Sequence[nn.Module], p: Optional[Sequence[float]] = None,
        group_by_branch: bool = True,
    ) -> None:
        super().__init__()
        self.transforms = _module_list(transforms, "RandomChoice")
        k = len(self.transforms)
        w = [1.0] * k if p is None else check_weights(p, k, "p", "transform")
        self.p: List[float] = [v / math.fsum(w) for v in w]
        self.group = check_bool(group_by_branch, "group_by_branch")
        self._constant("_probs", self.p, torch.float64)  # .half() must not round them

    def make_params(self, x: Tensor, keys: Optional[Tensor] = None) -> Tensor:
        """(N,) int64: the branch of each sample."""
        return _random.categorical(x, self._probs, keys=keys, draw=0)

    def _branches(self, branch: Tensor, static: bool
                  ) -> Tuple[List[int], List[Optional[Tensor]], Optional[Tensor]]:
        """How every call (and ``TimmRandomResizedCrop.crop_params``) runs the draw ``branch``:
        ``(ks, rows, order)``, the branches in the order they run, the samples of each
        (static: all, rows and order None) and ``order`` for :meth:`_gather`/:meth:`_join`."""
        if static:
            every = list(range(len(self.p)))
            whole: List[Optional[Tensor]] = [None for _ in every]
            return every, whole, None
        ks, idxs, order = branch_groups(branch, len(self.p))
        rows: List[Optional[Tensor]] = [i for i in idxs]
        return ks, rows, order

    def _gather(self, parts: List[Tensor], y: Tensor, k: int, branch: Tensor,
                order: Optional[Tensor]) -> None:
        """Adds branch ``k``'s result ``y`` to ``parts``: static, picked into ``parts[0]`` at
        once (one batch held beside ``y``); grouped, appended for :meth:`_join`."""
        if order is not None or len(parts) == 0:
            parts.append(y)
        elif y.dim() == 4:
            parts[0] = select_samples(branch == k, y, parts[0])
        else:
            parts[0] = torch.where((branch == k).view(-1, 1), y, parts[0])

    def _join(self, parts: List[Tensor], order: Optional[Tensor]) -> Tensor:
        """The results :meth:`_gather` collected, in sample order."""
        return parts[0] if order is None else ungroup(parts, order)

    def _dispatch(self, x: Tensor, targets: Optional[Dict[str, Tensor]],
                  keys: Optional[Tensor], branch: Tensor, static: bool
                  ) -> Tuple[Tensor, Optional[Dict[str, Tensor]]]:
        ks, rows, order = self._branches(branch, static)
        parts: List[Tensor] = []
        tparts: List[Dict[str, Tensor]] = []
        for j, k in enumerate(ks):
            y, ty = self._step(k, _rows(x, rows[j]), _take_t(targets, rows[j]),
                               _take(keys, rows[j]))
            if len(parts) > 0:
                _check_same(y, parts[0], "RandomChoice")
            self._gather(parts, y, k, branch, order)
            if ty is not None:
                if order is None and len(tparts) > 0:
                    tparts[0] = select_targets(branch == k, ty, tparts[0])
                else:
                    tparts.append(ty)
        out = self._join(parts, order)
        if order is None:
            return out, None if targets is None else tparts[0]
        # the static path keeps x's layout (torch.where): so does this one
        out = match_layout(out, x)
        return out, None if targets is None else cat_targets(tparts, inverse_permutation(order))


    def extra_repr(self) -> str:
        return f"p={[round(v, 6) for v in self.p]}, group_by_branch={self.group}"


class RandomOrder(_Container):
    """Apply all ``transforms`` to each sample in its own random order, as ``v2.RandomOrder``
    but one order per sample. The transforms must keep the image shape and dtype. See the
    module doc for ``group_by_branch``.

    Example:
        >>> from batchaug import RandomHorizontalFlip, RandomInvert
        >>> aug = RandomOrder([RandomHorizontalFlip(), RandomInvert()])
        >>> aug(torch.zeros(8, 3, 32, 32)).shape
        torch.Size([8, 3, 32, 32])
    """

    def __init__(self, transforms: Sequence[nn.Module], group_by_branch: bool = True) -> None:
        super().__init__()
        self.transforms = _module_list(transforms, "RandomOrder")
        self.group = check_bool(group_by_branch, "group_by_branch")

    def make_params(self, x: Tensor, keys: Optional[Tensor] = None) -> Tensor:
        """(N, k) int64: each sample's order of the k transforms."""
        return _random.permutations(x, len(self.transforms), keys=keys, draw=0)

    def _dispatch(self, x: Tensor, targets: Optional[Dict[str, Tensor]],
                  keys: Optional[Tensor], order: Tensor, static: bool
                  ) -> Tuple[Tensor, Optional[Dict[str, Tensor]]]:
        k = len(self.transforms)
        if static:
            for s in range(k):
                for j, t in enumerate(self.transforms):
                    # keyed, a transform draws the same for a sample at whichever step it runs
                    y, ty = self._step(j, x, targets, keys)
                    _check_same(y, x, "RandomOrder")
                    chosen = order[:, s] == j
                    x = select_samples(chosen, y, x)
                    targets = _select_t(chosen, ty, targets)
            return x, targets
        rows = torch.arange(x.shape[0], device=x.device)
        for s in range(k):
            # step s: each sample's s-th transform, on the samples (rows) in their current order
            js, idxs, perm = branch_groups(order.index_select(0, rows)[:, s], k)
            parts: List[Tensor] = []
            tparts: List[Dict[str, Tensor]] = []
            for i, j in enumerate(js):
                idx = idxs[i]
                y, ty = self._step(j, x.index_select(0, idx), _take_t(targets, idx),
                                   _take(keys, rows.index_select(0, idx)))
                _check_same(y, x, "RandomOrder")
                parts.append(y)
                if ty is not None:
                    tparts.append(ty)
            x = torch.cat(parts)
            rows = rows.index_select(0, perm)
            if targets is not None:
                targets = cat_targets(tparts)
        inv = inverse_permutation(rows)
        return x.index_select(0, inv), _take_t(targets, inv)

