"""The loader's crop: the module ``DeviceLoader(crop=...)`` runs on every batch, checked once.

The crop is an ordinary :class:`batchaug.Augment` of geometric transforms ending in one that
fixes the output size. The loader runs it on each ragged (padded) batch with the images'
sizes, ``crop.with_sizes(images, sizes, keys)`` or ``crop.with_targets(images, {..., "sizes":
sizes}, keys)`` (the transform protocol: each step draws from and acts on each image's own
extent, masks, boxes and keypoints moving with it); kernel choices (per image on an eager CPU
batch, batched elsewhere; ``Resize(int)`` then a crop as one resized window; a warp then
``RandomResizedCrop`` warping only the box) live in the transforms. Here only the check of
what may be a crop, and its output size; no draws.
"""
from typing import List, Optional, Sequence, Tuple, Union

from torch import nn

from .. import _equivalents
from ..compose import Augment
from ..functional import _kernels as F
from ..transforms import _geometry as G
from ..transforms._base import GeometricTransform
from ..transforms import _warps as W
from ..transforms._timm import TimmRandomResizedCrop

_WARPS = (G.RandomHorizontalFlip, G.RandomVerticalFlip, W.RandomRotation, W.RandomAffine,
          W.RandomPerspective)
# after the size-fixing step the batch has one size: any geometric module runs on it as it is
_POST = _WARPS + (G.RandomResizedCrop, G.RandomCrop, G.CenterCrop, G.Resize, G.Pad)
_SIZE_FIXING = "RandomResizedCrop (or TimmRandomResizedCrop), RandomCrop(pad_if_needed=True), " \
               "CenterCrop, Resize((h, w)) or Resize(int) followed by CenterCrop or RandomCrop"
_MOVE = ("it does not move pixels, so it gives the same result after the crop: move it into "
         "the model's Augment (it runs there on the fixed-size batch)")


def _flatten(crop: nn.Module, parent: nn.Module) -> List[Tuple[nn.Module, nn.Module]]:
    """The steps in order, each with the container that runs it."""
    if isinstance(crop, nn.Sequential):  # Augment is one
        out: List[Tuple[nn.Module, nn.Module]] = []
        for m in crop:
            out.extend(_flatten(m, crop))
        return out
    return [(crop, parent)]


def _is_fixing(m: nn.Module) -> bool:
    """A step that makes a ragged batch dense: batchaug's size-fixing crops and
    ``Resize((h, w))``, or any geometric transform with a sized path whose ``fixes_size()``
    says so (e.g. your own)."""
    if isinstance(m, (G.RandomResizedCrop, TimmRandomResizedCrop, G.RandomCrop, G.CenterCrop)):
        return True
    if isinstance(m, G.Resize):
        return len(m.size) == 2
    return (isinstance(m, GeometricTransform) and bool(getattr(type(m), "takes_sizes", False))
            and m.fixes_size())


