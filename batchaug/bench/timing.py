"""Timing machinery: equal wall-clock windows, interleaved rounds, same-round ratios and spreads."""
from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

from batchaug.bench.contenders import Contender

# Every contender gets the SAME wall-clock window in a round, whatever its speed: a short window
# dodges the load bursts a long one averages in, so unequal windows bias the ratios.
WARMUP_BATCHES = 2


@dataclass
class Measurement:
    recipe: str
    contender: str
    threads: int
    round: int
    images: int
    seconds: float

    @property
    def images_per_s(self) -> float:
        return self.images / self.seconds


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(contender: Contender, window: float, device: torch.device) -> Tuple[int, float]:
    """Pull batches from ``contender`` for ``window`` seconds; return (images, seconds).

    Start-up is not timed, for every contender alike: creating the stream (a ``DataLoader``
    forks its workers here) and its first ``contender.startup_batches`` batches (one per worker,
    so the pipeline is full, not racing ahead of the clock). The clock then runs until the first
    batch that ends at or after ``window`` is in hand (on CUDA after ``synchronize``): ``seconds``
    is ``window`` plus at most one batch. The stream is closed (workers joined) before returning,
    so nothing keeps working inside the next contender's window.
    """
    done = 0
    stream = contender.open_stream()
    try:
        with torch.no_grad():
            for _ in range(contender.startup_batches):
                next(stream)
            synchronize(device)
            start = time.perf_counter()
            while True:
                batch, _labels = next(stream)
                done += batch.shape[0]
                if time.perf_counter() - start >= window:
                    break
            synchronize(device)
            seconds = time.perf_counter() - start
    finally:
        stream.close()
    return done, seconds


def warmup(contender: Contender, device: torch.device) -> None:
    """First-call overhead (allocator, lazy imports, kernel selection), untimed, stream closed."""
    stream = contender.open_stream()
    try:
        with torch.no_grad():
            for _ in range(contender.startup_batches + WARMUP_BATCHES):
                next(stream)
            synchronize(device)
    finally:
        stream.close()


def run_rounds(recipe: str, contenders: Sequence[Contender], thread_counts: Sequence[int],
               rounds: int, window: float, device: torch.device,
               log: Callable[[str], None] = lambda s: print(s, file=sys.stderr)
               ) -> List[Measurement]:
    """Measure every contender at every thread count for ``window`` seconds, ``rounds`` times.

    Each round visits the thread counts and, within each, every contender once; the contender
    order rotates from round to round so no pipeline always runs first or right after another.
    """
    previous_threads = torch.get_num_threads()
    results: List[Measurement] = []
    try:
        for c in contenders:
            warmup(c, device)
        total = rounds * len(thread_counts) * len(contenders)
        step = 0
        for r in range(rounds):
            shift = r % len(contenders)
            order = list(contenders[shift:]) + list(contenders[:shift])
            for threads in thread_counts:
                torch.set_num_threads(threads)
                for c in order:
                    step += 1
                    n, seconds = measure(c, window, device)
                    m = Measurement(recipe, c.key, threads, r, n, seconds)
                    results.append(m)
                    log(f"[{step}/{total}] {recipe} round {r + 1}/{rounds} threads={threads} "
                        f"{c.label}: {m.images_per_s:,.0f} img/s ({n} images, {seconds:.2f} s)")
    finally:
        torch.set_num_threads(previous_threads)
    return results


def same_round_ratios(ms: Sequence[Measurement], base: Sequence[Measurement]) -> List[float]:
    by_round = {b.round: b for b in base}
    return [m.images_per_s / by_round[m.round].images_per_s for m in ms if m.round in by_round]


def summarize(measurements: Sequence[Measurement]) -> Dict[Tuple[str, int], dict]:
    """Per (contender, threads): median images/s, and ratios to every other contender.

    ``ratios[other]`` holds the median, min and max of the same-round ratios (this contender's
    images/s over ``other``'s, measured in the same round at the same thread count): min-max is
    the spread a reader needs to judge the median. ``scaling``: the same for this contender
    over itself at the fewest threads measured (empty at that count).
    """
    by_key: Dict[Tuple[str, int], List[Measurement]] = {}
    for m in measurements:
        by_key.setdefault((m.contender, m.threads), []).append(m)
    out: Dict[Tuple[str, int], dict] = {}
    for (name, threads), ms in by_key.items():
        ratios = {}
        for (other, t), base in by_key.items():
            if t != threads:
                continue
            values = same_round_ratios(ms, base)
            if values:
                ratios[other] = {"median": statistics.median(values), "min": min(values),
                                 "max": max(values), "samples": values}
        scaling = {}
        least = min(t for (other, t) in by_key if other == name)
        if threads != least:  # over its own rate at the fewest threads, in the same round
            values = same_round_ratios(ms, by_key[(name, least)])
            if values:
                scaling = {"threads": least, "median": statistics.median(values),
                           "min": min(values), "max": max(values), "samples": values}
        out[(name, threads)] = {
            "scaling": scaling,
            "images_per_s": statistics.median(m.images_per_s for m in ms),
            "samples_images_per_s": [m.images_per_s for m in ms],
            "images_per_measurement": [m.images for m in ms],
            "seconds_per_measurement": [m.seconds for m in ms],
            "ratios": ratios,
        }
    return out


def strongest(summary: Dict[Tuple[str, int], dict], keys: Sequence[str], threads: int
              ) -> Optional[str]:
    """The key among ``keys`` with the highest median images/s at ``threads`` (None: none ran)."""
    ran = [k for k in keys if (k, threads) in summary]
    if not ran:
        return None
    return max(ran, key=lambda k: summary[(k, threads)]["images_per_s"])
