"""``DeviceLoader``: batches of a ``DeviceCache`` on its device, whatever the cache's placement.

Per epoch: one order of the rows (a function of ``(seed, epoch)`` only, see
``batchaug.data.order``), this rank's share of it, then one batch after another:

* ``placement="device"``: one ``index_select`` per batch on the device. No worker processes,
  no collate, no pinning, no per-sample Python.
* ``placement="host"`` / ``"disk"``: a background thread gathers up to ``prefetch`` batches
  ahead into host buffers (pinned, reused, copied on a side CUDA stream when the device is
  CUDA) and the loop receives them on the device (``batchaug.data.prefetch``). The batches
  are the same bytes, in the same order, as the ``"device"`` placement gives.

Multi-process rules (``torch.utils.data.DistributedSampler``'s; the split is
``batchaug.data.order``'s): every rank computes the same global order and takes its own
disjoint share, ``ceil(N / world_size)`` samples with ``drop_last=False`` (the order padded by
repeating its first indices: up to ``world_size - 1`` samples seen twice in an epoch, none
lost) or ``floor(N / world_size)`` with ``drop_last=True`` (its tail cut: up to
``world_size - 1`` samples skipped, different ones each epoch; the last incomplete batch is
dropped too). With one process and ``drop_last=False`` every sample is seen once per epoch.

Partitioned mode: a cache loaded with ``DeviceCache.load(path, shard=(rank, world_size))`` holds
only this rank's contiguous part; the loader then shuffles within it (no further split) and
still gives every rank the same number of batches, padding (by repeating the part's own
samples) or cutting the part to ``ceil`` / ``floor(global N / world_size)`` samples as above.
With fewer images than ranks, ``load`` gives a rank whose part would be empty one repeated row
(see ``shard_range``), so no rank ever draws an empty batch; a hand-made partitioned cache with
an empty part of a non-empty set is refused at construction.

Resume: ``state_dict()`` / ``load_state_dict()``. Keys (``return_keys=True``): see
``DeviceLoader``.
"""
from __future__ import annotations

import contextlib
import math
import threading
from typing import Any, Dict, Iterator, Optional, Tuple, Union

import torch
from torch import Tensor, nn

from batchaug import _random
from batchaug.data.cache import DeviceCache
from batchaug.data.ragged import RaggedImages
from batchaug.data.crop import check_crop
from batchaug.data.format import shard_range
from batchaug.data.order import (  # noqa: F401 - epoch_seed re-exported: importable from here
    ORDERS,
    epoch_order,
    epoch_seed,
    quasi_random_geometry,
    rank_share,
)
from batchaug.data.prefetch import (
    Background,
    Delivery,
    DeviceRows,
    READ_AHEAD,
    DiskGather,
    HostGather,
)
from batchaug.data.ragged_batches import RaggedRows
from .._validation import check_bool, check_choice, check_int
from ..compose import Augment
from ..functional._sized import eager_cpu, without_sizes
from ..functional._utils import cpu_count, image_threads

#: Version of the dict ``DeviceLoader.state_dict`` returns.
STATE_VERSION = 1


def check_box_crop(crop: Augment) -> None:
    """A cache with boxes moves them through each step's own ``with_targets`` (the crop's
    ``Augment.with_targets``): every step must have one; else a ``ValueError`` naming those
    without."""
    missing = [type(t).__name__ for t in crop_steps(crop) if not hasattr(t, "with_targets")]
    if missing:
        raise ValueError(
            f"crop= on a cache with boxes moves them through each step's with_targets, which "
            f"{', '.join(missing)} do(es) not have; leave crop=None and crop in the "
            f"augmentation, e.g. augment.with_targets(images, targets)")


def crop_steps(crop: nn.Module) -> list:
    """The crop's steps in order (nested ``Augment``s flattened)."""
    if isinstance(crop, nn.Sequential):
        return [m for t in crop for m in crop_steps(t)]
    return [crop]


def full_sizes(x: Tensor) -> Tensor:
    """``(B, 2)`` int64 sizes of a fixed-size batch (every image fills it), made on ``x``'s
    device by fill kernels: ``torch.tensor(..., device=...)`` would copy from the host."""
    n = x.shape[0]
    return torch.stack((torch.full((n,), x.shape[-2], dtype=torch.int64, device=x.device),
                        torch.full((n,), x.shape[-1], dtype=torch.int64, device=x.device)), 1)


def to_device(t: Tensor, device: torch.device) -> Tensor:
    """CPU tensor ``t`` on ``device``; to a CUDA device from pinned memory with
    ``non_blocking``, so that the host does not wait for the work queued on the stream (the
    training step) before the copy: a pageable copy does."""
    if device.type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


