"""What batchaug offers for another library's transform, derived from what batchaug exports.

``Augment``'s refusals and ``from_torchvision``'s hints both ask here, so a transform added to
``batchaug.transforms.__all__`` is offered by both at once, and leaves :data:`NOT_YET` by
itself. :data:`NOT_YET` is the one list of other libraries' transforms batchaug has no
equivalent for, with what to do instead.

A leaf: ``batchaug.transforms`` hands itself over (:func:`set_exports`) when it is imported,
instead of being imported from here, because its containers check their children with
:mod:`batchaug._validation`, which asks here (imports run one way).
"""
from __future__ import annotations

import inspect
from types import ModuleType
from typing import Dict, FrozenSet, List, Optional

_EXPORTS: List[ModuleType] = []


def set_exports(module: ModuleType) -> None:
    """Name ``module`` (``batchaug.transforms``) as the one whose ``__all__`` batchaug
    exports; read on every question, so a change to its ``__all__`` shows at once."""
    _EXPORTS[:] = [module]


def _transforms() -> ModuleType:
    if not _EXPORTS:  # batchaug/__init__ imports batchaug.transforms: not reached in use
        raise RuntimeError("batchaug.transforms has not been imported")
    return _EXPORTS[0]

#: Other libraries' names for a batchaug transform of another name (kornia's mixers).
ALIASES: Dict[str, str] = {
    "RandomMixUpV2": "MixUp",
    "RandomCutMixV2": "CutMix",
}

_NONE_YET = "batchaug has no equivalent yet"
_NO_BATCH_SHAPE = "returns several images per input; not one batch shape"
#: Transforms with no batchaug equivalent yet: the name, and what to do instead. A name that
#: batchaug exports is dropped by :func:`not_yet`, so the list never offers a missing one.
NOT_YET: Dict[str, str] = {
    "Lambda": "write it as an nn.Module working on (N, C, H, W) batches, or apply it in your "
              "Dataset before caching",
    "FiveCrop": _NO_BATCH_SHAPE,
    "TenCrop": _NO_BATCH_SHAPE,
    "ElasticTransform": _NONE_YET,
    "GaussianNoise": _NONE_YET,
    "JPEG": _NONE_YET,
    "RandomPhotometricDistort": _NONE_YET + ": ColorJitter inside RandomApply "
                                "covers most of it",
    "RandomZoomOut": _NONE_YET,
    "RandomIoUCrop": _NONE_YET,
    "RandomResize": _NONE_YET,
    "RandomShortestSize": _NONE_YET,
    "ScaleJitter": _NONE_YET,
}


def exported() -> FrozenSet[str]:
    """The transform classes batchaug exports (``batchaug.transforms.__all__``)."""
    return frozenset(_transforms().__all__)


def equivalent(name: str) -> Optional[str]:
    """``"batchaug.Name"`` for a transform class name of torchvision/kornia, else None."""
    name = ALIASES.get(name, name)
    return f"batchaug.{name}" if name in exported() else None


def mixes_labels(name: str) -> bool:
    """Whether batchaug's equivalent of ``name`` takes ``(images, labels)``."""
    cls = getattr(_transforms(), ALIASES.get(name, name), None)
    forward = getattr(cls, "forward", None)
    return forward is not None and "labels" in inspect.signature(forward).parameters


def not_yet() -> Dict[str, str]:
    """:data:`NOT_YET` less what batchaug exports."""
    have = exported()
    return {k: v for k, v in NOT_YET.items() if k not in have}


def hint(name: str) -> str:
    """What to do about a transform batchaug has no equivalent for."""
    return not_yet().get(name, _NONE_YET)
