"""Batches of a compact (ragged or JPEG) cache: padded ``(B, C, Hmax, Wmax)`` uint8 + sizes.

``DeviceLoader`` hands each batch to its crop (an ``Augment``, ``with_sizes``), which reads image
``i`` from ``images[i, :, :h_i, :w_i]`` only; the padding is zeros. ``produce`` is the part a
reader thread can do ahead (gather the batch's bytes, decode JPEG on CPU threads, or enqueue the
copy and the decode on a side CUDA stream and record an event); ``receive`` is the caller's part
(its stream waits on that event, nothing else: no host sync).

* raw bytes on the batch's device: padded straight from the cache's buffer, one copy per image.
* raw bytes on the host or disk: gathered into one host buffer (pinned for CUDA; a disk cache
  with ``preadv``, sorted by offset), copied over once (the compact bytes, never the padding),
  padded there.
* JPEG: the batch's bitstreams gathered on the host (nvJPEG reads host bitstreams; a
  device-placed cache's are gathered on the side stream and copied into pinned memory there,
  so the reader never waits for the training step), decoded in one call: on the CPU split over
  ``threads`` threads; on CUDA one batched call on the side stream, so the decoded batch is
  ordered with the copy stream and the consumer by one event. Only the sampled images are
  decoded.

On CUDA the batch's sizes travel as the bytes do: from pinned memory, non-blocking, on the side
stream, under the same event (``device_sizes=False``, for a second gather such as the masks,
whose sizes are the images': they stay on the host).
"""
from __future__ import annotations

import queue
from typing import Any, List, Optional, Tuple

import torch
from torch import Tensor

from batchaug.data.compact import (
    CompactImages,
    _corrupt,
    batch_bytes,
    check_crcs,
    decode_jpegs,
    pad_images,
    raw_parts,
)


