"""``StallMeter``: how long each training step waited for its batch versus computed.

GPU utilisation that looks like a heartbeat usually means the step loop waits for the input
pipeline part of every step; the data-wait fraction says how much.
"""
from __future__ import annotations

import collections
import contextlib
import time
from dataclasses import asdict, dataclass
from typing import (Any, Deque, Dict, Iterable, Iterator, List, Optional, Tuple, TypeVar,
                    Union)

import torch

from batchaug.data.storage import resolve_device

T = TypeVar("T")

__all__ = ["StallMeter", "StallSummary"]


@dataclass(frozen=True)
class StallSummary:
    """Totals over the measured steps of a :class:`StallMeter` (times in milliseconds)."""

    steps: int
    wait_ms_mean: float
    compute_ms_mean: float
    wait_ms_total: float
    compute_ms_total: float
    wait_fraction: float  # wait / (wait + compute); 0 when nothing was measured

    def as_dict(self) -> Dict[str, float]:
        return asdict(self)

    def __str__(self) -> str:
        return (
            f"{self.steps} steps: wait {self.wait_ms_mean:.2f} ms/step, "
            f"compute {self.compute_ms_mean:.2f} ms/step, "
            f"data-wait fraction {100 * self.wait_fraction:.1f}%"
        )


class StallMeter:
    """Measure, per training step, the time spent waiting for the batch versus computing.

    Wrap the batch iterator with :meth:`wrap` (times each ``next()``) and put the step's work in
    ``with meter.compute():``. Steps are paired in order: the i-th batch's wait with the i-th
    compute block. Memory stays bounded however long the run: steps are folded into running
    totals as they complete (on CUDA, once their events have completed, checked without
    waiting), only the last ``history`` steps' times are kept for :meth:`step_times`, and of
    waits without a compute block (or the reverse) only the latest ``MAX_PENDING``.

    Args:
        device: where the step runs: pass the model's (or the loader's) device, e.g.
            ``next(model.parameters()).device`` or ``loader.cache.device``. CUDA devices use
            CUDA events on that device's current stream (no host synchronisation per step);
            anything else uses the wall clock. ``"cuda"`` without an index means the current
            CUDA device when the meter is made; ``None`` means that, or ``"cpu"`` without CUDA.
        skip_first: number of initial steps to leave out of :meth:`summary` (warm-up: first
            CUDA kernels, cuDNN autotuning, DataLoader worker start-up).
        history: how many of the latest steps :meth:`step_times` returns.

    Example:
        >>> import torch
        >>> from batchaug import StallMeter
        >>> model = torch.nn.Linear(4, 2)
        >>> batches = [(torch.randn(8, 4), torch.randint(0, 2, (8,))) for _ in range(3)]
        >>> meter = StallMeter(next(model.parameters()).device)
        >>> for x, y in meter.wrap(batches):
        ...     with meter.compute():
        ...         torch.nn.functional.cross_entropy(model(x), y).backward()
        >>> meter.summary().steps
        3
    """

    #: On CUDA, at most this many measured steps wait for their events: beyond it the oldest
    #: is waited for (it was recorded that many steps ago, so it has all but always completed).
    MAX_PENDING = 64

    def __init__(self, device: Optional[Union[str, torch.device, int]] = None,
                 skip_first: int = 0, history: int = 10_000) -> None:
        if isinstance(skip_first, bool) or not isinstance(skip_first, int) or skip_first < 0:
            raise ValueError(f"skip_first must be an int >= 0, got {skip_first!r}")
        if isinstance(history, bool) or not isinstance(history, int) or history < 1:
            raise ValueError(f"history must be an int >= 1, got {history!r}")
        self.device = resolve_device(device)
        self.skip_first = skip_first
        self.history = history
        self._cuda = self.device.type == "cuda"
        # Marks of steps not yet folded: floats on the CPU, torch.cuda.Event on CUDA.
        self._waits: Deque[Tuple[Any, Any]] = collections.deque()
        self._computes: Deque[Tuple[Any, Any]] = collections.deque()
        self._spare: List[Any] = []  # folded CUDA events, recorded again by later steps
        self.reset()

    def reset(self) -> None:
        """Forget every measured step."""
        self._waits.clear()
        self._computes.clear()
        self._times: Deque[Tuple[float, float]] = collections.deque(maxlen=self.history)
        self._steps = 0
        self._counted = 0
        self._wait_total = 0.0
        self._compute_total = 0.0

    def _mark(self) -> Any:
        if self._cuda:
            event = self._spare.pop() if self._spare else torch.cuda.Event(enable_timing=True)
            event.record(torch.cuda.current_stream(self.device))
            return event
        return time.perf_counter()

    def wrap(self, iterable: Iterable[T]) -> Iterator[T]:
        """Yield the items of ``iterable``, timing how long each one took to arrive."""
        iterator = iter(iterable)
        while True:
            start = self._mark()
            try:
                item = next(iterator)
            except StopIteration:
                if self._cuda:
                    self._spare.append(start)
                return
            self._waits.append((start, self._mark()))
            self._fold(block=False)
            yield item

    @contextlib.contextmanager
    def compute(self) -> Iterator[None]:
        """Context manager around one step's computation."""
        start = self._mark()
        yield
        self._computes.append((start, self._mark()))
        self._fold(block=False)

    def _elapsed_ms(self, marks: Tuple[Any, Any]) -> float:
        start, end = marks
        if self._cuda:
            return float(start.elapsed_time(end))
        return (float(end) - float(start)) * 1e3

    def _fold(self, block: bool) -> None:
        """Move complete steps (a wait and a compute) into the totals and the history. On CUDA
        only steps whose events have completed, unless ``block`` (or too many are pending)."""
        while self._waits and self._computes:
            wait, comp = self._waits[0], self._computes[0]
            if self._cuda:
                marks = (*wait, *comp)  # (a user may switch streams between them)
                if block or len(self._computes) > self.MAX_PENDING:
                    for event in marks:
                        event.synchronize()
                elif not all(event.query() for event in marks):  # asks, does not wait
                    return
            w, c = self._elapsed_ms(wait), self._elapsed_ms(comp)
            self._waits.popleft()
            self._computes.popleft()
            if self._cuda:
                self._spare.extend((*wait, *comp))
            self._times.append((w, c))
            if self._steps >= self.skip_first:
                self._counted += 1
                self._wait_total += w
                self._compute_total += c
            self._steps += 1
        # marks that never get their other half (a loop that wraps its batches but never
        # enters compute(), or the reverse) would pile up, two CUDA events per step: keep
        # the latest MAX_PENDING, which a late pairing could still use
        for unpaired, other in ((self._waits, self._computes), (self._computes, self._waits)):
            while len(unpaired) > self.MAX_PENDING and not other:
                dropped = unpaired.popleft()
                if self._cuda:
                    self._spare.extend(dropped)

    def step_times(self) -> List[Tuple[float, float]]:
        """``(wait_ms, compute_ms)`` of the latest ``history`` complete steps, oldest first,
        warm-up steps included.

        On CUDA this waits for the pending steps' events.
        """
        self._fold(block=True)
        return list(self._times)

    def summary(self) -> StallSummary:
        """Means, totals and the data-wait fraction over the measured steps after ``skip_first``."""
        self.step_times()
        n = self._counted
        wait, comp = self._wait_total, self._compute_total
        total = wait + comp
        return StallSummary(
            steps=n,
            wait_ms_mean=wait / n if n else 0.0,
            compute_ms_mean=comp / n if n else 0.0,
            wait_ms_total=wait,
            compute_ms_total=comp,
            wait_fraction=wait / total if total > 0 else 0.0,
        )
