"""CPU work split over cores as DataLoader workers split it: each image on one thread.

The loader's CPU stages (JPEG decode, padding, the crop's per-image warps and resizes) are many
small kernels. Split by torch's intra-op (OpenMP) threads, each kernel pays a parallel region,
and on a busy machine such regions stall in bursts (docs/performance.md, "Photos of different
sizes", gives the figures of ``benchmarks/bench_photos.py``); one thread per image, as
DataLoader workers do it, scales instead. Inside ``image_threads(n)`` every ``for_each`` loop runs its images on ``n`` threads
(the calling one and ``n - 1`` of a kept pool), each torch op on one intra-op thread. The
images' random draws are made before the loop, on the calling thread, so the results do not
depend on ``n`` (nor on which thread ran which image).
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import os
import threading
from typing import Callable, Iterator, List, Optional

import torch

_LOCAL = threading.local()
_POOL: Optional[concurrent.futures.ThreadPoolExecutor] = None
_POOL_SIZE = 0
_POOL_LOCK = threading.Lock()


def cpu_count() -> int:
    """The cores this process may run on (``os.sched_getaffinity``: a ``taskset`` or container
    limit counts), else ``os.cpu_count()``: the default thread count of the loader's CPU work.

    Example:
        >>> cpu_count() >= 1
        True
    """
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not on Linux
        return max(1, os.cpu_count() or 1)


def _one_intra_op_thread() -> None:
    torch.set_num_threads(1)
    _LOCAL.worker = True  # its own for_each loops run inline: a worker never waits on the pool


def pool(workers: int) -> concurrent.futures.ThreadPoolExecutor:
    """The kept worker threads (each with one intra-op thread), at least ``workers`` of them:
    started once and grown when a caller asks for more (a pool per batch would start and join
    threads every batch)."""
    global _POOL, _POOL_SIZE
    with _POOL_LOCK:
        if _POOL is None or _POOL_SIZE < workers:
            if _POOL is not None:
                _POOL.shutdown(wait=False)  # its running tasks finish; it takes no more
            _POOL = concurrent.futures.ThreadPoolExecutor(
                max(1, workers), thread_name_prefix="batchaug-cpu",
                initializer=_one_intra_op_thread)
            _POOL_SIZE = max(1, workers)
        return _POOL


def _forget_pool() -> None:
    """In a forked child: the parent's workers do not exist there, so a kept pool would take
    tasks that never run; the child starts its own when it needs one."""
    global _POOL, _POOL_SIZE, _POOL_LOCK
    _POOL, _POOL_SIZE, _POOL_LOCK = None, 0, threading.Lock()
    _LOCAL.__dict__.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


@contextlib.contextmanager
def single_threaded() -> Iterator[None]:
    """Torch ops of the calling thread on one intra-op thread, then its count as it was.

    ``torch.set_num_threads`` acts on the calling thread's OpenMP count (another thread keeps
    its own).
    """
    n = torch.get_num_threads()
    if n == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


@contextlib.contextmanager
def image_threads(threads: int) -> Iterator[None]:
    """In this block (on this thread), :func:`for_each` runs its images on ``threads`` threads
    and torch ops on one intra-op thread each.

    Example:
        >>> out = [0] * 8
        >>> with image_threads(2):
        ...     for_each(lambda i: out.__setitem__(i, i * i), 8)
        >>> out
        [0, 1, 4, 9, 16, 25, 36, 49]
    """
    before = getattr(_LOCAL, "threads", 1)
    _LOCAL.threads = max(1, int(threads))
    try:
        with single_threaded():
            yield
    finally:
        _LOCAL.threads = before


def current_threads() -> int:
    """The thread count :func:`for_each` uses here (1 outside :func:`image_threads`, and on a
    pool worker)."""
    if getattr(_LOCAL, "worker", False):
        return 1
    return getattr(_LOCAL, "threads", 1)


def for_each(fn: Callable[[int], None], n: int) -> None:
    """``fn(i)`` for every ``i`` in ``range(n)``: in order on this thread, or inside
    :func:`image_threads` on this thread and the pool, each thread taking the next index
    not yet taken (images of different sizes: a thread that drew small ones takes more, no
    thread idles while another still has a queue of its own). ``fn`` must write only its
    own image's results, and build no autograd graph (the loader's uint8 batches; autograd
    does not record from several threads into one tensor). After an exception no new index
    starts; it is raised once the running ones have finished (no thread keeps writing into a
    batch the caller has given up)."""
    t = min(current_threads(), n)
    if t <= 1:
        for i in range(n):
            fn(i)
        return

    grad = torch.is_grad_enabled()  # thread-local: the workers take the caller's
    # next() on a shared iterator is atomic under the GIL: each index is taken once
    indices = iter(range(n))
    failed: List[BaseException] = []

    def part() -> None:
        with torch.set_grad_enabled(grad):
            for i in indices:
                if failed:
                    return
                try:
                    fn(i)
                except BaseException as exc:
                    failed.append(exc)
                    return

    ahead = [pool(t - 1).submit(part) for _ in range(1, t)]
    part()
    for f in ahead:
        f.result()
    if failed:
        raise failed[0]


__all__ = ["cpu_count", "current_threads", "for_each", "image_threads", "pool",
           "single_threaded"]
