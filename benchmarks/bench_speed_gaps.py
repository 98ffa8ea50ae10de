"""Side-by-side speed of the three recipes issue 13 measured short, against their hand-written
rivals: interleaved rounds, every contender the same wall-clock window per round, same-round
ratios with their min-max spread, at 1 thread and at torch's default thread count.

    python benchmarks/bench_speed_gaps.py                           # all recipes, 1 + default
    python benchmarks/bench_speed_gaps.py --recipes rrc --rounds 5 --window 0.4 --threads 1

Every contender goes from the same uint8 (N, 3, H, W) batch to a normalised float32 batch.

rrc       RandomResizedCrop(224) + flip + normalize from 256x256 (batch 256)
  batchaug                 antialias=True (default): CPU per-box uint8 antialiased resize
  batchaug_noaa            antialias=False: the batched grid_sample path
  uint8_loop               per sample: F.interpolate on the channels_last uint8 box view,
                           antialias=True (torchvision's uint8 kernel), stack, flip, normalize
  plain_grid               affine_grid + grid_sample on the normalised float batch, flip folded
rotation  RandomRotation(15, bilinear) + normalize from 32x32 (batch 256)
  batchaug                 Augment(RandomRotation, Normalize)
  batchaug_unfused         the same modules in an nn.Sequential (since the CPU fusion of this
                           pair was removed, the same computation: an A/A control)
  kornia, plain_grid (grid_sample without the fill mask: not torchvision's rule)
cifar     RandomCrop(32, padding=4) + flip + normalize from 32x32 (batch 256)
  batchaug                 in-model Augment: pad-crop, flip, Normalize
  batchaug_unfused         the same modules in an nn.Sequential (an A/A control, as above)
  fused_plain              crop + flip windows gathered in one index_select straight from a
                           once-padded uint8 store and its mirror (both built once, outside the
                           timing), then normalised in place: the floor for this recipe
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from typing import Callable, Dict, List, Optional

import torch
import torch.nn.functional as Fnn

from batchaug.recipes import CIFAR10_MEAN as MEAN, CIFAR10_STD as STD  # noqa: E402
RECIPES = ["rrc", "rotation", "cifar"]


def _normalizer(device: str) -> Callable:
    mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=device).view(1, 3, 1, 1)

    def normalize(x):
        return x.float().div_(255).sub_(mean).div_(std)

    return normalize


def _flip(y):
    n = y.shape[0]
    flip = torch.rand(n, device=y.device) < 0.5
    return torch.where(flip.view(n, 1, 1, 1), y.flip(-1), y)


def contenders(recipe: str, device: str) -> Dict[str, Callable]:
    import batchaug

    normalize = _normalizer(device)
    out: Dict[str, Callable] = {}
    if recipe == "rrc":
        for name, aa in (("batchaug", True), ("batchaug_noaa", False)):
            out[name] = batchaug.Augment(
                batchaug.RandomResizedCrop(224, antialias=aa),
                batchaug.RandomHorizontalFlip(),
                batchaug.Normalize(MEAN, STD),
            ).to(device).train()
        box_drawer = batchaug.RandomResizedCrop(224)

        def uint8_loop(x):
            t, l, h, w = (v.tolist() for v in box_drawer.make_params(x))
            xc = x.contiguous(memory_format=torch.channels_last)  # free if already
            ys = [Fnn.interpolate(xc[i:i + 1, :, t[i]:t[i] + h[i], l[i]:l[i] + w[i]],
                                  size=[224, 224], mode="bilinear", antialias=True)
                  for i in range(x.shape[0])]
            return normalize(_flip(torch.cat(ys)))

        out["uint8_loop"] = uint8_loop

        def plain_grid(x):
            n = x.shape[0]
            area = torch.empty(n, device=x.device).uniform_(0.08, 1.0)
            logr = torch.empty(n, device=x.device).uniform_(math.log(3 / 4), math.log(4 / 3))
            ratio = torch.exp(logr)
            cw = torch.sqrt(area * ratio).clamp(max=1.0)
            ch = torch.sqrt(area / ratio).clamp(max=1.0)
            cx = (torch.rand(n, device=x.device) * 2 - 1) * (1 - cw)
            cy = (torch.rand(n, device=x.device) * 2 - 1) * (1 - ch)
            sign = torch.where(torch.rand(n, device=x.device) < 0.5, -1.0, 1.0)
            zero = torch.zeros_like(cw)
            theta = torch.stack([torch.stack([cw * sign, zero, cx], 1),
                                 torch.stack([zero, ch, cy], 1)], 1)
            grid = Fnn.affine_grid(theta, [n, 3, 224, 224], align_corners=False)
            return Fnn.grid_sample(normalize(x), grid, mode="bilinear", align_corners=False)

        out["plain_grid"] = plain_grid
    elif recipe == "rotation":
        out["batchaug"] = batchaug.Augment(
            batchaug.RandomRotation(15, interpolation="bilinear"), batchaug.Normalize(MEAN, STD)
        ).to(device).train()
        # nn.Sequential runs its modules one by one (no CPU fusion applies here any more)
        out["batchaug_unfused"] = torch.nn.Sequential(*out["batchaug"])
        try:
            import kornia.augmentation as K

            mean = torch.tensor(MEAN, device=device)
            std = torch.tensor(STD, device=device)
            # p=1.0: kornia's default p=0.5 would rotate only half the images
            seq = torch.nn.Sequential(K.RandomRotation(15.0, resample="bilinear", p=1.0),
                                      K.Normalize(mean, std)).to(device)
            out["kornia"] = lambda x: seq(x.float().div_(255))
        except ImportError:
            print("[skip] kornia is not installed", file=sys.stderr)

        def plain_grid(x):
            n = x.shape[0]
            ang = (torch.rand(n, device=x.device) * 30 - 15) * math.pi / 180
            cos, sin = torch.cos(ang), torch.sin(ang)
            zero = torch.zeros_like(cos)
            theta = torch.stack([torch.stack([cos, -sin, zero], 1),
                                 torch.stack([sin, cos, zero], 1)], 1)
            grid = Fnn.affine_grid(theta, list(x.shape), align_corners=False)
            return Fnn.grid_sample(normalize(x), grid, mode="bilinear", align_corners=False)

        out["plain_grid"] = plain_grid
    else:
        out["batchaug"] = batchaug.Augment(
            batchaug.RandomCrop(32, padding=4),
            batchaug.RandomHorizontalFlip(),
            batchaug.Normalize(MEAN, STD),
        ).to(device).train()
        out["batchaug_unfused"] = torch.nn.Sequential(*out["batchaug"])
        padded_store: Dict[int, torch.Tensor] = {}
        scale = (1.0 / 255 / torch.tensor(STD, device=device)).view(1, 3, 1, 1)
        shift = (-torch.tensor(MEAN, device=device) / torch.tensor(STD, device=device)).view(
            1, 3, 1, 1)

        def fused_plain(x):
            key = x.data_ptr()
            if key not in padded_store:
                # padded once per store, as a dataset would be, next to its mirror image: one
                # gather then crops and flips at once
                padded_store.clear()
                p = Fnn.pad(x, (4, 4, 4, 4))
                padded_store[key] = torch.cat([p, p.flip(-1)])
            p = padded_store[key]
            n = x.shape[0]
            s = p.stride()
            top = torch.randint(0, 9, (n,), device=x.device)
            left = torch.randint(0, 9, (n,), device=x.device)
            flip = (torch.rand(n, device=x.device) < 0.5).long()
            # a flipped window starting at `left` is the mirror's window at 8 - left
            col = torch.where(flip.bool(), 8 - left, left)
            last = p.numel() - (2 * s[1] + 31 * s[2] + 31)
            win = p.as_strided([last, 3, 32, 32], [1, s[1], s[2], 1])
            idx = (torch.arange(n, device=x.device) + flip * n) * s[0] + top * s[2] + col
            y = win.index_select(0, idx)
            return y.float().mul_(scale).add_(shift)

        out["fused_plain"] = fused_plain
    return out


def source(recipe: str, batch: int, device: str) -> torch.Tensor:
    size = 256 if recipe == "rrc" else 32
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, 256, (batch, 3, size, size), generator=g, dtype=torch.uint8).to(device)


def _window(fn: Callable, x: torch.Tensor, seconds: float) -> float:
    """Images/s over one window: calls until ``seconds`` have passed (at least one)."""
    calls, t0 = 0, time.perf_counter()
    while True:
        fn(x)
        calls += 1
        dt = time.perf_counter() - t0
        if dt >= seconds:
            return calls * x.shape[0] / dt


def bench(recipe: str, batch: int, rounds: int, window: float, device: str) -> dict:
    fns = contenders(recipe, device)
    x = source(recipe, batch, device)
    rates: Dict[str, List[float]] = {k: [] for k in fns}
    with torch.no_grad():
        for fn in fns.values():
            fn(x)  # warm-up
        for r in range(rounds):
            # rotate the order each round so no contender always follows the same one
            names = list(fns)[r % len(fns):] + list(fns)[:r % len(fns)]
            for name in names:
                rates[name].append(_window(fns[name], x, window))
            print(f"  {recipe} threads={torch.get_num_threads()} round {r + 1}/{rounds}: "
                  + ", ".join(f"{k}={rates[k][-1]:,.0f}" for k in fns), file=sys.stderr)
    ratios = {k: [a / b for a, b in zip(rates["batchaug"], v)]
              for k, v in rates.items() if k != "batchaug"}
    return {
        "recipe": recipe, "batch": batch, "threads": torch.get_num_threads(), "rounds": rounds,
        "window_s": window, "images_per_s": rates,
        "ratio_batchaug_over": {k: {"median": statistics.median(v), "min": min(v), "max": max(v)}
                                for k, v in ratios.items()},
    }


def markdown(results: List[dict]) -> str:
    lines = ["| recipe | threads | contender | median img/s (min-max) | batchaug / it, same round:"
             " median (min-max) |", "|---|---|---|---|---|"]
    for r in results:
        for k, v in r["images_per_s"].items():
            q = r["ratio_batchaug_over"].get(k)
            ratio = "" if q is None else f"{q['median']:.2f}x ({q['min']:.2f}-{q['max']:.2f})"
            lines.append(f"| {r['recipe']} | {r['threads']} | {k} | {statistics.median(v):,.0f} "
                         f"({min(v):,.0f}-{max(v):,.0f}) | {ratio} |")
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--recipes", default="all", help="comma list of rrc,rotation,cifar or 'all'")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--window", type=float, default=0.3, help="seconds per contender per round")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--threads", default="1,default", help="comma list; 'default' = torch's")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    recipes = RECIPES if args.recipes == "all" else args.recipes.split(",")
    for r in recipes:
        if r not in RECIPES:
            ap.error(f"unknown recipe {r!r}; choose from {RECIPES}")
    if args.rounds < 1 or args.window <= 0:
        ap.error("--rounds must be >= 1 and --window > 0")
    default_threads = torch.get_num_threads()
    results = []
    for t in args.threads.split(","):
        torch.set_num_threads(default_threads if t == "default" else int(t))
        for recipe in recipes:
            results.append(bench(recipe, args.batch_size, args.rounds, args.window, args.device))
    torch.set_num_threads(default_threads)
    print(markdown(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": " ".join(sys.argv), "torch": torch.__version__,
                       "results": results}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
