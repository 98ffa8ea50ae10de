"""Eager vs ``torch.compile(fullgraph=True)`` for every recipe on a GPU, with achieved memory
bandwidth: what to run on a GPU, measured (called by benchmarks/gpu_check.sh).

    python benchmarks/gpu_bench.py                          # CUDA, batch 512 and 4096
    python benchmarks/gpu_bench.py --json out.json --iters 50
    python benchmarks/gpu_bench.py --device cpu --dry-run   # smoke test of the script itself

For each recipe, batch size and mode the batch (uint8, on the device) is augmented ``--iters``
times between two CUDA events (after warm-up, which includes compiling). GB/s counts the bytes
one batch must move at least: the uint8 input read once and the float32 output written once
(``N * C * (H * W + 4 * OH * OW)``); it is printed beside the device's memory bandwidth, from
its memory clock and bus width (theoretical) and from a 1 GiB device-to-device copy (achieved).
A recipe near the copy figure is bound by memory; far below it, by launches or arithmetic.

``--dry-run`` runs everything at batch 4 for one iteration, eager only unless ``--compile`` is
given, timed with the wall clock: it checks that the recipes build and run, not their speed.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Callable, Dict, List, Optional, Tuple

import torch

MEAN = [0.4914, 0.4822, 0.4465]
STD = [0.2470, 0.2435, 0.2616]
IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]


def recipes() -> Dict[str, Tuple[Callable[[], torch.nn.Module], Tuple[int, int], Tuple[int, int]]]:
    """name -> (module factory, source (H, W), output (H, W))."""
    import batchaug as B

    return {
        "cifar": (lambda: B.Augment(B.RandomCrop(32, padding=4), B.RandomHorizontalFlip(),
                                    B.Normalize(MEAN, STD)), (32, 32), (32, 32)),
        "rotation": (lambda: B.Augment(B.RandomRotation(15, interpolation="bilinear"),
                                       B.Normalize(MEAN, STD)), (32, 32), (32, 32)),
        "rrc-antialias": (lambda: B.Augment(B.RandomResizedCrop(224), B.RandomHorizontalFlip(),
                                            B.Normalize(IMAGENET_MEAN, IMAGENET_STD)),
                          (256, 256), (224, 224)),
        "rrc-no-antialias": (lambda: B.Augment(B.RandomResizedCrop(224, antialias=False),
                                               B.RandomHorizontalFlip(),
                                               B.Normalize(IMAGENET_MEAN, IMAGENET_STD)),
                             (256, 256), (224, 224)),
        # issue 10: TrivialAugmentWide per sample (compile: the static path, every op on the
        # batch), erasing, and MixUp/CutMix per sample on 1000-class labels (images timed)
        "policy": (lambda: _WithMix(
            B.Augment(B.RandomResizedCrop(224), B.RandomHorizontalFlip(),
                      B.TrivialAugmentWide(), B.Normalize(IMAGENET_MEAN, IMAGENET_STD),
                      B.RandomErasing(p=0.25)),
            B.MixUpOrCutMix(1000, mixup_alpha=0.2, cutmix_alpha=1.0)), (256, 256), (224, 224)),
    }


class _WithMix(torch.nn.Module):
    """An augment followed by label mixing with labels ``arange(N) % 1000``; returns images."""

    def __init__(self, aug: torch.nn.Module, mix: torch.nn.Module) -> None:
        super().__init__()
        self.aug, self.mix = aug, mix

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        labels = torch.arange(x.shape[0], device=x.device) % 1000
        return self.mix(self.aug(x), labels)[0]


def bytes_moved(n: int, c: int, src: Tuple[int, int], out: Tuple[int, int]) -> int:
    """The least a recipe must move: uint8 input read once, float32 output written once."""
    return n * c * (src[0] * src[1] + 4 * out[0] * out[1])


def theoretical_bandwidth(device: torch.device) -> Optional[float]:
    """Bytes/s from the memory clock (kHz, double data rate) and bus width (bits); None when
    torch does not report them (CPU, older torch)."""
    if device.type != "cuda":
        return None
    p = torch.cuda.get_device_properties(device)
    clock = getattr(p, "memory_clock_rate", 0)
    width = getattr(p, "memory_bus_width", 0)
    if not clock or not width:
        return None
    return 2.0 * clock * 1e3 * width / 8.0


def copy_bandwidth(device: torch.device, nbytes: int = 1 << 30) -> Optional[float]:
    """Achieved bytes/s (read + write) of a device-to-device copy of ``nbytes``."""
    if device.type != "cuda":
        return None
    a = torch.empty(nbytes, dtype=torch.uint8, device=device)
    b = torch.empty_like(a)
    b.copy_(a)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        b.copy_(a)
    end.record()
    torch.cuda.synchronize(device)
    seconds = start.elapsed_time(end) / 1e3
    del a, b
    return 10 * 2 * nbytes / seconds


def time_batches(fn: Callable, x: torch.Tensor, iters: int, warmup: int) -> float:
    """Seconds per call: CUDA events on a GPU, the wall clock elsewhere."""
    with torch.no_grad():
        for _ in range(warmup):
            fn(x)
        if x.is_cuda:
            torch.cuda.synchronize(x.device)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                fn(x)
            end.record()
            torch.cuda.synchronize(x.device)
            return start.elapsed_time(end) / 1e3 / iters
        t0 = time.perf_counter()
        for _ in range(iters):
            fn(x)
        return (time.perf_counter() - t0) / iters


def run(device: torch.device, batches: List[int], modes: List[str], iters: int, warmup: int,
        names: List[str]) -> List[dict]:
    table = recipes()
    rows = []
    for name in names:
        factory, src, out = table[name]
        for n in batches:
            g = torch.Generator().manual_seed(0)
            x = torch.randint(0, 256, (n, 3, src[0], src[1]), generator=g,
                              dtype=torch.uint8).to(device)
            for mode in modes:
                m = factory().to(device).train()
                if mode == "compile":
                    torch._dynamo.reset()
                    m = torch.compile(m, fullgraph=True)
                try:
                    sec = time_batches(m, x, iters, warmup)
                except Exception as e:  # report and go on: one failure must not hide the rest
                    rows.append({"recipe": name, "batch": n, "mode": mode,
                                 "error": f"{type(e).__name__}: {e}"[:300]})
                    print(f"[error] {name} batch {n} {mode}: {e}", file=sys.stderr)
                    continue
                moved = bytes_moved(n, 3, src, out)
                rows.append({"recipe": name, "batch": n, "mode": mode, "seconds": sec,
                             "images_per_s": n / sec, "bytes": moved, "gb_per_s": moved / sec / 1e9})
                print(f"  {name} batch {n} {mode}: {n / sec:,.0f} img/s, "
                      f"{moved / sec / 1e9:,.1f} GB/s", file=sys.stderr)
            del x
    return rows


def markdown(rows: List[dict], theoretical: Optional[float], copy: Optional[float]) -> str:
    ref = copy or theoretical
    lines = []
    if theoretical or copy:
        lines.append("device memory bandwidth: theoretical "
                     + (f"{theoretical / 1e9:,.0f} GB/s" if theoretical else "unknown")
                     + ", 1 GiB device copy " + (f"{copy / 1e9:,.0f} GB/s" if copy else "n/a"))
        lines.append("")
    lines += ["| recipe | batch | mode | img/s | GB/s (uint8 in + float32 out) | % of copy GB/s |"
              " compile / eager |", "|---|---:|---|---:|---:|---:|---:|"]
    eager = {(r["recipe"], r["batch"]): r for r in rows if r["mode"] == "eager" and "seconds" in r}
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['recipe']} | {r['batch']} | {r['mode']} | error: "
                         f"{r['error'][:80]} | | | |")
            continue
        pct = f"{100 * r['gb_per_s'] * 1e9 / ref:.0f}%" if ref else ""
        e = eager.get((r["recipe"], r["batch"]))
        speedup = f"{e['seconds'] / r['seconds']:.2f}x" if e and r["mode"] == "compile" else ""
        lines.append(f"| {r['recipe']} | {r['batch']} | {r['mode']} | {r['images_per_s']:,.0f} | "
                     f"{r['gb_per_s']:,.1f} | {pct} | {speedup} |")
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batch-sizes", default="512,4096")
    ap.add_argument("--recipes", default="all", help="comma list or 'all': " + ",".join(recipes()))
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--modes", default="eager,compile")
    ap.add_argument("--dry-run", action="store_true",
                    help="batch 4, one iteration, eager only unless --modes says otherwise")
    ap.add_argument("--json", default=None, help="write the rows to this JSON file")
    ap.add_argument("--md", default=None, help="write the markdown table to this file")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda but CUDA is not available (use --device cpu --dry-run to test)")
    names = list(recipes()) if args.recipes == "all" else args.recipes.split(",")
    for n in names:
        if n not in recipes():
            ap.error(f"unknown recipe {n!r}; choose from {list(recipes())}")
    modes = args.modes.split(",")
    for m in modes:
        if m not in ("eager", "compile"):
            ap.error(f"unknown mode {m!r}; choose from eager, compile")
    batches = [int(b) for b in args.batch_sizes.split(",")]
    iters, warmup = args.iters, args.warmup
    if args.dry_run:
        batches, iters, warmup = [4], 1, 1
        if "--modes" not in " ".join(argv if argv is not None else sys.argv):
            modes = ["eager"]
    theoretical, copy = theoretical_bandwidth(device), copy_bandwidth(device)
    rows = run(device, batches, modes, iters, warmup, names)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    table = f"device: {name}, torch {torch.__version__}\n\n" + markdown(rows, theoretical, copy)
    print(table)
    if args.md:
        with open(args.md, "w") as f:
            f.write(table + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": name, "torch": torch.__version__, "theoretical_bytes_per_s":
                       theoretical, "copy_bytes_per_s": copy, "rows": rows}, f, indent=2)
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
