"""Ragged image storage: every image at its own size, raw or as JPEG, bytes back to back.

A photo dataset's images differ in size; padding them to the largest (or squaring them) wastes
memory and changes what a training-time crop sees. ``RaggedImages`` keeps image ``i`` as
``index[i] = (offset, nbytes, height, width, crc32)`` into one flat uint8 buffer ``data``: its raw
``(C, h, w)`` bytes (``storage="raw"``) or its JPEG bitstream (``storage="jpeg"``, a quarter of
the raw bytes or less at quality 90). ``data`` lives where the cache's placement says: on the
device, in (pinned) host memory, or in the memory map of ``images.bin``; the index always stays
on the CPU, where batches are planned (their padded size is known without a device sync).

``batch_bytes`` and ``pad_images`` turn a batch of indices into ``(B, C, Hmax, Wmax)`` uint8 plus
``(B, 2)`` sizes: the form ``batchaug.data.crop``'s crop stage takes. The JPEG codec (encode,
decode, window decode) is ``batchaug.data.jpeg``.
"""
from __future__ import annotations

import contextlib
import zlib
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor

from batchaug.functional._utils import for_each, single_threaded  # noqa: F401 (importable here)
from batchaug.data.jpeg import corrupt_sample, decode_jpegs, encode_jpeg
from batchaug.data.storage import MappedRows, copy_images_chunked
from batchaug.data.atomic import write_file
from batchaug.data.meta import DATA, INDEX, STORAGES, CacheFormatError, open_npy

#: Columns of the index: byte offset into ``data``, byte count, height, width, and the bytes'
#: CRC-32, which every JPEG batch is checked against before decoding (a damaged bitstream can
#: decode without an error, to wrong pixels).
INDEX_COLUMNS = 5


def check_storage(storage: Any, quality: Any, dtype: Optional[torch.dtype] = None
                  ) -> Tuple[str, Optional[int]]:
    """Validate ``storage=`` / ``quality=`` (and ``dtype``): ``(storage, quality or None)``."""
    if storage not in STORAGES:
        raise ValueError(f"storage must be one of {list(STORAGES)}, got {storage!r}")
    if storage == "raw":
        return storage, None
    if isinstance(quality, bool) or not isinstance(quality, int) or not 1 <= quality <= 100:
        raise ValueError(f"quality must be an int in 1..100 (JPEG quality), got {quality!r}")
    if dtype is not None and dtype != torch.uint8:
        raise ValueError(f"storage='jpeg' stores 8-bit images: pass dtype=torch.uint8, got "
                         f"{dtype} (JPEG cannot hold floating values)")
    return storage, int(quality)


