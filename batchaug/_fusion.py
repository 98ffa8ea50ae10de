"""The eager CPU fast path of a sequence of transforms (``Augment``, ``RandomApply``'s inner
sequence): consecutive transforms run as one fused kernel where that gives exactly what the
modules give one after the other (same random draws, same bytes).

A fusion is a :class:`Rule` ``(first, second, ready, applies, run)``: the exact types of the two
modules, ``ready(a, b)`` (the modules' own state, e.g. both in training), ``applies(a, b, x)``
(the batch the pair gets: device, dtype, layout, sizes) and ``run(a, b, x, keys_a, keys_b)``, the
fused call. Rules read only public parameters: the modules' ``make_params`` (called in the
modules' order, keyed ones with the substreams the sequence gives them, ``substream(keys, i)``
for position ``i``: ``RandomErasing``'s boxes and value) and the modules' own calls. :data:`RULES` (built on first use: the transforms import this
module's users) holds the three rules that pay end to end:

- ``RandomCrop`` then ``RandomHorizontalFlip`` (the CIFAR recipe), both in training, where
  ``functional.crop_flip``'s gather serves (zero constant padding, a crop as wide as the image,
  contiguous uint8);
- ``RandomRotation`` (training) then ``Normalize`` (``functional.rotate_normalize``: no cast to
  uint8 and back between them; contiguous uint8);
- ``Normalize`` then ``RandomErasing`` (training): the boxes are erased in place in Normalize's
  fresh output (``erase_``), which nothing outside the sequence has seen, instead of in a copy
  of it (a fresh batch-sized float32 buffer, whose page faults cost more than the erasing).
  Not when autograd records the output.

A rule is a second implementation, so it stays only where it pays end to end: in
``benchmarks/bench_fusion.py``'s steady state or, where that bench's one ``Augment`` on one
batch hides the buffers a rule saves, in ``batchaug bench`` and a ``DeviceLoader`` feeding the
recipe (docs/performance.md, "Which path runs where", gives each rule's figures and commands).
RandomResizedCrop then RandomHorizontalFlip has no rule: it did not pay.

A :class:`Plan` is the sequence's pairs that fuse (by type and ``ready``), built once per
sequence and kept until a module of the sequence is replaced, added or removed or switches
between ``train()`` and ``eval()`` (checked per call by identity and flag, not rebuilt).
Everything else (TorchScript, ``torch.compile``, ``torch.export``, other devices) runs the
modules one by one.
"""
from __future__ import annotations

import weakref
from typing import Callable, List, NamedTuple, Optional

import torch
from torch import Tensor, nn

from . import _random
from ._validation import check_batch, check_fill_for
from .functional._fused import crop_flip, crop_flip_applies, rotate_normalize
from .functional._misc import erase_


class Rule(NamedTuple):
    """One fusion: modules of exactly types ``first`` then ``second``; ``ready(a, b)`` at plan
    time, ``applies(a, b, x)`` per batch, ``run(a, b, x, keys_a, keys_b)`` the fused call."""

    first: type
    second: type
    ready: Callable[[nn.Module, nn.Module], bool]
    applies: Callable[[nn.Module, nn.Module, Tensor], bool]
    run: Callable[[nn.Module, nn.Module, Tensor, Optional[Tensor], Optional[Tensor]], Tensor]


def _call(t: nn.Module, x: Tensor, keys: Optional[Tensor]) -> Tensor:
    # the sequence's convention for its i-th child, given substream(keys, i)
    if getattr(t, "takes_keys", False):
        return t(x, keys)
    return t(x)


def _make_params(t: nn.Module, x: Tensor, keys: Optional[Tensor]):
    if getattr(t, "takes_keys", False):
        return t.make_params(x, keys=keys)
    return t.make_params(x)


# -- the rules --------------------------------------------------------------------------------

def _both_training(a: nn.Module, b: nn.Module) -> bool:
    return a.training and b.training


def _crop_flip_applies(crop: nn.Module, flip: nn.Module, x: Tensor) -> bool:
    if x.dim() != 4:
        return False
    try:
        pad = crop.padding_for(x.shape[2], x.shape[3])
    except ValueError:
        return False  # the module raises it, with its own message
    return crop_flip_applies(x, crop.width, pad, crop.fill, crop.padding_mode)


def _crop_flip_run(crop: nn.Module, flip: nn.Module, x: Tensor, keys_a: Optional[Tensor],
                   keys_b: Optional[Tensor]) -> Tensor:
    check_batch(x, "RandomCrop")
    pad = crop.padding_for(x.shape[2], x.shape[3])
    top, left = _make_params(crop, x, keys_a)
    mask = _make_params(flip, x, keys_b)
    return crop_flip(x, top, left, mask, crop.height, crop.width, pad, crop.fill,
                     crop.padding_mode)


def _rotate_normalize_applies(rot: nn.Module, norm: nn.Module, x: Tensor) -> bool:
    # uint8 contiguous input (the output layout then matches the modules'), and a Normalize
    # whose arithmetic is the float32 affine (a float64 output takes another kernel)
    return (x.dim() == 4 and x.dtype == torch.uint8 and x.is_contiguous()
            and x.numel() > 0 and norm.out_dtype() != torch.float64
            and (norm.channels == 1 or norm.channels == x.shape[1]))


