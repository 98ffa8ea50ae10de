"""``DeviceLoader``: batches drawn from a ``DeviceCache`` by on-device indexing.

Per epoch: one permutation (a function of ``(seed, epoch)`` only), this rank's share of it moved
to the device once, then one ``index_select`` per batch for images and labels. No worker
processes, no collate, no pinning, no per-sample Python.

Multi-process rules (the same as ``torch.utils.data.DistributedSampler``):

* Every rank computes the same global permutation, then takes every ``world_size``-th index
  starting at its ``rank``, so shares are disjoint.
* Every rank gets the same number of samples, ``ceil(N / world_size)``: with
  ``drop_last=False`` the permutation is padded by repeating its first indices, so up to
  ``world_size - 1`` samples are seen twice in an epoch (none is lost); with ``drop_last=True``
  the permutation's tail is cut to ``floor(N / world_size)`` per rank (up to
  ``world_size - 1`` samples skipped this epoch, different ones each epoch), and the last
  incomplete batch is dropped too. With one process and ``drop_last=False`` every sample is seen
  exactly once per epoch.
* Partitioned mode: a cache loaded with ``DeviceCache.load(path, shard=(rank, world_size))``
  holds only this rank's contiguous part; the loader then shuffles within it (no further split)
  and still gives every rank the same number of batches, padding (by repeating the part's own
  samples) or cutting the part to ``ceil`` / ``floor(global N / world_size)`` samples as above.
  With fewer images than ranks, ``load`` gives a rank whose part would be empty one repeated
  row (see ``shard_range``), so no rank ever draws an empty batch; a hand-made partitioned
  cache with an empty part of a non-empty set is refused at construction.
"""
from __future__ import annotations

import math
import numbers
from typing import Iterator, Optional, Tuple

import torch
from torch import Tensor

from batchaug.data.cache import DeviceCache

_MASK63 = (1 << 63) - 1


def epoch_seed(seed: int, epoch: int) -> int:
    """Mix ``(seed, epoch)`` into one generator seed; ``seed + epoch`` would make (0, 1) and
    (1, 0) the same order."""
    x = (seed * 0x9E3779B97F4A7C15 + epoch * 0xBF58476D1CE4E5B9 + 0x94D049BB133111EB) & _MASK63
    x ^= x >> 31
    x = (x * 0xD6E8FEB86659FD93) & _MASK63
    return x ^ (x >> 32)


def _check_int(value: object, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {value!r}")
    if int(value) < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def _default_rank_world() -> Tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class DeviceLoader:
    """Iterate ``(images, labels)`` batches of a ``DeviceCache`` on the cache's device.

    ``set_epoch(e)`` fixes the next epoch's order, a function of ``(seed, e)`` only and identical
    on every rank. Without it, each ``iter()`` uses the current epoch and then moves to the next
    (0, 1, 2, ...), so a plain ``for epoch ...: for x, y in loader`` reshuffles every epoch.
    ``rank``/``world_size`` default to ``torch.distributed``'s when it is initialised; see the
    module docstring for how a remainder is handled. Batches are new tensors (never views of
    the cache), so augmenting them in place cannot corrupt the cache.

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
    ) -> None:
        if not isinstance(cache, DeviceCache):
            raise TypeError(f"cache must be a batchaug.DeviceCache, got {type(cache).__name__}")
        self.cache = cache
        self.batch_size = _check_int(batch_size, "batch_size", 1)
        for name, flag in (("shuffle", shuffle), ("drop_last", drop_last)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name} must be a bool, got {flag!r}")
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.seed = _check_int(seed, "seed", 0)
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
            d_rank, d_world = _default_rank_world()
            rank = d_rank if rank is None else rank
            world_size = d_world if world_size is None else world_size
        self.world_size = _check_int(world_size, "world_size", 1)
        self.rank = _check_int(rank, "rank", 0)
        if self.rank >= self.world_size:
            raise ValueError(f"rank must be < world_size ({self.world_size}), got {self.rank}")
        self.partitioned = cache.shard is not None
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
        # Same count on every rank, as DistributedSampler: ceil (pad) or floor (cut).
        if drop_last:
            self.num_samples = n_global // self.world_size
        else:
            self.num_samples = math.ceil(n_global / self.world_size)

    def set_epoch(self, epoch: int) -> None:
        """Use ``epoch`` for the next iteration's order (call it on every rank)."""
        self.epoch = _check_int(epoch, "epoch", 0)

    def __len__(self) -> int:
        if self.drop_last:
            return self.num_samples // self.batch_size
        return math.ceil(self.num_samples / self.batch_size)

    def indices(self, epoch: Optional[int] = None) -> Tensor:
        """This rank's sample indices (into ``cache``) for ``epoch``, in order, on the CPU."""
        epoch = self.epoch if epoch is None else _check_int(epoch, "epoch", 0)
        n = len(self.cache)
        if self.shuffle:
            # A CPU generator: the order is the same on every device type and every rank.
            g = torch.Generator()
            g.manual_seed(epoch_seed(self.seed, epoch))
            perm = torch.randperm(n, generator=g)
        else:
            perm = torch.arange(n)
        step, offset = (1, 0) if self.partitioned else (self.world_size, self.rank)
        total = self.num_samples * step
        if n == 0 or total == 0:
            return perm[:0]
        if total <= n:
            perm = perm[:total]
        else:  # pad by repeating the permutation from its start
            perm = perm[torch.arange(total) % n]
        return perm[offset:total:step]

    def __iter__(self) -> Iterator[Tuple[Tensor, Tensor]]:
        idx = self.indices().to(self.cache.device)
        self.epoch += 1
        images, labels = self.cache.images, self.cache.labels
        channels_last = self.cache.channels_last
        if channels_last:
            # index_select on the NHWC view keeps the batch channels_last.
            images = images.permute(0, 2, 3, 1)
        bs = self.batch_size
        for b in range(len(self)):
            i = idx[b * bs:(b + 1) * bs]
            x = images.index_select(0, i)
            yield (x.permute(0, 3, 1, 2) if channels_last else x), labels.index_select(0, i)

    def __repr__(self) -> str:
        return (f"DeviceLoader(batch_size={self.batch_size}, shuffle={self.shuffle}, "
                f"drop_last={self.drop_last}, seed={self.seed}, rank={self.rank}, "
                f"world_size={self.world_size}, batches={len(self)}, cache={self.cache!r})")
