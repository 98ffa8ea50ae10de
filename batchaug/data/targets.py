"""Dense targets in a cache: segmentation masks and detection boxes, stored beside the images.

A dataset item is one of

* ``(image, label)``: an image cache (no targets), as before;
* ``(image, mask)``: ``mask`` a PIL image (mode ``L``, ``P``, ``1``, ``I``, ``I;16``), an
  ``(H, W)`` (or ``(1, H, W)``) integer or bool tensor / numpy array at the image's size;
* ``(image, {"boxes": (M, 4), "labels": (M,)})``: torchvision's detection items (e.g.
  ``wrap_dataset_for_transforms_v2(CocoDetection(...))``); boxes are XYXY pixels, or a
  ``tv_tensors.BoundingBoxes`` in any non-rotated format (converted to XYXY). ``"image_id"``
  is ignored; any other key is refused.

A third item, ``(image, target, label)``, adds a per-image integer label. One dataset holds one
kind of item throughout; a mix is a ``ValueError`` naming two items.

The cache keeps the columns ``DeviceCache`` describes (bool masks as uint8 0/1; padding and
invalid box slots are zeros with ``box_valid`` False, and boxes keep their slots, so
``box_labels`` stay aligned). A box is stored valid where it is finite with
``x1 <= x2, y1 <= y2`` (else ``ValueError``), and, clamped to its image, torchvision's
``SanitizeBoundingBoxes(min_size=1, min_area=1)`` would keep it.

A ``pre_transform`` moves the targets with the image: it is called as torchvision v2 calls
transforms, ``pre_transform(image, {"masks": Mask, "boxes": BoundingBoxes})`` (nearest for
masks, boxes scaled, cropped and clamped); a torchvision v1 ``Resize`` / ``CenterCrop`` (or a
``Compose`` of them, what ``batchaug cache build`` makes) is run as its v2 equivalent, which
gives the same image.
"""
from __future__ import annotations

import numbers
from typing import Any, Callable, Dict, NamedTuple, Optional, Tuple

import numpy as np
import torch
from torch import Tensor

#: Keys of ``DeviceCache.targets`` (and of the loader's target dicts, with ``"labels"``).
CACHE_TARGET_KEYS = ("masks", "boxes", "box_valid", "box_labels")
#: Mask dtypes, narrowest first; a cache stores the first that holds every value.
MASK_DTYPES = (torch.uint8, torch.int16, torch.int32, torch.int64)
_MASK_NUMPY = {torch.uint8: "|u1", torch.int16: "<i2", torch.int32: "<i4", torch.int64: "<i8"}
MASK_DTYPE_NAMES = {torch.uint8: "uint8", torch.int16: "int16", torch.int32: "int32",
                    torch.int64: "int64"}
_DET_KEYS = ("boxes", "labels")
_DET_IGNORED = ("image_id",)


class Sample(NamedTuple):
    """One item's targets after the ``pre_transform``: ``kind`` is ``"masks"`` or ``"boxes"``."""

    kind: str
    mask: Optional[Tensor]  # (H, W) int64
    boxes: Optional[Tensor]  # (M, 4) float32, invalid rows zero
    box_valid: Optional[Tensor]  # (M,) bool
    box_labels: Optional[Tensor]  # (M,) int64
    label: Optional[int]  # the per-image label of a 3-item sample


def _pil_image_type() -> Optional[type]:
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover - pillow is a dependency
        return None
    return Image.Image


def is_target(obj: Any) -> bool:
    """Whether an item's second element is a target (a mask or a detection dict), not a label."""
    pil = _pil_image_type()
    return (isinstance(obj, dict) or (pil is not None and isinstance(obj, pil))
            or (isinstance(obj, (Tensor, np.ndarray)) and obj.ndim >= 2))