class CompactBatches:
    """``produce(idx)`` then ``receive(item)`` -> ``(images, sizes)`` on ``device``: the
    ragged column delivery (the interface of ``batchaug.data.prefetch``'s).

    ``base`` is added to ``idx`` to name a sample in errors (a shard's first global index).
    With ``device_sizes=False`` the sizes ``receive`` returns stay on the CPU (not copied).

    Example:
        >>> imgs = CompactImages.from_list([torch.zeros(3, 4, 6, dtype=torch.uint8),
        ...                                  torch.ones(3, 5, 2, dtype=torch.uint8)])
        >>> batches = CompactBatches(imgs, torch.device("cpu"))
        >>> x, sizes = batches.receive(batches.produce(torch.tensor([1, 0])))
        >>> x.shape, sizes.tolist()
        (torch.Size([2, 3, 5, 6]), [[5, 2], [4, 6]])
    """

    def __init__(self, images: CompactImages, device: torch.device, threads: int = 1,
                 base: int = 0, device_sizes: bool = True) -> None:
        self.images = images
        self.device = device
        self.threads = max(1, int(threads))
        self.base = int(base)
        self.device_sizes = device_sizes
        self.cuda = device.type == "cuda"
        self.stream = None
        if self.cuda:
            with torch.cuda.device(device):
                self.stream = torch.cuda.Stream(device)
                # the side stream reads the cache's device bytes: after their upload
                self.stream.wait_stream(torch.cuda.current_stream(device))
        # CPU: padded batches are written into reused buffers (a fresh one the size of a
        # padded photo batch costs a page fault per page); ``release`` hands one back.
        self._buffers: List[Tensor] = []
        self._free: "queue.Queue[int]" = queue.Queue()
        self.set_buffers(1)

    ahead = True
    device_index = False

    def reset(self) -> None:
        """Before an epoch: every padded-batch buffer free again."""
        self.set_buffers(len(self._buffers))

    def thread_setup(self) -> None:
        """Run first on a reader thread: a new thread's current CUDA device is 0, and its first
        CUDA call (a pinned buffer, a stream) would otherwise create a context there."""
        if self.cuda:
            torch.cuda.set_device(self.device)

    def set_buffers(self, n: int) -> None:
        """Use ``n`` reusable padded-batch buffers (a reader ``d`` batches ahead needs
        ``d + 2``: queued, being filled, being used); all free again."""
        if len(self._buffers) != n:
            self._buffers = [torch.empty(0, dtype=torch.uint8) for _ in range(n)]
        self._free = queue.Queue()
        for k in range(n):
            self._free.put(k)

    def _take(self, nbytes: int, stop: Any) -> Optional[Tuple[int, Tensor]]:
        from batchaug.data.prefetch import wait_get

        slot = wait_get(self._free, stop)
        if slot is None:
            return None
        if self._buffers[slot].numel() < nbytes:  # grows to the largest batch seen, then stays
            self._buffers[slot] = torch.empty(int(nbytes * 1.25), dtype=torch.uint8)
        return slot, self._buffers[slot]

    def release(self, item: Tuple[Any, ...]) -> None:
        """The padded batch of ``item`` is no longer used: its buffer may be written again."""
        if item[0] == "ready" and item[3] is not None:
            self._free.put(item[3])

    def _pad_cpu(self, parts, sizes: Tensor, stop: Any) -> Tuple[Any, ...]:
        if not len(parts):
            return ("ready", pad_images(parts, sizes, self.images.channels), sizes, None)
        hmax, wmax = (int(v) for v in sizes.amax(0))
        taken = self._take(len(parts) * self.images.channels * hmax * wmax, stop)
        if taken is None:  # stopping
            return ("ready", pad_images(parts, sizes, self.images.channels), sizes, None)
        slot, buf = taken
        return ("ready", pad_images(parts, sizes, self.images.channels, buf), sizes, slot)

    def produce(self, idx: Tensor, stop: Any = None, decode: bool = True) -> Tuple[Any, ...]:
        """The reader thread's part of a batch (see the class doc). ``decode=False`` on a CPU
        JPEG cache: ``("bytes", bitstreams, sizes, names)``, gathered and CRC-checked but not
        decoded (the caller decodes the windows it needs: ``batchaug.data.roi_crop``)."""
        images, c = self.images, self.images.channels
        rows = images.index.index_select(0, idx)
        sizes = rows[:, 2:4].contiguous()
        on_device = images.mapped is None and images.data.device == self.device
        if images.storage == "raw" and on_device:
            if self.cuda:  # padded by the caller, on its stream, from the cache's buffer
                with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
                    _, _, dev_sizes, event = self._done(None, sizes)
                return ("direct", rows, dev_sizes, event)
            return self._pad_cpu(raw_parts(images.data, rows, c), sizes, stop)
        buf, local = batch_bytes(images, idx, pin=self.cuda, stream=self.stream)
        if images.storage == "raw":
            if not self.cuda:
                return self._pad_cpu(raw_parts(buf, local, c), sizes, stop)
            with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
                dev_buf = buf.to(self.device, non_blocking=True)
                x = pad_images(raw_parts(dev_buf, local, c), sizes, c)
                return self._done(x, sizes)
        names = (idx + self.base).tolist()
        check_crcs(buf, local, names)  # a damaged bitstream may decode, to wrong pixels
        data = [buf[o:o + n] for o, n, _, _, _ in local.tolist()]
        if not decode and not self.cuda:
            return ("bytes", data, sizes, names)
        if not self.cuda:
            parts = decode_jpegs(data, self.device, self.threads, names)
            return self._pad_cpu(self._checked(parts, sizes, names), sizes, stop)
        with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
            parts = decode_jpegs(data, self.device, self.threads, names)
            return self._done(pad_images(self._checked(parts, sizes, names), sizes, c), sizes)

    def _checked(self, parts, sizes: Tensor, names):
        for name, p, (h, w) in zip(names, parts, sizes.tolist()):
            if tuple(p.shape) != (self.images.channels, h, w):
                raise _corrupt(name, f"decode to {tuple(p.shape)}, not the recorded "
                                  f"{(self.images.channels, h, w)}")
        return parts

    def _done(self, x: Optional[Tensor], sizes: Tensor) -> Tuple[Any, ...]:
        """On the side stream: the sizes copied over after ``x``'s work, then the event."""
        if self.device_sizes:  # pinned, so the copy is asynchronous; ordered by the event
            sizes = sizes.pin_memory().to(self.device, non_blocking=True)
        event = torch.cuda.Event()
        event.record(self.stream)
        return ("cuda", x, sizes, event)

    def receive(self, item: Tuple[Any, ...]) -> Tuple[Tensor, Tensor]:
        """``(padded batch, sizes)`` on the device; on the CPU the batch lives in a reused
        buffer until ``release(item)``."""
        kind = item[0]
        if kind == "ready":  # a CPU device: the sizes are already there
            return item[1], item[2]
        current = torch.cuda.current_stream(self.device)
        current.wait_event(item[3])  # no use of the batch before its copy/decode finished
        sizes = item[2]
        if sizes.device.type == "cuda":
            sizes.record_stream(current)  # allocated on the side stream
        if kind == "direct":
            rows = item[1]
            c = self.images.channels
            return pad_images(raw_parts(self.images.data, rows, c), rows[:, 2:4], c), sizes
        x = item[1]
        x.record_stream(current)  # allocated on the side stream: kept until the caller's use
        return x, sizes


def square_crops(images: CompactImages, idx: Tensor, size: int) -> Tensor:
    """Images ``idx`` of a compact cache, each resized (shorter side ``size``) and centre-cropped
    to ``size`` x ``size`` on the CPU: a fixed-size batch for tools that show or time a recipe
    (``batchaug show``, ``batchaug bench --data``) on a ragged or JPEG cache.

    Example:
        >>> imgs = CompactImages.from_list([torch.zeros(3, 4, 6, dtype=torch.uint8),
        ...                                  torch.ones(3, 5, 2, dtype=torch.uint8)])
        >>> square_crops(imgs, torch.tensor([0, 1]), 3).shape
        torch.Size([2, 3, 3, 3])
    """
    from batchaug.compose import Augment
    from batchaug.transforms import CenterCrop, Resize

    batches = CompactBatches(images, torch.device("cpu"))
    x, sizes = batches.receive(batches.produce(idx))
    crop = Augment(Resize(size), CenterCrop(size))
    return crop.with_sizes(x, sizes)[0].clone()  # (never a view of the reused buffer)


def smallest_side(images: CompactImages, idx: Tensor) -> int:
    """The shortest side among images ``idx``: the largest square none of them is upscaled to."""
    return int(images.index.index_select(0, idx)[:, 2:4].amin()) if idx.numel() else 1
