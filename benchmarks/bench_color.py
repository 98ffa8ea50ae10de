"""Images/s of batchaug's colour recipes vs kornia and torchvision v2, side by side.

    flock /tmp/batchaug-bench.lock python benchmarks/bench_color.py --rounds 3
    python benchmarks/bench_color.py --recipes color32 --json out.json
    python benchmarks/bench_color.py --containers 32 --batch 256   # grouped vs static paths
    python benchmarks/bench_color.py --device cuda --batch 256     # a GPU session
    python benchmarks/bench_color.py --parts 32 --calls 20        # ms per call of each part

Recipes (batch 256 by default, uint8 (N, 3, S, S) source in memory):
  color32   ColorJitter(0.4, 0.4, 0.4, 0.1) + RandomGrayscale(0.2), 32x32
  color224  the same at 224x224
  simclr    batchaug.recipes.simclr(224) from 256x256 (RRC, flip, jitter p=0.8, gray 0.2,
            blur p=0.5 (kernel 23), normalize)
Contenders:
  batchaug_u8      batchaug on the uint8 batch (per-sample parameters and order)
  batchaug_f32     batchaug on a float32 [0, 1] batch
  kornia           kornia.augmentation on the float32 batch (per-sample parameters)
  tv_onedraw       torchvision.transforms.v2 applied to the uint8 batch tensor: ONE draw of
                   parameters for the whole batch (not the same augmentation; marked)
  tv_per_sample    torchvision.transforms.v2 on one uint8 image at a time, then stack (a
                   DataLoader with num_workers=0, without the sampler)
  tv_loader_w0/_w2 the same per-sample v2 pipeline in a real DataLoader (batch = --batch,
                   num_workers 0 / 2, persistent workers kept warm across calls; the w2 one
                   gets the source batch twice, one whole batch per worker per call):
                   bench_transforms.per_sample_loader

Timing: ``batchaug.bench.timing`` (interleaved rounds of equal windows, at 1 thread and the
default thread count). The report gives per-contender median images/s and the same-round ratios
batchaug_u8 / contender: median [min-max]; ``--containers`` gives grouped / static.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Callable, Dict, List, Tuple

import torch

try:  # an installed batchaug wins; a bare checkout falls back to its own root (appended)
    import batchaug  # noqa: F401
except ImportError:  # pragma: no cover - depends on how the script is run
    sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import batchaug as B  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # its sibling bench_transforms
from bench_transforms import per_sample_loader  # noqa: E402

from batchaug.bench import timing  # noqa: E402
from batchaug.bench.timing import Call  # noqa: E402
from batchaug.recipes import IMAGENET_MEAN as MEAN, IMAGENET_STD as STD  # noqa: E402


def _kornia_color():
    import kornia.augmentation as K

    return torch.nn.Sequential(K.ColorJitter(0.4, 0.4, 0.4, 0.1, p=1.0),
                               K.RandomGrayscale(p=0.2))


def _kornia_simclr():
    import kornia.augmentation as K

    return torch.nn.Sequential(
        K.RandomResizedCrop((224, 224)), K.RandomHorizontalFlip(),
        K.ColorJitter(0.4, 0.4, 0.4, 0.1, p=0.8), K.RandomGrayscale(p=0.2),
        K.RandomGaussianBlur((23, 23), (0.1, 2.0), p=0.5),
        K.Normalize(torch.tensor(MEAN), torch.tensor(STD)))


def _tv_color():
    import torchvision.transforms.v2 as V2

    return V2.Compose([V2.ColorJitter(0.4, 0.4, 0.4, 0.1), V2.RandomGrayscale(0.2)])


def _tv_simclr():
    import torchvision.transforms.v2 as V2

    return V2.Compose([
        V2.RandomResizedCrop(224, antialias=True), V2.RandomHorizontalFlip(),
        V2.RandomApply([V2.ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8), V2.RandomGrayscale(0.2),
        V2.RandomApply([V2.GaussianBlur(23, (0.1, 2.0))], p=0.5),
        V2.ToDtype(torch.float32, scale=True), V2.Normalize(MEAN, STD)])


def _per_sample(t: Callable) -> Callable:
    return lambda x: torch.stack([t(x[i]) for i in range(x.shape[0])])


RECIPES = {
    "color32": (32, lambda: B.recipes.color(), _kornia_color, _tv_color),
    "color224": (224, lambda: B.recipes.color(), _kornia_color, _tv_color),
    "simclr": (256, lambda: B.recipes.simclr(224), _kornia_simclr, _tv_simclr),
}


def contenders(recipe: str, batch: int, device: str = "cpu"
               ) -> Dict[str, Tuple[Callable, torch.Tensor]]:
    size, ba, ko, tv = RECIPES[recipe]
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (batch, 3, size, size), generator=g, dtype=torch.uint8)
    x = x.to(device)
    xf = x.float() / 255
    tvm = tv()
    out = {
        "batchaug_u8": (ba().to(device), x),
        "batchaug_f32": (ba().to(device), xf),
        "kornia": (ko().to(device), xf),
        "tv_onedraw": (tvm, x),
    }
    if device == "cpu":  # on an accelerator the per-sample loop would run in a DataLoader
        out["tv_per_sample"] = (_per_sample(tvm), x)
        out["tv_loader_w0"] = (per_sample_loader(tvm, 0, batch), x)
        out["tv_loader_w2"] = (per_sample_loader(tvm, 2, batch), x.repeat(2, 1, 1, 1))
    return out


def run(recipe: str, args: argparse.Namespace) -> Dict[tuple, dict]:
    calls = [Call(name, fn, [(x,)], images=x.shape[0])
             for name, (fn, x) in contenders(recipe, args.batch, args.device).items()]
    return timing.compare(calls, args, recipe, torch.device(args.device))


def _container_cases(size: int):
    jitter = lambda: B.ColorJitter(0.4, 0.4, 0.4, 0.1)  # noqa: E731
    return {
        "RandomApply([ColorJitter], p=0.8)":
            lambda g: B.RandomApply([jitter()], p=0.8, group_by_branch=g),
        "RandomChoice([ColorJitter, GaussianBlur, Invert])":
            lambda g: B.RandomChoice([jitter(), B.GaussianBlur(5), B.RandomInvert(1.0)],
                                     group_by_branch=g),
        "RandomOrder([ColorJitter, Grayscale 0.5, Blur])":
            lambda g: B.RandomOrder([jitter(), B.RandomGrayscale(0.5), B.GaussianBlur(5)],
                                    group_by_branch=g),
    }


def run_containers(size: int, args: argparse.Namespace) -> Dict[str, dict]:
    """grouped (group_by_branch=True, the eager default) vs static (every branch on every
    sample + torch.where, what compile/export run) on the same uint8 batch."""
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (args.batch, 3, size, size), generator=g, dtype=torch.uint8)
    out = {}
    for k, (name, make) in enumerate(_container_cases(size).items()):
        out[name] = timing.compare([Call("grouped", make(True), [(x,)]),
                                    Call("static", make(False), [(x,)])], args, name)
        print("\n".join(timing.table(out[name], "grouped", f"{name} {size}px", header=k == 0)))
    return out


def run_parts(size: int, batch: int, calls: int) -> List[dict]:
    """Best-of-``calls`` ms of the colour recipe and of its parts on one uint8 batch, one thread,
    interleaved call by call, with the minor page faults per call (fresh multi-MiB buffers that
    the C allocator has returned to the OS: on CPU they can cost as much as the arithmetic)."""
    import resource

    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (batch, 3, size, size), generator=g, dtype=torch.uint8)
    parts = {"ColorJitter(0.4, 0.4, 0.4, 0.1)": B.ColorJitter(0.4, 0.4, 0.4, 0.1),
             "RandomGrayscale(0.2)": B.RandomGrayscale(0.2), "recipes.color()": B.recipes.color()}
    best = {name: float("inf") for name in parts}
    faults = {name: 0 for name in parts}
    with torch.no_grad():
        for m in parts.values():
            m(x)
        for _ in range(calls):
            for name, m in parts.items():
                f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                t0 = time.perf_counter()
                m(x)
                best[name] = min(best[name], time.perf_counter() - t0)
                faults[name] += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
    print(f"\nparts at {batch}x3x{size}x{size} uint8, 1 thread, best of {calls} calls")
    rows = []
    for name in parts:
        rows.append({"part": name, "size": size, "batch": batch, "best_ms": best[name] * 1e3,
                     "minor_faults_per_call": faults[name] / calls})
        print(f"{name:<34} {best[name] * 1e3:7.2f} ms  {faults[name] / calls:7.0f} faults/call")
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--recipes", nargs="+", default=list(RECIPES), choices=list(RECIPES))
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--device", default="cpu", help="cpu or cuda (inputs and modules there)")
    ap.add_argument("--containers", type=int, nargs="*", default=None, metavar="SIZE",
                    help="instead: grouped vs static containers at these image sizes")
    ap.add_argument("--parts", type=int, nargs="*", default=None, metavar="SIZE",
                    help="instead: best-of --calls ms of the color recipe and its parts")
    ap.add_argument("--calls", type=int, default=20)
    timing.add_arguments(ap, rounds=3, window=1.0)
    args = ap.parse_args(argv)
    if args.parts is not None:
        results = [run_parts(size, args.batch, args.calls) for size in args.parts or [32]]
    elif args.containers is not None:
        results = [run_containers(size, args) for size in args.containers or [32]]
    else:
        results = []
        for k, recipe in enumerate(args.recipes):
            results.append(run(recipe, args))
            print("\n".join(timing.table(results[-1], "batchaug_u8",
                                         f"{recipe} b{args.batch} {args.device}",
                                         header=k == 0)))
        print("(tv_onedraw draws once per batch: not the same augmentation)")
    timing.write_json(args.json, results)


if __name__ == "__main__":
    main()