def mask_tensor(mask: Any, where: str) -> Tensor:
    """A mask (PIL image, tensor or numpy array) as a CPU ``(H, W)`` int64 tensor."""
    pil = _pil_image_type()
    if pil is not None and isinstance(mask, pil):
        if mask.mode not in ("L", "P", "1", "I", "I;16", "I;16L", "I;16B", "I;16N"):
            raise ValueError(f"{where}: a mask must be a one-channel label image (PIL mode L, P, "
                             f"1, I or I;16), got mode {mask.mode!r}")
        mask = np.asarray(mask)
    if isinstance(mask, np.ndarray):
        if mask.dtype == object or not (np.issubdtype(mask.dtype, np.integer)
                                        or mask.dtype == np.bool_):
            raise TypeError(f"{where}: a mask must hold integer (or bool) class ids, got a "
                            f"{mask.dtype} array (a mask is labels, never floats)")
        if mask.dtype == np.uint64:
            mask = mask.astype(np.int64)
        mask = torch.from_numpy(np.array(mask))  # a copy: PIL arrays are read-only
    if not isinstance(mask, Tensor):
        raise TypeError(f"{where}: a mask must be a PIL image, an (H, W) integer tensor or "
                        f"numpy array, got {type(mask).__name__}")
    mask = mask.as_subclass(Tensor).detach().cpu()
    if mask.is_floating_point() or mask.is_complex():
        raise TypeError(f"{where}: a mask must hold integer (or bool) class ids, got "
                        f"{mask.dtype} (a mask is labels, never floats)")
    if mask.dim() == 3 and mask.shape[0] == 1:
        mask = mask[0]
    if mask.dim() != 2:
        raise ValueError(f"{where}: a mask must be (H, W) (or (1, H, W)), got shape "
                         f"{tuple(mask.shape)}")
    return mask.to(torch.int64)


def _boxes_xyxy(boxes: Any, where: str) -> Tensor:
    """Boxes as a CPU ``(M, 4)`` float32 XYXY tensor (a BoundingBoxes converted from its format)."""
    try:
        from torchvision import tv_tensors
    except ImportError:  # pragma: no cover - torchvision is a dependency
        tv_tensors = None
    if tv_tensors is not None and isinstance(boxes, tv_tensors.BoundingBoxes):
        fmt = boxes.format
        if tv_tensors.is_rotated_bounding_format(fmt):
            raise ValueError(f"{where}: rotated boxes ({fmt.name}) cannot be cached; a cache "
                             f"holds axis-aligned XYXY boxes")
        if fmt != tv_tensors.BoundingBoxFormat.XYXY:
            from torchvision.ops import box_convert

            boxes = box_convert(boxes.as_subclass(Tensor), fmt.name.lower(), "xyxy")
        boxes = boxes.as_subclass(Tensor)
    elif isinstance(boxes, np.ndarray):
        if not (np.issubdtype(boxes.dtype, np.floating) or np.issubdtype(boxes.dtype,
                                                                          np.integer)):
            raise TypeError(f"{where}: boxes must be numeric, got a {boxes.dtype} array")
        boxes = torch.from_numpy(np.ascontiguousarray(boxes))
    if not isinstance(boxes, Tensor):
        raise TypeError(f"{where}: 'boxes' must be an (M, 4) XYXY tensor or "
                        f"tv_tensors.BoundingBoxes, got {type(boxes).__name__}")
    boxes = boxes.detach().cpu()
    if boxes.dtype == torch.bool or boxes.is_complex():
        raise TypeError(f"{where}: 'boxes' must be float XYXY pixels, got {boxes.dtype}")
    if boxes.dim() != 2 or boxes.shape[1] != 4:
        raise ValueError(f"{where}: 'boxes' must have shape (M, 4) (XYXY), got "
                         f"{tuple(boxes.shape)}")
    return boxes.to(torch.float32)


