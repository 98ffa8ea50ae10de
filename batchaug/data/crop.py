"""The loader's crop: the module ``DeviceLoader(crop=...)`` runs on every batch, checked once.

The crop is an ordinary :class:`batchaug.Augment` of geometric transforms ending in one that
fixes the output size. The loader runs it on each ragged (padded) batch with the images'
sizes, ``crop.with_sizes(images, sizes, keys)`` or ``crop.with_targets(images, {..., "sizes":
sizes}, keys)`` (the transform protocol: each step draws from and acts on each image's own
extent, masks, boxes and keypoints moving with it); kernel choices (per image on an eager CPU
batch, batched elsewhere) live in the transforms, pairs of steps run as one (``Resize(int)``
then a crop as one resized window; a warp then ``RandomResizedCrop`` warping only the box) in
the pair table, ``batchaug._fusion``. Here only the check of what may be a crop, and its
output size; no draws.
"""
from typing import List, Optional, Sequence, Tuple, Union

from torch import nn

from .. import _equivalents
from ..compose import Augment
from ..transforms import _geometry as G
from ..transforms._base import GeometricTransform

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


def _sized(m: nn.Module) -> bool:
    """A geometric transform with a path for a ragged batch (``takes_sizes``): batchaug's
    flips, warps, crops, ``Pad`` and ``Resize``, or your own."""
    return isinstance(m, GeometricTransform) and bool(getattr(type(m), "takes_sizes", False))


def _is_fixing(m: nn.Module) -> bool:
    """A step that makes a ragged batch dense (its ``fixes_size()``)."""
    return _sized(m) and m.fixes_size()


def _keeps_aspect(m: nn.Module) -> bool:
    """``Resize(int)`` (or ``max_size``): ragged again alone, so only directly before a crop
    (the pair is one resized window: ``batchaug._fusion``'s pair table)."""
    return isinstance(m, G.Resize) and not m.fixes_size()


def _is_warp(m: nn.Module) -> bool:
    """A step that may come before the size-fixing one: one with a ragged path that does not
    fix the size (flips, warps, ``Pad``, your own)."""
    return _sized(m) and not m.fixes_size() and not _keeps_aspect(m)


def crop_role(m: nn.Module) -> str:
    """Where ``m`` may stand in a loader's crop: ``"fixing"`` (it makes a ragged batch dense:
    the crop ends its ragged part there), ``"warp"`` (before that step: flips, warps, ``Pad``,
    a user's sized step), ``"keeps_aspect"`` (``Resize(int)``: directly before ``CenterCrop``
    or ``RandomCrop`` only) or ``""`` (not in the ragged part). The one rule, for
    :func:`check_crop` and ``migrate.from_torchvision``'s choice of a crop stage.

    Example:
        >>> from batchaug import RandomRotation, RandomResizedCrop, ColorJitter
        >>> [crop_role(m) for m in (RandomRotation(9), RandomResizedCrop(8), ColorJitter(0.1))]
        ['warp', 'fixing', '']
    """
    if _is_fixing(m):
        return "fixing"
    if _keeps_aspect(m):
        return "keeps_aspect"
    return "warp" if _is_warp(m) else ""


def _refuse(m: object, where: str) -> None:
    name = type(m).__name__
    if not isinstance(m, nn.Module):
        raise TypeError(f"crop: {where} is {name}, not a transform module (nn.Module)")
    module = type(m).__module__
    if not module.startswith("batchaug") and isinstance(m, GeometricTransform):
        raise ValueError(f"crop: {where} is {name}, which does not run on images of different "
                         f"sizes: give it takes_sizes = True with make_params(x, keys, sizes), "
                         f"apply_image(x, params, sizes), apply_masks(m, params, sizes) and "
                         f"target_matrix(params, in_size, out_size, sizes) (see "
                         f"GeometricTransform), or "
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
                     f"Pad, then {_SIZE_FIXING})")


def check_crop(crop: Union[nn.Module, Sequence[nn.Module]]) -> Tuple[Augment, Tuple[int, int]]:
    """Check ``crop`` for the loader and return it as an ``Augment`` (an ``Augment`` as it
    is; a single transform or a list wrapped in one), with its output size ``(h, w)``.

    ``crop`` is a batchaug geometric transform or an ``Augment`` (or list) of them that
    reaches a fixed size: any of ``RandomHorizontalFlip``, ``RandomVerticalFlip``,
    ``RandomRotation``, ``RandomAffine``, ``RandomPerspective``, ``Pad`` (or your own
    ``GeometricTransform`` with ``takes_sizes = True``), then one of ``RandomResizedCrop``,
    ``TimmRandomResizedCrop`` (interpolation drawn per sample),
    ``RandomCrop(pad_if_needed=True)``, ``CenterCrop``, ``Resize((h, w))``, ``Resize(int)``
    + ``CenterCrop``/``RandomCrop``, or your own ``GeometricTransform`` with ``takes_sizes =
    True`` whose ``fixes_size()`` is True (its size: ``output_size``, see
    ``GeometricTransform.output_size``); any geometric transform with ``takes_sizes`` may
    follow (it runs on the fixed-size batch as it is). The steps are told apart by these
    methods, not by their classes (``Resize(int)`` aside, which only a crop may follow). Colour, erasing, normalisation and policies are refused
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
    final_at = 0
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
            final, final_at = m, i
        elif final is None and _keeps_aspect(m) and resize is None:
            resize = m
        elif final is not None and _sized(m):
            pass  # the batch is dense from here: any geometric step runs on it as it is
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
    # the size-fixing step's size is its own (asked with no image known); each later step's
    # follows from its input (a RandomCrop that cannot fit is refused here, not per batch)
    k = final_at
    try:
        oh, ow = final.output_size(0, 0)
        for k in range(k + 1, len(steps)):
            oh, ow = steps[k].output_size(oh, ow)
    except ValueError as exc:  # an unknown output size, or a step that does not fit its input
        raise ValueError(f"crop: step {k}: {exc}") from None
    if not isinstance(module, Augment):
        module = Augment(list(module) if isinstance(module, nn.Sequential) else [module])
    return module, (int(oh), int(ow))


__all__ = ["check_crop", "crop_role"]