def _rotate_normalize_run(rot: nn.Module, norm: nn.Module, x: Tensor, keys_a: Optional[Tensor],
                          keys_b: Optional[Tensor]) -> Tensor:
    check_batch(x, "RandomRotation")
    check_fill_for(rot.fill, x, "RandomRotation")
    angle = _make_params(rot, x, keys_a)[0]  # RandomRotation: an affine of angle only
    scale, shift = norm.make_params(x)  # for uint8 x, float32 (out_dtype is not float64)
    return rotate_normalize(x, angle, rot.interpolation, rot.fill, rot.center, scale, shift,
                            norm.out_dtype())


def _rotation_ready(rot: nn.Module, norm: nn.Module) -> bool:
    return rot.training


def _owned(y: Tensor, x: Tensor) -> bool:
    # a fresh tensor (not x, not a view of x's memory) that autograd does not record
    return (y.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
            and not (y.requires_grad and torch.is_grad_enabled()))


def _erasing_ready(norm: nn.Module, er: nn.Module) -> bool:
    return er.training


def _always(a: nn.Module, b: nn.Module, x: Tensor) -> bool:
    return True  # decided in run, on Normalize's output


def _normalize_erase_run(norm: nn.Module, er: nn.Module, x: Tensor, keys_a: Optional[Tensor],
                         keys_b: Optional[Tensor]) -> Tensor:
    y = norm(x)
    if not (_owned(y, x) and y.dim() == 4):
        return _call(er, y, keys_b)
    check_batch(y, "RandomErasing")
    top, left, bh, bw, value = _make_params(er, y, keys_b)
    return erase_(y, top, left, bh, bw, value)


_RULES: List[Rule] = []


def rules() -> List[Rule]:
    """The fusion rules (built on first use: the transforms' modules import this one's
    users)."""
    if not _RULES:
        from .transforms._geometry import RandomCrop, RandomHorizontalFlip
        from .transforms._misc import Normalize, RandomErasing
        from .transforms._warps import RandomRotation

        _RULES.extend([
            Rule(RandomCrop, RandomHorizontalFlip, _both_training, _crop_flip_applies,
                 _crop_flip_run),
            Rule(RandomRotation, Normalize, _rotation_ready, _rotate_normalize_applies,
                 _rotate_normalize_run),
            Rule(Normalize, RandomErasing, _erasing_ready, _always, _normalize_erase_run),
        ])
    return _RULES


# -- plans --------------------------------------------------------------------------------------

def _rule_for(a: nn.Module, b: nn.Module) -> Optional[Rule]:
    # exact types: a subclass may override forward or make_params
    for r in rules():
        if type(a) is r.first and type(b) is r.second and r.ready(a, b):
            return r
    return None


class Plan:
    """The fused pairs of one sequence of modules: ``pairs[i]`` is the rule for modules
    ``i, i + 1`` (or None), for the modules and training flags it was built with."""

    def __init__(self, modules: List[nn.Module]) -> None:
        self.modules = modules
        self.modes = [m.training for m in modules]
        self.pairs: List[Optional[Rule]] = [
            _rule_for(modules[i], modules[i + 1]) for i in range(len(modules) - 1)]
        self.fuses = any(r is not None for r in self.pairs)

    def current(self, modules: List[nn.Module]) -> bool:
        """Whether ``modules`` are still the ones (and in the modes) this plan was built for."""
        if len(modules) != len(self.modules):
            return False
        for m, built, mode in zip(modules, self.modules, self.modes):
            if m is not built or m.training != mode:
                return False
        return True

    def run(self, x: Tensor, keys: Optional[Tensor] = None) -> Tensor:
        """The modules applied to ``x`` in order (module ``i`` with ``substream(keys, i)``),
        each pair whose rule applies to the batch it gets through the rule's fused call."""
        ts, pairs = self.modules, self.pairs
        i, n = 0, len(ts)
        while i < n:
            r = pairs[i] if i + 1 < n else None
            if r is not None and r.applies(ts[i], ts[i + 1], x):
                x = r.run(ts[i], ts[i + 1], x, _random.substream(keys, i),
                          _random.substream(keys, i + 1))
                i += 2
            else:
                x = _call(ts[i], x, _random.substream(keys, i))
                i += 1
        return x


# one plan per sequence (the Augment or the ModuleList), dropped with it; nothing on the module
# itself, so TorchScript, pickling and state dicts never see a plan
_PLANS: "weakref.WeakKeyDictionary[nn.Module, Plan]" = weakref.WeakKeyDictionary()


def build_plan(modules: List[nn.Module]) -> Plan:
    """A new :class:`Plan` for ``modules`` (tests count the calls)."""
    return Plan(modules)


def plan(sequence: nn.Module) -> Plan:
    """``sequence``'s plan (an ``nn.Sequential`` or ``nn.ModuleList``): the cached one while it
    is current, else a new one."""
    modules = list(sequence)
    p = _PLANS.get(sequence)
    if p is None or not p.current(modules):
        p = build_plan(modules)
        _PLANS[sequence] = p
    return p


def fusable(sequence: nn.Module, x: Tensor) -> bool:
    """Whether ``sequence`` has a pair that may fuse for a batch on ``x``'s device (eager CPU):
    then :func:`run` is the sequence's call."""
    if torch.compiler.is_compiling() or x.device.type != "cpu":
        return False
    return plan(sequence).fuses


def run(sequence: nn.Module, x: Tensor, keys: Optional[Tensor] = None) -> Tensor:
    """Apply ``sequence`` to ``x`` as its modules one by one would (module ``i`` given
    ``substream(keys, i)``), each fusable pair through its fused kernel."""
    return plan(sequence).run(x, keys)