def _box_labels(labels: Any, m: int, where: str) -> Tensor:
    if isinstance(labels, np.ndarray):
        labels = torch.from_numpy(np.ascontiguousarray(labels))
    elif isinstance(labels, (list, tuple)):
        labels = torch.as_tensor(labels) if labels else torch.empty(0, dtype=torch.int64)
    if not isinstance(labels, Tensor):
        raise TypeError(f"{where}: 'labels' must be an (M,) integer tensor, got "
                        f"{type(labels).__name__}")
    labels = labels.as_subclass(Tensor).detach().cpu()
    if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
        raise TypeError(f"{where}: 'labels' must be integer class ids, got {labels.dtype}")
    if labels.dim() != 1 or labels.shape[0] != m:
        raise ValueError(f"{where}: 'labels' must have shape ({m},) to match the {m} boxes, got "
                         f"{tuple(labels.shape)}")
    return labels.to(torch.int64)


def detection_parts(target: Dict[str, Any], where: str) -> Tuple[Tensor, Tensor]:
    """``(boxes (M, 4) float32 XYXY, labels (M,) int64)`` of a torchvision detection dict."""
    extra = sorted(str(k) for k in target if k not in _DET_KEYS + _DET_IGNORED)
    if extra or "boxes" not in target or "labels" not in target:
        raise ValueError(f"{where}: a detection target must be a dict with 'boxes' (M, 4) and "
                         f"'labels' (M,) ('image_id' is ignored), got keys {sorted(target)}; "
                         f"keep only those (a cache stores boxes and their labels)")
    boxes = _boxes_xyxy(target["boxes"], where)
    return boxes, _box_labels(target["labels"], boxes.shape[0], where)


def sanitize_boxes(boxes: Tensor, height: int, width: int, where: str
                   ) -> Tuple[Tensor, Tensor]:
    """``(boxes, valid)``: ``boxes`` ``(M, 4)`` clamped to the ``height x width`` image, valid
    where torchvision's ``SanitizeBoundingBoxes(min_size=1, min_area=1)`` keeps them, invalid
    rows zeroed. Non-finite boxes or ``x2 < x1`` / ``y2 < y1`` raise ``ValueError``."""
    if boxes.numel():
        bad = ~torch.isfinite(boxes).all(dim=1) | (boxes[:, 2] < boxes[:, 0]) | (
            boxes[:, 3] < boxes[:, 1])
        if bool(bad.any()):
            k = int(bad.nonzero()[0, 0])
            raise ValueError(f"{where}: box {k} is {boxes[k].tolist()}: boxes must be finite "
                             f"XYXY with x1 <= x2 and y1 <= y2")
    limit = torch.tensor([width, height, width, height], dtype=boxes.dtype)
    out = torch.minimum(boxes.clamp_min(0.0), limit)
    bw, bh = out[:, 2] - out[:, 0], out[:, 3] - out[:, 1]
    valid = (bw >= 1.0) & (bh >= 1.0) & (bw * bh >= 1.0)
    return torch.where(valid.unsqueeze(1), out, torch.zeros_like(out)), valid


def as_v2(pre_transform: Callable) -> Callable:
    """``pre_transform`` as a v2 callable moving ``(image, targets)``: a v1 ``Resize`` /
    ``CenterCrop`` / ``PILToTensor`` / ``ToTensor`` / ``Compose`` of them becomes its v2
    equivalent (same image); anything else that is not v2 cannot move targets: ``TypeError``."""
    from torchvision import transforms as v1
    from torchvision.transforms import v2

    if isinstance(pre_transform, v2.Transform):
        return pre_transform

    def convert(t: Any) -> Any:
        if isinstance(t, v1.Compose):
            return v2.Compose([convert(s) for s in t.transforms])
        if isinstance(t, v1.Resize):
            return v2.Resize(t.size, interpolation=t.interpolation, max_size=t.max_size,
                             antialias=t.antialias)
        if isinstance(t, v1.CenterCrop):
            return v2.CenterCrop(t.size)
        if isinstance(t, v1.PILToTensor):  # image conversions: the targets pass through
            return v2.PILToTensor()
        if isinstance(t, v1.ToTensor):
            return v2.Compose([v2.ToImage(), v2.ToDtype(torch.float32, scale=True)])
        if isinstance(t, v2.Transform):
            return t
        raise TypeError(
            f"pre_transform must move the targets with the image: a torchvision.transforms.v2 "
            f"transform (called as pre_transform(image, targets), e.g. v2.Compose([v2.Resize("
            f"256), v2.CenterCrop(224)])) or a v1 Resize/CenterCrop/Compose of them; got "
            f"{type(t).__name__}, which would resize the image but not its masks or boxes")

    return convert(pre_transform)


