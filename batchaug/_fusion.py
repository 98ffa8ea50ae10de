"""``Augment``'s CPU fast path: consecutive transforms run as one fused kernel where that gives
exactly what the modules give one after the other (same random draws, same bytes).

Four runs fuse on a CPU batch:
- ``RandomCrop`` then ``RandomHorizontalFlip`` (the CIFAR recipe), both in training, where
  ``functional.crop_flip``'s gather serves (zero constant padding, a crop as wide as the image,
  contiguous uint8);
- ``RandomResizedCrop`` then ``RandomHorizontalFlip`` (the ImageNet recipes), both in training,
  where the crop is resized box by box (antialiased bilinear or bicubic): each box is flipped
  as it is written (``resized_crop_flip``);
- ``RandomRotation`` (training) then ``Normalize`` (``functional.rotate_normalize``: no cast to
  uint8 and back between them; contiguous uint8);
- ``Normalize`` then ``RandomErasing`` (training): the boxes are erased in place in Normalize's
  fresh output (``erase_``), which nothing outside ``Augment`` has seen, instead of in a copy of
  it (a fresh batch-sized float32 buffer: ~50-100 ms of page faults and copying at
  256x3x224x224 on one thread). Not when autograd records the output.
The draws are the modules' own ``make_params`` in the modules' order, keyed ones from the same
substreams ``Augment`` gives them (``substream(keys, i)`` for the module at position ``i``), so
the output equals the unfused one bit for bit, keyed or not. Everything else (TorchScript,
``torch.compile``, ``torch.export``, other devices and dtypes, eval, gradients) runs the modules.
"""
from __future__ import annotations

from typing import List, Optional

import torch
from torch import Tensor, nn

from . import _random
from ._validation import check_batch, check_fill_for
from .functional._fused import crop_flip, crop_flip_applies, resized_crop_flip, rotate_normalize
from .functional._resize import resized_crop_per_sample_applies
from .functional._misc import erase_


def fusable(transforms: nn.Module, x: Tensor) -> bool:
    """Whether ``transforms`` (an ``Augment``) holds a run this module can fuse for a batch on
    ``x``'s device: a cheap look at types and modes before :func:`run`, which checks the rest."""
    if torch.compiler.is_compiling() or x.device.type != "cpu":
        return False
    ts = list(transforms)
    for i in range(len(ts) - 1):
        if (_is_crop_flip(ts[i], ts[i + 1]) or _is_rotate_normalize(ts[i], ts[i + 1])
                or _is_normalize_erase(ts[i], ts[i + 1]) or _is_rrc_flip(ts[i], ts[i + 1])):
            return True
    return False


def _is_rrc_flip(a: nn.Module, b: nn.Module) -> bool:
    from .transforms._geometry import RandomHorizontalFlip, RandomResizedCrop

    return (type(a) is RandomResizedCrop and type(b) is RandomHorizontalFlip
            and a.training and b.training)


def _is_normalize_erase(a: nn.Module, b: nn.Module) -> bool:
    from .transforms._misc import Normalize, RandomErasing

    return type(a) is Normalize and type(b) is RandomErasing and b.training


def _owned(y: Tensor, x: Tensor) -> bool:
    # a fresh tensor (not x, not a view of x's memory) that autograd does not record
    return (y.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
            and not (y.requires_grad and torch.is_grad_enabled()))


def _is_rotate_normalize(a: nn.Module, b: nn.Module) -> bool:
    from .transforms._geometry import RandomRotation
    from .transforms._misc import Normalize

    return type(a) is RandomRotation and type(b) is Normalize and a.training


def _rotate_normalize_serves(norm: nn.Module, x: Tensor) -> bool:
    # uint8 contiguous input (the output layout then matches the modules'), and a Normalize
    # whose arithmetic is the float32 affine (a float64 output takes another kernel)
    return (x.dim() == 4 and x.dtype == torch.uint8 and x.is_contiguous()
            and x.numel() > 0 and norm.out_dtype() != torch.float64
            and (norm.channels == 1 or norm.channels == x.shape[1]))


