"""``DeviceCache``: a whole image dataset as columns on one device.

The deterministic part of an input pipeline (decode, resize, crop, convert) runs once; what is
left is a few columns, one row per sample: the images, the labels and any targets. A pixel
column (images, masks) is dense, one ``(N, C, H, W)`` tensor (uint8 by default: a quarter of
float32's bytes), or ragged, each row at its own size, raw or JPEG (``RaggedImages``). One load
(``placement.place_dense`` / ``place_ragged`` per pixel column), one save (``format.save_cache``)
and one loader loop serve every kind: ``DeviceLoader`` draws batches by on-device indexing, or,
for images kept on the host or disk (``placement=``), copies each batch over
(``batchaug.data.prefetch``).
"""
from __future__ import annotations

import numbers
import os
import pickle
import sys
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch import Tensor

from batchaug.data import atomic
from batchaug.data import format as fmt
from batchaug.data.ragged import RaggedImages
from batchaug.data.format import CacheFormatError
from batchaug.data.ingest import MemoryColumns, check_dataset_args, skipped_summary, \
    source_info
from batchaug.data.placement import PLACEMENTS, check_images_memory, pixel_bytes, place_dense, \
    place_ragged, resolve_placement
from batchaug.data.targets import CACHE_TARGET_KEYS, check_cache_targets, \
    mask_dtype_from_name
from batchaug.data.storage import CACHE_DTYPES, DenseImages, DeviceLike, MappedRows, \
    _fmt_bytes, check_cache_dtype, check_classes, check_device_memory, check_label_range, \
    copy_images_chunked, empty_images, resolve_device
from batchaug._validation import check_bool, check_choice


def pickling_error(device: torch.device) -> Optional[pickle.PicklingError]:
    """The error pickling a cache on ``device`` must raise, or None when it may be pickled."""
    if device.type == "cpu":
        return None
    return pickle.PicklingError(
        f"a DeviceCache holding {device.type} tensors cannot be pickled. This usually means it "
        f"was handed to a torch.utils.data.DataLoader with num_workers > 0, whose worker "
        f"processes pickle the dataset (and would fail with '_share_filename_: only available "
        f"on CPU'). Iterate it with batchaug.DeviceLoader(cache, batch_size) instead (no workers "
        f"needed: batches are drawn on the device), or use num_workers=0. To store it, use "
        f"cache.save(path); to move it, cache.to('cpu')."
    )


def _as_tensor(x: Any, name: str) -> Tensor:
    if isinstance(x, Tensor):
        return x
    if isinstance(x, np.ndarray):
        if x.dtype == object:
            raise TypeError(f"{name} must be a numeric array, got dtype=object")
        if not x.flags.writeable:  # torch.from_numpy warns on read-only arrays (e.g. memmaps)
            x = np.array(x)
        return torch.from_numpy(x)
    raise TypeError(f"{name} must be a torch.Tensor or numpy.ndarray, got {type(x).__name__}")


def check_labels(labels: Any, n: int, classes: Optional[Sequence[str]]) -> Tensor:
    labels = _as_tensor(labels, "labels")
    if labels.dim() != 1 or labels.shape[0] != n:
        raise ValueError(f"labels must have shape ({n},) to match images, got {tuple(labels.shape)}")
    if labels.dtype == torch.bool or labels.is_floating_point() or labels.is_complex():
        raise TypeError(f"labels must be an integer tensor, got {labels.dtype}")
    labels = labels.to(torch.int64)
    if n:
        # once, at construction, not per batch
        check_label_range(int(labels.min()), int(labels.max()), classes)
    return labels