def _size_of(image: Any) -> Tuple[int, int]:
    """``(height, width)`` of a PIL image, HWC numpy array or CHW tensor."""
    pil = _pil_image_type()
    if pil is not None and isinstance(image, pil):
        return image.size[1], image.size[0]
    if isinstance(image, np.ndarray):
        return int(image.shape[0]), int(image.shape[1])
    if isinstance(image, Tensor):
        return int(image.shape[-2]), int(image.shape[-1])
    raise TypeError(f"expected a PIL image, HWC uint8 numpy array or CHW tensor, got "
                    f"{type(image).__name__}")


def label_to_int(label: Any, index: int) -> int:
    """A dataset item's per-image label as an int (an int, numpy integer or 1-element integer
    tensor); anything else is a ``TypeError``."""
    if isinstance(label, Tensor) and label.numel() == 1 and not label.is_floating_point():
        return int(label)
    if isinstance(label, (numbers.Integral, np.integer)) and not isinstance(label, bool):
        return int(label)
    raise TypeError(f"dataset[{index}]: label must be an int, got {label!r}")


def prepare_sample(item: Any, pre_transform: Optional[Callable], index: int, where: str
                   ) -> Tuple[Any, Sample]:
    """``(image after pre_transform, Sample)`` of a target item ``(image, target[, label])``."""
    image, target = item[0], item[1]
    label = label_to_int(item[2], index) if len(item) > 2 else None
    h, w = _size_of(image)
    if isinstance(target, dict):
        kind = "boxes"
        boxes, box_labels = detection_parts(target, where)
        mask = None
    else:
        kind = "masks"
        mask = mask_tensor(target, where)
        if tuple(mask.shape) != (h, w):
            raise ValueError(f"{where}: the mask is {tuple(mask.shape)} (H, W) but the image is "
                             f"{h} x {w}; a mask must have its image's height and width")
        boxes = box_labels = None
    if pre_transform is not None:
        from torchvision import tv_tensors

        moved: Dict[str, Any] = {}
        if mask is not None:
            moved["masks"] = tv_tensors.Mask(mask)
        if boxes is not None:
            moved["boxes"] = tv_tensors.BoundingBoxes(boxes, format="XYXY", canvas_size=(h, w))
        image, moved = as_v2(pre_transform)(image, moved)
        h, w = _size_of(image)
        if mask is not None:
            mask = moved["masks"].as_subclass(Tensor)
            if tuple(mask.shape[-2:]) != (h, w):
                raise ValueError(f"{where}: after pre_transform the mask is "
                                 f"{tuple(mask.shape)} but the image {h} x {w}")
        if boxes is not None:
            boxes = moved["boxes"].as_subclass(Tensor).to(torch.float32)
    valid = None
    if boxes is not None:
        boxes, valid = sanitize_boxes(boxes, h, w, where)
        box_labels = torch.where(valid, box_labels, torch.zeros_like(box_labels))
    return image, Sample(kind, mask, boxes, valid, box_labels, label)


def narrow_mask_dtype(lo: int, hi: int) -> torch.dtype:
    """The narrowest of ``MASK_DTYPES`` holding every value in ``[lo, hi]``.

    Example:
        >>> narrow_mask_dtype(0, 255), narrow_mask_dtype(-1, 20)
        (torch.uint8, torch.int16)
    """
    for dtype in MASK_DTYPES:
        info = torch.iinfo(dtype)
        if info.min <= lo and hi <= info.max:
            return dtype
    return torch.int64


