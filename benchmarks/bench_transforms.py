"""Images/s of batchaug transforms vs kornia, a torchvision per-sample DataLoader, and plain torch.

Every contender goes from a uint8 (N, 3, H, W) batch held in memory to a normalized float32
batch. Contenders run interleaved in rounds (so slow bursts on a shared machine hit all of them);
the report gives per-contender medians and the median of same-round ratios batchaug / other.

    python benchmarks/bench_transforms.py                       # all recipes, 1 and default threads
    python benchmarks/bench_transforms.py --recipes cifar --rounds 7 --json out.json

Recipes:
  cifar     RandomCrop(32, padding=4) + RandomHorizontalFlip + Normalize, 32x32 source
  rotation  RandomRotation(15, bilinear) + Normalize, 32x32 source
  rrc       RandomResizedCrop(224) + RandomHorizontalFlip + Normalize, 256x256 source
The rotation and rrc recipes use batchaug's warp transforms; they are skipped with a message if
this checkout does not define them yet. On CUDA (``--device cuda``) timings use CUDA events and
batches of 512 and 4096; the torchvision per-sample loop then stays on the CPU (it is what a
DataLoader feeding that GPU would do) and is reported once.
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

MEAN = [0.4914, 0.4822, 0.4465]
STD = [0.2470, 0.2435, 0.2616]
RECIPES = ["cifar", "rotation", "rrc"]


# ----------------------------------------------------------------------------- contenders

def batchaug_pipeline(recipe: str, device: str) -> Optional[Callable]:
    import batchaug

    if recipe == "cifar":
        aug = batchaug.Augment(
            batchaug.RandomCrop(32, padding=4),
            batchaug.RandomHorizontalFlip(),
            batchaug.Normalize(MEAN, STD),
        )
    elif recipe == "rotation":
        if not hasattr(batchaug, "RandomRotation"):
            return None
        aug = batchaug.Augment(
            batchaug.RandomRotation(15, interpolation="bilinear"), batchaug.Normalize(MEAN, STD)
        )
    else:
        if not hasattr(batchaug, "RandomResizedCrop"):
            return None
        aug = batchaug.Augment(
            batchaug.RandomResizedCrop(224),
            batchaug.RandomHorizontalFlip(),
            batchaug.Normalize(MEAN, STD),
        )
    return aug.to(device).train()


def kornia_pipeline(recipe: str, device: str) -> Optional[Callable]:
    try:
        import kornia.augmentation as K
    except ImportError:
        return None
    mean = torch.tensor(MEAN, device=device)
    std = torch.tensor(STD, device=device)
    if recipe == "cifar":
        ops = [K.RandomCrop((32, 32), padding=4), K.RandomHorizontalFlip()]
    elif recipe == "rotation":
        ops = [K.RandomRotation(15.0, resample="bilinear")]
    else:
        ops = [K.RandomResizedCrop((224, 224)), K.RandomHorizontalFlip()]
    seq = torch.nn.Sequential(*ops, K.Normalize(mean, std)).to(device)

    def run(x):  # kornia works on float input in [0, 1]
        return seq(x.float().div_(255))

    return run


def plain_torch_pipeline(recipe: str, device: str) -> Callable:
    """What a careful user writes by hand with plain torch ops (no batchaug)."""
    mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=device).view(1, 3, 1, 1)

    def normalize(x):
        return (x.float().div_(255)).sub_(mean).div_(std)

    if recipe == "cifar":
        def run(x):
            n = x.shape[0]
            p = Fnn.pad(x, (4, 4, 4, 4))
            top = torch.randint(0, 9, (n,), device=x.device)
            left = torch.randint(0, 9, (n,), device=x.device)
            win = p.unfold(2, 32, 1).unfold(3, 32, 1)  # N C 9 9 32 32 (a view)
            y = win[torch.arange(n, device=x.device), :, top, left]
            flip = torch.rand(n, device=x.device) < 0.5
            y = torch.where(flip.view(n, 1, 1, 1), y.flip(-1), y)
            return normalize(y)
        return run

    if recipe == "rotation":
        def run(x):
            n = x.shape[0]
            ang = (torch.rand(n, device=x.device) * 30 - 15) * math.pi / 180
            cos, sin = torch.cos(ang), torch.sin(ang)
            theta = torch.stack([torch.stack([cos, -sin, torch.zeros_like(cos)], 1),
                                 torch.stack([sin, cos, torch.zeros_like(cos)], 1)], 1)
            grid = Fnn.affine_grid(theta, list(x.shape), align_corners=False)
            return Fnn.grid_sample(normalize(x), grid, mode="bilinear", align_corners=False)
        return run

    def run(x):  # random resized crop via affine_grid + grid_sample, then flip
        n, _, h, w = x.shape
        area = torch.empty(n, device=x.device).uniform_(0.08, 1.0)
        logr = torch.empty(n, device=x.device).uniform_(math.log(3 / 4), math.log(4 / 3))
        ratio = torch.exp(logr)
        cw = torch.sqrt(area * ratio).clamp(max=1.0)
        ch = torch.sqrt(area / ratio).clamp(max=1.0)
        cx = (torch.rand(n, device=x.device) * 2 - 1) * (1 - cw)
        cy = (torch.rand(n, device=x.device) * 2 - 1) * (1 - ch)
        flip = torch.where(torch.rand(n, device=x.device) < 0.5, -1.0, 1.0)
        zero = torch.zeros_like(cw)
        theta = torch.stack([torch.stack([cw * flip, zero, cx], 1),
                             torch.stack([zero, ch, cy], 1)], 1)
        grid = Fnn.affine_grid(theta, [n, 3, 224, 224], align_corners=False)
        return Fnn.grid_sample(normalize(x), grid, mode="bilinear", align_corners=False)
    return run


def torchvision_loader(recipe: str, source: torch.Tensor, batch_size: int):
    """A DataLoader (num_workers=0) applying torchvision v2 transforms to one image at a time."""
    from torch.utils.data import DataLoader, Dataset
    from torchvision.transforms import v2

    if recipe == "cifar":
        ops = [v2.RandomCrop(32, padding=4), v2.RandomHorizontalFlip()]
    elif recipe == "rotation":
        ops = [v2.RandomRotation(15, interpolation=v2.InterpolationMode.BILINEAR)]
    else:
        ops = [v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip()]
    tf = v2.Compose(ops + [v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])

    class _DS(Dataset):
        def __len__(self):
            return source.shape[0]

        def __getitem__(self, i):
            return tf(source[i])

    loader = DataLoader(_DS(), batch_size=batch_size, shuffle=False, num_workers=0)

    def run(_x):
        return next(iter(loader))

    return run


# ----------------------------------------------------------------------------- timing

def _time_cpu(fn: Callable, x: torch.Tensor, min_seconds: float) -> float:
    """Images/s: repeat fn(x) until min_seconds passed (at least twice)."""
    fn(x)  # warm-up (allocator, lazy init)
    n_calls, t0 = 0, time.perf_counter()
    while True:
        fn(x)
        n_calls += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= min_seconds and n_calls >= 2:
            return n_calls * x.shape[0] / elapsed


def _time_cuda(fn: Callable, x: torch.Tensor, iters: int) -> float:
    fn(x)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn(x)
    end.record()
    torch.cuda.synchronize()
    return iters * x.shape[0] / (start.elapsed_time(end) / 1000)


def source_batch(recipe: str, batch_size: int, device: str) -> torch.Tensor:
    size = 256 if recipe == "rrc" else 32
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, 256, (batch_size, 3, size, size), generator=g,
                         dtype=torch.uint8).to(device)


def bench_recipe(recipe: str, batch_size: int, rounds: int, device: str, threads: Optional[int],
                 min_seconds: float, with_torchvision: bool) -> Optional[dict]:
    if threads is not None:
        torch.set_num_threads(threads)
    ours = batchaug_pipeline(recipe, device)
    if ours is None:
        print(f"[skip] {recipe}: batchaug does not define the warp transforms it needs yet",
              file=sys.stderr)
        return None
    contenders: Dict[str, Callable] = {"batchaug": ours, "plain_torch": plain_torch_pipeline(recipe, device)}
    k = kornia_pipeline(recipe, device)
    if k is None:
        print("[skip] kornia is not installed", file=sys.stderr)
    else:
        contenders["kornia"] = k
    x = source_batch(recipe, batch_size, device)
    if with_torchvision:
        contenders["torchvision_per_sample"] = torchvision_loader(recipe, x.cpu(), batch_size)
    rates: Dict[str, List[float]] = {name: [] for name in contenders}
    for r in range(rounds):
        for name, fn in contenders.items():
            slow = name == "torchvision_per_sample"
            if device == "cuda" and not slow:
                rate = _time_cuda(fn, x, iters=20)
            else:
                rate = _time_cpu(fn, x.cpu() if slow else x, 0.0 if slow else min_seconds)
            rates[name].append(rate)
        print(f"  {recipe} threads={threads or torch.get_num_threads()} round {r + 1}/{rounds}: "
              + ", ".join(f"{n}={rates[n][-1]:,.0f}" for n in contenders), file=sys.stderr)
    result = {
        "recipe": recipe, "device": device, "batch_size": batch_size,
        "threads": torch.get_num_threads(), "rounds": rounds,
        "images_per_s": {n: v for n, v in rates.items()},
        "median_images_per_s": {n: statistics.median(v) for n, v in rates.items()},
        "median_ratio_batchaug_over": {
            n: statistics.median(a / b for a, b in zip(rates["batchaug"], v))
            for n, v in rates.items() if n != "batchaug"
        },
    }
    return result


def markdown(results: List[dict]) -> str:
    lines = ["| recipe | device | batch | threads | contender | median img/s | batchaug / it (same-round median) |",
             "|---|---|---|---|---|---:|---:|"]
    for r in results:
        for name, rate in r["median_images_per_s"].items():
            ratio = r["median_ratio_batchaug_over"].get(name)
            lines.append(f"| {r['recipe']} | {r['device']} | {r['batch_size']} | {r['threads']} | "
                         f"{name} | {rate:,.0f} | {'' if ratio is None else f'{ratio:.1f}x'} |")
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--recipes", default="all", help="comma list of cifar,rotation,rrc or 'all'")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=None,
                    help="default 256 on CPU; 512 and 4096 on CUDA")
    ap.add_argument("--threads", default="1,default",
                    help="comma list of thread counts; 'default' = torch's default")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda", "auto"])
    ap.add_argument("--min-seconds", type=float, default=0.3, help="per contender per round")
    ap.add_argument("--json", default=None, help="write results to this JSON file")
    args = ap.parse_args(argv)

    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda but CUDA is not available")
    recipes = RECIPES if args.recipes == "all" else args.recipes.split(",")
    for r in recipes:
        if r not in RECIPES:
            ap.error(f"unknown recipe {r!r}; choose from {RECIPES}")
    if args.rounds < 1:
        ap.error("--rounds must be >= 1")
    default_threads = torch.get_num_threads()
    threads = [None if t == "default" else int(t) for t in args.threads.split(",")]
    sizes = [args.batch_size] if args.batch_size else ([256] if device == "cpu" else [512, 4096])

    results = []
    for recipe in recipes:
        for t in threads:
            for bs in sizes:
                torch.set_num_threads(default_threads if t is None else t)
                r = bench_recipe(recipe, bs, args.rounds, device, t, args.min_seconds,
                                 with_torchvision=(device == "cpu" or bs == sizes[0]))
                if r is not None:
                    results.append(r)
    torch.set_num_threads(default_threads)
    meta = {"torch": torch.__version__, "device": device,
            "cpu_threads_default": default_threads, "command": " ".join(sys.argv)}
    print(markdown(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "results": results}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