class DeviceCache:
    """Images ``(N, C, H, W)`` and int64 labels ``(N,)`` held on one device.

    Build one with ``from_tensors``, ``from_dataset`` or ``load``; draw batches from it with
    ``DeviceLoader``. Floating caches hold values in [0, 1] (uint8 images divided by 255).

    A cache may also hold dense targets (``batchaug.data.targets``): ``masks`` ``(N, H, W)``
    (the narrowest integer dtype holding every value: uint8, int16, int32 or int64), or
    ``boxes`` ``(N, M, 4)`` float32 XYXY with ``box_valid`` ``(N, M)`` bool and
    ``box_labels`` ``(N, M)`` int64, padded to the largest box count. ``labels`` is then None
    unless the items carried a per-image label. Masks live where the images do (the
    placement); boxes and labels on ``device``. ``DeviceLoader`` yields ``(images,
    targets)`` from such a cache.

    Example:
        >>> cache = DeviceCache.from_tensors(torch.zeros(10, 3, 8, 8, dtype=torch.uint8),
        ...                                  torch.arange(10), device="cpu")
        >>> len(cache), cache.images.shape
        (10, torch.Size([10, 3, 8, 8]))
    """

    def __init__(
        self,
        images: Tensor,
        labels: Optional[Tensor],
        classes: Optional[Sequence[str]] = None,
        source: Optional[Dict[str, Any]] = None,
        shard: Optional[Tuple[int, int]] = None,
        global_len: Optional[int] = None,
        *,
        placement: str = "device",
        mapped: Optional[MappedRows] = None,
        placement_reason: Optional[str] = None,
        targets: Optional[Dict[str, Tensor]] = None,
        device: DeviceLike = None,
    ) -> None:
        ragged = isinstance(images, RaggedImages)
        if not ragged and (not isinstance(images, Tensor) or images.dim() != 4):
            raise ValueError(
                f"images must be an (N, C, H, W) tensor or RaggedImages, got "
                f"{tuple(images.shape) if isinstance(images, Tensor) else type(images).__name__}"
            )
        check_cache_dtype(images.dtype, "images.dtype")
        self.classes: Optional[List[str]] = check_classes(classes)
        targets = dict(targets or {})
        if targets:
            targets = check_cache_targets(targets, images)
        if labels is None and not targets:
            raise ValueError("labels are required for a cache without masks or boxes")
        if labels is not None:
            labels = check_labels(labels, images.shape[0], self.classes)
        if check_choice(placement, "placement", PLACEMENTS) == "auto":
            raise ValueError("placement='auto' is resolved by DeviceCache.load; a cache holds "
                             "'device', 'host' or 'disk'")
        if labels is not None:
            dev = labels.device
        elif "boxes" in targets:
            dev = targets["boxes"].device
        elif placement == "device":
            dev = images.device
        elif device is not None:
            dev = resolve_device(device)
        else:
            raise ValueError(f"device= is required for a placement={placement!r} cache "
                             f"without labels or boxes (where batches are delivered)")
        if placement == "device" and dev != images.device:
            raise ValueError(f"labels are on {dev} but images on {images.device}")
        for key, t in targets.items():
            where = images.device if key == "masks" else dev
            if t.device != where:
                raise ValueError(f"{key} are on {t.device} but must be on {where} (masks "
                                 f"where the images are, boxes where batches are delivered)")
        if placement != "device" and images.device.type != "cpu":
            raise ValueError(f"placement={placement!r} keeps the images on the host, but they "
                             f"are on {images.device}")
        if ragged and mapped is None:
            mapped = images.mapped
        if (placement == "disk") != (mapped is not None):
            raise ValueError("placement='disk' goes with the MappedRows its images come from")
        #: Where the images live: ``"device"`` (on ``device``), ``"host"`` (ordinary CPU
        #: memory; the loader stages batches through pinned buffers) or ``"disk"`` (a memory
        #: map of ``images.npy``). Labels are always on ``device``, where ``DeviceLoader``
        #: delivers batches.
        self.placement: str = placement
        #: Why ``"auto"`` chose this placement (None when it was asked for by name).
        self.placement_reason: Optional[str] = placement_reason
        self.mapped: Optional[MappedRows] = mapped
        #: The masks' file rows behind a ``placement="disk"`` cache with masks (else None).
        self.mapped_masks: Optional[MappedRows] = None
        #: ``(N, C, H, W)`` images, or for a ragged cache (own sizes, or ``storage="jpeg"``)
        #: a ``RaggedImages``: each image's bytes at its own size (see ``image(i)``).
        self.images: Union[Tensor, RaggedImages] = images
        #: ``(N,)`` int64 class of each image; None for a target cache without per-image labels.
        self.labels: Optional[Tensor] = labels
        self._device: torch.device = dev
        #: ``(N, H, W)`` integer masks (a segmentation cache), else None; in a ragged cache a
        #: 1-channel uint8 ``RaggedImages``, mask ``i`` at image ``i``'s own size.
        self.masks: Optional[Union[Tensor, RaggedImages]] = targets.get("masks")
        #: ``(N, M, 4)`` float32 XYXY boxes, ``(N, M)`` bool validity and ``(N, M)`` int64
        #: class of each box (a detection cache), else None. Invalid slots are zeros.
        self.boxes: Optional[Tensor] = targets.get("boxes")
        self.box_valid: Optional[Tensor] = targets.get("box_valid")
        self.box_labels: Optional[Tensor] = targets.get("box_labels")
        self.source: Dict[str, Any] = dict(source or {})
        #: ``(rank, world_size)`` when this is one part of a cache loaded with ``shard=``.
        self.shard: Optional[Tuple[int, int]] = tuple(shard) if shard is not None else None
        #: Length of the whole cache this is a part of (``len(self)`` when not sharded).
        self.global_len: int = int(global_len) if global_len is not None else len(self)

    # --- constructors -------------------------------------------------------------------------
    @classmethod
    def from_tensors(
        cls,
        images: Union[Tensor, np.ndarray],
        labels: Union[Tensor, np.ndarray, Sequence[int], None],
        device: DeviceLike = None,
        layout: str = "NCHW",
        *,
        dtype: Optional[torch.dtype] = None,
        channels_last: bool = False,
        classes: Optional[Sequence[str]] = None,
        masks: Optional[Union[Tensor, np.ndarray]] = None,
        boxes: Optional[Union[Tensor, np.ndarray]] = None,
        box_valid: Optional[Union[Tensor, np.ndarray]] = None,
        box_labels: Optional[Union[Tensor, np.ndarray]] = None,
    ) -> "DeviceCache":
        """Wrap image and label tensors (torch or numpy) as a cache on ``device``.

        ``layout`` says how ``images`` is laid out: ``"NCHW"`` or ``"NHWC"`` (e.g. a numpy
        array straight from decoded images). ``labels`` are integer class indices: floats
        (even ``[1.0, 2.0]``) and bools are refused, never truncated. ``dtype`` defaults to the
        images' own (uint8 or float); converting uint8 to float divides by 255. ``device=None``
        means CUDA if available, else CPU. When nothing needs converting or moving, the tensors
        are used as they are (no copy).

        Targets (see the class docstring): ``masks`` ``(N, H, W)`` integer or bool, or
        ``boxes`` ``(N, M, 4)`` XYXY with optional ``box_valid`` (default all valid) and
        ``box_labels`` (default zeros); ``labels`` may then be None.

        Example:
            >>> seg = DeviceCache.from_tensors(torch.zeros(2, 3, 4, 4, dtype=torch.uint8), None,
            ...                                device="cpu", masks=torch.ones(2, 4, 4).long())
            >>> seg.masks.dtype, seg.labels is None
            (torch.uint8, True)

        Example:
            >>> x = np.zeros((4, 32, 32, 3), dtype=np.uint8)
            >>> DeviceCache.from_tensors(x, [0, 1, 2, 3], device="cpu", layout="NHWC").images.shape
            torch.Size([4, 3, 32, 32])
        """
        if layout not in ("NCHW", "NHWC"):
            raise ValueError(f"layout must be 'NCHW' or 'NHWC', got {layout!r}")
        if labels is not None and not isinstance(labels, (Tensor, np.ndarray)):
            # A plain list: reject floats as float tensors are, never truncate 1.9 to 1.
            values = list(labels)
            for k, v in enumerate(values):
                if isinstance(v, (bool, np.bool_)) or not isinstance(
                        v, (numbers.Integral, np.integer, Tensor)):
                    raise TypeError(f"labels must be integer class indices, got {v!r} at index "
                                    f"{k}; convert them explicitly (e.g. [int(y) for y in labels]) "
                                    f"if that is what you mean")
            try:
                labels = (torch.as_tensor(values) if values
                          else torch.empty(0, dtype=torch.int64))
            except (TypeError, ValueError, RuntimeError) as exc:
                raise TypeError(f"labels must be a sequence of ints: {exc}") from None
        images = _as_tensor(images, "images")
        if images.dim() != 4:
            raise ValueError(
                f"images must be 4-D ({layout}), got shape {tuple(images.shape)}"
            )
        if layout == "NHWC":
            images = images.permute(0, 3, 1, 2)
        if images.dtype not in CACHE_DTYPES and dtype is None:
            raise TypeError(
                f"images have dtype {images.dtype}; pass dtype= one of "
                f"{[str(d) for d in CACHE_DTYPES]} or convert them first"
            )
        dtype = check_cache_dtype(images.dtype if dtype is None else dtype)
        check_bool(channels_last, "channels_last")
        dev = resolve_device(device)
        classes = check_classes(classes)
        if labels is not None:
            labels = check_labels(labels, images.shape[0], classes).to(dev)
        targets = {k: v for k, v in (("masks", masks), ("boxes", boxes),
                                     ("box_valid", box_valid), ("box_labels", box_labels))
                   if v is not None}
        if targets:
            targets = {k: v.to(dev) for k, v in check_cache_targets(targets, images).items()}
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        if images.device == dev and images.dtype == dtype and images.is_contiguous(memory_format=fmt):
            out = images
        else:
            check_device_memory(images.numel() * dtype.itemsize + images.shape[0] * 8, dev)
            out = empty_images(images.shape, dtype, dev, channels_last)
            copy_images_chunked(out, images)
        return cls(out, labels, classes=classes, source={"kind": "tensors"}, targets=targets)

    @classmethod
    def from_dataset(
        cls,
        dataset: Any,
        pre_transform: Optional[Any] = None,
        device: DeviceLike = None,
        dtype: torch.dtype = torch.uint8,
        *,
        channels_last: bool = False,
        num_workers: int = 0,
        progress: Optional[bool] = None,
        skip_bad: bool = False,
        classes: Optional[Sequence[str]] = None,
        storage: str = "raw",
        quality: int = 90,
    ) -> "DeviceCache":
        """Decode a map-style dataset once into a cache on ``device``.

        ``dataset[i]`` gives ``(image, label)`` with a PIL image, an HWC uint8 numpy array or a
        CHW tensor (uint8, or floating in [0, 1]). ``pre_transform`` (deterministic, e.g.
        ``Resize(256)`` + ``CenterCrop(224)``) runs once per image on what the dataset returns.
        uint8 keeps [0, 255]; floating dtypes store [0, 1]. ``num_workers`` > 0 decodes in
        DataLoader worker processes (CPU tensors only). ``progress=None`` shows a tqdm bar only
        on a terminal. A corrupt or unreadable image raises ``BadImageError`` (a ``ValueError``)
        naming the file (ImageFolder's path, else the index); ``skip_bad=True`` drops such samples
        instead and warns with their count and first names (the count is also in
        ``cache.source["skipped"]``). A 16-bit grayscale PIL image is scaled to 8 bits (one
        warning), never clipped. Class names come from ``classes`` or ``dataset.classes``.

        uint8 images of different sizes are each kept at their own size, back to back with no
        padding (``cache.ragged``, ``cache.sizes``, ``cache.image(i)``; ``DeviceLoader`` then
        needs a ``crop``). ``storage="jpeg"`` keeps each image as its JPEG bytes at ``quality``
        (1..100), about a quarter of the raw bytes or less at 90, decoded per batch by the
        loader; a JPEG file whose pixels the pipeline does not change is kept as its own bytes
        (``quality`` is not applied to it). ``dataset`` may also be a Hugging Face
        ``datasets.Dataset`` with an ``Image`` and a ``ClassLabel`` column (``HuggingFaceImages``
        names other columns) or WebDataset tar shards (a path, a pattern such as
        ``"train-{000000..000099}.tar"`` or a list: ``TarShards``). Different channel counts, or floating dtypes with different sizes, raise
        ``ValueError`` naming two offending images and the fix.

        Dense targets: ``dataset[i]`` may instead be ``(image, mask)`` (a PIL label image or an
        ``(H, W)`` integer tensor / array) or torchvision's detection item ``(image, {"boxes":
        (M, 4) XYXY, "labels": (M,)})``, optionally with a per-image label as a third element
        (``batchaug.data.targets`` says exactly what is accepted). The cache then holds
        ``masks`` or ``boxes`` / ``box_valid`` / ``box_labels``; ``pre_transform`` moves them
        with the image, called as a torchvision v2 transform (``pre_transform(image,
        targets)``: nearest for masks; a v1 ``Resize`` / ``CenterCrop`` / ``Compose`` runs as
        its v2 equivalent). A ragged or JPEG cache keeps each mask at its image's size as uint8
        (ids 0..255; wider ids are refused, naming the sample).

        Example:
            >>> from torchvision.datasets import FakeData
            >>> DeviceCache.from_dataset(FakeData(8, (3, 16, 16)), device="cpu").images.shape
            torch.Size([8, 3, 16, 16])
        """
        from batchaug.data.ragged import check_storage
        from batchaug.data.sources import as_map_dataset

        dataset = as_map_dataset(dataset)  # a datasets.Dataset, tar shards: map-style
        dtype, classes = check_dataset_args(dataset, pre_transform, dtype, num_workers, classes)
        storage, quality = check_storage(storage, quality, dtype)
        columns = MemoryColumns(dataset, dtype, resolve_device(device), channels_last, storage,
                                quality, skip_bad)
        images, labels, targets = columns.build(
            pre_transform, num_workers, classes,
            sys.stderr.isatty() if progress is None else bool(progress))
        info = source_info(dataset, pre_transform)
        skipped = columns.checker.skipped
        if skipped:  # the count is also in cache.source["skipped"]
            info["skipped"] = len(skipped)
            warnings.warn(skipped_summary(skipped, len(dataset)), stacklevel=2)
        return cls(images, labels, classes=classes, source=info, targets=targets)

    @classmethod
    def load(
        cls,
        path: Union[str, os.PathLike],
        device: DeviceLike = None,
        shard: Optional[Tuple[int, int]] = None,
        verify: bool = False,
        placement: Optional[str] = None,
    ) -> "DeviceCache":
        """Load a cache directory written by ``save`` (or ``batchaug cache build``).

        ``shard=(rank, world_size)`` loads only that rank's contiguous part (for data larger
        than one device); ``verify=True`` also checks every file's SHA-256. Bad, truncated,
        foreign or newer-format directories raise ``CacheFormatError`` naming the file.

        ``placement`` says where the images stay: ``"device"`` (read into ``device``),
        ``"host"`` (read into ordinary CPU memory, not pinned), ``"disk"`` (a memory
        map of ``images.npy``: loading reads only the headers and the labels) or ``"auto"``
        (device if they fit in half the device's free memory, PyTorch's cached blocks
        included, else host if they fit in half the available RAM divided by the host's ranks,
        ``LOCAL_WORLD_SIZE``, else disk; the choice and why are logged and in ``repr``). Labels
        are always on ``device``, and ``DeviceLoader`` delivers every placement's batches
        there, the same bytes in the same order. ``placement=None`` means ``"device"``, except
        for a JPEG cache on a CUDA device: ``"host"``, where the decoder reads its
        bitstreams from.

        Example:
            >>> cache = DeviceCache.load("cifar10-cache", device="cuda")  # doctest: +SKIP
            >>> big = DeviceCache.load("imagenet-cache", device="cuda", placement="disk")  # doctest: +SKIP
        """
        shard = fmt.check_shard(shard)
        check_bool(verify, "verify")
        if placement is not None:
            placement = check_choice(placement, "placement", PLACEMENTS)
        dev = resolve_device(device)
        cache = fmt.read_consistently(Path(path),
                                      lambda p: _load_once(p, dev, shard, verify, placement))
        note = atomic.interrupted_note(atomic.resolve(Path(path)))
        if note is not None:  # e.g. a rebuild with new settings, killed: say so, do not lose it
            warnings.warn(f"loaded {path}, but {note}", stacklevel=2)
        return cache

    def save(self, path: Union[str, os.PathLike], overwrite: bool = False) -> None:
        """Write the cache to directory ``path`` atomically (see ``batchaug.data.format``).

        Example:
            >>> cache.save("cifar10-cache")  # doctest: +SKIP
        """
        fmt.save_cache(path, self.images, self.labels, classes=self.classes,
                       source=self.source, overwrite=overwrite, targets=self.targets)

    # --- accessors ----------------------------------------------------------------------------
    def __len__(self) -> int:
        return int(self.images.shape[0])

    @property
    def device(self) -> torch.device:
        """Where batches are delivered (and labels live), whatever the placement."""
        return self._device

    @property
    def targets(self) -> Dict[str, Tensor]:
        """The cache's target tensors by name (``masks``, ``boxes``, ``box_valid``,
        ``box_labels``; those it holds), ``{}`` for an image cache.

        Example:
            >>> sorted(cache.targets)  # doctest: +SKIP
            ['box_labels', 'box_valid', 'boxes']
        """
        return {k: getattr(self, k) for k in CACHE_TARGET_KEYS if getattr(self, k) is not None}

    @property
    def dtype(self) -> torch.dtype:
        return self.images.dtype

    @property
    def column(self) -> Union[DenseImages, RaggedImages]:
        """The images column: a ``RaggedImages`` (ragged, or JPEG), else the dense tensor
        as a ``DenseImages``; both answer the same questions (sizes, image, nbytes, to).

        Example:
            >>> cache = DeviceCache.from_tensors(torch.zeros(4, 3, 8, 8, dtype=torch.uint8),
            ...                                  torch.arange(4), device="cpu")
            >>> cache.column.sizes[0].tolist(), cache.column.ragged
            ([8, 8], False)
        """
        return self.images if isinstance(self.images, RaggedImages) else DenseImages(self.images)

    @property
    def dense(self) -> bool:
        """True when the images column is dense, one ``(N, C, H, W)`` tensor; False when it is
        ragged, a ``RaggedImages``: each image stored on its own (at its own size, ``ragged``,
        or as JPEG, ``storage="jpeg"``), so batches need a crop to one size.

        Example:
            >>> DeviceCache.from_tensors(torch.zeros(2, 3, 4, 4, dtype=torch.uint8),
            ...                          torch.arange(2), device="cpu").dense
            True
        """
        return not isinstance(self.images, RaggedImages)

    @property
    def compact(self) -> bool:
        """``not dense`` (its name before 0.4): the images column is a ``RaggedImages``."""
        return not self.dense

    @property
    def ragged(self) -> bool:
        """True when the images differ in size (each kept at its own; ``sizes`` says which)."""
        return self.column.ragged

    @property
    def storage(self) -> str:
        """``"raw"`` (pixels) or ``"jpeg"`` (JPEG bytes, decoded per batch by the loader)."""
        return self.column.storage

    @property
    def sizes(self) -> Tensor:
        """``(N, 2)`` int64 ``(height, width)`` of every image, on the CPU."""
        return self.column.sizes

    def image(self, i: int) -> Tensor:
        """Image ``i`` as ``(C, h_i, w_i)`` at its own size (a JPEG cache decodes it on the CPU).

        Example:
            >>> cache.image(0).shape  # doctest: +SKIP
            torch.Size([3, 256, 341])
        """
        return self.column.image(i)

    @property
    def channels_last(self) -> bool:
        return self.column.channels_last

    @property
    def nbytes(self) -> int:
        """Bytes held by images, labels and targets together (a ragged cache: its stored
        bytes)."""
        extra = sum(t.nbytes if isinstance(t, RaggedImages) else t.numel() * t.element_size()
                    for t in self.targets.values())
        if self.labels is not None:
            extra += self.labels.numel() * self.labels.element_size()
        return self.column.nbytes + extra

    def to(self, device: DeviceLike) -> "DeviceCache":
        """A copy of this cache with its images on ``device`` (self if already there).

        The copy has ``placement="device"``: a host or disk cache is read into ``device``.
        """
        dev = resolve_device(device)
        if dev == self.device and self.placement == "device":
            return self
        check_device_memory(self.nbytes, dev)
        labels = None if self.labels is None else self.labels.to(dev)
        images = self.column.to(dev)
        # copy=True: a host or disk cache's masks (a memory map) are never shared with the copy
        targets = {k: v.to(dev) if isinstance(v, RaggedImages)
                   else v.to(dev, copy=self.placement != "device")
                   for k, v in self.targets.items()}
        return DeviceCache(images, labels, self.classes, self.source, self.shard,
                           self.global_len, targets=targets, device=dev)

    def __repr__(self) -> str:
        column = self.column
        shape = column.shape_text
        dtype = str(self.dtype).replace("torch.", "")
        extra = f", {column.describe()}" if column.describe() else ""
        classes = "" if self.classes is None else f", classes={len(self.classes)}"
        if self.masks is not None:
            classes += f", masks={str(self.masks.dtype).replace('torch.', '')}"
            if isinstance(self.masks, RaggedImages):
                classes += " at each image's size"
        if self.boxes is not None:
            classes += f", boxes<={self.boxes.shape[1]} per image"
        shard = "" if self.shard is None else f", shard={self.shard[0]}/{self.shard[1]}"
        place = ""
        if self.placement != "device" or self.placement_reason:
            place = f", placement={self.placement}"
            if self.placement_reason:
                place += f" ({self.placement_reason})"
        return (f"DeviceCache(images={shape} {dtype}{extra}, device={self.device}, "
                f"size={_fmt_bytes(self.nbytes)}{classes}{shard}{place})")

    def __getstate__(self) -> Dict[str, Any]:
        if self.placement == "disk":
            raise pickle.PicklingError(
                "a DeviceCache with placement='disk' holds an open file and cannot be pickled; "
                "pass its path and call DeviceCache.load(path, placement='disk') where needed")
        err = pickling_error(self.device)
        if err is not None:
            raise err
        return dict(self.__dict__)