def check_ragged_mask_range(lo: int, hi: int, where: str = "") -> None:
    """Mask ids ``lo..hi`` must fit the uint8 a ragged column stores masks as (0..255 exactly:
    255 is VOC's "ignore" label); anything wider is refused, never wrapped. For both the
    in-memory ingest and the streaming writer.

    Example:
        >>> check_ragged_mask_range(0, 255)  # fits
    """
    if lo < 0 or hi > 255:
        raise ValueError(f"{where + ': ' if where else ''}a ragged (or JPEG) cache stores masks "
                         f"as uint8, but the mask values span [{lo}, {hi}]; map the ids into "
                         f"0..255, or give the images one size (a resizing pre_transform) to "
                         f"keep wider ids")


def mask_range(mask: Tensor) -> Tuple[int, int]:
    """``(lowest, highest)`` id of a mask (``(0, 0)`` when empty)."""
    return (int(mask.min()), int(mask.max())) if mask.numel() else (0, 0)


def admit_sample(state: Any, label: Any, where: str, ragged: bool = False) -> Optional[Sample]:
    """The one rule for a kept item of every cache build (``target_writer.TargetParts``, in
    memory or streaming; ``state`` has ``kind``, ``first``, ``lo``, ``hi``): every item is of
    the first one's kind, and the mask ids seen so far widen ``[state.lo, state.hi]`` (a
    ``ragged`` column's must fit uint8). Returns the ``Sample``, or None for a plain label."""
    if not isinstance(label, Sample):
        check_kind(state, "label", where)
        return None
    check_kind(state, label.kind if label.label is None else label.kind + "+label", where)
    if label.mask is not None:
        lo, hi = mask_range(label.mask)
        if ragged:
            check_ragged_mask_range(lo, hi, where)
        state.lo, state.hi = min(state.lo, lo), max(state.hi, hi)
    return label


def check_kind(state: Any, kind: str, where: str) -> None:
    """Every item of one dataset is of one kind (``state.kind``, set by the first)."""
    if state.kind is None:
        state.kind, state.first = kind, where
        return
    if kind != state.kind:
        raise ValueError(f"{where} is an {describe_kind(kind)} item but {state.first} is an "
                         f"{describe_kind(state.kind)} item; a cache holds one kind: (image, "
                         f"label), (image, mask) or (image, {{'boxes', 'labels'}}) throughout "
                         f"(each optionally with a per-image label as a third element)")


def describe_kind(kind: str) -> str:
    base = kind.split("+")[0]
    text = {"label": "(image, label)", "masks": "(image, mask)",
            "boxes": "(image, {'boxes', 'labels'})"}[base]
    return text + (" + per-image label" if kind.endswith("+label") else "")


