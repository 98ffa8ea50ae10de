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

Timing: ``batchaug.bench.timing`` (interleaved rounds of equal windows, at 1 thread and the
default thread count); the table gives samples per second and the same-round ratio keyed /
unkeyed: median [min-max].
"""
from __future__ import annotations

import argparse
from typing import Callable, Dict, List, Tuple

import torch

import batchaug.recipes as recipes
from batchaug import _random as R
from batchaug.bench import timing
from batchaug.bench.timing import Call

Case = Tuple[str, Callable[[], object], Callable[[], object], int]  # label, unkeyed, keyed, n


def draw_cases(batch: int) -> List[Case]:
    x = torch.zeros(batch, 3, 1, 1)
    keys = R.sample_keys(0, 1, torch.arange(batch))
    return [
        ("uniform (N,)", lambda: R.uniform(x, 0.0, 1.0),
         lambda: R.uniform(x, 0.0, 1.0, keys=keys, draw=0), batch),
        ("substream + uniform (N,)", lambda: R.uniform(x, 0.0, 1.0),
         lambda: R.uniform(x, 0.0, 1.0, keys=R.substream(keys, 2), draw=0), batch),
        ("uniform (N, 4)", lambda: R.uniform(x, 0.0, 1.0, 4),
         lambda: R.uniform(x, 0.0, 1.0, 4, keys=keys, draw=0), batch),
    ]


def recipe_cases(batch: int, size: int) -> List[Case]:
    g = torch.Generator().manual_seed(0)
    src = size + size // 8
    x = torch.randint(0, 256, (batch, 3, src, src), generator=g, dtype=torch.uint8)
    keys = R.sample_keys(0, 1, torch.arange(batch))
    x32 = torch.randint(0, 256, (batch, 3, 32, 32), generator=g, dtype=torch.uint8)
    out = []
    for name, s, xs in (("cifar10", 32, x32), ("imagenet", size, x), ("simclr", size, x)):
        aug = recipes.get(name, size=s)
        out.append((f"{name}({s})", lambda a=aug, v=xs: a(v), lambda a=aug, v=xs: a(v, keys),
                    batch))
    return out


def mix_cases(batches: List[int]) -> List[Case]:
    from batchaug.transforms import MixUpOrCutMix

    m = MixUpOrCutMix(10, mixup_alpha=0.8, cutmix_alpha=1.0)
    out = []
    for b in batches:
        x = torch.rand(b, 3, 32, 32)
        y = torch.arange(b) % 10
        k = R.sample_keys(0, 1, torch.arange(b))
        out.append((f"MixUpOrCutMix b{b}", lambda x=x, y=y: m(x, y),
                    lambda x=x, y=y, k=k: m(x, y, k), b))
        out.append((f"  make_params b{b}", lambda x=x: m.make_params(x),
                    lambda x=x, k=k: m.make_params(x, k), b))
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sections", nargs="+", default=["draws", "recipes"],
                    choices=["draws", "recipes", "mix"])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--size", type=int, default=64, help="recipe output size (px)")
    ap.add_argument("--mix-batches", type=int, nargs="+", default=[64, 256])
    timing.add_arguments(ap, rounds=5, window=0.5)
    args = ap.parse_args(argv)
    cases: List[Case] = []
    if "draws" in args.sections:
        cases += draw_cases(args.batch)
    if "recipes" in args.sections:
        cases += recipe_cases(args.batch, args.size)
    if "mix" in args.sections:
        cases += mix_cases(args.mix_batches)
    results: Dict[str, dict] = {}
    for k, (label, plain, keyed, n) in enumerate(cases):
        summary = timing.compare([Call("unkeyed", plain, images=n),
                                  Call("keyed", keyed, images=n)], args, label)
        results[label] = summary
        print("\n".join(timing.table(summary, "keyed", label, header=k == 0)), flush=True)
    timing.write_json(args.json, results)


if __name__ == "__main__":
    main()
