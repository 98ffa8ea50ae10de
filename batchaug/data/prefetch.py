"""Batches of a dense column: gather rows (on the device, or on the host and copy them ahead).

Every column delivery ``DeviceLoader`` uses, dense (here) or ragged
(``batchaug.data.compact_batches.CompactBatches``), has one interface: ``produce(idx, stop)``
(the part a reader thread can do ahead: gather, copy, decode) and ``receive(item)`` (the
caller's part) -> ``(batch, sizes)`` on the device, ``sizes`` None for a dense column (every
row fills the batch); ``release(item)`` once the batch is no longer read, ``reset()`` before an
epoch, ``thread_setup()`` first on a reader thread; ``ahead`` says whether a reader thread
helps, ``device_index`` whether ``produce`` takes the batch's indices on the device.

A ``"device"`` column (``DeviceRows``) needs no thread: one ``index_select`` on the device is
already asynchronous. For ``placement="host"`` and ``"disk"``:

* ``HostGather`` / ``DiskGather`` write one batch of rows, in batch order, into a host tensor.
  ``DiskGather`` reads rows in ascending file order (one ``preadv`` per run of consecutive rows)
  and restores the batch order with one ``index_copy_``; for ``order="quasi_random"`` it reads
  whole blocks (``batchaug.data.order``) into a small LRU of block slots, so each block of the
  file is read once, sequentially. Before reading, it hands the kernel all of the batch's reads
  and those of the batches ``READ_AHEAD`` ahead (``POSIX_FADV_WILLNEED``), so the disk works on
  many requests at once (measured: 1.5x the cold rate of one synchronous read at a time). ``HostGather`` is one ``index_select`` from RAM: there is no
  file order to follow, and sorting would only add a pass.
* ``Background`` runs the gathering on one daemon thread at most ``depth`` batches ahead
  (a bounded queue), after the delivery's ``thread_setup`` (``CudaDelivery``: make the
  cache's device current first, as torch's pin-memory thread does; a new thread's current
  device is 0, so its first CUDA call would otherwise create a context on GPU 0 in every
  rank). An exception there is re-raised in the caller as the same object (same
  type, same message); ``close()`` (called when the loop ends, breaks, or the generator is
  closed, and at interpreter exit) stops the thread within ~50 ms and joins it.
* ``CudaDelivery`` owns ``depth + 1`` reusable pinned staging buffers: the thread gathers into a
  free one, copies it to the device with ``non_blocking=True`` on a side stream and records an
  event; the caller's stream waits on that event (no host sync) and the device tensor is
  ``record_stream``-ed to it; a buffer is written again only after its copy's event completed.
  ``CpuDelivery`` (a CPU-only machine) uses the same reusable buffers; the caller clones each
  batch out of its buffer (a caller may keep a batch), and the thread still overlaps reading
  with compute.
"""
from __future__ import annotations

import atexit
import queue
import threading
import weakref
from collections import OrderedDict
from typing import Any, Callable, List, Optional, Tuple

import numpy as np
import torch
from torch import Tensor

from batchaug.data.mapped import MappedRows

_POLL_S = 0.05
#: Batches whose reads a disk reader starts (``DiskGather.advise``) before it gathers the current
#: one: enough to keep the disk busy, and only that many batches of page cache.
READ_AHEAD = 2


def _bytes_of(t: Tensor) -> memoryview:
    """A writable byte view of a contiguous CPU tensor (any dtype, bfloat16 included)."""
    return memoryview(t.reshape(-1).view(torch.uint8).numpy())


class HostGather:
    """Rows of a host tensor (``raw``: on-disk order, e.g. NHWC for channels_last caches)."""

    def __init__(self, raw: Tensor) -> None:
        self.raw = raw
        self.row_shape = tuple(raw.shape[1:])
        self.dtype = raw.dtype

    def __call__(self, idx: Tensor, out: Tensor) -> None:
        torch.index_select(self.raw, 0, idx, out=out)


