"""The pair table: every rule that runs two consecutive steps of a sequence as one call, with
the steps' own draws (their ``make_params`` in their order, keyed ones with ``substream(keys,
i)`` for step ``i``) and their result bit for bit.

A :class:`Rule` ``(first, second, ready, applies, run, sized, window)``: the steps' types,
``ready(a, b)`` (their own state), ``applies(a, b, x, targets)`` (the batch: device, dtype,
layout, targets) and ``run(a, b, x, targets, keys_a, keys_b) -> (x, targets)``. Asked by:

- a sequence's eager CPU ``forward`` (``Augment``, ``RandomApply``'s; :func:`run`, planned once
  per sequence, :class:`Plan`): the rules without ``sized``, for exactly their types (a
  subclass may override ``forward``), each kept only where it pays end to end
  (docs/performance.md, "Which path runs where"): ``RandomRotation`` then ``Normalize``
  (``functional.rotate_normalize``: no cast to uint8 and back), ``Normalize`` then
  ``RandomErasing`` (the boxes erased in Normalize's fresh output, not in a copy of it);
- ``Augment.with_targets`` / ``with_sizes`` on a ragged batch (targets with ``"sizes"``, not in
  TorchScript; :func:`sized_pair`, per call): the ``sized`` rules, subclasses included:
  ``Resize(int)`` then ``CenterCrop`` / ``RandomCrop`` (one resized window of each image: the
  resize alone would leave sizes known per image only), a ``RandomAffine`` in training then
  ``RandomResizedCrop`` on an eager CPU batch (only each crop box warped);
- the window decode (``batchaug.data.roi_crop.plan``; :func:`window_pair`): the ``window``
  rules, whose second step's window maps back through the first to a part of the photo.

TorchScript, ``torch.export`` and other devices run the modules one by one.
"""
from __future__ import annotations

import weakref
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple, Union

import torch
from torch import Tensor, nn

from . import _random
from ._validation import check_batch, check_fill_for
from .functional import _sized as S
from .functional._fused import rotate_normalize
from .functional._misc import erase_
from .functional._targets import (check_mask_fill_for, image_as_masks, masks_as_image,
                                   resized_crop_matrix_each)

Targets = Optional[Dict[str, Tensor]]


class Rule(NamedTuple):
    """Two steps run as one (the fields: see the module's docstring)."""

    first: type
    second: Union[type, Tuple[type, ...]]
    ready: Callable[[nn.Module, nn.Module], bool]
    applies: Callable[[nn.Module, nn.Module, Tensor, Targets], bool]
    run: Callable[[nn.Module, nn.Module, Tensor, Targets, Optional[Tensor], Optional[Tensor]],
                  Tuple[Tensor, Targets]]
    sized: bool = False
    window: bool = False

    def matches(self, a: nn.Module, b: nn.Module) -> bool:
        """Whether ``a`` then ``b`` are this rule's steps, ready."""
        if self.sized:
            kinds = isinstance(a, self.first) and isinstance(b, self.second)
        else:
            kinds = type(a) is self.first and type(b) is self.second
        return kinds and self.ready(a, b)


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

def _always(a: nn.Module, b: nn.Module, x: Tensor, targets: Targets) -> bool:
    return True


def _rotate_normalize_applies(rot: nn.Module, norm: nn.Module, x: Tensor,
                              targets: Targets) -> bool:
    # uint8 contiguous input (the output layout then matches the modules'), and a Normalize
    # whose arithmetic is the float32 affine (a float64 output takes another kernel)
    return (x.dim() == 4 and x.dtype == torch.uint8 and x.is_contiguous()
            and x.numel() > 0 and norm.out_dtype() != torch.float64
            and (norm.channels == 1 or norm.channels == x.shape[1]))


def _rotate_normalize_run(rot: nn.Module, norm: nn.Module, x: Tensor, targets: Targets,
                          keys_a: Optional[Tensor], keys_b: Optional[Tensor]
                          ) -> Tuple[Tensor, Targets]:
    check_batch(x, "RandomRotation")
    check_fill_for(rot.fill, x, "RandomRotation")
    angle = _make_params(rot, x, keys_a)[0]  # RandomRotation: an affine of angle only
    scale, shift = norm.make_params(x)  # for uint8 x, float32 (out_dtype is not float64)
    return rotate_normalize(x, angle, rot.interpolation, rot.fill, rot.center, scale, shift,
                            norm.out_dtype()), targets