def _load_once(path: Path, dev: torch.device, shard: Optional[Tuple[int, int]],
               verify: bool, placement: Optional[str]) -> DeviceCache:
    """Rows ``[start, end)`` of every column: the pixel columns (images, masks; dense or
    ragged) where ``placement`` says, labels and boxes on ``dev``."""
    meta, mm, labels_np = fmt.open_cache(path, verify)
    ragged = fmt.is_ragged(meta)
    n = int(meta["shape"][0])
    start, end = fmt.shard_range(n, *shard) if shard else (0, n)
    index = mm if ragged else None  # a ragged cache's index rows; else images.npy's map
    images_bytes, mask_bytes = pixel_bytes(meta, index, start, end)
    # masks stay where the images do: their bytes count towards the choice
    placement, reason = resolve_placement(path, meta, images_bytes + mask_bytes, dev, placement)
    check_images_memory(placement, images_bytes, end - start, dev)
    stored = meta.get("targets") or {}
    if ragged:
        originals = meta.get("originals") if end - start == n else None  # a shard: not known
        images, mapped = place_ragged(path, fmt.DATA, index[start:end], int(meta["shape"][1]),
                                      dev, placement, meta.get("storage", "raw"),
                                      meta.get("quality"), originals)
    else:
        images, mapped = place_dense(path, fmt.IMAGES, mm, start, end, dev, placement,
                                     fmt.torch_dtype(meta["dtype"]), meta["layout"] == "NHWC")
    targets: Dict[str, Any] = {}
    mapped_masks = None
    if "masks" in stored:
        if placement == "device":
            check_device_memory(mask_bytes, dev, "masks")
        if ragged:
            targets["masks"], mapped_masks = place_ragged(
                path, fmt.MASKS_BIN, fmt.mask_index(index)[start:end].numpy(), 1, dev,
                placement)
        else:
            arr = fmt.open_masks(path, meta)
            targets["masks"], mapped_masks = place_dense(
                path, fmt.MASKS, arr, start, end, dev, placement,
                mask_dtype_from_name(stored["masks"]["dtype"]))
    for key, arr in fmt.open_boxes(path, meta).items():
        targets[key] = torch.from_numpy(np.array(arr[start:end])).to(dev)
    labels = None
    if labels_np is not None:
        labels = torch.from_numpy(np.array(labels_np[start:end])).to(dev)
    source = dict(meta.get("source") or {})
    source.setdefault("cache", str(path))
    try:
        cache = DeviceCache(images, labels, classes=meta.get("classes"), source=source,
                            shard=shard, global_len=n, placement=placement, mapped=mapped,
                            placement_reason=reason, targets=targets, device=dev)
    except (ValueError, TypeError) as exc:  # e.g. a label outside the recorded classes
        raise CacheFormatError(path / fmt.LABELS, str(exc)) from None
    if not ragged:  # a ragged column's MappedRows is its own ``mapped``
        cache.mapped_masks = mapped_masks
    return cache