class RaggedImages:
    """``N`` uint8 images of their own sizes (raw ``(C, h, w)`` bytes or JPEG), back to back.

    ``data`` and ``index`` as the module docstring says (``index`` an ``(N, 5)`` int64 CPU
    tensor); ``mapped`` is the file behind a ``placement="disk"`` cache.

    Example:
        >>> imgs = RaggedImages.from_list([torch.zeros(3, 4, 6, dtype=torch.uint8),
        ...                                  torch.ones(3, 5, 2, dtype=torch.uint8)])
        >>> imgs.shape, imgs.image(1).shape
        ((2, 3, 5, 6), torch.Size([3, 5, 2]))
    """

    def __init__(self, data: Tensor, index: Tensor, channels: int, storage: str = "raw",
                 quality: Optional[int] = None, mapped: Optional[MappedRows] = None,
                 originals: Optional[int] = None) -> None:
        if data.dim() != 1 or data.dtype != torch.uint8:
            raise ValueError(f"data must be a 1-D uint8 tensor, got {data.dtype} "
                             f"{tuple(data.shape)}")
        if index.dim() != 2 or index.shape[1] != INDEX_COLUMNS or index.dtype != torch.int64:
            raise ValueError(f"index must be an (N, {INDEX_COLUMNS}) int64 tensor, got "
                             f"{index.dtype} {tuple(index.shape)}")
        self.data = data
        self.index = index.cpu()
        self.channels = int(channels)
        self.storage = storage
        self.quality = quality
        self.mapped = mapped
        #: how many JPEG images are their source file's own bytes (the rest were encoded at
        #: ``quality``); None where unknown (a part of a cache, or one written before 0.3)
        self.originals = originals

    @classmethod
    def from_list(cls, images: Sequence[Tensor], storage: str = "raw",
                  quality: Optional[int] = None) -> "RaggedImages":
        """Pack ``(C, h, w)`` uint8 CPU images (one channel count) into one buffer."""
        builder = RaggedBuilder(storage, quality)
        for k, im in enumerate(images):
            builder.add(im, k)
        return builder.finish()

    # --- what a cache reports -------------------------------------------------------------
    def __len__(self) -> int:
        return int(self.index.shape[0])

    def __getitem__(self, item: Any) -> Tensor:
        # a fixed cache's images are one (N, C, H, W) tensor that indexing slices; these have
        # their own sizes (or are JPEG bytes) and cannot be one tensor: say what works instead
        raise TypeError(
            f"the images of a {'JPEG' if self.storage == 'jpeg' else 'ragged'} cache have "
            f"their own sizes and cannot be indexed as one tensor; use "
            f"cache.image(i) for image i as a (C, h, w) tensor, e.g. [cache.image(i) for i in "
            f"range(4)], or a DeviceLoader with crop=... for batches of one size")

    @property
    def dtype(self) -> torch.dtype:
        return torch.uint8

    @property
    def device(self) -> torch.device:
        return self.data.device

    @property
    def sizes(self) -> Tensor:
        """``(N, 2)`` int64 ``(height, width)`` of each image, on the CPU."""
        return self.index[:, 2:4].clone()

    @property
    def shape(self) -> Tuple[int, int, int, int]:
        """``(N, C, largest height, largest width)``."""
        if len(self) == 0:
            return (0, self.channels, 0, 0)
        hw = self.index[:, 2:4].amax(0)
        return (len(self), self.channels, int(hw[0]), int(hw[1]))

    @property
    def ragged(self) -> bool:
        return len(self) > 0 and bool((self.index[:, 2:4] != self.index[0, 2:4]).any())

    #: never channels_last: each image's bytes are its own ``(C, h, w)`` (JPEG: a bitstream)
    channels_last = False

    @property
    def shape_text(self) -> str:
        """The shape for a repr: a ragged column's largest height and width."""
        n, c, h, w = self.shape
        return f"({n}, {c}, h<={h}, w<={w})" if self.ragged else str((n, c, h, w))

    @property
    def nbytes(self) -> int:
        """Bytes of image data (the flat buffer) plus the index."""
        return int(self.data.numel()) + self.index.numel() * 8

    def bytes_of(self, i: int) -> Tensor:
        """Image ``i``'s stored bytes (a view of ``data``)."""
        off, nb = int(self.index[i, 0]), int(self.index[i, 1])
        return self.data[off:off + nb]

    def image(self, i: int) -> Tensor:
        """Image ``i`` as ``(C, h, w)`` uint8 (raw: a view on the data's device; JPEG: decoded
        on the CPU)."""
        if not -len(self) <= i < len(self):
            raise IndexError(f"image index {i} is out of range for {len(self)} images")
        i = i % len(self)
        _, _, h, w, _ = (int(v) for v in self.index[i])
        if self.storage == "raw":
            return self.bytes_of(i).view(self.channels, h, w)
        buf, local = batch_bytes(self, torch.tensor([i]))
        check_crcs(buf, local, [i])
        return decode_jpegs([buf], torch.device("cpu"), names=[i])[0]

    def to(self, device: torch.device, pin: bool = False) -> "RaggedImages":
        """A copy with ``data`` on ``device`` (pinned host memory with ``pin``)."""
        data = torch.empty(self.data.numel(), dtype=torch.uint8, device=device,
                           pin_memory=pin and device.type == "cpu")
        copy_images_chunked(data, self.data)
        return RaggedImages(data, self.index.clone(), self.channels, self.storage,
                             self.quality, originals=self.originals)

    def describe(self) -> str:
        kind = "jpeg" if self.storage == "jpeg" else "raw"
        q = f" q{self.quality}" if self.quality is not None else ""
        kept = f" ({originals_text(self.originals, len(self))})" \
            if self.storage == "jpeg" and self.originals is not None else ""
        return f"{kind}{q}{kept}{', ragged' if self.ragged else ''}"