def check_cache_targets(targets: Dict[str, Any], images: Any) -> Dict[str, Any]:
    """``DeviceCache``'s target columns checked against its images (a tensor or a
    ``RaggedImages``): ``masks`` shaped as the images (``(N, H, W)`` integer, bool as uint8, or
    a 1-channel raw ``RaggedImages`` of the images' sizes), ``boxes`` ``(N, M, 4)`` with
    ``box_valid`` (default all valid) and ``box_labels`` (default zeros).
    """
    from batchaug.data.ragged import RaggedImages

    unknown = sorted(set(targets) - set(CACHE_TARGET_KEYS))
    if unknown:
        raise ValueError(f"unknown target(s) {unknown}; a cache holds {list(CACHE_TARGET_KEYS)}")
    n = int(images.shape[0])
    out: Dict[str, Any] = {}
    masks = targets.get("masks")
    if masks is not None and isinstance(images, RaggedImages):
        if not (isinstance(masks, RaggedImages) and masks.channels == 1
                and masks.storage == "raw"):
            raise TypeError(f"a ragged (or JPEG) cache's masks must be a 1-channel raw "
                            f"RaggedImages (each mask at its image's size), got "
                            f"{type(masks).__name__}")
        if len(masks) != n or not torch.equal(masks.sizes, images.sizes):
            raise ValueError("a ragged (or JPEG) cache's masks must have their images' sizes, "
                             "one by one")
        out["masks"] = masks
    elif masks is not None:
        hw = tuple(images.shape[2:])
        if isinstance(masks, np.ndarray):
            masks = torch.from_numpy(np.array(masks) if not masks.flags.writeable else masks)
        if not isinstance(masks, Tensor):
            raise TypeError(f"masks must be an (N, H, W) integer tensor, got "
                            f"{type(masks).__name__}")
        if masks.is_floating_point() or masks.is_complex():
            raise TypeError(f"masks must hold integer (or bool) class ids, got {masks.dtype} (a "
                            f"mask is labels, never floats)")
        if masks.dim() != 3 or masks.shape[0] != n or tuple(masks.shape[1:]) != tuple(hw):
            raise ValueError(f"masks must have shape ({n}, {hw[0]}, {hw[1]}) (N, H, W: the "
                             f"images' count and size), got {tuple(masks.shape)}")
        if masks.dtype not in MASK_DTYPES:
            if masks.dtype == torch.bool:
                masks = masks.to(torch.uint8)
            else:
                masks = masks.to(narrow_mask_dtype(*mask_range(masks)))
        out["masks"] = masks
    boxes = targets.get("boxes")
    if boxes is None:
        if targets.get("box_valid") is not None or targets.get("box_labels") is not None:
            raise ValueError("box_valid and box_labels go with boxes")
        return out
    if isinstance(boxes, np.ndarray):
        boxes = torch.from_numpy(np.array(boxes))
    if not isinstance(boxes, Tensor) or boxes.dim() != 3 or boxes.shape[0] != n or \
            boxes.shape[2] != 4:
        raise ValueError(f"boxes must be an (N={n}, M, 4) XYXY tensor, got "
                         f"{tuple(boxes.shape) if isinstance(boxes, Tensor) else type(boxes)}")
    if not boxes.is_floating_point():
        raise TypeError(f"boxes must be floating XYXY pixels, got {boxes.dtype}")
    m = boxes.shape[1]
    valid = _per_box(targets, "box_valid", torch.ones(n, m, dtype=torch.bool, device=boxes.device))
    if not isinstance(valid, Tensor) or valid.dtype != torch.bool or tuple(valid.shape) != (n, m):
        raise ValueError(f"box_valid must be an ({n}, {m}) bool tensor, got "
                         f"{getattr(valid, 'dtype', type(valid))} "
                         f"{tuple(getattr(valid, 'shape', ()))}")
    labels = _per_box(targets, "box_labels", torch.zeros(n, m, dtype=torch.int64,
                                                          device=boxes.device))
    if not isinstance(labels, Tensor) or tuple(labels.shape) != (n, m) or \
            labels.is_floating_point() or labels.dtype == torch.bool:
        raise ValueError(f"box_labels must be an ({n}, {m}) integer tensor, got "
                         f"{getattr(labels, 'dtype', type(labels))} "
                         f"{tuple(getattr(labels, 'shape', ()))}")
    out["boxes"] = boxes.to(torch.float32)
    out["box_valid"] = valid
    out["box_labels"] = labels.to(torch.int64)
    return out


def _per_box(targets: Dict[str, Any], key: str, default: Tensor) -> Any:
    """``targets[key]`` (a numpy array as a tensor), or ``default`` where it is missing."""
    value = targets.get(key)
    if value is None:
        return default
    return torch.from_numpy(np.array(value)) if isinstance(value, np.ndarray) else value


def mask_numpy_dtype(dtype: torch.dtype) -> np.dtype:
    return np.dtype(_MASK_NUMPY[dtype])


def mask_dtype_from_name(name: str) -> Optional[torch.dtype]:
    return {n: dtype for dtype, n in MASK_DTYPE_NAMES.items()}.get(name)