class DiskGather:
    """Rows of a ``MappedRows`` file; with ``block_rows``, through an LRU of whole blocks."""

    def __init__(self, rows: MappedRows, dtype: torch.dtype, block_rows: Optional[int] = None,
                 capacity_blocks: int = 0) -> None:
        self.rows = rows
        self.row_shape = rows.row_shape
        self.dtype = dtype
        self.block_rows = block_rows
        self.capacity = capacity_blocks if block_rows else 0
        self._slots: Optional[Tensor] = None
        self._lru: "OrderedDict[int, int]" = OrderedDict()  # block -> slot, oldest first
        self._sorted: Optional[Tensor] = None

    def __call__(self, idx: Tensor, out: Tensor) -> None:
        self.rows.check_unchanged()
        rows = idx.numpy()
        if self.block_rows:
            blocks = rows // self.block_rows
            needed = np.unique(blocks)
            if needed.size <= self.capacity:
                self._gather_blocks(rows, blocks, needed, out)
                return
        self._gather_runs(rows, out)

    def advise(self, idx: Tensor) -> None:
        """Start the reads of a later batch (``idx``) now: the kernel reads its blocks (or
        runs of rows) into the page cache while this thread gathers the current batch, so the
        disk always has requests queued instead of one synchronous read at a time."""
        rows = idx.numpy()
        if self.block_rows:
            for b in np.unique(rows // self.block_rows).tolist():
                if b not in self._lru:
                    first = b * self.block_rows
                    self.rows.will_need(first, min(self.block_rows, self.rows.n - first))
            return
        s = np.unique(rows)
        cuts = np.flatnonzero(np.diff(s) != 1) + 1
        for a, b in zip([0, *cuts.tolist()], [*cuts.tolist(), s.size]):
            self.rows.will_need(int(s[a]), b - a)

    def _gather_runs(self, rows: np.ndarray, out: Tensor) -> None:
        k = rows.size
        order = np.argsort(rows, kind="stable")
        s = rows[order]
        if self._sorted is None or self._sorted.shape[0] < k:
            self._sorted = torch.empty((k,) + self.row_shape, dtype=self.dtype)
        dest = _bytes_of(self._sorted[:k])
        rb = self.rows.row_bytes
        # A run is consecutive rows; a repeated row (padding) starts a new run and is read again.
        cuts = np.flatnonzero(np.diff(s) != 1) + 1
        runs = list(zip([0, *cuts.tolist()], [*cuts.tolist(), k]))
        for a, b in runs:  # queue all of this batch's reads at once, then wait in order
            self.rows.will_need(int(s[a]), b - a)
        for a, b in runs:
            self.rows.read(int(s[a]), dest[a * rb:b * rb])
        out.index_copy_(0, torch.from_numpy(order), self._sorted[:k])

    def _gather_blocks(self, rows: np.ndarray, blocks: np.ndarray, needed: np.ndarray,
                       out: Tensor) -> None:
        br = self.block_rows
        if self._slots is None:
            self._slots = torch.empty((self.capacity * br,) + self.row_shape, dtype=self.dtype)
        keep = set(needed.tolist())
        missing = [b for b in keep if b not in self._lru]
        for b in missing:  # queue all of this batch's block reads at once, then wait in order
            self.rows.will_need(b * br, min(br, self.rows.n - b * br))
        slot_of = np.empty(needed.size, dtype=np.int64)
        for j, b in enumerate(needed.tolist()):  # ascending: blocks are read in file order
            if b in self._lru:
                self._lru.move_to_end(b)
            else:
                if len(self._lru) < self.capacity:
                    slot = len(self._lru)
                else:  # evict the least recently used block this batch does not need
                    old = next(o for o in self._lru if o not in keep)
                    slot = self._lru.pop(old)
                first = b * br
                count = min(br, self.rows.n - first)
                self.rows.read(first, _bytes_of(self._slots[slot * br:slot * br + count]))
                self._lru[b] = slot
            slot_of[j] = self._lru[b]
        flat = slot_of[np.searchsorted(needed, blocks)] * br + rows % br
        torch.index_select(self._slots, 0, torch.from_numpy(flat), out=out)


class _Failure:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


_END = object()
_LIVE: "weakref.WeakSet[Background]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for bg in list(_LIVE):
        bg.close()


class Background:
    """``produce(i)`` for ``i`` in ``range(n)`` on a daemon thread, at most ``depth`` ahead.

    Example:
        >>> it = Background(lambda i: i * i, 4, depth=2)
        >>> list(it)
        [0, 1, 4, 9]
    """

    def __init__(self, produce: Callable[[int], Any], n: int, depth: int,
                 stop: Optional[threading.Event] = None,
                 setup: Optional[Callable[[], None]] = None) -> None:
        self._produce = produce
        self._setup = setup
        self._n = n
        self._q: "queue.Queue[Any]" = queue.Queue(maxsize=max(1, depth))
        #: Set by ``close()``; ``produce`` may wait on it too (see ``wait_get``).
        self.stop = stop if stop is not None else threading.Event()
        self._thread = threading.Thread(target=self._run, name="batchaug-prefetch", daemon=True)
        _LIVE.add(self)
        self._thread.start()

    def _put(self, item: Any) -> bool:
        while not self.stop.is_set():
            try:
                self._q.put(item, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        try:
            if self._setup is not None:  # before anything else this thread does
                self._setup()
            for i in range(self._n):
                if self.stop.is_set() or not self._put(self._produce(i)):
                    return
            self._put(_END)
        except BaseException as exc:  # handed to the caller, raised there
            self._put(_Failure(exc))

    def __iter__(self) -> "Background":
        return self

    def __next__(self) -> Any:
        while True:
            try:
                item = self._q.get(timeout=_POLL_S)
                break
            except queue.Empty:
                if self.stop.is_set():
                    raise StopIteration from None
                if not self._thread.is_alive() and self._q.empty():
                    self.close()
                    raise RuntimeError("the batchaug prefetch thread ended without a result")
        if item is _END:
            self.close()
            raise StopIteration
        if isinstance(item, _Failure):
            self.close()
            raise item.exc
        return item

    def close(self) -> None:
        """Stop the thread and wait for it (idempotent)."""
        self.stop.set()
        while True:  # drop what was produced: releases its tensors now
            try:
                self._q.get_nowait()
            except queue.Empty:
                break
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        _LIVE.discard(self)


def wait_get(q: "queue.Queue[Any]", stop: Optional[threading.Event]) -> Any:
    """``q.get()`` that gives up (returns None) once ``stop`` is set."""
    while True:
        try:
            return q.get(timeout=_POLL_S)
        except queue.Empty:
            if stop is not None and stop.is_set():
                return None


class DeviceRows:
    """A dense column on the batches' device: one ``index_select`` per batch, in the caller's
    thread (``produce`` takes the indices on the device; nothing is done ahead).

    Example:
        >>> rows = DeviceRows(torch.arange(6).view(3, 2))
        >>> rows.receive(rows.produce(torch.tensor([2, 0])))[0].tolist()
        [[4, 5], [0, 1]]
    """

    ahead = False
    device_index = True

    def __init__(self, column: Tensor) -> None:
        self.column = column

    def produce(self, idx: Tensor, stop: Optional[threading.Event] = None) -> Tensor:
        return idx

    def receive(self, item: Tensor) -> Tuple[Tensor, None]:
        return self.column.index_select(0, item), None

    def release(self, item: Any) -> None:
        pass

    def reset(self) -> None:
        pass

    def thread_setup(self) -> None:
        pass


class _Staging:
    """``buffers`` reusable host buffers of one batch each, handed out through a free list."""

    ahead = True
    device_index = False

    def __init__(self, gather: Callable[[Tensor, Tensor], None], batch_size: int, buffers: int,
                 pin: bool) -> None:
        self.gather = gather
        shape = (batch_size,) + tuple(gather.row_shape)
        self.buffers: List[Tensor] = [torch.empty(shape, dtype=gather.dtype, pin_memory=pin)
                                      for _ in range(buffers)]
        self.free: "queue.Queue[int]" = queue.Queue()
        self.reset()

    def reset(self) -> None:
        """All buffers free again (a new epoch; an abandoned one's batches were dropped)."""
        self.free = queue.Queue()
        for i in range(len(self.buffers)):
            self.free.put(i)

    def _fill(self, idx: Tensor, stop: Optional[threading.Event]) -> Optional[Tuple[int, Tensor]]:
        slot = wait_get(self.free, stop)
        if slot is None:
            return None
        self._wait_reusable(slot)
        part = self.buffers[slot][:idx.numel()]
        self.gather(idx, part)
        return slot, part

    def _wait_reusable(self, slot: int) -> None:
        pass

    def thread_setup(self) -> None:
        """Run first on a reader thread (``Background(setup=...)``)."""

    def release(self, item: Any) -> None:
        """Nothing to do: ``receive`` already handed the buffer back (the batch left it)."""


class CpuDelivery(_Staging):
    """Batches for a CPU device: gathered into a staging buffer, cloned by the caller.

    The clone (one memcpy) is the CPU's "copy to the device": a caller may keep a batch while
    its buffer is refilled, and every long-lived tensor is allocated by the caller's thread (a
    tensor allocated on the reader thread and freed on another grows glibc's per-thread arenas
    by tens of MiB).
    """

    def __init__(self, gather: Callable[[Tensor, Tensor], None], batch_size: int,
                 buffers: int) -> None:
        super().__init__(gather, batch_size, buffers, pin=False)

    def produce(self, idx: Tensor, stop: Optional[threading.Event]) -> Any:
        return self._fill(idx, stop)

    def receive(self, item: Any) -> Tuple[Tensor, None]:
        slot, part = item
        out = part.clone()
        self.free.put(slot)
        return out, None


class CudaDelivery(_Staging):
    """Pinned staging buffers -> side-stream copies -> event waits on the caller's stream."""

    def __init__(self, gather: Callable[[Tensor, Tensor], None], device: torch.device,
                 batch_size: int, buffers: int) -> None:
        super().__init__(gather, batch_size, buffers, pin=True)
        self.device = device
        self.done: List[Optional[torch.cuda.Event]] = [None] * buffers
        with torch.cuda.device(device):
            self.stream = torch.cuda.Stream(device)

    def thread_setup(self) -> None:
        # A new thread's current device is 0: without this, its first CUDA call (an event
        # wait, a stream) would create a context on GPU 0 in every rank.
        torch.cuda.set_device(self.device)

    def _wait_reusable(self, slot: int) -> None:
        event = self.done[slot]
        if event is not None:
            with torch.cuda.device(self.device):
                event.synchronize()  # the last copy out of this buffer has finished

    def produce(self, idx: Tensor, stop: Optional[threading.Event]) -> Any:
        filled = self._fill(idx, stop)
        if filled is None:
            return None
        slot, part = filled
        with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
            x = part.to(self.device, non_blocking=True)
            event = torch.cuda.Event()
            event.record(self.stream)
        self.done[slot] = event
        return x, event, slot

    def receive(self, item: Any) -> Tuple[Tensor, None]:
        x, event, slot = item
        current = torch.cuda.current_stream(self.device)
        current.wait_event(event)
        # x was allocated on the side stream: keep its memory until the caller's work is done.
        x.record_stream(current)
        self.free.put(slot)
        return x, None
