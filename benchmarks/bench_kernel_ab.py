"""A kernel against its own earlier version: the function as committed at a git revision and as
it is in the working tree, timed in the same interleaved rounds in one process
(``batchaug.bench.timing``), so a change to a kernel is measured on the same load, with the same
inputs.

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
import types
from typing import Callable, Tuple

import torch

from batchaug.bench import timing
from batchaug.bench.timing import Call

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


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("function", help="a name in batchaug.functional, e.g. adjust_hue")
    ap.add_argument("shape", help="N,C,H,W")
    ap.add_argument("--rev", required=True, help="the git revision of the old version")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64", "uint8"])
    ap.add_argument("--factor", default="-0.5,0.5", help="per-sample factor range lo,hi")
    timing.add_arguments(ap, rounds=5, window=0.3, threads="1")
    args = ap.parse_args(argv)
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
    summary = timing.compare([Call("old", old, [(x, f)]), Call("new", new, [(x, f)])], args)
    print(f"{args.function} {tuple(shape)} {args.dtype}; old = {args.rev}:{path}; "
          f"max |old - new| {diff:.3g}")
    print("\n".join(timing.table(summary, "new", args.function, per_call=shape[0])))
    timing.write_json(args.json, summary)


if __name__ == "__main__":
    main()
