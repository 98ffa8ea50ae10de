"""Augment's eager CPU call overhead: its fusion plan built once vs matched per call.

    flock /tmp/batchaug-bench.lock python benchmarks/bench_plan.py
    python benchmarks/bench_plan.py --batch 8 --rounds 7 --window 0.3 --threads 1
    python benchmarks/bench_plan.py --before 3755288   # the per-call matcher of that commit

Contenders, on small uint8 batches (``--batch``, 32x32) where the call overhead shows:
  planned    ``aug(x)``: the plan (which consecutive pairs fuse) is built once and only checked
             per call (same modules, same train/eval flags)
  replanned  the same code with the plan dropped before every call: what matching the rules on
             every call costs
  before     ``batchaug/_fusion.py`` as it was at ``--before`` (default: the commit before the
             plan), which matched the fusable pairs on every call (skipped with a note where
             that code no longer runs against today's modules)
Pipelines: ``erase`` (RandomHorizontalFlip, Normalize, RandomErasing: Normalize and the erasing
fuse) and ``nofuse`` (RandomHorizontalFlip, RandomVerticalFlip, Normalize: nothing fuses, the
plan only says so). Two measurements per pipeline: ``call`` (the whole ``aug(x)``) and
``decide`` (``fusable(aug, x)`` alone, 1000 times per measurement: the per-call decision whether
and what to fuse, without the kernels' time and noise; in ``before``, ``run`` matched the pairs
once more per fused call).

Timing: batchaug.bench.timing (every contender over the same wall-clock window per round, the
order rotating, at 1 thread and the default thread count). The report gives microseconds per
call (median) and the same-round ratio planned / other in calls per second: median [min-max].
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import types
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import torch
from torch import Tensor

import batchaug
import batchaug._fusion as fusion
import batchaug.compose as compose
from batchaug.bench.contenders import Contender
from batchaug.bench.timing import run_rounds, summarize

MEAN = [0.4914, 0.4822, 0.4465]
STD = [0.2470, 0.2435, 0.2616]


class _Call(Contender):
    """``aug(x)`` with ``module`` standing in for ``batchaug._fusion`` during the call; with
    ``decide``, ``module.fusable(aug, x)`` 1000 times instead (one "image" per call)."""

    def __init__(self, key: str, aug: torch.nn.Module, x: Tensor, module: types.ModuleType,
                 before_call: Optional[Callable[[], None]] = None, decide: bool = False) -> None:
        self.key = self.label = key
        self.aug, self.x, self.module, self.before_call = aug, x, module, before_call
        self.decide = decide
        self.labels = torch.zeros(1000 if decide else x.shape[0], dtype=torch.int64)
        self.startup_batches = 0

    def epoch(self) -> Iterator[Tuple[Tensor, Tensor]]:
        if self.decide:
            for _ in range(1000):
                if self.before_call is not None:
                    self.before_call()
                self.module.fusable(self.aug, self.x)
            yield self.labels.view(-1, 1), self.labels
            return
        if self.before_call is not None:
            self.before_call()
        compose._fusion = self.module
        try:
            out = self.aug(self.x)
        finally:
            compose._fusion = fusion
        yield out.view(self.x.shape[0], -1), self.labels


def _load_before(rev: str) -> Optional[types.ModuleType]:
    root = Path(__file__).resolve().parent.parent
    try:
        src = subprocess.check_output(["git", "show", f"{rev}:batchaug/_fusion.py"], cwd=root,
                                      stderr=subprocess.DEVNULL).decode()
    except (subprocess.CalledProcessError, FileNotFoundError):
        print(f"before: cannot read batchaug/_fusion.py at {rev}; skipped", file=sys.stderr)
        return None
    # the one method renamed since (same body): RandomCrop._full_padding -> padding_for
    src = src.replace("._full_padding(", ".padding_for(")
    module = types.ModuleType("batchaug._fusion_before")
    module.__package__ = "batchaug"
    try:
        exec(compile(src, f"{rev}:batchaug/_fusion.py", "exec"), module.__dict__)
    except ImportError as e:  # e.g. functional/_fused.py, removed with the rules it served
        print(f"before: {rev}'s _fusion.py does not import today ({e}); skipped",
              file=sys.stderr)
        return None
    return module


def pipelines() -> Dict[str, batchaug.Augment]:
    return {
        "erase": batchaug.Augment(batchaug.RandomHorizontalFlip(), batchaug.Normalize(MEAN, STD),
                                  batchaug.RandomErasing()),
        "nofuse": batchaug.Augment(batchaug.RandomHorizontalFlip(), batchaug.RandomVerticalFlip(),
                                   batchaug.Normalize(MEAN, STD)),
    }


def contenders(aug: batchaug.Augment, x: Tensor, before: Optional[types.ModuleType],
               decide: bool) -> List[Contender]:
    out: List[Contender] = [
        _Call("planned", aug, x, fusion, decide=decide),
        _Call("replanned", aug, x, fusion, before_call=fusion._PLANS.clear, decide=decide),
    ]
    if before is not None:
        try:
            torch.manual_seed(0)
            y = next(_Call("before", aug, x, before).epoch())[0]
            torch.manual_seed(0)
            ref = aug(x).view(x.shape[0], -1)
            if not torch.equal(y, ref):
                raise RuntimeError("a different result")
            out.append(_Call("before", aug, x, before, decide=decide))
        except Exception as e:  # old private names gone from today's modules
            print(f"before: does not run against today's modules ({type(e).__name__}: {e}); "
                  f"skipped", file=sys.stderr)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--window", type=float, default=0.3, help="seconds per measurement")
    ap.add_argument("--threads", type=int, nargs="+", default=None,
                    help="thread counts (default: 1 and torch's default)")
    ap.add_argument("--before", default="3755288", help="commit of the per-call matcher")
    args = ap.parse_args()
    threads = sorted(set(args.threads or [1, torch.get_num_threads()]))
    before = _load_before(args.before)
    print(f"batch {args.batch} uint8 32x32, {args.rounds} rounds of {args.window} s, threads "
          f"{threads}; us per call (median), ratio = planned / other calls per second in the "
          f"same round: median [min-max]")
    x = torch.randint(0, 256, (args.batch, 3, 32, 32), dtype=torch.uint8)
    for name, aug in pipelines().items():
        aug.train()
        for what in ("call", "decide"):
            cs = contenders(aug, x, before, what == "decide")
            per = 1 if what == "decide" else args.batch
            summary = summarize(run_rounds(name, cs, threads, args.rounds, args.window,
                                           torch.device("cpu"), log=lambda s: None))
            for t in threads:
                planned = summary[("planned", t)]
                parts = [f"planned {1e6 * per / planned['images_per_s']:7.2f} us"]
                for c in cs[1:]:
                    s = summary[(c.key, t)]
                    r = planned["ratios"][c.key]
                    parts.append(f"{c.key} {1e6 * per / s['images_per_s']:7.2f} us "
                                 f"(x{r['median']:.3f} [{r['min']:.3f}-{r['max']:.3f}])")
                print(f"{name:<7} {what:<6} {t} thr: " + "  ".join(parts), flush=True)


if __name__ == "__main__":
    main()
