"""Ops per batch of the main recipes: what an eager GPU step pays in launches before any pixel.

    python benchmarks/bench_launches.py                      # batch 64, CPU and fake CUDA
    python benchmarks/bench_launches.py --quick --json launches.json --md launches.md

On a GPU every eager op costs ~5-10 us of launch whatever its size, so a recipe's ops per batch
times that is its floor, against ~0.04 ms to read and write 256 images of 224 px at H200
bandwidth. A ``TorchDispatchMode`` (``OpCounter``) counts the aten ops one training call
dispatches, after one warm-up call:

* ``ops``: every aten op that reaches the dispatcher;
* ``kernels``: the ops that may launch a kernel: not views (``view``, ``expand``, ``slice``...,
  metadata only) and not bare allocations (``empty``, ``empty_strided``...);
* ``top``: the most frequent ops.

Devices: ``cpu`` (real tensors: the CPU eager fast paths, some of which loop over the batch, so
their counts grow with it) and ``fake-cuda`` (``FakeTensorMode`` tensors on a ``"cuda"``
device, as tests/contract/fake_cuda.py's ``fake_cuda()``: the CUDA dispatch with no GPU; the module is
built on the CPU and moved inside the mode). A CUDA graph (``batchaug.graphed``) replays all of
a recipe's kernels as one launch.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

try:  # an installed batchaug wins; a bare checkout falls back to its own root (appended)
    import batchaug  # noqa: F401
except ImportError:  # pragma: no cover - depends on how the script is run
    sys.path.append(str(Path(__file__).resolve().parents[1]))

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

import batchaug as B  # noqa: E402
from batchaug.recipes import IMAGENET_MEAN, IMAGENET_STD  # noqa: E402

# Allocations without a kernel (views are recognised by their schema: OpOverload.is_view).
_NO_KERNEL = frozenset({
    "aten.empty.memory_format", "aten.empty_strided.default", "aten.empty_like.default",
    "aten.new_empty.default", "aten.new_empty_strided.default", "aten.detach.default",
    "aten.alias.default", "aten.lift_fresh.default", "aten._local_scalar_dense.default",
})


class OpCounter(TorchDispatchMode):
    """Counts the aten ops dispatched inside it (``counts``: op name -> calls).

    Example:
        >>> with OpCounter() as c:
        ...     _ = torch.ones(3).add(1).view(3, 1)
        >>> c.total, c.kernels
        (3, 2)
    """

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter = Counter()
        self.views: int = 0
        self.no_kernel: int = 0  # views and bare allocations

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        if not name.startswith("aten."):  # prim.device and co.: metadata queries of a subclass
            return func(*args, **(kwargs or {}))
        self.counts[name] += 1
        view = bool(getattr(func, "is_view", False))
        self.views += view
        self.no_kernel += view or name in _NO_KERNEL
        return func(*args, **(kwargs or {}))

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def kernels(self) -> int:
        return self.total - self.no_kernel

    def top(self, k: int = 5) -> str:
        return ", ".join(f"{n.replace('aten.', '').replace('.default', '')} {c}"
                         for n, c in self.counts.most_common(k))


#: name -> (module factory, input (C, H, W), keyed)
def recipes(size: int) -> Dict[str, Tuple[Callable[[], torch.nn.Module], Tuple[int, int, int],
                                           bool]]:
    src = size + size // 7  # 256 -> 224 at the default size

    def rrc() -> torch.nn.Module:
        return B.Augment(B.RandomResizedCrop(size), B.RandomHorizontalFlip(),
                         B.Normalize(IMAGENET_MEAN, IMAGENET_STD), B.RandomErasing(p=0.25))

    return {
        "rrc+flip+normalize+erasing": (rrc, (3, src, src), False),
        "rrc+flip+normalize+erasing keyed": (rrc, (3, src, src), True),
        "cifar crop(32, pad 4)+flip": (
            lambda: B.Augment(B.RandomCrop(32, padding=4), B.RandomHorizontalFlip()),
            (3, 32, 32), False),
        "TrivialAugmentWide": (lambda: B.Augment(B.TrivialAugmentWide()), (3, size, size), False),
    }


def count(factory: Callable[[], torch.nn.Module], shape: Tuple[int, int, int], keyed: bool,
          batch: int, device: str) -> OpCounter:
    """Ops of one training call of ``factory()`` on a uint8 ``(batch, *shape)`` batch, after a
    warm-up call; ``device`` ``"cpu"`` or ``"fake-cuda"``."""
    m = factory().train()
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (batch,) + shape, dtype=torch.uint8, generator=g)
    keys = B.sample_keys(0, 0, torch.arange(batch)) if keyed else None

    def call(mod: torch.nn.Module, images: torch.Tensor, k: Optional[torch.Tensor]) -> None:
        counter = OpCounter()
        mod(images) if k is None else mod(images, k)  # warm-up (lazy state, plans)
        with counter:
            mod(images) if k is None else mod(images, k)
        return counter

    if device == "cpu":
        return call(m, x, keys)
    if device != "fake-cuda":
        raise ValueError(f"device must be 'cpu' or 'fake-cuda', got {device!r}")
    with FakeTensorMode(allow_non_fake_inputs=True):
        m = m.to("cuda")
        return call(m, x.to("cuda"), None if keys is None else keys.to("cuda"))


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--size", type=int, default=224, help="output size of the ImageNet recipes")
    p.add_argument("--devices", default="cpu,fake-cuda")
    p.add_argument("--quick", action="store_true", help="batch 4, 32 px (a smoke test)")
    p.add_argument("--json", help="write the rows here")
    p.add_argument("--md", help="write the markdown table here")
    a = p.parse_args(argv)
    if a.quick:
        a.batch, a.size = 4, 32
    devices = a.devices.split(",")
    for d in devices:
        if d not in ("cpu", "fake-cuda"):
            p.error(f"--devices: {d!r} is not cpu or fake-cuda")
    torch.manual_seed(0)
    rows = []
    for name, (factory, shape, keyed) in recipes(a.size).items():
        for device in devices:
            row = {"recipe": name, "device": device, "batch": a.batch}
            try:
                c = count(factory, shape, keyed, a.batch, device)
                row.update(ops=c.total, kernels=c.kernels, views=c.views, top=c.top())
            except Exception as e:  # report and go on: one failure must not hide the rest
                row["error"] = f"{type(e).__name__}: {e}"[:200]
            rows.append(row)
    lines = ["| recipe | device | batch | ops | kernels | most frequent |",
             "|---|---|---:|---:|---:|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['recipe']} | {r['device']} | {r['batch']} | | | "
                         f"FAILED: {r['error']} |")
        else:
            lines.append(f"| {r['recipe']} | {r['device']} | {r['batch']} | {r['ops']} | "
                         f"{r['kernels']} | {r['top']} |")
    table = "\n".join(lines)
    print(table)
    if a.md:
        Path(a.md).write_text(table + "\n")
    if a.json:
        Path(a.json).write_text(json.dumps({"rows": rows, "torch": torch.__version__}, indent=1))
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