class RaggedBuilder:
    """Collects ``(C, h, w)`` uint8 images one by one (encoding them for ``storage="jpeg"``)."""

    def __init__(self, storage: str = "raw", quality: Optional[int] = None) -> None:
        self.storage, self.quality = check_storage(storage, 90 if quality is None else quality)
        self.parts: List[Tensor] = []
        self.rows: List[Tuple[int, int, int, int, int]] = []
        self.channels: Optional[Tuple[int, int]] = None  # (first index, its channel count)
        self.offset = 0
        self.originals = 0  # JPEG images stored as their source's own bytes

    def encode(self, image: Tensor, name: Any, original: Optional[Tensor] = None) -> Tensor:
        """The bytes ``add`` stores for ``image`` (checked: uint8, same channel count).

        ``original``: the source file's JPEG bytes where the image came from one, already
        checked to decode to exactly ``image`` (``original_if_exact``); stored as they are
        instead of encoding ``image`` again (no second, lossy encode)."""
        if image.dtype != torch.uint8:
            raise ValueError(f"{name}: a ragged (own sizes or JPEG) cache holds uint8 images, got "
                             f"{image.dtype}: pass dtype=torch.uint8")
        if self.channels is None:
            self.channels = (name, int(image.shape[0]))
        elif int(image.shape[0]) != self.channels[1]:
            raise ValueError(f"{name} has {image.shape[0]} channel(s) but {self.channels[0]} "
                             f"has {self.channels[1]}: images with different channel counts "
                             f"cannot share a cache; convert them all to one mode, e.g. "
                             f"pre_transform=lambda im: im.convert('RGB')")
        image = image.detach().cpu()
        if self.storage == "jpeg":
            if original is not None:
                self.originals += 1
                return original
            return encode_jpeg(image, self.quality)
        return image.contiguous().reshape(-1)

    def add(self, image: Tensor, name: Any, original: Optional[Tensor] = None) -> None:
        data = self.encode(image, name, original)
        self.parts.append(data)
        self.rows.append((self.offset, int(data.numel()), int(image.shape[1]),
                          int(image.shape[2]), zlib.crc32(data.numpy())))
        self.offset += int(data.numel())

    def finish(self, device: Optional[torch.device] = None) -> "RaggedImages":
        data = torch.cat(self.parts) if self.parts else torch.empty(0, dtype=torch.uint8)
        if device is not None and device != data.device:
            data = data.to(device)
        index = torch.tensor(self.rows, dtype=torch.int64).reshape(-1, INDEX_COLUMNS)
        jpeg = self.storage == "jpeg"
        return RaggedImages(data, index, self.channels[1] if self.channels else 0,
                             self.storage, self.quality if jpeg else None,
                             originals=self.originals if jpeg else None)