def _owned(y: Tensor, x: Tensor) -> bool:
    # a fresh tensor (not x, not a view of x's memory) that autograd does not record
    return (y.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
            and not (y.requires_grad and torch.is_grad_enabled()))


def _normalize_erase_run(norm: nn.Module, er: nn.Module, x: Tensor, targets: Targets,
                         keys_a: Optional[Tensor], keys_b: Optional[Tensor]
                         ) -> Tuple[Tensor, Targets]:
    y = norm(x)  # whether the erasing may write in place is decided on Normalize's output
    if not (_owned(y, x) and y.dim() == 4):
        return _call(er, y, keys_b), targets
    check_batch(y, "RandomErasing")
    top, left, bh, bw, value = _make_params(er, y, keys_b)
    return erase_(y, top, left, bh, bw, value), targets


def _resize_crop_run(resize: nn.Module, crop: nn.Module, images: Tensor, targets: Targets,
                     keys: Optional[Tensor], next_keys: Optional[Tensor]
                     ) -> Tuple[Tensor, Targets]:
    """``Resize(int)`` then the crop as one resized window per image: the crop draws its
    window from each resized size (``make_params``), the kernel resizes and crops in one go
    (:func:`functional._sized.resized_window`), masks the same way with nearest and the crop's
    ``mask_fill``, boxes and keypoints by the window scaled back onto each image. A dense
    batch at the crop's size."""
    assert targets is not None
    sizes = targets["sizes"]
    S.check_sizes(sizes, images, resize._name)
    resized = S.resized_sizes(sizes, resize.size[0] if len(resize.size) == 1 else None,
                              resize.max_size)
    if S.eager_cpu(resized) and resized.numel() > 0 and bool((resized < 1).any()):
        # (checked where it is free, as check_sizes checks the values)
        i = int((resized < 1).any(1).nonzero()[0, 0])
        resize.output_size(int(sizes[i, 0]), int(sizes[i, 1]))  # the dense path's error
    top, left = crop.make_params(images, next_keys, resized)
    height, width = crop.height, crop.width
    mode, fill = crop.padding_mode, crop.fill  # CenterCrop's: zeros, as torchvision
    out = S.resized_window(images, sizes, resized, top, left, height, width,
                           resize.interpolation, resize.antialias, fill, mode)
    masks: Optional[Tensor] = None
    if "masks" in targets:
        m = targets["masks"]
        check_mask_fill_for(crop.mask_fill, m, crop._name)
        masks = image_as_masks(S.resized_window(
            masks_as_image(m, crop.mask_fill), sizes, resized, top, left, height, width,
            "nearest", False, [float(crop.mask_fill)], mode), m, crop.mask_fill)
    if masks is None and "boxes" not in targets and "keypoints" not in targets:
        return out, S.without_sizes(targets)
    # the window of the resized image is a box of the image itself, resized to the output
    sy = sizes[:, 0].to(torch.float64) / resized[:, 0].to(torch.float64)
    sx = sizes[:, 1].to(torch.float64) / resized[:, 1].to(torch.float64)
    # centred on each image's own extent, as for the image alone: on the batch's canvas the
    # rounding of the float64 map differs from the image's alone (own_frame)
    out_sizes = crop.sizes_after(out, sizes)
    matrix = resized_crop_matrix_each(top.to(torch.float64) * sy, left.to(torch.float64) * sx,
                                      height * sy, width * sx, sizes, out_sizes)
    moved = S.move_targets_sized(targets, matrix, sizes, out_sizes, [images.shape[2],
                                 images.shape[3]], [height, width], masks, None, True, True)
    return out, S.without_sizes(moved)


