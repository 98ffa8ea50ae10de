"""Timing machinery: one measurement, interleaved rounds, medians and same-round ratios."""
from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

from batchaug.bench.contenders import Contender

# A measurement processes at least `images` images AND lasts at least MIN_SECONDS (very fast
# pipelines would otherwise be timed over a few milliseconds), and stops after MAX_SECONDS even if
# `images` is not reached (this machine has 2-thread bursts 10-70x slower than normal; a cap keeps
# the run's length bounded). Tests lower MIN_SECONDS to stay fast.
MIN_SECONDS = 0.25
MAX_SECONDS = 6.0


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


def measure(contender: Contender, images: int, device: torch.device,
            min_seconds: Optional[float] = None, max_seconds: Optional[float] = None
            ) -> Tuple[int, float]:
    """Pull batches from ``contender`` until the limits are met; return (images, seconds).

    The clock starts before the epoch iterator is created (so DataLoader prefetch is inside the
    timing) and stops after the device has finished the last batch (``cuda.synchronize``; on the
    CPU every op has finished when it returns).
    """
    min_s = MIN_SECONDS if min_seconds is None else min_seconds
    max_s = MAX_SECONDS if max_seconds is None else max_seconds
    done = 0
    with torch.no_grad():
        synchronize(device)
        start = time.perf_counter()
        while True:
            produced = False
            for batch, _labels in contender.epoch():
                produced = True
                done += batch.shape[0]
                elapsed = time.perf_counter() - start
                if (done >= images and elapsed >= min_s) or elapsed >= max_s:
                    break
            else:
                if not produced:
                    raise ValueError(f"{contender.label}: the data produced no batch")
                continue
            break
        synchronize(device)
        seconds = time.perf_counter() - start
    return done, seconds


def run_rounds(recipe: str, contenders: Sequence[Contender], thread_counts: Sequence[int],
               rounds: int, images: int, device: torch.device,
               log: Callable[[str], None] = lambda s: print(s, file=sys.stderr)
               ) -> List[Measurement]:
    """Measure every contender at every thread count, interleaved, ``rounds`` times.

    Each round visits the thread counts and, within each, every contender once; the contender
    order rotates from round to round so no pipeline always runs first (or right after the
    DataLoader's worker processes were busy).
    """
    previous_threads = torch.get_num_threads()
    results: List[Measurement] = []
    try:
        for c in contenders:
            c.warmup()
        total = rounds * len(thread_counts) * len(contenders)
        step = 0
        for r in range(rounds):
            shift = r % len(contenders)
            order = list(contenders[shift:]) + list(contenders[:shift])
            for threads in thread_counts:
                torch.set_num_threads(threads)
                for c in order:
                    step += 1
                    n, seconds = measure(c, images, device)
                    m = Measurement(recipe, c.key, threads, r, n, seconds)
                    results.append(m)
                    log(f"[{step}/{total}] {recipe} round {r + 1}/{rounds} threads={threads} "
                        f"{c.label}: {m.images_per_s:,.0f} img/s ({n} images, {seconds:.2f} s)")
    finally:
        torch.set_num_threads(previous_threads)
    return results


def _same_round_ratios(ms: Sequence[Measurement], base: Sequence[Measurement]) -> List[float]:
    by_round = {b.round: b for b in base}
    return [m.images_per_s / by_round[m.round].images_per_s for m in ms if m.round in by_round]


def summarize(measurements: Sequence[Measurement], baseline: str, other: str = "kornia"
              ) -> Dict[Tuple[str, int], dict]:
    """Per (contender, threads): median images/s and median same-round ratios.

    ``ratio_to_baseline`` compares with ``baseline`` (torchvision per-sample, num_workers=0) and
    ``ratio_to_other`` with ``other`` (kornia) measured in the same round at the same thread
    count; None when that contender was not measured.
    """
    by_key: Dict[Tuple[str, int], List[Measurement]] = {}
    for m in measurements:
        by_key.setdefault((m.contender, m.threads), []).append(m)
    out: Dict[Tuple[str, int], dict] = {}
    for (name, threads), ms in by_key.items():
        ratios = _same_round_ratios(ms, by_key.get((baseline, threads), []))
        other_ratios = _same_round_ratios(ms, by_key.get((other, threads), []))
        out[(name, threads)] = {
            "images_per_s": statistics.median(m.images_per_s for m in ms),
            "ratio_to_baseline": statistics.median(ratios) if ratios else None,
            "ratio_to_other": statistics.median(other_ratios) if other_ratios else None,
            "samples_images_per_s": [m.images_per_s for m in ms],
            "samples_ratio": ratios,
            "images_per_measurement": [m.images for m in ms],
        }
    return out
