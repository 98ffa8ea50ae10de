"""Timing machinery: equal wall-clock windows, interleaved rounds, same-round ratios and spreads.

``batchaug bench`` times its pipelines (:mod:`batchaug.bench.contenders`) here, and so do the
``benchmarks/`` scripts, whose contenders are a :class:`Call` (a function called on inputs made
before the clock) or :class:`Epochs` (a loader read epoch after epoch): :func:`compare` runs the
rounds with a script's ``--rounds/--window/--threads`` (:func:`add_arguments`), :func:`table`
prints the medians and same-round ratios.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

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

    Untimed for every contender alike: opening the stream (a ``DataLoader`` forks its workers)
    and its first ``startup_batches`` batches, so the pipeline is full. The clock stops at the
    first batch that ends at or after ``window`` (on CUDA after ``synchronize``); the stream is
    closed before returning, so nothing runs into the next contender's window.
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
                done += contender.count(batch)
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


def _spread_of(values: List[float]) -> dict:
    if not values:
        return {}
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "samples": values}


def summarize(measurements: Sequence[Measurement]) -> Dict[Tuple[str, int], dict]:
    """Per (contender, threads): median images/s, ``ratios[other]`` (the median, min and max of
    the same-round ratios of this contender's images/s over ``other``'s at the same thread
    count) and ``scaling`` (the same over itself at the fewest threads; empty at that count).
    """
    by_key: Dict[Tuple[str, int], List[Measurement]] = {}
    for m in measurements:
        by_key.setdefault((m.contender, m.threads), []).append(m)
    out: Dict[Tuple[str, int], dict] = {}
    for (name, threads), ms in by_key.items():
        ratios = {}
        for (other, t), base in by_key.items():
            ratio = _spread_of(same_round_ratios(ms, base)) if t == threads else {}
            if ratio:
                ratios[other] = ratio
        least = min(t for (other, t) in by_key if other == name)
        scaling = {} if threads == least else _spread_of(
            same_round_ratios(ms, by_key[(name, least)]))
        if scaling:
            scaling = {"threads": least, **scaling}
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


# --- calls: the benchmarks/ scripts' contenders, a function called again and again ----------


class Call(Contender):
    """A contender that calls ``fn(*args)`` for each ``args`` of ``inputs`` in turn, forever.

    Each call counts ``images`` images (default: the length of what it returns). Inputs are
    made before the clock, so what is timed is the call alone.

    Example:
        >>> x = torch.zeros(8, 3, 4, 4)
        >>> flip = Call("flip", lambda v: v.flip(-1), [(x,)])
        >>> n, seconds = measure(flip, 0.01, torch.device("cpu"))
    """

    def __init__(self, key: str, fn: Callable[..., Any], inputs: Sequence[tuple] = ((),),
                 images: Optional[int] = None, label: Optional[str] = None,
                 startup_batches: int = 0) -> None:
        if not inputs:
            raise ValueError(f"Call {key!r}: inputs must hold at least one argument tuple")
        self.key, self.label = key, label or key
        self.fn, self.inputs, self.images = fn, list(inputs), images
        self.startup_batches = startup_batches

    def count(self, batch: Any) -> int:
        return self.images if self.images is not None else len(batch)

    def epoch(self) -> Iterator[Tuple[Any, None]]:
        for args in self.inputs:
            yield self.fn(*args), None


class Epochs(Contender):
    """A contender that reads ``loader`` (any re-iterable of batches, such as a ``DataLoader``
    or a ``DeviceLoader``) epoch after epoch; a batch counts the length of its first item.

    Example:
        >>> batches = [(torch.zeros(4, 3, 8, 8), torch.zeros(4))] * 2
        >>> n, seconds = measure(Epochs("list", batches), 0.01, torch.device("cpu"))
    """

    def __init__(self, key: str, loader: Any, label: Optional[str] = None,
                 startup_batches: int = 1) -> None:
        self.key, self.label, self.loader = key, label or key, loader
        self.startup_batches = startup_batches

    def count(self, batch: Any) -> int:
        return len(batch[0] if isinstance(batch, (tuple, list)) else batch)

    def epoch(self) -> Iterator[Tuple[Any, None]]:
        for batch in self.loader:
            yield batch, None


def thread_list(text: str) -> List[int]:
    """``"1,default"`` -> ``[1, torch's default]`` (repeats dropped): a ``--threads`` value."""
    default = torch.get_num_threads()
    out: List[int] = []
    for part in text.split(","):
        try:
            t = default if part.strip() == "default" else int(part)
        except ValueError:
            t = 0
        if t < 1:
            raise ValueError(f"thread counts are integers >= 1 or 'default', got {part!r}")
        if t not in out:
            out.append(t)
    return out


def _threads_argument(text: str) -> List[int]:
    try:
        return thread_list(text)
    except ValueError as e:  # argparse would print only "invalid value"
        raise argparse.ArgumentTypeError(f"{e} (e.g. 1,default)") from None


def add_arguments(ap: argparse.ArgumentParser, rounds: int = 5, window: float = 0.3,
                  threads: str = "1,default") -> None:
    """The timing options every benchmark script takes: --rounds, --window, --threads, --json."""
    ap.add_argument("--rounds", type=int, default=rounds, help="interleaved rounds")
    ap.add_argument("--window", type=float, default=window,
                    help="seconds every contender is timed per round (the same for all)")
    ap.add_argument("--threads", type=_threads_argument, default=thread_list(threads),
                    help="comma list of torch thread counts; 'default' = torch's default")
    ap.add_argument("--json", default=None, help="also write the results to this JSON file")


def compare(contenders: Sequence[Contender], args: argparse.Namespace, name: str = "",
            device: torch.device = torch.device("cpu"), quiet: bool = True
            ) -> Dict[Tuple[str, int], dict]:
    """:func:`run_rounds` with a script's --rounds/--window/--threads, then :func:`summarize`."""
    if args.rounds < 1 or not args.window > 0:
        raise ValueError(f"--rounds must be >= 1 and --window > 0, got {args.rounds} and "
                         f"{args.window}")
    log = (lambda s: None) if quiet else (lambda s: print(s, file=sys.stderr))
    return summarize(run_rounds(name, contenders, args.threads, args.rounds, args.window,
                                device, log=log))


def spread(ratio: Optional[dict], digits: int = 2) -> str:
    """``'1.23x [1.01-1.40]'``: a same-round ratio's median and min-max (``'-'`` if none)."""
    if not ratio:
        return "-"
    return (f"{ratio['median']:.{digits}f}x [{ratio['min']:.{digits}f}-"
            f"{ratio['max']:.{digits}f}]")


def table(summary: Dict[Tuple[str, int], dict], base: str, name: str = "",
          per_call: Optional[float] = None, header: bool = True) -> List[str]:
    """Markdown rows: per contender and thread count, its median images/s (or ms per call of
    ``per_call`` images) and the same-round ratio ``base`` / it; ``name`` fills a first column.
    ``header=False``: the rows alone, to continue a table printed case by case."""
    unit = "ms per call" if per_call else "img/s"
    lines = [f"| case | contender | threads | {unit} | {base} / it, same round |",
             "|---|---|---:|---:|---:|"] if header else []
    for (key, threads), s in summary.items():
        rate = s["images_per_s"]
        value = f"{per_call / rate * 1e3:,.2f}" if per_call else f"{rate:,.0f}"
        ours = summary.get((base, threads), {}).get("ratios", {}).get(key)
        lines.append(f"| {name} | {key} | {threads} | {value} | "
                     f"{'' if key == base else spread(ours)} |")
    return lines


def write_json(path: Optional[str], rows: Any) -> None:
    """Write ``rows`` (summaries keyed by (contender, threads) made JSON-able) when ``path``."""
    if path is None:
        return

    def plain(obj: Any) -> Any:
        if isinstance(obj, dict):
            return {(f"{k[0]}@{k[1]}" if isinstance(k, tuple) else k): plain(v)
                    for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [plain(v) for v in obj]
        return obj

    with open(path, "w") as f:
        json.dump({"command": " ".join(sys.argv), "torch": torch.__version__,
                   "default_threads": torch.get_num_threads(), "results": plain(rows)}, f,
                  indent=2)
        f.write("\n")