def _warp_crop_applies(warp: nn.Module, rrc: nn.Module, images: Tensor,
                       targets: Targets) -> bool:
    # images with masks or none (labels pass through); benchmarks/bench_photos.py section b
    # measures it against the two steps
    if not (warp.training and targets is not None and S.eager_cpu(images)):
        return False
    return all(k == "sizes" or k == "labels" or k == "masks" for k in targets.keys())


def _warp_crop_run(warp: nn.Module, rrc: nn.Module, images: Tensor, targets: Targets,
                   keys: Optional[Tensor], next_keys: Optional[Tensor]
                   ) -> Tuple[Tensor, Targets]:
    """The warp's and the crop's own sized draws, in their order, then one kernel per image
    that warps only the crop box (:func:`functional._sized.affine_resized_crop`)."""
    assert targets is not None
    sizes = targets["sizes"]
    S.check_sizes(sizes, images, warp._name)
    angle, translate, scale, shear = warp.make_params(images, keys, sizes)
    rotation = warp.rotation
    top, left, height, width = rrc.make_params(images, next_keys, sizes)
    check_fill_for(warp.fill, images, warp._name)
    out = S.affine_resized_crop(images, sizes, angle, translate, scale, shear, rotation,
                                warp.center, warp.interpolation, warp.fill, top, left, height,
                                width, rrc.size, rrc.interpolation, rrc.antialias)
    moved = S.without_sizes(targets)
    if "masks" in targets:  # nearest, each step's mask_fill: as the two steps move them
        m = targets["masks"]
        check_mask_fill_for(warp.mask_fill, m, warp._name)
        check_mask_fill_for(rrc.mask_fill, m, rrc._name)
        moved["masks"] = image_as_masks(S.affine_resized_crop(
            masks_as_image(m, warp.mask_fill), sizes, angle, translate, scale, shear, rotation,
            warp.center, "nearest", [float(warp.mask_fill)], top, left, height, width,
            rrc.size, "nearest", False), m, warp.mask_fill)
    return out, moved


_RULES: List[Rule] = []


def rules() -> List[Rule]:
    """The pair table (built on first use: the transforms' modules import this one's
    users)."""
    if not _RULES:
        from .transforms._geometry import CenterCrop, RandomCrop, RandomResizedCrop, Resize
        from .transforms._misc import Normalize, RandomErasing
        from .transforms._warps import RandomAffine, RandomRotation

        _RULES.extend([
            Rule(RandomRotation, Normalize, lambda a, b: a.training, _rotate_normalize_applies,
                 _rotate_normalize_run),
            Rule(Normalize, RandomErasing, lambda a, b: b.training, _always,
                 _normalize_erase_run),
            Rule(Resize, (CenterCrop, RandomCrop), lambda a, b: len(a.size) != 2, _always,
                 _resize_crop_run, sized=True),
            # (a warp in eval() is the identity: applies says no, the window decode skips it)
            Rule(RandomAffine, RandomResizedCrop, lambda a, b: True, _warp_crop_applies,
                 _warp_crop_run, sized=True, window=True),
        ])
    return _RULES


def sized_pair(a: nn.Module, b: nn.Module, x: Tensor, targets: Dict[str, Tensor]
               ) -> Optional[Rule]:
    """The rule that runs steps ``a`` then ``b`` as one on the ragged batch ``x`` (``targets``
    with ``"sizes"``), or None: they run one after the other."""
    for r in rules():
        if r.sized and r.matches(a, b) and r.applies(a, b, x, targets):
            return r
    return None


def window_pair(a: nn.Module, b: nn.Module) -> Optional[Rule]:
    """The rule through which the window decode decodes ``b``'s window under ``a``, or
    None."""
    for r in rules():
        if r.window and r.matches(a, b):
            return r
    return None


# -- plans --------------------------------------------------------------------------------------

def _rule_for(a: nn.Module, b: nn.Module) -> Optional[Rule]:
    for r in rules():
        if not r.sized and r.matches(a, b):
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
            if r is not None and r.applies(ts[i], ts[i + 1], x, None):
                x = r.run(ts[i], ts[i + 1], x, None, _random.substream(keys, i),
                          _random.substream(keys, i + 1))[0]
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