def _is_crop_flip(a: nn.Module, b: nn.Module) -> bool:
    # imported here: transforms imports compose (for its containers), which imports this module
    from .transforms._geometry import RandomCrop, RandomHorizontalFlip

    # exact types: a subclass may override forward or make_params
    return (type(a) is RandomCrop and type(b) is RandomHorizontalFlip
            and a.training and b.training)


def _crop_flip_serves(crop: nn.Module, x: Tensor) -> bool:
    if x.dim() != 4:
        return False
    try:
        pad = crop.padding_for(x.shape[2], x.shape[3])
    except ValueError:
        return False  # the module raises it, with its own message
    return crop_flip_applies(x, crop.width, pad, crop.fill, crop.padding_mode)


def _call(t: nn.Module, x: Tensor, keys: Optional[Tensor]) -> Tensor:
    # Augment's convention for its i-th child, given substream(keys, i)
    if getattr(t, "takes_keys", False):
        return t(x, keys)
    return t(x)


def _make_params(t: nn.Module, x: Tensor, keys: Optional[Tensor]):
    if getattr(t, "takes_keys", False):
        return t.make_params(x, keys=keys)
    return t.make_params(x)


def run(transforms: nn.Module, x: Tensor, keys: Optional[Tensor] = None) -> Tensor:
    """Apply ``transforms`` (an ``Augment``) to ``x`` as its forward does, each fusable run
    (see the module doc) through its fused kernel. ``keys``: as ``Augment.forward``."""
    ts: List[nn.Module] = list(transforms)
    i = 0
    while i < len(ts):
        if (i + 1 < len(ts) and _is_crop_flip(ts[i], ts[i + 1])
                and _crop_flip_serves(ts[i], x)):
            crop, flip = ts[i], ts[i + 1]
            check_batch(x, "RandomCrop")
            pad = crop.padding_for(x.shape[2], x.shape[3])
            top, left = _make_params(crop, x, _random.substream(keys, i))
            mask = _make_params(flip, x, _random.substream(keys, i + 1))
            x = crop_flip(x, top, left, mask, crop.height, crop.width, pad, crop.fill,
                          crop.padding_mode)
            i += 2
            continue
        if (i + 1 < len(ts) and _is_rotate_normalize(ts[i], ts[i + 1])
                and _rotate_normalize_serves(ts[i + 1], x)):
            rot, norm = ts[i], ts[i + 1]
            check_batch(x, "RandomRotation")
            check_fill_for(rot.fill, x, "RandomRotation")
            angle = _make_params(rot, x, _random.substream(keys, i))
            x = rotate_normalize(x, angle, rot.interpolation, rot.fill, rot.center,
                                 norm._factor_u8, norm._shift32, norm.out_dtype())
            i += 2
            continue
        if (i + 1 < len(ts) and _is_rrc_flip(ts[i], ts[i + 1]) and x.dim() == 4
                and resized_crop_per_sample_applies(x, ts[i].interpolation, ts[i].antialias)):
            rrc, flip = ts[i], ts[i + 1]
            check_batch(x, "RandomResizedCrop")
            top, left, h, w = _make_params(rrc, x, _random.substream(keys, i))
            mask = _make_params(flip, x, _random.substream(keys, i + 1))
            x = resized_crop_flip(x, top, left, h, w, mask, rrc.size, rrc.interpolation,
                                  rrc.antialias)
            i += 2
            continue
        if i + 1 < len(ts) and _is_normalize_erase(ts[i], ts[i + 1]):
            y = ts[i](x)
            if _owned(y, x) and y.dim() == 4:
                er = ts[i + 1]
                check_batch(y, "RandomErasing")
                top, left, bh, bw, value = er._boxes_and_value(y, _random.substream(keys, i + 1))
                x = erase_(y, top, left, bh, bw, value)
            else:
                x = _call(ts[i + 1], y, _random.substream(keys, i + 1))
            i += 2
            continue
        x = _call(ts[i], x, _random.substream(keys, i))
        i += 1
    return x
