"""Epoch orders for ``DeviceLoader``: which rows a rank reads, in which order, as pure functions.

Everything here is a function of its arguments only (a CPU ``torch.Generator`` seeded from
``(seed, epoch)``), so every rank, every placement and every device computes the same order.

* ``"random"``: one ``randperm`` of all rows; rank ``r`` of ``W`` takes every ``W``-th entry
  starting at ``r`` (as ``torch.utils.data.DistributedSampler``).
* ``"quasi_random"`` (for caches read from disk): the rows are cut into blocks of consecutive
  rows (``QUASI_BLOCK_BYTES`` each), the blocks are shuffled, and the rows inside each window
  of ``window_blocks`` consecutive shuffled blocks are shuffled. Every epoch is still a
  permutation of all rows, but a batch touches only the blocks of one or two windows, so a
  reader can fetch whole blocks with large sequential reads. Rank ``r`` takes the ``r``-th
  contiguous slice of the order (not every ``W``-th entry), so ranks read disjoint windows and
  the file is read once per epoch in all, not once per rank (the strided split FFCV #92 needs).

Both pad (``drop_last=False``) or cut (``drop_last=True``) the order to ``num_samples *
world_size`` entries before splitting, so every rank gets the same count.
"""
from __future__ import annotations

import math
from typing import Tuple

import torch
from torch import Tensor

#: Values ``order=`` accepts.
ORDERS = ("random", "quasi_random")
#: Bytes per quasi-random block: large enough for near-sequential read rates, small enough that
#: a window of blocks (the reader keeps about two) stays in the tens of MiB.
QUASI_BLOCK_BYTES = 1024 * 1024
#: Fewest blocks per window: a batch mixes rows of up to this many places in the file, so a
#: class-sorted file still gives batches of many classes.
QUASI_MIN_WINDOW_BLOCKS = 16

_MASK63 = (1 << 63) - 1


def epoch_seed(seed: int, epoch: int) -> int:
    """Mix ``(seed, epoch)`` into one generator seed; ``seed + epoch`` would make (0, 1) and
    (1, 0) the same order.

    Example:
        >>> epoch_seed(0, 1) != epoch_seed(1, 0)
        True
    """
    x = (seed * 0x9E3779B97F4A7C15 + epoch * 0xBF58476D1CE4E5B9 + 0x94D049BB133111EB) & _MASK63
    x ^= x >> 31
    x = (x * 0xD6E8FEB86659FD93) & _MASK63
    return x ^ (x >> 32)


def quasi_random_geometry(row_bytes: int, batch_size: int) -> Tuple[int, int]:
    """``(block_rows, window_blocks)`` for rows of ``row_bytes`` bytes and this batch size.

    A window holds at least two batches, so consecutive batches are not drawn from the
    same handful of rows.

    Example:
        >>> quasi_random_geometry(3 * 32 * 32, 256)
        (341, 16)
    """
    block_rows = max(1, QUASI_BLOCK_BYTES // max(1, int(row_bytes)))
    window_blocks = max(QUASI_MIN_WINDOW_BLOCKS, math.ceil(2 * batch_size / block_rows))
    return block_rows, window_blocks


def quasi_random_permutation(n: int, block_rows: int, window_blocks: int,
                             generator: torch.Generator) -> Tensor:
    """A permutation of ``range(n)``: shuffled blocks, rows shuffled within windows of blocks.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> sorted(quasi_random_permutation(10, 3, 2, g).tolist()) == list(range(10))
        True
    """
    if n == 0:
        return torch.empty(0, dtype=torch.int64)
    n_blocks = math.ceil(n / block_rows)
    blocks = torch.randperm(n_blocks, generator=generator)
    rows = (blocks[:, None] * block_rows + torch.arange(block_rows)).flatten()
    rows = rows[rows < n]  # the last block may be partial; keeps the blocks' order
    # Window of each row = (position of its block in the shuffled order) // window_blocks;
    # a random key in [0, 1) added to it shuffles rows within, never across, windows.
    sizes = torch.full((n_blocks,), block_rows, dtype=torch.int64)
    sizes[blocks == n_blocks - 1] = n - (n_blocks - 1) * block_rows
    window = torch.repeat_interleave(torch.arange(n_blocks) // window_blocks, sizes)
    key = window.to(torch.float64) + torch.rand(n, generator=generator, dtype=torch.float64)
    return rows[torch.argsort(key, stable=True)]


def epoch_order(n: int, seed: int, epoch: int, shuffle: bool, order: str, block_rows: int,
                window_blocks: int) -> Tensor:
    """The whole order of ``n`` rows for ``(seed, epoch)``, before any rank split."""
    if not shuffle:
        return torch.arange(n)
    g = torch.Generator()
    g.manual_seed(epoch_seed(seed, epoch))
    if order == "quasi_random":
        return quasi_random_permutation(n, block_rows, window_blocks, g)
    return torch.randperm(n, generator=g)


def rank_share(perm: Tensor, num_samples: int, rank: int, world_size: int,
               contiguous: bool) -> Tensor:
    """This rank's ``num_samples`` entries of ``perm`` (padded by repeating its start, or cut):
    every ``world_size``-th entry, or with ``contiguous`` the rank's slice of the order."""
    n = perm.numel()
    total = num_samples * world_size
    if n == 0 or total == 0:
        return perm[:0]
    if total <= n:
        perm = perm[:total]
    else:  # pad by repeating the permutation from its start
        perm = perm[torch.arange(total) % n]
    if contiguous:
        return perm[rank * num_samples:(rank + 1) * num_samples]
    return perm[rank:total:world_size]
