"""``StallMeter``: how long each training step waited for its batch versus computed.

GPU utilisation that looks like a heartbeat usually means the step loop spends part of every step
waiting for the input pipeline. ``StallMeter`` splits each step into *wait* (from asking the
iterator for the next batch until the batch is ready) and *compute* (the forward, backward and
optimizer step), so the data-wait fraction can be read off directly.

On CUDA the split is measured with CUDA events recorded on the current stream: the events see the
device timeline, so a batch that the host produces slowly shows up as device idle time (wait), and
nothing forces the host to synchronise until :meth:`StallMeter.summary` is called. On the CPU
there is no asynchronous queue, so a wall clock (``time.perf_counter``) taken between the phases
is already synchronised.
"""
from __future__ import annotations

import contextlib
import math
import time
from dataclasses import asdict, dataclass
from typing import Dict, Iterable, Iterator, List, Optional, Tuple, TypeVar, Union

import torch

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
    compute block.

    Args:
        device: where the step runs. ``"cuda"`` devices use CUDA events on the current stream
            (no host synchronisation per step); anything else uses the wall clock. ``None``
            means ``"cuda"`` if available, else ``"cpu"``.
        skip_first: number of initial steps to leave out of :meth:`summary` (warm-up: first
            CUDA kernels, cuDNN autotuning, DataLoader worker start-up).

    Example:
        >>> import torch
        >>> from batchaug import StallMeter
        >>> model = torch.nn.Linear(4, 2)
        >>> batches = [(torch.randn(8, 4), torch.randint(0, 2, (8,))) for _ in range(3)]
        >>> meter = StallMeter("cpu")
        >>> for x, y in meter.wrap(batches):
        ...     with meter.compute():
        ...         torch.nn.functional.cross_entropy(model(x), y).backward()
        >>> meter.summary().steps
        3
    """

    def __init__(self, device: Optional[Union[str, torch.device]] = None,
                 skip_first: int = 0) -> None:
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        if isinstance(skip_first, bool) or not isinstance(skip_first, int) or skip_first < 0:
            raise ValueError(f"skip_first must be an int >= 0, got {skip_first!r}")
        self.skip_first = skip_first
        self._cuda = self.device.type == "cuda"
        if self._cuda and not torch.cuda.is_available():
            raise ValueError(f"device={str(self.device)!r} was requested but CUDA is not available")
        # Per step: (wait_start, wait_end) and (compute_start, compute_end) marks; floats on the
        # CPU, torch.cuda.Event on CUDA (read only in summary(), so steps never synchronise).
        self._wait: List[Tuple[object, object]] = []
        self._compute: List[Tuple[object, object]] = []

    def reset(self) -> None:
        """Forget every measured step."""
        self._wait.clear()
        self._compute.clear()

    def _mark(self) -> object:
        if self._cuda:
            event = torch.cuda.Event(enable_timing=True)
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
                return
            self._wait.append((start, self._mark()))
            yield item

    @contextlib.contextmanager
    def compute(self) -> Iterator[None]:
        """Context manager around one step's computation."""
        start = self._mark()
        yield
        self._compute.append((start, self._mark()))

    def _elapsed_ms(self, marks: Tuple[object, object]) -> float:
        start, end = marks
        if self._cuda:
            return float(start.elapsed_time(end))  # type: ignore[attr-defined]
        return (float(end) - float(start)) * 1e3  # type: ignore[arg-type]

    def step_times(self) -> List[Tuple[float, float]]:
        """``(wait_ms, compute_ms)`` for every complete step, warm-up steps included.

        On CUDA this synchronises with the device once.
        """
        steps = min(len(self._wait), len(self._compute))
        if self._cuda and steps:
            torch.cuda.synchronize(self.device)
        return [(self._elapsed_ms(self._wait[i]), self._elapsed_ms(self._compute[i]))
                for i in range(steps)]

    def summary(self) -> StallSummary:
        """Means, totals and the data-wait fraction over the measured steps after ``skip_first``."""
        times = self.step_times()[self.skip_first:]
        n = len(times)
        wait = math.fsum(w for w, _ in times)
        comp = math.fsum(c for _, c in times)
        total = wait + comp
        return StallSummary(
            steps=n,
            wait_ms_mean=wait / n if n else 0.0,
            compute_ms_mean=comp / n if n else 0.0,
            wait_ms_total=wait,
            compute_ms_total=comp,
            wait_fraction=wait / total if total > 0 else 0.0,
        )
