"""Cost of keyed draws (issue 11): keyed vs torch.rand per batch, and whole recipes keyed vs not.

    flock /tmp/batchaug-bench.lock python benchmarks/bench_keys.py
    python benchmarks/bench_keys.py --sections draws --batch 256 --rounds 5 --window 0.5
    python benchmarks/bench_keys.py --sections recipes --size 224 --json keys.json
    python benchmarks/bench_keys.py --sections mix --mix-batches 64 256 --threads 1

Sections (batch 256 by default, CPU):
  draws    one uniform value per sample: ``torch.rand`` (batchaug._random.uniform without
           keys) vs ``uniform(..., keys=keys)`` (the counter-based hash), and the keyed draw
           after ``substream`` (what a transform inside an Augment pays), and 4 values per
           sample (size=4, as a crop box)
  recipes  batchaug.recipes.cifar10 on 32x32 images, and .imagenet and .simclr at ``--size``
           from (size + size // 8)^2 uint8 images: ``aug(x)`` vs ``aug(x, keys)``
  mix      MixUpOrCutMix (mixup_alpha 0.8, cutmix_alpha 1.0) on float32 32x32 images at each
           ``--mix-batches`` size: the whole forward ``m(x, y)`` vs ``m(x, y, keys)``, and its
           parameters alone (``make_params``, where the keyed Beta draws are)

Every contender is timed over the same wall-clock window per round (batchaug.bench.timing:
rounds interleaved with a rotating order, at 1 thread and the default thread count); the report
gives median images (samples) per second and the same-round ratio keyed / unkeyed: median
[min-max].
"""
from __future__ import annotations

import argparse
import json
from typing import Callable, Dict, Iterator, List, Tuple

import torch
from torch import Tensor

import batchaug.recipes as recipes
from batchaug import _random as R
from batchaug.bench.contenders import Contender
from batchaug.bench.timing import run_rounds, summarize


class _Fn(Contender):
    """A contender that computes ``fn()`` once per batch of ``n`` samples."""

    def __init__(self, key: str, fn: Callable[[], Tensor], n: int) -> None:
        self.key = self.label = key
        self.fn = fn
        self.labels = torch.zeros(n, dtype=torch.int64)
        self.startup_batches = 0

    def epoch(self) -> Iterator[Tuple[Tensor, Tensor]]:
        out = self.fn()
        yield out.view(self.labels.shape[0], -1), self.labels


def draw_contenders(batch: int) -> List[Tuple[str, Contender, Contender]]:
    x = torch.zeros(batch, 3, 1, 1)
    keys = R.sample_keys(0, 1, torch.arange(batch))
    return [
        ("uniform (N,)", _Fn("rand", lambda: R.uniform(x, 0.0, 1.0), batch),
         _Fn("keyed", lambda: R.uniform(x, 0.0, 1.0, keys=keys, draw=0), batch)),
        ("substream + uniform (N,)", _Fn("rand", lambda: R.uniform(x, 0.0, 1.0), batch),
         _Fn("keyed", lambda: R.uniform(x, 0.0, 1.0, keys=R.substream(keys, 2), draw=0),
             batch)),
        ("uniform (N, 4)", _Fn("rand", lambda: R.uniform(x, 0.0, 1.0, 4), batch),
         _Fn("keyed", lambda: R.uniform(x, 0.0, 1.0, 4, keys=keys, draw=0), batch)),
    ]


def recipe_contenders(batch: int, size: int) -> List[Tuple[str, Contender, Contender]]:
    g = torch.Generator().manual_seed(0)
    src = size + size // 8
    x = torch.randint(0, 256, (batch, 3, src, src), generator=g, dtype=torch.uint8)
    keys = R.sample_keys(0, 1, torch.arange(batch))
    x32 = torch.randint(0, 256, (batch, 3, 32, 32), generator=g, dtype=torch.uint8)
    out = []
    for name, s, xs in (("cifar10", 32, x32), ("imagenet", size, x), ("simclr", size, x)):
        aug = recipes.get(name, size=s)
        out.append((f"{name}({s})", _Fn("unkeyed", lambda a=aug, v=xs: a(v), batch),
                    _Fn("keyed", lambda a=aug, v=xs: a(v, keys), batch)))
    return out


def mix_contenders(batches: List[int]) -> List[Tuple[str, Contender, Contender]]:
    from batchaug.transforms import MixUpOrCutMix

    m = MixUpOrCutMix(10, mixup_alpha=0.8, cutmix_alpha=1.0)
    out = []
    for b in batches:
        x = torch.rand(b, 3, 32, 32)
        y = torch.arange(b) % 10
        keys = R.sample_keys(0, 1, torch.arange(b))
        out.append((f"MixUpOrCutMix b{b}", _Fn("unkeyed", lambda x=x, y=y: m(x, y)[1], b),
                    _Fn("keyed", lambda x=x, y=y, k=keys: m(x, y, k)[1], b)))
        out.append((f"  make_params b{b}", _Fn("unkeyed", lambda x=x: m.make_params(x)[2], b),
                    _Fn("keyed", lambda x=x, k=keys: m.make_params(x, k)[2], b)))
    return out


def run(cases: List[Tuple[str, Contender, Contender]], threads: List[int], rounds: int,
        window: float) -> List[Dict]:
    rows = []
    cpu = torch.device("cpu")
    for label, base, keyed in cases:
        summary = summarize(run_rounds(label, [base, keyed], threads, rounds, window, cpu,
                                       log=lambda s: None))
        for t in threads:
            r = summary[(keyed.key, t)]["ratios"][base.key]
            rows.append({"case": label, "threads": t,
                         f"{base.key}_per_s": summary[(base.key, t)]["images_per_s"],
                         "keyed_per_s": summary[(keyed.key, t)]["images_per_s"],
                         "keyed_over_base_median": r["median"], "min": r["min"],
                         "max": r["max"], "base": base.key})
            b = summary[(base.key, t)]["images_per_s"]
            k = summary[(keyed.key, t)]["images_per_s"]
            print(f"{label:<26} {t} thr: {base.key} {b:>12,.0f}/s  keyed {k:>12,.0f}/s  "
                  f"keyed/{base.key} {r['median']:.3f} [{r['min']:.3f}-{r['max']:.3f}]",
                  flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sections", nargs="+", default=["draws", "recipes"],
                    choices=["draws", "recipes", "mix"])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--size", type=int, default=64, help="recipe output size (px)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--window", type=float, default=0.5, help="seconds per measurement")
    ap.add_argument("--mix-batches", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--threads", type=int, nargs="+", default=None,
                    help="thread counts (default: 1 and torch's default)")
    ap.add_argument("--json", default=None, help="also write the rows here")
    args = ap.parse_args()
    threads = sorted(set(args.threads or [1, torch.get_num_threads()]))
    print(f"batch {args.batch}, {args.rounds} rounds of {args.window} s windows, threads "
          f"{threads}; samples per second, ratio = keyed / unkeyed in the same round")
    rows: List[Dict] = []
    if "draws" in args.sections:
        rows += run(draw_contenders(args.batch), threads, args.rounds, args.window)
    if "recipes" in args.sections:
        rows += run(recipe_contenders(args.batch, args.size), threads, args.rounds, args.window)
    if "mix" in args.sections:
        rows += run(mix_contenders(args.mix_batches), threads, args.rounds, args.window)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"batch": args.batch, "size": args.size, "rounds": args.rounds,
                       "window_s": args.window, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