# --- batches --------------------------------------------------------------------------------
def batch_bytes(images: RaggedImages, idx: Tensor, pin: bool = False,
                stream: Optional["torch.cuda.Stream"] = None,
                out: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """The stored bytes of images ``idx`` (CPU int64) gathered into one host buffer (``out``, a
    reused flat uint8 buffer, else a new one, pinned with ``pin``) in batch order: ``(buffer,
    index rows rebased to it)``. A ``"disk"`` cache is read with ``preadv`` sorted by offset,
    never through page faults. Bytes on a CUDA device are gathered and copied back on
    ``stream``, so the reader thread waits for that stream only, never for the training step."""
    rows = images.index.index_select(0, idx)
    nb = rows[:, 1]
    offsets = torch.cumsum(nb, 0) - nb
    total = int(nb.sum())
    buf = torch.empty(total, dtype=torch.uint8, pin_memory=pin) if out is None else out[:total]
    local = rows.clone()
    local[:, 0] = offsets
    view = memoryview(buf.numpy()) if buf.numel() else None
    src_off = rows[:, 0].tolist()
    dst_off = offsets.tolist()
    counts = nb.tolist()
    if images.mapped is not None:
        images.mapped.check_unchanged()
        for k in sorted(range(len(counts)), key=src_off.__getitem__):
            if counts[k]:
                images.mapped.read(src_off[k], view[dst_off[k]:dst_off[k] + counts[k]])
    else:
        src = images.data if images.data.device.type == "cpu" else None
        if src is None and counts:  # bytes on the device: one gather there, one copy back
            on = torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()
            with on:
                sel = torch.cat([images.data[o:o + c] for o, c in zip(src_off, counts)])
                buf.copy_(sel, non_blocking=stream is not None and pin)
                if stream is not None and pin:
                    stream.synchronize()  # this stream's gather and copy only
        elif src is not None:
            for o, d, c in zip(src_off, dst_off, counts):
                buf[d:d + c].copy_(src[o:o + c])
    return buf, local


def check_crcs(buf: Tensor, local: Tensor, names: Sequence[int]) -> None:
    """Each image's bytes in ``buf`` against the CRC-32 its index row recorded."""
    arr = buf.numpy()
    for name, (o, n, _, _, crc) in zip(names, local.tolist()):
        if zlib.crc32(arr[o:o + n]) != crc:
            raise corrupt_sample(name, "do not match the CRC-32 recorded when they were written")


def pad_images(parts: Sequence[Tensor], sizes: Tensor, channels: int,
               buffer: Optional[Tensor] = None) -> Tensor:
    """``(C, h_i, w_i)`` images (one device) into a padded ``(B, C, Hmax, Wmax)`` batch, image
    ``i`` at the top left; ``sizes`` is their CPU ``(B, 2)``. The batch is channels_last when
    the images are (decoded JPEGs: CHW views of HWC memory), so each image is copied as whole
    rows. The padding is left unwritten (the crop stage never reads it). ``buffer``, a flat
    uint8 tensor of at least ``B * C * Hmax * Wmax`` bytes, is written instead of a fresh
    allocation, which costs a page fault per page (``prefetch.Delivery`` reuses one).
    """
    if len(parts) == 0:
        return torch.empty(0, channels, 0, 0, dtype=torch.uint8)
    hmax, wmax = (int(v) for v in sizes.amax(0))
    device = parts[0].device
    b = len(parts)
    hwc = channels > 1 and parts[0].stride(0) == 1
    if device.type != "cpu":
        # one launch per image would be ~B launches per batch from the reader thread: pack
        # the images (one cat, a row's spare bytes after them) and gather their rows into the
        # batch (one index_select)
        row = wmax * channels if hwc else wmax
        flat = [p.permute(1, 2, 0).reshape(-1) if hwc else p.reshape(-1) for p in parts]
        offsets = torch.tensor([0] + [f.numel() for f in flat[:-1]], dtype=torch.int64)
        packed = torch.cat(flat + [torch.empty(row, dtype=torch.uint8, device=device)])
        return pad_rows(packed, offsets.cumsum(0), sizes, channels, hwc, buffer)
    out = _padded_out(b, channels, hmax, wmax, hwc, device, buffer)
    if hwc:
        out = out.permute(0, 3, 1, 2)
    # On the CPU one copy per image (a memcpy of its rows), single-threaded: a copy this small
    # split over OpenMP threads was many times slower here, and a gather by element needs an
    # int64 index eight times the padded batch (benchmarks/bench_ragged_pad.py); inside
    # ``image_threads`` the images are split over threads instead.
    sl = sizes.tolist()

    def copy(i: int) -> None:
        out[i, :, :sl[i][0], :sl[i][1]].copy_(parts[i])

    with single_threaded():
        for_each(copy, b)
    return out


def _padded_out(b: int, channels: int, hmax: int, wmax: int, hwc: bool, device: torch.device,
                buffer: Optional[Tensor]) -> Tensor:
    shape = (b, hmax, wmax, channels) if hwc else (b, channels, hmax, wmax)
    if buffer is None:
        return torch.empty(shape, dtype=torch.uint8, device=device)
    return buffer[:b * channels * hmax * wmax].view(shape)


def row_starts(offsets: Tensor, sizes: Tensor, channels: int, hwc: bool) -> Tuple[Tensor, int]:
    """Where each row of a padded batch starts in the packed bytes (CPU int64, rows in the
    batch's memory order: ``(B, Hmax)`` rows of ``Wmax * C`` bytes for HWC images, ``(B, C,
    Hmax)`` rows of ``Wmax`` for CHW ones), and the row's length. Image ``i``'s bytes start at
    ``offsets[i]``; a row below an image (padding) starts at 0."""
    h, w = sizes[:, 0], sizes[:, 1]
    hmax, wmax = (int(v) for v in sizes.amax(0))
    y = torch.arange(hmax)
    if hwc:
        starts = offsets[:, None] + y * (w * channels)[:, None]
        inside = y < h[:, None]
        return torch.where(inside, starts, 0).reshape(-1), wmax * channels
    c = torch.arange(channels)[:, None]
    starts = offsets[:, None, None] + (c * h[:, None, None] + y) * w[:, None, None]
    inside = (y < h[:, None, None]).expand(-1, channels, -1)
    return torch.where(inside, starts, 0).reshape(-1), wmax


def pad_rows(packed: Tensor, offsets: Tensor, sizes: Tensor, channels: int, hwc: bool,
             buffer: Optional[Tensor] = None) -> Tensor:
    """``pad_images`` from one flat uint8 buffer ``packed`` holding image ``i`` (``(C, h_i,
    w_i)`` bytes, or ``(h_i, w_i, C)`` with ``hwc``) at ``offsets[i]`` (CPU int64): one
    ``index_select`` of row windows of the padded width, whatever the batch size. A window
    reads past a narrower image's row into the padding, so ``packed`` must reach a full window
    past every row's start (``ValueError`` otherwise: keep ``Wmax * C`` spare bytes at the end).

    Example:
        >>> a, b = torch.arange(6, dtype=torch.uint8), torch.arange(6, 10, dtype=torch.uint8)
        >>> packed = torch.cat([a, b, torch.zeros(3, dtype=torch.uint8)])
        >>> x = pad_rows(packed, torch.tensor([0, 6]), torch.tensor([[2, 3], [2, 2]]), 1, False)
        >>> x[0, 0].tolist(), x[1, 0, :, :2].tolist()
        ([[0, 1, 2], [3, 4, 5]], [[6, 7], [8, 9]])
    """
    b = sizes.shape[0]
    hmax, wmax = (int(v) for v in sizes.amax(0))
    starts, row = row_starts(offsets, sizes, channels, hwc)
    if int(starts.max()) + row > packed.numel():
        raise ValueError(f"pad_rows: packed must hold a whole row ({row} bytes) past every "
                         f"row's start, {int(starts.max()) + row} bytes, got {packed.numel()}")
    out = _padded_out(b, channels, hmax, wmax, hwc, packed.device, buffer)
    if packed.device.type == "cuda":
        starts = starts.pin_memory().to(packed.device, non_blocking=True)
    windows = packed.as_strided((packed.numel() - row + 1, row), (1, 1))
    torch.index_select(windows, 0, starts, out=out.view(-1, row))
    return out.permute(0, 3, 1, 2) if hwc else out


def raw_parts(data: Tensor, index: Tensor, channels: int) -> List[Tensor]:
    """Views ``(C, h, w)`` of raw images in ``data`` at ``index`` rows (CPU int64)."""
    return [data[o:o + n].view(channels, h, w) for o, n, h, w, _ in index.tolist()]


# --- files ------------------------------------------------------------------------------------
def write_ragged_files(tmp: Path, images: RaggedImages) -> Dict[str, Any]:
    """Write ``images.bin`` (the bytes in image order) and ``index.npy`` into ``tmp``; returns
    their ``files`` records (size and SHA-256)."""
    record, index = write_ragged_bytes(tmp / DATA, images)
    return {DATA: record, INDEX: write_file(tmp / INDEX, index_bytes(index.numpy()))}


def write_ragged_bytes(fp: Path, column: RaggedImages) -> Tuple[Dict[str, Any], Tensor]:
    """A ragged column's bytes in row order, back to back from offset 0, into the file ``fp``
    (``images.bin``, ``masks.bin``), a chunk at a time: ``(its files record, the index
    rebased to the file)``. A column whose rows are not back to back (a selection) is
    repacked first."""
    # in row order, from offset 0: a shard's view may start anywhere in a bigger buffer
    index = column.index.clone()
    if len(index):
        first, last = int(index[0, 0]), int(index[-1, 0] + index[-1, 1])
        expected = torch.cumsum(index[:, 1], 0) - index[:, 1] + first
        if not torch.equal(expected, index[:, 0]):  # not back to back: repack
            data = batch_bytes(column, torch.arange(len(index)))[0]
            index[:, 0] = expected - first
            column = RaggedImages(data, index, column.channels, column.storage,
                                  column.quality)
            index = column.index.clone()
            first, last = 0, int(index[:, 1].sum())
        index[:, 0] -= first
    else:
        first = last = 0
    step = 64 * 1024 * 1024
    return write_file(fp, (column.data[a:min(last, a + step)].cpu().numpy().tobytes()
                           for a in range(first, last, step))), index


def index_bytes(index: np.ndarray) -> bytes:
    """index.npy's exact content for an ``(N, 5)`` integer array."""
    import io

    buf = io.BytesIO()
    np.save(buf, np.asarray(index).astype("<i8").reshape(-1, INDEX_COLUMNS), allow_pickle=False)
    return buf.getvalue()


def ragged_meta_fields(ragged: bool, storage: str, quality: Optional[int],
                       originals: Optional[int] = None) -> Dict[str, Any]:
    """meta.json's version-2 fields of a ragged cache (``originals``: how many JPEG images
    are their source files' own bytes)."""
    out: Dict[str, Any] = {"storage": storage, "ragged": bool(ragged)}
    if storage == "jpeg":
        out["quality"] = int(quality)
        if originals is not None:
            out["originals"] = int(originals)
    return out


def originals_text(originals: Optional[int], n: int) -> str:
    """``cache info``'s words for how a JPEG cache's images were stored."""
    if originals is None:
        return "source bytes or encoded: not recorded"
    if originals == n:
        return "all the source files' own bytes"
    if originals == 0:
        return "all encoded at this quality"
    return f"{originals} the source files' own bytes, {n - originals} encoded at this quality"


def open_ragged(path: Path, meta: Dict[str, Any]) -> np.ndarray:
    """A ragged cache directory's index.npy, checked against meta.json's shape and the data
    file's size."""
    n = int(meta["shape"][0])
    fp = path / INDEX
    data_size = (path / DATA).stat().st_size
    index = open_npy(fp, (n, INDEX_COLUMNS), np.dtype("<i8"), mmap=False)
    if n:
        off, nb, h, w = index[:, 0], index[:, 1], index[:, 2], index[:, 3]
        ends = off + nb
        if (off < 0).any() or (nb < 0).any() or (h < 1).any() or (w < 1).any() or \
                int(ends.max()) > data_size or (off[1:] != ends[:-1]).any() or off[0] != 0:
            raise CacheFormatError(fp, "offsets, byte counts or sizes are inconsistent with "
                                       f"{DATA} ({data_size} bytes)")
        c = int(meta["shape"][1])
        if meta.get("storage") == "raw" and (nb != c * h * w).any():
            raise CacheFormatError(fp, "a raw image's byte count is not C * height * width")
        if int(h.max()) != int(meta["shape"][2]) or int(w.max()) != int(meta["shape"][3]):
            raise CacheFormatError(fp, "the largest image size does not match meta.json's shape")
    return index


def describe_sizes(index: np.ndarray) -> str:
    """``min/median/max`` of heights and widths, for ``cache info``."""
    if len(index) == 0:
        return "no images"
    h, w = index[:, 2], index[:, 3]
    return (f"height {int(h.min())}/{int(np.median(h))}/{int(h.max())}, width "
            f"{int(w.min())}/{int(np.median(w))}/{int(w.max())} (min/median/max)")
