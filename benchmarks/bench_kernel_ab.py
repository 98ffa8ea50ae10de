"""A kernel against its own earlier version: the function as committed at a git revision and as
it is in the working tree, called alternately in one process (best of N calls each), so a change
to a kernel is measured on the same load, with the same inputs.

    python benchmarks/bench_kernel_ab.py --rev 90ba925 adjust_hue 256,3,32,32
    python benchmarks/bench_kernel_ab.py --rev 90ba925 adjust_hue 64,3,224,224 --dtype float32
    python benchmarks/bench_kernel_ab.py --rev d53bda0 adjust_sharpness 64,3,224,224 --dtype uint8

The function is looked up in batchaug/functional/*.py at the revision (its module is loaded from
``git show REV:path``, its relative imports pointing at today's package) and in today's
``batchaug.functional``. It gets one (N, C, H, W) batch (uniform in [0, 1) for floats, 0-255 for
uint8) and one per-sample factor tensor (uniform in --factor's range), as the colour kernels
take them. The outputs are compared first (max abs difference printed), then timed.
"""
from __future__ import annotations

import argparse
import pathlib
import subprocess
import time
import types
from typing import Callable, Tuple

import torch

ROOT = pathlib.Path(__file__).resolve().parent.parent
FUNCTIONAL = "batchaug/functional"


def old_function(rev: str, name: str) -> Tuple[Callable, str]:
    """``name`` as defined in batchaug/functional at ``rev``, and the file it came from."""
    files = subprocess.run(["git", "ls-tree", "--name-only", rev, f"{FUNCTIONAL}/"], cwd=ROOT,
                           check=True, capture_output=True, text=True).stdout.split()
    for path in sorted(files):
        if not path.endswith(".py"):
            continue
        src = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT, check=True,
                             capture_output=True, text=True).stdout
        if f"\ndef {name}(" not in src:
            continue
        mod = types.ModuleType(f"old_{pathlib.Path(path).stem}")
        mod.__dict__["__package__"] = "batchaug.functional"  # relative imports: today's modules
        exec(compile(src, f"{rev}:{path}", "exec"), mod.__dict__)
        return mod.__dict__[name], path
    raise SystemExit(f"no function {name!r} in {FUNCTIONAL} at {rev}")


def best_of(fn: Callable, x: torch.Tensor, f: torch.Tensor) -> float:
    start = time.perf_counter()
    fn(x, f)
    return time.perf_counter() - start


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("function", help="a name in batchaug.functional, e.g. adjust_hue")
    ap.add_argument("shape", help="N,C,H,W")
    ap.add_argument("--rev", required=True, help="the git revision of the old version")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64", "uint8"])
    ap.add_argument("--factor", default="-0.5,0.5", help="per-sample factor range lo,hi")
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    import batchaug.functional as BF

    old, path = old_function(args.rev, args.function)
    new = getattr(BF, args.function)
    shape = [int(v) for v in args.shape.split(",")]
    g = torch.Generator().manual_seed(0)
    if args.dtype == "uint8":
        x = torch.randint(0, 256, shape, dtype=torch.uint8, generator=g)
    else:
        x = torch.rand(shape, generator=g, dtype=getattr(torch, args.dtype))
    lo, hi = (float(v) for v in args.factor.split(","))
    f = torch.rand(shape[0], generator=g, dtype=torch.float64) * (hi - lo) + lo
    diff = (old(x, f).double() - new(x, f).double()).abs().max().item()
    times = {"old": float("inf"), "new": float("inf")}
    for _ in range(args.calls):
        times["old"] = min(times["old"], best_of(old, x, f))
        times["new"] = min(times["new"], best_of(new, x, f))
    print(f"{args.function} {tuple(shape)} {args.dtype}, {args.threads} thread(s), best of "
          f"{args.calls}: old ({args.rev}:{path}) {times['old'] * 1e3:.2f} ms, new "
          f"{times['new'] * 1e3:.2f} ms, old / new {times['old'] / times['new']:.2f}x; "
          f"max |old - new| {diff:.3g}")


if __name__ == "__main__":
    main()
