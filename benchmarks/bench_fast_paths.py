"""Does a fast path pay? A transform's forward with one CPU fast path on and forced off.

    OMP_NUM_THREADS=1 python benchmarks/bench_fast_paths.py
    python benchmarks/bench_fast_paths.py --paths normalize-threads --threads 2

Each path is switched off by patching the predicate or function that selects it (as the
contract's ``check_fast_path_matches_plain`` does), so the plain contender runs what the
library would run without the path. Both contenders enter the same patch (the fast one with the
original value), on the same batch and module, in interleaved rounds of equal windows
(``batchaug.bench.timing``); the outputs are compared first (max abs difference printed). The
report gives ms per call and the same-round ratio fast / plain (> 1: the path is faster),
median [min-max]. Batches: uint8 or float32, (64, 3, 224, 224) and (512, 3, 32, 32).
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
from typing import Any, Callable, Dict, List, NamedTuple, Optional
from unittest import mock

import torch

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]
SHAPES = {"224": (64, 3, 224, 224), "32": (512, 3, 32, 32)}


class Path(NamedTuple):
    module: Callable[[], torch.nn.Module]
    target: str  # "package.module.name" or "package.module.Class.name", patched to ``plain``
    plain: Callable[..., Any]
    dtypes: List[str]
    sizes: List[str]
    also: Optional[str] = None  # a predicate patched to False in both contenders


def _paths() -> Dict[str, Path]:
    import batchaug.functional._color as FC
    import batchaug.functional._misc as FM
    import batchaug.transforms as T
    from batchaug import Augment
    from batchaug.functional._warp import _warp

    def whole_batch(x: torch.Tensor, *args: Any, **kwargs: Any) -> int:
        return x.shape[0]

    def factors_per_call(self, x, keys=None):
        dtype = torch.float64 if self.out_dtype() == torch.float64 else torch.float32
        return FM.normalize_factors(self.mean.to(dtype), self.std.to(dtype), x.dtype, dtype)

    def rotate_then_normalize(x, angle, interpolation, fill, center, factor, shift,
                              dtype=torch.float32):
        rotated = _warp(x, angle, "rotation", center, interpolation, fill)
        return FM.normalize_affine(rotated, factor, shift, dtype)

    jitter = lambda: T.ColorJitter(0.4, 0.4, 0.4, 0.1)  # noqa: E731
    both, u8 = ["uint8", "float32"], ["uint8"]
    sizes = ["224", "32"]
    return {
        "jitter-grouped": Path(jitter, "batchaug.transforms._color.group_on_host",
                               lambda x: False, both, sizes),
        "jitter-chunks": Path(jitter, "batchaug.transforms._color.cpu_chunk_size", whole_batch,
                              both, sizes),
        "jitter-static-u8": Path(jitter, "batchaug.transforms._color.ColorJitter._static_u8",
                                 lambda self, *a: self._static(*a), u8, sizes,
                                 also="batchaug.transforms._color.group_on_host"),
        "hue-in-place": Path(lambda: T.ColorJitter(hue=0.1),
                             "batchaug.functional._color.rotate_hue_",
                             lambda xf, f, *a: FC._rotate_hue(xf, f), ["float32"], sizes),
        "sharpness-integer": Path(lambda: T.RandomAdjustSharpness(2.0, p=1.0),
                                  "batchaug.functional._color._sharpness_u8",
                                  FC._sharpness_conv, u8, sizes),
        "sharpness-chunks": Path(lambda: T.RandomAdjustSharpness(2.0, p=1.0),
                                 "batchaug.functional._color.cpu_chunk_size", whole_batch, u8,
                                 sizes),
        "erasing-loop": Path(lambda: T.RandomErasing(0.5),
                             "batchaug.functional._misc._erase_by_loop", lambda x: False, both,
                             sizes),
        "normalize-chunked": Path(lambda: T.Normalize(MEAN, STD),
                                  "batchaug.functional._misc._needs_grad", lambda x: True, both,
                                  sizes),
        "normalize-threads": Path(lambda: T.Normalize(MEAN, STD),
                                  "batchaug.functional._misc._normalize_threads",
                                  FM._normalize_chunked, u8, sizes),
        "normalize-factors": Path(lambda: T.Normalize(MEAN, STD),
                                  "batchaug.transforms._misc.Normalize.make_params",
                                  factors_per_call, both, sizes),
        "rotate-normalize": Path(lambda: Augment(T.RandomRotation(15), T.Normalize(MEAN, STD)),
                                 "batchaug._fusion.rotate_normalize", rotate_then_normalize, u8,
                                 sizes),
    }


def _owner(target: str):
    where, name = target.rsplit(".", 1)
    try:
        return importlib.import_module(where), name
    except ImportError:
        module, cls = where.rsplit(".", 1)
        return getattr(importlib.import_module(module), cls), name


def main(argv=None) -> None:
    from batchaug.bench import timing
    from batchaug.bench.timing import Call

    paths = _paths()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--paths", default=",".join(paths),
                    help=f"comma list of: {', '.join(paths)}")
    ap.add_argument("--sizes", default="224,32", help="comma list of: 224, 32")
    timing.add_arguments(ap, rounds=5, window=0.5, threads="1")
    args = ap.parse_args(argv)
    print("| path | batch | threads | plain -> fast, ms per call | fast / plain, same round |"
          "\n|---|---|---:|---:|---:|")
    for key in args.paths.split(","):
        path = paths[key]
        owner, name = _owner(path.target)
        original = vars(owner)[name] if isinstance(owner, type) else getattr(owner, name)
        calls = [0]

        def plain(*a: Any, **k: Any) -> Any:
            calls[0] += 1
            return path.plain(*a, **k)

        for size in path.sizes:
            if size not in args.sizes.split(","):
                continue
            for dtype in path.dtypes:
                shape = SHAPES[size]
                g = torch.Generator().manual_seed(0)
                x = (torch.randint(0, 256, shape, dtype=torch.uint8, generator=g)
                     if dtype == "uint8" else torch.rand(shape, generator=g))
                m = path.module().train()

                def run(x: torch.Tensor, value: Any, m=m) -> torch.Tensor:
                    with contextlib.ExitStack() as stack:
                        stack.enter_context(mock.patch.object(owner, name, value))
                        if path.also:
                            stack.enter_context(mock.patch(path.also, lambda x: False))
                        return m(x)

                torch.manual_seed(1)
                fast = run(x, original)
                torch.manual_seed(1)
                diff = (fast.double() - run(x, plain).double()).abs().max().item()
                if calls[0] == 0:
                    raise SystemExit(f"{key}: {path.target} is never called")
                summary = timing.compare([Call("fast", lambda x: run(x, original), [(x,)]),
                                          Call("plain", lambda x: run(x, plain), [(x,)])], args)
                for threads in args.threads:
                    ms = {c: shape[0] / summary[(c, threads)]["images_per_s"] * 1e3
                          for c in ("fast", "plain")}
                    ratio = summary[("fast", threads)]["ratios"]["plain"]
                    print(f"| {key} | {dtype} {tuple(shape)} (max diff {diff:g}) | {threads} | "
                          f"{ms['plain']:.2f} -> {ms['fast']:.2f} | {timing.spread(ratio)} |",
                          flush=True)


if __name__ == "__main__":
    main()
