"""How a ragged column's batches are gathered: the rows' bytes by their index, sizes alongside.

``RaggedRows`` is the ragged column's gather for ``batchaug.data.prefetch.Delivery``: ``fill``
gathers the batch's stored bytes (or hands over the column's own where they already are where
the batch goes), ``finish`` turns them into a padded ``(B, C, Hmax, Wmax)`` uint8 batch plus
``(B, 2)`` sizes: raw images padded, JPEG ones decoded (``decode``, the one place a JPEG batch
is decoded: only the sampled images, on the reader thread over ``threads`` threads on the CPU,
in one batched nvJPEG call on the side stream on CUDA). The crop stage reads image ``i`` from
``images[i, :, :h_i, :w_i]`` only; the padding is never read.
"""
from __future__ import annotations

from typing import Any, Callable, List, Optional, Tuple

import torch
from torch import Tensor

from batchaug.functional._utils import image_threads
from batchaug.data.jpeg import corrupt_sample, decode_jpegs
from batchaug.data.ragged import (RaggedImages, batch_bytes, check_crcs, pad_images, pad_rows,
                                   raw_parts)
from batchaug.data.prefetch import Delivery


class RaggedRows:
    """A ragged column's gather for ``Delivery``: images ``idx`` by their index rows.

    ``base`` is added to ``idx`` to name a sample in errors (a shard's first global index).

    Example:
        >>> imgs = RaggedImages.from_list([torch.zeros(3, 4, 6, dtype=torch.uint8),
        ...                                  torch.ones(3, 5, 2, dtype=torch.uint8)])
        >>> d = Delivery(RaggedRows(imgs, torch.device("cpu")), torch.device("cpu"), 2, 1)
        >>> x, sizes = d.receive(d.produce(torch.tensor([1, 0])))
        >>> x.shape, sizes.tolist()
        (torch.Size([2, 3, 5, 6]), [[5, 2], [4, 6]])
    """

    def __init__(self, images: RaggedImages, device: torch.device, threads: int = 1,
                 base: int = 0) -> None:
        self.images = images
        self.device = device
        self.threads = max(1, int(threads))
        self.base = int(base)
        #: raw bytes are copied over as they are; JPEG bitstreams stay on the host (the
        #: decoder reads them there)
        self.upload = images.storage == "raw"

    dtype = torch.uint8

    def batch_numel(self, batch_size: int) -> int:
        return 0  # a batch's bytes depend on its images: buffers grow to the largest seen

    def fill(self, idx: Tensor, take: Callable[[int], Tensor], stream: Any = None
             ) -> Tuple[Tensor, Tuple[Tensor, Tensor]]:
        """``(bytes, (index rows rebased to them, idx))`` of images ``idx`` (CPU int64)."""
        images = self.images
        rows = images.index.index_select(0, idx)
        if self.upload and images.mapped is None and images.data.device == self.device:
            return images.data, (rows, idx)  # already where the batch goes: padded from there
        total = int(rows[:, 1].sum())
        # raw bytes padded on the device: a row's spare bytes after them, for pad_rows' windows
        spare = int(rows[:, 3].max()) if self.upload and self.device.type != "cpu" and \
            len(rows) else 0
        out = take(total + spare)
        buf, local = batch_bytes(images, idx, pin=self.device.type == "cuda", stream=stream,
                                 out=out)
        return (out[:total + spare] if spare else buf), (local, idx)

    def finish(self, data: Tensor, rows: Tuple[Tensor, Tensor],
               take: Optional[Callable[[int], Tensor]], hold: Optional[List[Any]] = None
               ) -> Tuple[Tensor, Tensor]:
        """The padded batch (into ``take(nbytes)`` when given) and its CPU sizes. ``hold``
        receives the device tensors the queued padding still reads (nvJPEG's decoded images:
        the decoder writes its outputs on its own stream, so memory freed while the padding
        is pending could be handed to, and overwritten by, the next decode), to be kept until
        the batch's event."""
        local, idx = rows
        c = self.images.channels
        sizes = local[:, 2:4].contiguous()
        if self.images.storage == "raw":
            if data.device.type != "cpu" and len(local) and \
                    int((local[:, 0] + local[:, 1]).max()) + int(sizes[:, 1].max()) \
                    <= data.numel():  # packed with a row to spare: one gather of its rows
                return pad_rows(data, local[:, 0], sizes, c, False), sizes
            parts = raw_parts(data, local, c)
        else:
            parts = self.decode(data, local, idx)
            if hold is not None:
                hold.extend(parts)
        out = None
        if take is not None and len(parts):
            hmax, wmax = (int(v) for v in sizes.amax(0))
            out = take(len(parts) * c * hmax * wmax)
        if self.device.type != "cpu":
            return pad_images(parts, sizes, c, out), sizes
        with image_threads(self.threads):  # the copies split by images over the threads
            return pad_images(parts, sizes, c, out), sizes

    def bitstreams(self, data: Tensor, rows: Tuple[Tensor, Tensor]
                   ) -> Tuple[List[Tensor], Tensor, List[int]]:
        """A JPEG batch's gathered bytes (``fill``'s) as ``(bitstreams, sizes, names)``, each
        bitstream checked against its CRC-32 (a damaged bitstream may decode, to wrong
        pixels): what ``decode`` decodes whole and the ROI crop (``batchaug.data.roi_crop``)
        decodes window by window."""
        local, idx = rows
        names = (idx + self.base).tolist()
        check_crcs(data, local, names)
        return ([data[o:o + n] for o, n, _, _, _ in local.tolist()],
                local[:, 2:4].contiguous(), names)

    def decode(self, data: Tensor, local: Tensor, idx: Tensor) -> List[Tensor]:
        """A JPEG batch's host bitstreams decoded on ``self.device``, each checked first
        against its CRC-32 and after against its recorded size."""
        streams, _, names = self.bitstreams(data, (local, idx))
        parts = decode_jpegs(streams, self.device, self.threads, names)
        c = self.images.channels
        for name, p, (h, w) in zip(names, parts, local[:, 2:4].tolist()):
            if tuple(p.shape) != (c, h, w):
                raise corrupt_sample(name, f"decode to {tuple(p.shape)}, not the recorded "
                                  f"{(c, h, w)}")
        return parts


def square_crops(images: RaggedImages, idx: Tensor, size: int) -> Tensor:
    """Images ``idx`` of a ragged cache, each resized (shorter side ``size``) and centre-cropped
    to ``size`` x ``size`` on the CPU: a fixed-size batch for tools that show or time a recipe
    (``batchaug show``, ``batchaug bench --data``) on a ragged or JPEG cache.

    Example:
        >>> imgs = RaggedImages.from_list([torch.zeros(3, 4, 6, dtype=torch.uint8),
        ...                                  torch.ones(3, 5, 2, dtype=torch.uint8)])
        >>> square_crops(imgs, torch.tensor([0, 1]), 3).shape
        torch.Size([2, 3, 3, 3])
    """
    from batchaug.compose import Augment
    from batchaug.transforms import CenterCrop, Resize

    cpu = torch.device("cpu")
    delivery = Delivery(RaggedRows(images, cpu), cpu, 0, 1)
    x, sizes = delivery.receive(delivery.produce(idx))
    crop = Augment(Resize(size), CenterCrop(size))
    return crop.with_sizes(x, sizes)[0].clone()  # (never a view of the reused buffer)


def smallest_side(images: RaggedImages, idx: Tensor) -> int:
    """The shortest side among images ``idx``: the largest square none of them is upscaled to."""
    return int(images.index.index_select(0, idx)[:, 2:4].amin()) if idx.numel() else 1