def _is_size(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def _fixed_size(m: nn.Module, where: str) -> Tuple[int, int]:
    """The output size of the size-fixing step ``m``: the loader sizes its batches (and
    checks the steps after it) before any draw, so it must be known from ``m`` itself."""
    if isinstance(m, TimmRandomResizedCrop):
        return m.first.size[0], m.first.size[1]
    if isinstance(m, (G.RandomResizedCrop, G.Resize)):
        return m.size[0], m.size[1]
    if isinstance(m, (G.RandomCrop, G.CenterCrop)):
        return m.height, m.width
    size = getattr(m, "size", None)  # a user's step: RandomResizedCrop's or Resize's words
    if isinstance(size, (list, tuple)) and len(size) == 2 and all(_is_size(v) for v in size):
        return int(size[0]), int(size[1])
    h, w = getattr(m, "height", None), getattr(m, "width", None)
    if _is_size(h) and _is_size(w):
        return int(h), int(w)  # type: ignore[arg-type]
    raise ValueError(f"{where} fixes the output size (fixes_size() is True), but the "
                     f"loader cannot tell which size before drawing: give it an attribute "
                     f"size = (height, width) of two positive ints, or height and width")


def _is_warp(m: nn.Module) -> bool:
    """A step that may come before the size-fixing one: batchaug's flips and warps, or any
    geometric transform that runs on a ragged batch (``takes_sizes``, e.g. your own) and
    keeps each image's size."""
    if isinstance(m, _WARPS):
        return True
    return (isinstance(m, GeometricTransform) and bool(getattr(type(m), "takes_sizes", False))
            and not isinstance(m, (G.Resize, G.RandomResizedCrop, G.RandomCrop, G.CenterCrop))
            and not m.fixes_size())


def _refuse(m: object, where: str) -> None:
    name = type(m).__name__
    if not isinstance(m, nn.Module):
        raise TypeError(f"crop: {where} is {name}, not a transform module (nn.Module)")
    module = type(m).__module__
    if not module.startswith("batchaug") and isinstance(m, GeometricTransform):
        raise ValueError(f"crop: {where} is {name}, which does not run on images of different "
                         f"sizes: give it takes_sizes = True with make_params_sized, "
                         f"apply_sized and target_matrix_sized (see GeometricTransform), or "
                         f"move it into the model's Augment")
    if not module.startswith("batchaug"):
        twin = _equivalents.equivalent(name)
        instead = (f"use {twin} with the same arguments" if twin is not None
                   else _equivalents.hint(name))
        raise ValueError(f"crop: {where} is {module}.{name}; the crop stage takes batchaug's "
                         f"geometric transforms: {instead}")
    if module.endswith(("_color", "_misc", "_auto_augment", "_augment")):
        raise ValueError(f"crop: {where} is {name}: {_MOVE}")
    if module.endswith("_container"):
        raise ValueError(f"crop: {where} is {name}: the crop stage runs a fixed sequence; put "
                         f"random choices of geometric transforms in the model's Augment, after "
                         f"the crop")
    raise ValueError(f"crop: {where} is {name}, which the crop stage cannot run on images of "
                     f"different sizes (flips, RandomRotation, RandomAffine, RandomPerspective, "
                     f"then {_SIZE_FIXING})")


def _size_after(m: nn.Module, h: int, w: int, where: str) -> Tuple[int, int]:
    """The output size of a step after the size-fixing one, on an ``h x w`` batch (its
    constructor-time check: a RandomCrop that would not fit is refused here, not per batch)."""
    if isinstance(m, G.RandomResizedCrop):
        return m.size[0], m.size[1]
    if isinstance(m, G.CenterCrop):
        return m.height, m.width
    if isinstance(m, G.RandomCrop):
        m.padding_for(h, w)  # raises if the crop cannot fit
        return m.height, m.width
    if isinstance(m, G.Resize):
        out = F.resized_output_size(h, w, m.size, m.max_size)
        return out[0], out[1]
    if isinstance(m, G.Pad):
        return h + m.padding[1] + m.padding[3], w + m.padding[0] + m.padding[2]
    if _is_fixing(m):  # a user's size-fixing step (batchaug's are all handled above)
        return _fixed_size(m, where)
    return h, w


def check_crop(crop: Union[nn.Module, Sequence[nn.Module]]) -> Tuple[Augment, Tuple[int, int]]:
    """Check ``crop`` for the loader and return it as an ``Augment`` (an ``Augment`` as it
    is; a single transform or a list wrapped in one), with its output size ``(h, w)``.

    ``crop`` is a batchaug geometric transform or an ``Augment`` (or list) of them that
    reaches a fixed size: any of ``RandomHorizontalFlip``, ``RandomVerticalFlip``,
    ``RandomRotation``, ``RandomAffine``, ``RandomPerspective`` (or your own
    ``GeometricTransform`` with ``takes_sizes = True``), then one of ``RandomResizedCrop``,
    ``TimmRandomResizedCrop`` (interpolation drawn per sample),
    ``RandomCrop(pad_if_needed=True)``, ``CenterCrop``, ``Resize((h, w))``, ``Resize(int)``
    + ``CenterCrop``/``RandomCrop``, or your own ``GeometricTransform`` with ``takes_sizes =
    True`` whose ``fixes_size()`` is True and whose output size is an attribute (``size =
    (h, w)``, or ``height`` and ``width``); any geometric transform may follow (it runs on the
    fixed-size batch as it is). Colour, erasing, normalisation and policies are refused
    (``ValueError`` saying to move them into the model's ``Augment``), as is a crop that never
    fixes the size.

    Example:
        >>> from batchaug import Augment, RandomResizedCrop, RandomRotation
        >>> crop, size = check_crop(Augment(RandomRotation(30), RandomResizedCrop(224)))
        >>> size
        (224, 224)
    """
    if isinstance(crop, (list, tuple)):
        for m in crop:
            if not isinstance(m, nn.Module):
                raise TypeError(f"crop: every step must be a transform module, got "
                                f"{type(m).__name__}")
        module: nn.Module = nn.Sequential(*crop)
    elif isinstance(crop, nn.Module):
        module = crop
    else:
        raise TypeError(f"crop must be a batchaug geometric transform or an Augment of them, "
                        f"got {type(crop).__name__}")
    flat = _flatten(module, module)
    steps = [m for m, _ in flat]
    resize: Optional[nn.Module] = None
    final: Optional[nn.Module] = None
    final_at = ""
    for i, m in enumerate(steps):
        where = f"step {i} ({type(m).__name__})"
        if final is None and _is_fixing(m):
            if isinstance(m, G.RandomCrop) and not m.pad_if_needed:
                raise ValueError(f"crop: {where}: RandomCrop needs pad_if_needed=True here, as "
                                 f"an image may be smaller than the crop")
            if resize is not None and not isinstance(m, (G.CenterCrop, G.RandomCrop)):
                raise ValueError(f"crop: {where} follows Resize(int); only CenterCrop or "
                                 f"RandomCrop may follow it")
            if resize is not None and flat[i][1] is not flat[i - 1][1]:
                raise ValueError(f"crop: {where} and the Resize(int) before it must be in the "
                                 f"same Augment (they run as one resized window)")
            final, final_at = m, where
        elif final is None and isinstance(m, G.Resize) and len(m.size) < 2 and resize is None:
            resize = m
        elif final is not None and (isinstance(m, _POST) or _is_fixing(m)):
            pass
        elif _is_warp(m) and resize is None:
            pass
        else:
            if isinstance(m, G.Resize):
                raise ValueError(f"crop: {where}: Resize(int) or Resize(max_size=...) keeps "
                                 f"the aspect ratio, so it must be followed directly by "
                                 f"CenterCrop or RandomCrop")
            if _is_warp(m):
                raise ValueError(f"crop: {where} follows Resize(int); put warps before the "
                                 f"Resize")
            _refuse(m, where)
    if final is None:
        raise ValueError(f"crop must end in a transform that fixes the output size "
                         f"({_SIZE_FIXING}); got {[type(m).__name__ for m in steps]}")
    try:
        oh, ow = _fixed_size(final, final_at)
        for k, m in enumerate(steps[steps.index(final) + 1:], steps.index(final) + 1):
            oh, ow = _size_after(m, oh, ow, f"step {k} ({type(m).__name__})")
    except ValueError as exc:  # an unknown output size, or a step that does not fit its input
        raise ValueError(f"crop: {exc}") from None
    if not isinstance(module, Augment):
        module = Augment(list(module) if isinstance(module, nn.Sequential) else [module])
    return module, (int(oh), int(ow))


__all__ = ["check_crop"]