class DeviceLoader:
    """Iterate ``(images, labels)`` batches of a ``DeviceCache`` on the cache's device.

    ``set_epoch(e)`` fixes the next epoch's order, a function of ``(seed, e)`` only and identical
    on every rank. Without it, each ``iter()`` uses the current epoch and then moves to the next
    (0, 1, 2, ...), so a plain ``for epoch ...: for x, y in loader`` reshuffles every epoch.
    ``rank``/``world_size`` default to ``torch.distributed``'s when it is initialised; see the
    module docstring for how a remainder is handled. Batches are new tensors (never views of
    the cache), so augmenting them in place cannot corrupt the cache.

    ``order="quasi_random"`` shuffles blocks of consecutive rows and the rows within windows of
    blocks (``batchaug.data.order``): mostly sequential reads for a ``placement="disk"`` cache,
    still every sample exactly once per epoch. ``return_keys=True`` yields ``(images, labels,
    keys)``: ``keys`` int64 ``(N,)`` on the batch's device, ``batchaug.sample_keys(seed,
    epoch, i)`` for each sample's index ``i`` in the whole dataset (also for a partitioned
    cache); pass them to ``Augment(x, keys)`` for augmentation that depends on (seed, epoch,
    sample) only, the same for any batch size, world size, placement, partitioning or resume
    point. ``prefetch`` is how many batches a host or disk cache's reader thread gathers ahead
    (0: read in the loop, no thread); it does nothing for a ``"device"`` cache. Batches are
    identical across placements for the same seed and epoch. Ending a loop early stops the
    reader thread; ``close()`` does it explicitly.

    ``crop`` (a batchaug geometric transform, or an ``Augment`` or list of them ending in one
    that fixes the size: ``RandomResizedCrop``, ``RandomCrop(pad_if_needed=True)``,
    ``CenterCrop``, ``Resize((h, w))`` or ``Resize(int)`` then ``CenterCrop``/``RandomCrop``;
    checked once, ``batchaug.data.crop.check_crop``) runs on every batch in the loader, on each
    image's own extent, and the batch comes out at its fixed size. ``loader.crop`` is that
    module as an ``Augment`` (a single transform or a list is wrapped in one) and
    ``loader.crop_size`` its output size; ``set_crop`` changes them between epochs (progressive
    resizing). It is called as any ``Augment`` on a ragged batch, ``crop.with_sizes(images,
    sizes, keys)`` (``crop.with_targets(images, {..., "sizes": sizes}, keys)`` with targets), so
    your own ``GeometricTransform`` with ``takes_sizes = True`` works in it. A ragged or JPEG
    cache (``not cache.dense``) requires one: its batches are gathered (JPEG decoded, on
    ``decode_threads`` CPU threads or in one batched call on a CUDA device) and padded to the
    batch's largest image first, and the padding never reaches the crop. On the CPU the decode,
    the padding and the crop's per-image kernels are split by images over ``decode_threads``
    threads (the calling one included, each torch op on one intra-op thread, as DataLoader
    workers run; ``batchaug.functional._utils``), default the cores the process may use
    (``os.sched_getaffinity``); the draws are made before, so batches do not depend on the
    thread count.

    A CPU JPEG cache whose crop takes a window of each photo (with a ``RandomRotation`` or
    ``RandomAffine`` before a ``RandomResizedCrop``: the bounding rectangle of the box's
    preimage) decodes only that window (nvImageCodec, the ``roi`` extra) and resizes it straight
    into the batch, with no padded batch: the same batches and draws (``window_decode`` says
    whether, or why not; ``batchaug.data.roi_crop``). ``decode_scale="auto"`` (opt-in; needs
    simplejpeg) decodes there a window at least twice the output size at the smallest DCT scale
    (1/2, 1/4, 1/8) that keeps it at least the output size, then resizes it: less work for large
    photos, but different pixels (an antialiased resize of a DCT-downscaled image;
    docs/performance.md measures the difference; a window through a warp is always decoded at
    full size); ``"full"`` (default) decodes at full resolution, exactly.

    The crop follows its module's ``train()`` / ``eval()``: random steps before the
    size-fixing one are the identity in ``eval()``, ``RandomResizedCrop`` takes its eval box
    and ``RandomCrop`` the centre window. For a validation loader over the same recipe, give
    it the crop in eval mode, e.g. ``DeviceLoader(val_cache, 256,
    crop=copy.deepcopy(migration.crop).eval())`` (or ``migration.crop.eval()`` when the
    training loader does not share the module).

    A cache with targets (``cache.masks`` or ``cache.boxes``) yields ``(images, targets)``
    (``(images, targets, keys)`` with ``return_keys``): ``targets`` a dict of the batch's
    ``"masks"`` and/or ``"boxes"``, ``"box_valid"``, ``"box_labels"``, plus ``"labels"`` when
    the cache has per-image labels, gathered by the same indices as the images and on the same
    device (ready for ``augment.with_targets(images, targets, keys)``). ``crop`` moves them
    with their images through its ``with_targets`` (each step's; with ``"sizes"`` on a ragged
    or JPEG cache, warps before the size-fixing step included): masks by exactly their image's
    per-sample crop (nearest, filled with each step's ``mask_fill``), boxes and keypoints by
    its geometry; every step must have a ``with_targets`` on a cache with boxes (else
    ``ValueError``). Masks of a host or disk fixed-size cache travel as its images do
    (gathered ahead into pinned buffers, copied on a side stream when the device is CUDA).

    Example:
        >>> cache = DeviceCache.from_tensors(torch.zeros(10, 3, 8, 8, dtype=torch.uint8),
        ...                                  torch.arange(10), device="cpu")
        >>> loader = DeviceLoader(cache, batch_size=4)
        >>> [x.shape[0] for x, y in loader]
        [4, 4, 2]
    """

    def __init__(
        self,
        cache: DeviceCache,
        batch_size: int,
        shuffle: bool = True,
        drop_last: bool = False,
        seed: int = 0,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        order: str = "random",
        prefetch: int = 2,
        return_keys: bool = False,
        crop: Optional[nn.Module] = None,
        decode_threads: Optional[int] = None,
        decode_scale: str = "full",
    ) -> None:
        if not isinstance(cache, DeviceCache):
            raise TypeError(f"cache must be a batchaug.DeviceCache, got {type(cache).__name__}")
        self.cache = cache
        self.set_crop(crop)
        if decode_threads is None:
            decode_threads = cpu_count()
        self.decode_threads = check_int(decode_threads, "decode_threads", 1)
        self.decode_scale = check_choice(decode_scale, "decode_scale", ("full", "auto"))
        if self.decode_scale == "auto":
            try:
                import simplejpeg  # noqa: F401
            except ImportError:
                raise ValueError("decode_scale='auto' decodes with simplejpeg, which is not "
                                 "installed: pip install simplejpeg (the roi extra), or "
                                 "decode_scale='full'") from None
        self.batch_size = check_int(batch_size, "batch_size", 1)
        self.shuffle = check_bool(shuffle, "shuffle")
        self.drop_last = check_bool(drop_last, "drop_last")
        self.seed = check_int(seed, "seed", 0)
        self.order = check_choice(order, "order", ORDERS)
        self.prefetch = check_int(prefetch, "prefetch", 0)
        self.return_keys = check_bool(return_keys, "return_keys")
        if cache.shard is not None:
            # Partitioned: the cache already is this rank's part; never split it again.
            s_rank, s_world = cache.shard
            if (rank is not None and rank != s_rank) or (
                    world_size is not None and world_size != s_world):
                raise ValueError(
                    f"the cache was loaded with shard=({s_rank}, {s_world}) but the loader got "
                    f"rank={rank}, world_size={world_size}; leave them None for a sharded cache"
                )
            rank, world_size = s_rank, s_world
        elif rank is None or world_size is None:
            import torch.distributed as dist

            d_rank, d_world = 0, 1
            if dist.is_available() and dist.is_initialized():
                d_rank, d_world = dist.get_rank(), dist.get_world_size()
            rank = d_rank if rank is None else rank
            world_size = d_world if world_size is None else world_size
        self.world_size = check_int(world_size, "world_size", 1)
        self.rank = check_int(rank, "rank", 0)
        if self.rank >= self.world_size:
            raise ValueError(f"rank must be < world_size ({self.world_size}), got {self.rank}")
        self.partitioned = cache.shard is not None
        #: the global index of the cache's row 0 (a partitioned cache's first)
        self._base = shard_range(cache.global_len, *cache.shard)[0] if self.partitioned else 0
        self.epoch = 0
        n_global = cache.global_len if self.partitioned else len(cache)
        if self.partitioned and len(cache) == 0 and n_global > 0:
            # Nothing to pad from: this rank would yield empty batches (NaN loss, which DDP
            # averages into every rank). DeviceCache.load never makes such a part.
            raise ValueError(
                f"this rank's part (shard={cache.shard}) is empty but the whole cache holds "
                f"{n_global} samples; load it with DeviceCache.load(path, shard=...), which "
                f"gives every rank at least one row"
            )
        if return_keys and n_global > 2**31:
            raise ValueError(f"return_keys=True supports datasets of up to 2**31 samples (a key "
                             f"holds the index in 31 bits), this one has {n_global}")
        # Same count on every rank, as DistributedSampler: ceil (pad) or floor (cut).
        if drop_last:
            self.num_samples = n_global // self.world_size
        else:
            self.num_samples = math.ceil(n_global / self.world_size)
        if not cache.dense:  # quasi-random blocks sized by the average stored image
            row = max(1, cache.images.data.numel() // max(1, len(cache)))
        else:
            row = cache.images[0].numel() * cache.images.element_size() if len(cache) else 1
        self._block_rows, self._window_blocks = quasi_random_geometry(row, self.batch_size)
        # Resume bookkeeping: (epoch, batches handed out) of the running or last iteration,
        # and a loaded state's (epoch, batches to skip) for the next one.
        self._progress: Optional[list] = None
        self._resume: Optional[Tuple[int, int]] = None
        self._delivery: Any = None
        self._mask_delivery: Any = None  # the masks' delivery
        self._active: Optional[Background] = None
        self._iteration: Optional[object] = None  # the running iteration's token

    def set_crop(self, crop: Optional[nn.Module]) -> None:
        """Use ``crop`` (validated as for the constructor) from the next batch on: call it
        between epochs, e.g. for progressive resizing, ``loader.set_crop(RandomResizedCrop(
        size))`` with a growing ``size``. Nothing is rebuilt; a model compiled with
        ``torch.compile`` sees a new input shape (mark the spatial dims dynamic with
        ``torch._dynamo.mark_dynamic`` or accept one recompile per size).

        Example:
            >>> loader.set_crop(RandomResizedCrop(192))  # doctest: +SKIP
        """
        cache = self.cache
        if crop is None and not cache.dense:
            kind = "ragged" if cache.ragged else f"storage={cache.storage!r}"
            raise ValueError(
                f"crop is required for a {kind} cache: its images differ in size or are "
                f"decoded per batch, so the loader crops each one on its own extent to one "
                f"size, e.g. DeviceLoader(cache, batch_size, crop=RandomResizedCrop(224)) for "
                f"training or crop=Augment(Resize(256), CenterCrop(224)) for evaluation")
        module, size = (None, None) if crop is None else check_crop(crop)
        if module is not None and cache.boxes is not None:
            check_box_crop(module)
        #: The crop every batch goes through, an ``Augment`` (None: batches as stored), and
        #: its output size ``(h, w)``.
        self.crop: Optional[Augment] = module
        self.crop_size: Optional[Tuple[int, int]] = size

    def set_epoch(self, epoch: int) -> None:
        """Use ``epoch`` for the next iteration's order (call it on every rank).

        After ``load_state_dict``, setting the same epoch keeps the resume point; another
        epoch starts that one from its first batch.
        """
        self.epoch = check_int(epoch, "epoch", 0)
        self._progress = None
        if self._resume is not None and self._resume[0] != self.epoch:
            self._resume = None

    def __len__(self) -> int:
        if self.drop_last:
            return self.num_samples // self.batch_size
        return math.ceil(self.num_samples / self.batch_size)

    def indices(self, epoch: Optional[int] = None) -> Tensor:
        """This rank's sample indices (into ``cache``) for ``epoch``, in order, on the CPU."""
        epoch = self.epoch if epoch is None else check_int(epoch, "epoch", 0)
        perm = epoch_order(len(self.cache), self.seed, epoch, self.shuffle, self.order,
                           self._block_rows, self._window_blocks)
        step, offset = (1, 0) if self.partitioned else (self.world_size, self.rank)
        return rank_share(perm, self.num_samples, offset, step,
                          contiguous=self.order == "quasi_random")

    # --- iteration ------------------------------------------------------------------------------
    def keys(self, epoch: Optional[int] = None) -> Tensor:
        """The keys of this rank's samples for ``epoch``, in ``indices(epoch)`` order, on the
        cache's device: ``batchaug.sample_keys(seed, epoch, global index)``."""
        epoch = self.epoch if epoch is None else check_int(epoch, "epoch", 0)
        return self._keys(epoch, to_device(self.indices(epoch), self.cache.device))

    def _keys(self, epoch: int, idx_dev: Tensor) -> Tensor:
        """``keys(epoch)`` from the epoch's indices already on the device."""
        return _random.sample_keys(self.seed, epoch, idx_dev + self._base if self._base
                                   else idx_dev)

    def __iter__(self) -> Iterator[Tuple[Tensor, ...]]:
        """One epoch's batches. One iteration at a time: the first batch of a new iteration
        ends the previous one (as do ``close()`` and ``load_state_dict``), whose next ``next()``
        then raises ``RuntimeError``: it never stops early as if its epoch were complete."""
        self.close()  # one reader at a time: a superseded iteration's thread stops here
        token = self._iteration = object()
        batches = self._epoch_batches()
        try:
            while True:
                if self._iteration is not token:
                    raise RuntimeError(
                        "this DeviceLoader iterator was ended before its epoch was complete (by "
                        "a newer iteration of the loader, loader.close() or load_state_dict()): "
                        "a loader runs one iteration at a time; finish the old iterator first, "
                        "or use two loaders over the same cache")
                try:
                    batch = next(batches)
                except StopIteration:
                    return
                yield batch
        finally:
            batches.close()

    def _epoch_batches(self) -> Iterator[Tuple[Tensor, ...]]:
        """One loop for every cache: each pixel column (images, masks) through its delivery
        (``_column``: dense or ragged, any placement), the per-image targets gathered on the
        device, then the crop stage on ``(x, sizes)``."""
        epoch, first = self.epoch, 0
        if self._resume is not None and self._resume[0] == epoch:
            first = self._resume[1]
        self._resume = None
        self.epoch += 1
        progress = self._progress = [epoch, first]
        idx = self.indices(epoch)
        bs, nb = self.batch_size, len(self)
        idx_dev = to_device(idx, self.cache.device)  # the epoch's order: no host wait
        keys = self._keys(epoch, idx_dev) if self.return_keys else None
        channels_last = self.cache.channels_last
        images = self._get_delivery()
        masks = self._get_mask_delivery()
        for d in (images, masks):
            if d is not None:
                d.reset()
        advise = getattr(getattr(images, "gather", None), "advise", None)
        roi = self._window_plan()[0]  # a CPU JPEG cache whose crop takes a window of each photo
        # set_crop between batches: (the current crop, its plan; None: it decodes whole
        # images, the gathered bytes are then finished below), read by the reader thread and
        # this one (a list item is replaced whole: each sees a consistent pair)
        last = [(self.crop, roi)]

        def current_roi() -> Tuple[Any, Any]:
            crop, seen = self.crop, last[0]
            if seen[0] is not crop:
                seen = (crop, self._window_plan(crop)[0])
                last[0] = seen
            return seen

        def produce(j: int, stop=None) -> Any:
            b = first + j
            if advise is not None:  # disk: start the reads of the batches READ_AHEAD ahead
                for a in range(b + 1 if j == 0 else b + READ_AHEAD,
                               min(nb, b + READ_AHEAD + 1)):
                    advise(idx[a * bs:(a + 1) * bs])
            i, i_dev = idx[b * bs:(b + 1) * bs], idx_dev[b * bs:(b + 1) * bs]
            if roi is not None:  # the bitstreams only: the crop decodes its windows
                item = images.produce_gathered(i, stop)
                crop, now = current_roi()
                if keys is not None and item is not None and now is not None:
                    # keyed draws depend on the keys only: the whole crop runs here, ahead (the
                    # global generator's draws must wait for the caller's thread, below); the
                    # bytes are kept until then in case set_crop changes the crop meanwhile
                    return item, (crop, self._roi_batch(now, images, item,
                                                        keys[b * bs:(b + 1) * bs]))
                return item, None
            return tuple(None if d is None else d.produce(i_dev if d.device_index else i, stop)
                         for d in (images, masks))

        bg: Optional[Background] = None
        if images.ahead and self.prefetch > 0:  # the reader thread, ``prefetch`` batches ahead
            stop = threading.Event()
            bg = self._active = Background(lambda j: produce(j, stop), nb - first,
                                           self.prefetch, stop, setup=images.thread_setup)
        items = bg if bg is not None else (produce(j) for j in range(nb - first))
        try:
            for b, (item, m_item) in zip(range(first, nb), items):
                k = keys[b * bs:(b + 1) * bs] if keys is not None else None
                y = self._targets_or_labels(idx_dev[b * bs:(b + 1) * bs])
                if roi is not None:  # the crop's windows drawn, decoded alone, resized
                    crop, now = current_roi()
                    if m_item is not None and m_item[0] is crop:
                        out = m_item[1]  # made ahead with this crop
                    elif now is not None:
                        out = self._roi_batch(now, images, item, k)
                    else:  # set_crop to a crop that decodes whole images: the padded path
                        x, sizes = images.finish_gathered(item)
                        x = x.permute(0, 3, 1, 2) if channels_last else x
                        out, y = self._crop_batch(x, sizes, y, k, None)
                    images.release(item)
                else:
                    x, sizes = images.receive(item)
                    x = x.permute(0, 3, 1, 2) if channels_last else x
                    m = None
                    if masks is not None:
                        m = masks.receive(m_item)[0]
                        m = m.unsqueeze(1) if m.dim() == 3 else m  # (B, 1, H, W), as images
                    out, y = self._crop_batch(x, sizes, y, k, m)
                    for d, it in ((images, item), (masks, m_item)):
                        if d is not None:
                            d.release(it)
                progress[1] = b + 1
                yield (out, y, k) if k is not None else (out, y)
        finally:
            if bg is not None:
                bg.close()

    def _crop_batch(self, x: Tensor, sizes: Optional[Tensor], y: Any, k: Optional[Tensor],
                    m: Optional[Tensor]) -> Tuple[Tensor, Any]:
        """The crop on a batch ``x`` (each image's ``sizes`` inside it; None: a dense batch,
        every image fills it), its masks ``m`` ``(B, 1, H, W)`` and boxes with it: the crop's
        own ``with_targets`` (boxes of a dense batch, moved as on the batch itself) or, with
        ``"sizes"``, its ragged path (for a dense batch the same result as on the batch itself,
        and the per-image kernels, e.g. a warp then RandomResizedCrop warping only the box on
        CPU). Returns ``(images, labels or targets)``; never a view of a delivery's reused
        buffer."""
        crop = self.crop
        masks_out = None
        if crop is None:
            out, masks_out = x, (None if m is None else m[:, 0])
        elif isinstance(y, dict) and "boxes" in y and sizes is None:
            t = dict(y)
            if m is not None:
                t["masks"] = m[:, 0]
            out, t = crop.with_targets(x, t, k)
            masks_out = t.pop("masks", None)
            y = t
        else:
            if sizes is None:  # a dense batch: every image fills it
                sizes = full_sizes(x)
            # per image: one small kernel each, split over threads by images, not by OpenMP
            # (2-thread regions were measured many times slower in bursts, bench_photos (c))
            one_thread = not self.cache.dense and eager_cpu(x)
            with image_threads(self.decode_threads) if one_thread \
                    else contextlib.nullcontext():
                if isinstance(y, dict) or m is not None:
                    t = dict(y) if isinstance(y, dict) else {}
                    t["sizes"] = sizes
                    if m is not None:
                        t["masks"] = m[:, 0]
                    out, t = crop.with_targets(x, t, k)
                    t = without_sizes(t)
                    masks_out = t.pop("masks", None)
                    if isinstance(y, dict):
                        y = t
                else:
                    out = crop.with_sizes(x, sizes, k)[0]
        if self._delivery.reuses:  # a view of a reused buffer is never handed out
            if out.untyped_storage().data_ptr() == x.untyped_storage().data_ptr():
                out = out.clone()
            if masks_out is not None and m is not None and \
                    masks_out.untyped_storage().data_ptr() == m.untyped_storage().data_ptr():
                masks_out = masks_out.clone()
        if masks_out is not None:
            y = {"masks": masks_out, **y} if isinstance(y, dict) else {"masks": masks_out}
        return out, y

    def _targets_or_labels(self, i_dev: Tensor) -> Union[Tensor, Dict[str, Tensor]]:
        """What comes after the images of the batch ``i_dev`` (its cache indices, on the
        cache's device): the labels, or for a cache with targets a dict of the box arrays and
        ``"labels"`` (when it has them); the masks, a pixel column delivered as the images are
        (``_column``), join it after the crop."""
        cache = self.cache
        if not cache.targets:
            return cache.labels.index_select(0, i_dev)
        out = {k: t.index_select(0, i_dev) for k, t in cache.targets.items() if k != "masks"}
        if cache.labels is not None:
            out["labels"] = cache.labels.index_select(0, i_dev)
        return out

    def _window_plan(self, crop: Optional[nn.Module] = None) -> Tuple[Any, str]:
        """``batchaug.data.roi_crop.plan`` of the crop (``self.crop`` unless given) on this
        cache: ``(RoiCrop or None, why not)``; a ``RoiCrop`` decodes each image's window
        alone, with no padded batch (see :attr:`window_decode`)."""
        from batchaug.data import roi_crop

        crop = self.crop if crop is None else crop
        if self.cache.storage != "jpeg":
            return None, f"storage={self.cache.storage!r} (not JPEG)"
        if crop is None:
            return None, "no crop"
        if self.cache.dense:
            return None, "a dense JPEG cache (decoded whole: every image has the batch's size)"
        targets = self.cache.masks is not None or self.cache.boxes is not None
        return roi_crop.plan(list(crop), self.cache.device, targets, self.decode_scale)

    def _roi_batch(self, roi: Any, images: Delivery, item: Tuple[Any, ...],
                   keys: Optional[Tensor]) -> Tensor:
        """The cropped batch of ``item`` (``Delivery.produce_gathered``: a JPEG column's
        gathered bytes), on ``decode_threads`` threads, this one included (the reader's with
        keys, else the loop's, which waits for the batch anyway)."""
        streams, sizes, names = images.gather.bitstreams(item[1], item[2])
        return roi(streams, sizes, keys, self.decode_threads, names, self.cache.images.channels)

    @property
    def window_decode(self) -> str:
        """``"roi"`` when each batch of this JPEG cache decodes only its crop's windows
        (``batchaug.data.roi_crop``: the same pixels and draws as a full decode), else why not
        (e.g. nvImageCodec missing: ``pip install nvidia-nvimgcodec-cu13``); the batches are
        the same either way.

        Example:
            >>> loader = DeviceLoader(jpeg_cache, 64, crop=RandomResizedCrop(224))  # doctest: +SKIP
            >>> loader.window_decode  # doctest: +SKIP
            'roi'
        """
        roi, why = self._window_plan()
        return "roi" if roi is not None else why

    def _get_delivery(self) -> Any:
        """The images column's delivery (made once)."""
        if self._delivery is None:
            self._delivery = self._column(self.cache.images, self.cache.mapped,
                                          self.decode_threads, device_sizes=True)
        return self._delivery

    def _get_mask_delivery(self) -> Any:
        """The masks column's delivery (None: no masks), delivered as the images are."""
        cache = self.cache
        if cache.masks is None:
            return None
        if self._mask_delivery is None:
            mapped = cache.mapped_masks
            if isinstance(cache.masks, RaggedImages):
                mapped = cache.masks.mapped
            # a ragged column's sizes are the images': the masks' are not copied again
            self._mask_delivery = self._column(cache.masks, mapped, 1, device_sizes=False)
        return self._mask_delivery

    def _column(self, column: Any, mapped: Any, threads: int, device_sizes: bool) -> Any:
        """The delivery of one pixel column: ``DeviceRows`` for dense rows on the device, else
        one ``Delivery`` of its rows (dense, or ragged by their index) through reused buffers."""
        cache = self.cache
        if isinstance(column, RaggedImages):
            return self._delivery_of(RaggedRows(column, cache.device, threads, self._base),
                                     device_sizes)
        raw = column.permute(0, 2, 3, 1) if column.dim() == 4 and cache.channels_last \
            else column
        if cache.placement == "device":
            return DeviceRows(raw)
        if mapped is not None:
            # read with preadv, checked against the file as loaded: a file truncated
            # meanwhile is an error here, never a SIGBUS through the memory map
            quasi = self.order == "quasi_random" and mapped is cache.mapped
            gather: Any = DiskGather(mapped, column.dtype,
                                     self._block_rows if quasi else None,
                                     2 * self._window_blocks + 2)
        else:
            gather = HostGather(raw)
        return self._delivery_of(gather, device_sizes)

    def _delivery_of(self, gather: Any, device_sizes: bool = True) -> Delivery:
        # prefetch queued + one being filled + one being read (released after the crop)
        return Delivery(gather, self.cache.device, self.batch_size, self.prefetch + 2,
                        device_sizes)

    def close(self) -> None:
        """Stop the reader thread of an unfinished iteration (a loop left with ``break``).

        Also happens when that iteration's generator is closed or collected, and at exit.
        That iterator then raises ``RuntimeError`` if asked for another batch.
        """
        self._iteration = None
        if self._active is not None:
            self._active.close()
            self._active = None

    # --- resume ----------------------------------------------------------------------------------
    def state_dict(self) -> Dict[str, Any]:
        """Where this loader is, as a small JSON-serialisable dict.

        ``batches_yielded`` counts the batches of ``epoch`` already handed out; a state taken
        after an epoch's last batch says the next epoch, 0 batches. Save it with the model and
        optimizer; ``load_state_dict`` continues with exactly the next batch.

        Example:
            >>> cache = DeviceCache.from_tensors(torch.zeros(10, 1, 2, 2, dtype=torch.uint8),
            ...                                  torch.arange(10), device="cpu")
            >>> loader = DeviceLoader(cache, 4, rank=0, world_size=1)
            >>> it = iter(loader); _ = next(it)
            >>> loader.state_dict()["epoch"], loader.state_dict()["batches_yielded"]
            (0, 1)
        """
        if self._progress is not None and self._progress[1] < len(self):
            epoch, done = self._progress
        elif self._progress is not None:  # the epoch's last batch was handed out
            epoch, done = self._progress[0] + 1, 0
        elif self._resume is not None:
            epoch, done = self._resume
        else:
            epoch, done = self.epoch, 0
        return {
            "version": STATE_VERSION,
            "seed": self.seed,
            "epoch": int(epoch),
            "batches_yielded": int(done),
            "batch_size": self.batch_size,
            "world_size": self.world_size,
            "rank": self.rank,
            "order": self.order,
            "shuffle": self.shuffle,
            "drop_last": self.drop_last,
            "dataset_length": self.cache.global_len if self.partitioned else len(self.cache),
            "partitioned": self.partitioned,
        }

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Continue from ``state`` (from ``state_dict``): the next ``iter()`` yields the batch
        after the last one handed out, without reading the skipped ones.

        Every field but ``epoch`` and ``batches_yielded`` must equal this loader's: a mismatch
        is a ``ValueError`` naming the field. A different ``world_size`` (or ``rank``) is
        refused too, even with the same global batch size: the padding and the rank split of
        an epoch depend on it, so no offset of the new split replays the old one exactly.

        Example:
            >>> cache = DeviceCache.from_tensors(torch.zeros(10, 1, 2, 2, dtype=torch.uint8),
            ...                                  torch.arange(10), device="cpu")
            >>> first = DeviceLoader(cache, 4, rank=0, world_size=1)
            >>> it = iter(first); _ = next(it)
            >>> resumed = DeviceLoader(cache, 4, rank=0, world_size=1)
            >>> resumed.load_state_dict(first.state_dict())
            >>> [y.numel() for _, y in resumed]  # the two batches the first run had left
            [4, 2]
        """
        if not isinstance(state, dict):
            raise TypeError(f"state must be a dict from DeviceLoader.state_dict, got "
                            f"{type(state).__name__}")
        mine = self.state_dict()
        missing = sorted(set(mine) - set(state))
        if missing:
            raise ValueError(f"state is missing the field(s) {missing}")
        if state["version"] != STATE_VERSION:
            raise ValueError(f"state field 'version' is {state['version']!r}; this batchaug "
                             f"reads version {STATE_VERSION}")
        if state["world_size"] != mine["world_size"]:
            same = state["world_size"] * state["batch_size"] == self.world_size * self.batch_size
            raise ValueError(
                f"state field 'world_size' is {state['world_size']!r} but this loader has "
                f"{self.world_size}{' (the same global batch size)' if same else ''}: an "
                f"epoch's padding and rank split depend on the world size, so it cannot be "
                f"continued with another one; finish it with the old world size, or start the "
                f"next epoch with loader.set_epoch({state['epoch']} + 1)")
        for key in ("rank", "dataset_length", "batch_size", "order", "shuffle", "drop_last",
                    "seed", "partitioned"):
            if state[key] != mine[key] or type(state[key]) is not type(mine[key]):
                raise ValueError(f"state field {key!r} is {state[key]!r} but this loader has "
                                 f"{mine[key]!r}; build the loader (and load the cache) as in "
                                 f"the run that saved the state")
        epoch = check_int(state["epoch"], "state['epoch']", 0)
        done = check_int(state["batches_yielded"], "state['batches_yielded']", 0)
        if done > len(self):
            raise ValueError(f"state field 'batches_yielded' is {done} but an epoch has only "
                             f"{len(self)} batches")
        if done == len(self):  # a hand-made end-of-epoch state: the next epoch's start
            epoch, done = epoch + 1, 0
        self.close()
        self.epoch = epoch
        self._progress = None
        self._resume = (epoch, done)

    def __repr__(self) -> str:
        crop = "" if self.crop_size is None else f"crop_size={tuple(self.crop_size)}, "
        return (f"DeviceLoader({crop}batch_size={self.batch_size}, shuffle={self.shuffle}, "
                f"drop_last={self.drop_last}, seed={self.seed}, rank={self.rank}, "
                f"world_size={self.world_size}, order={self.order!r}, prefetch={self.prefetch}, "
                f"batches={len(self)}, cache={self.cache!r})")
