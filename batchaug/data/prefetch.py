"""Batches of a column: gather rows (on the device, or on the host and copy them ahead).

Every delivery ``DeviceLoader`` uses answers ``produce(idx, stop)`` (what a reader thread can do
ahead: gather, copy, decode), ``receive(item)`` -> ``(batch, sizes)`` on the device (``sizes``
None for a dense column), ``release(item)``, ``reset()`` and ``thread_setup()``; ``ahead``,
``device_index`` and ``reuses`` say whether a reader thread helps, whether ``produce`` takes
the indices on the device, and whether a batch is read out of a reused buffer.

A dense ``"device"`` column (``DeviceRows``) needs no thread: ``index_select`` on the device is
already asynchronous. Everything else goes through one ``Delivery``, whose columns differ only
in their gather: ``HostGather`` (one ``index_select`` from RAM: no file order to follow),
``DiskGather`` (reads in ascending file order, one ``preadv`` per run of consecutive rows, or
whole ``quasi_random`` blocks through a small LRU, with the reads of the next ``READ_AHEAD``
batches handed to the kernel first so the disk has many requests queued) and
``batchaug.data.ragged_batches.RaggedRows`` (a ragged column's bytes, padded or decoded).

``Background`` runs the gathering on one daemon thread at most ``depth`` batches ahead; an
exception there is re-raised in the caller as the same object, and ``close()`` (at the end of
the loop, on ``break``, and at interpreter exit) stops and joins the thread within ``_POLL_S``.
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

from batchaug.data.storage import MappedRows

_POLL_S = 0.05
#: Batches whose reads a disk reader starts (``DiskGather.advise``) before it gathers the current
#: one: enough to keep the disk busy, and only that many batches of page cache.
READ_AHEAD = 2


def _bytes_of(t: Tensor) -> memoryview:
    """A writable byte view of a contiguous CPU tensor (any dtype, bfloat16 included)."""
    return memoryview(t.reshape(-1).view(torch.uint8).numpy())


class _DenseRows:
    """A dense column's gather for ``Delivery``: fixed-size rows written by ``self(idx, out)``
    into a buffer, copied over as they are, no sizes."""

    upload = True
    row_shape: Tuple[int, ...] = ()
    dtype = torch.uint8

    def _row_numel(self) -> int:
        return int(np.prod(self.row_shape, dtype=np.int64))

    def batch_numel(self, batch_size: int) -> int:
        return batch_size * self._row_numel()

    def fill(self, idx: Tensor, take: Callable[[int], Tensor], stream: Any = None
             ) -> Tuple[Tensor, None]:
        k = idx.numel()
        n = k * self._row_numel()
        out = take(n)[:n].view((k,) + tuple(self.row_shape))
        self(idx, out)
        return out, None

    def __call__(self, idx: Tensor, out: Tensor) -> None:
        raise NotImplementedError

    def finish(self, data: Tensor, rows: None, take: Any, hold: Any = None
               ) -> Tuple[Tensor, None]:
        return data, None


class HostGather(_DenseRows):
    """Rows of a host tensor (``raw``: on-disk order, e.g. NHWC for channels_last caches)."""

    def __init__(self, raw: Tensor) -> None:
        self.raw = raw
        self.row_shape = tuple(raw.shape[1:])
        self.dtype = raw.dtype

    def __call__(self, idx: Tensor, out: Tensor) -> None:
        torch.index_select(self.raw, 0, idx, out=out)


class DiskGather(_DenseRows):
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
    reuses = False

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


class Delivery:
    """One column's batches through ``buffers`` reused host buffers (pinned for a CUDA
    device): ``gather.fill`` fills a free buffer on the reader thread, the bytes go to the
    device on a side stream (an event orders the caller's stream after them: no host sync;
    ``upload`` False keeps a JPEG column's bytes on the host for the decoder), ``gather.finish``
    pads or decodes a ragged batch there, and the buffer is written again only after
    ``release`` and after its copy finished. On a CPU device ``finish`` runs on the reader
    thread and the batch stays in its buffer until ``release`` (``reuses``).

    Example:
        >>> d = Delivery(HostGather(torch.arange(6).view(3, 2)), torch.device("cpu"), 2, 2)
        >>> item = d.produce(torch.tensor([2, 0]))
        >>> d.receive(item)[0].tolist()
        [[4, 5], [0, 1]]
        >>> d.release(item)
    """

    ahead = True
    device_index = False

    def __init__(self, gather: Any, device: torch.device, batch_size: int, buffers: int,
                 device_sizes: bool = True) -> None:
        self.gather = gather
        self.device = device
        #: any other device (CUDA; "meta" in tests) is reached by side-stream copies
        self.cuda = device.type != "cpu"
        #: on a CPU device a batch is read straight out of its reused buffer
        self.reuses = not self.cuda
        self.device_sizes = device_sizes
        first = gather.batch_numel(batch_size)  # a dense batch's size is known: allocate now
        self.buffers: List[Tensor] = [torch.empty(first, dtype=gather.dtype, pin_memory=self.cuda)
                                      for _ in range(buffers)]
        #: a CPU device's finished (padded) batches, one per buffer
        self.outputs: List[Optional[Tensor]] = [None] * buffers
        self.done: List[Any] = [None] * buffers
        #: per buffer, the device tensors its batch's queued work still reads (kept until
        #: ``done``'s event: ``RaggedRows.finish``'s ``hold``)
        self.held: List[List[Any]] = [[] for _ in range(buffers)]
        self.stream = None
        if self.cuda:
            with torch.cuda.device(device):
                self.stream = torch.cuda.Stream(device)
                # the side stream may read the column's device bytes: after their upload
                self.stream.wait_stream(torch.cuda.current_stream(device))
        self.free: "queue.Queue[int]" = queue.Queue()
        self.reset()

    def reset(self) -> None:
        """All buffers free again (a new epoch; an abandoned one's batches were dropped)."""
        self.free = queue.Queue()
        for i in range(len(self.buffers)):
            self.free.put(i)

    def thread_setup(self) -> None:
        """Run first on a reader thread (``Background(setup=...)``)."""
        if self.cuda:
            # A new thread's current device is 0: without this, its first CUDA call (an event
            # wait, a stream) would create a context on GPU 0 in every rank.
            torch.cuda.set_device(self.device)

    def _take(self, slot: int, numel: int, outputs: bool = False) -> Tensor:
        """Flat buffer ``slot`` (of the gather's dtype; ``outputs``: uint8) with at least
        ``numel`` elements: grown to the largest batch seen, then kept (a fresh one per batch
        costs a page fault per page, or a pinned allocation)."""
        held: List[Any] = self.outputs if outputs else self.buffers
        if held[slot] is None or held[slot].numel() < numel:
            held[slot] = torch.empty(int(numel * 1.25),
                                     dtype=torch.uint8 if outputs else self.gather.dtype,
                                     pin_memory=self.cuda and not outputs)
        return held[slot]

    def produce(self, idx: Tensor, stop: Optional[threading.Event] = None) -> Any:
        """The batch of rows ``idx`` (CPU int64): gathered, and on its way to the device."""
        item = self.produce_gathered(idx, stop)
        if item is None:
            return None
        slot, data, rows, _ = item
        if not self.cuda:
            return (slot, *self.finish_gathered(item), None)
        with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
            if self.gather.upload and data.device != self.device:
                data = data.to(self.device, non_blocking=True)
            x, sizes = self.gather.finish(data, rows, None, self.held[slot])
            if sizes is not None and self.device_sizes:  # pinned: ordered by the event
                sizes = sizes.pin_memory().to(self.device, non_blocking=True)
            event = torch.cuda.Event()
            event.record(self.stream)
        self.done[slot] = event
        return slot, x, sizes, event

    def produce_gathered(self, idx: Tensor, stop: Optional[threading.Event] = None) -> Any:
        """The rows ``idx`` gathered into a free buffer but not finished, ``(slot, bytes,
        rows, None)``: ``produce``'s first step, or on a CPU device for the caller to use (the
        ROI crop decodes only the windows it needs from a JPEG column's bitstreams) before
        ``release``."""
        slot = wait_get(self.free, stop)
        if slot is None:
            return None
        event = self.done[slot]
        if event is not None:
            with torch.cuda.device(self.device):
                event.synchronize()  # the last copy out of this buffer has finished
        self.held[slot] = []  # its work is done: what it read may be freed
        data, rows = self.gather.fill(idx, lambda n: self._take(slot, n), self.stream)
        return slot, data, rows, None

    def finish_gathered(self, item: Any) -> Tuple[Tensor, Optional[Tensor]]:
        """``(batch, sizes)`` of a ``produce_gathered`` item, as ``produce`` + ``receive``
        give them (the loader's crop changed to one that decodes whole images)."""
        slot, data, rows, _ = item
        return self.gather.finish(data, rows, lambda n: self._take(slot, n, True))

    def receive(self, item: Any) -> Tuple[Tensor, Optional[Tensor]]:
        """``(batch, sizes)`` on the device (``sizes`` None for dense rows)."""
        _, x, sizes, event = item
        if event is None:
            return x, sizes
        current = torch.cuda.current_stream(self.device)
        current.wait_event(event)  # no use of the batch before its copy / decode finished
        # allocated on the side stream: keep their memory until the caller's work is done
        x.record_stream(current)
        if sizes is not None and sizes.device.type != "cpu":
            sizes.record_stream(current)
        return x, sizes

    def release(self, item: Any) -> None:
        """The batch of ``item`` is no longer read: its buffer may be written again."""
        if item is not None:
            self.free.put(item[0])
