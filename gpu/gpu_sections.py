"""gpu_bench.py's sections for a first run on a GPU: every transform eager vs CUDA-graph replay vs
``torch.compile``, host syncs per call, the JPEG loader on the device, and memory.

* ``transforms``: every exported transform (default arguments, crops to 7/8 of the side) on a
  uint8 batch of ``--transform-batch`` (256) at each of ``--transform-sides`` (224, 32), in
  ``train()``: eager img/s and the host syncs of its first call and of a later one (CUDA's sync
  debug mode counts them: a blocking copy, ``.item()``, a stream sync), then the
  ``batchaug.graphed`` replay's img/s and the memory its graph pool reserved, then
  ``torch.compile(fullgraph=True)`` img/s while the budget leaves ``COMPILE_S`` (all eager and
  graph rows come first: they are cheap; compiled rows past the budget are written as skipped).
* ``jpeg_loader``: a JPEG cache of ``--jpeg-images`` photos-sized images (256-400 px) through
  ``DeviceLoader(crop=RandomResizedCrop(224))`` at batch 256, placed on the device (decoded by
  nvJPEG through torchvision, or TorchCodec where installed) and on the host: img/s over the
  epochs that fit ``--jpeg-seconds`` after a first one (decoder start-up).
* ``memory``: the process's peak device memory (allocated, reserved), the pinned host memory
  (torch's caching host allocator: current and peak) and the graph pools the transforms
  section reserved.

Without CUDA (``--dry-run`` on a CPU) the eager rows run at tiny sizes, the graph and sync rows
say why they are not measured, one transform is compiled (``--modes`` with compile), the loader
decodes on the CPU, and the memory rows say "no CUDA".
"""
from __future__ import annotations

import time
import warnings
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import torch
from torch import nn

#: Seconds of budget a compiled transform row needs to be started (a single transform compiles
#: in a few seconds to ~20 s).
COMPILE_S = 15.0


def transform_table(side: int) -> List[Tuple[str, Callable[[], nn.Module]]]:
    """Every exported transform, built with its default arguments (the required ones filled
    in, crops and resizes to 7/8 of ``side``), as ``(name, factory)``."""
    import batchaug as B

    c = max(1, side * 7 // 8)
    required = {
        "RandomCrop": (c,), "CenterCrop": (c,), "Pad": (4,),
        "Normalize": ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
        "ToDtype": (torch.float32,), "RandomRotation": (30,), "RandomAffine": (30,),
        "RandomResizedCrop": (c,), "TimmRandomResizedCrop": (c,), "Resize": (c,),
        "GaussianBlur": (5,), "RandomPosterize": (3,), "RandomSolarize": (0.5,),
        "RandomAdjustSharpness": (2.0,),
        "RandomApply": (lambda: [B.RandomInvert()],),
        "RandomOrder": (lambda: [B.RandomInvert(), B.RandomHorizontalFlip()],),
        "RandomChoice": (lambda: [B.RandomInvert(), B.RandomGrayscale()],),
        "Augment": (lambda: B.RandomHorizontalFlip(),),
    }
    skip = {"MixUp", "CutMix", "MixUpOrCutMix", "TimmMixup",  # need labels
            "AugmentedModel", "DeployedModel", "Transform", "GeometricTransform"}
    out = []
    for name in B.__all__:
        cls = getattr(B, name)
        if isinstance(cls, type) and issubclass(cls, nn.Module) and name not in skip:
            def make(cls=cls, args=required.get(name, ())) -> nn.Module:
                return cls(*[a() if callable(a) and not isinstance(a, type) else a
                             for a in args])
            out.append((name, make))
    return out


class SyncCounter:
    """Host syncs of the CUDA calls made inside it (``torch.cuda.set_sync_debug_mode("warn")``
    warns once per synchronizing call); ``count`` after the block."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.count: Optional[int] = None

    def __enter__(self) -> "SyncCounter":
        self._w = warnings.catch_warnings(record=True)
        self._seen = self._w.__enter__()
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        return self

    def __exit__(self, *exc) -> None:
        torch.cuda.set_sync_debug_mode("default")
        self._w.__exit__(*exc)
        self.count = sum("synchroniz" in str(w.message) for w in self._seen)


def _syncs(fn: Callable[[], object], device: torch.device) -> Optional[int]:
    if device.type != "cuda":
        return None
    with SyncCounter(device) as c:
        fn()
    return c.count


def _pool_bytes(device: torch.device, capture: Callable[[], object]) -> Tuple[object, int]:
    """``capture()``'s result and the device memory reserved meanwhile (the graph's pool)."""
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_reserved(device)
    out = capture()
    torch.cuda.synchronize(device)
    return out, torch.cuda.memory_reserved(device) - before


def section_transforms(run) -> Iterator[dict]:
    from gpu_bench import time_batches

    import batchaug as B

    cuda = run.device.type == "cuda"
    n = 4 if run.dry else run.transform_batch
    sides = [16] if run.dry else run.transform_sides
    compile_plan = []
    run.extra.setdefault("graph_pool_bytes", 0)
    for side in sides:
        g = torch.Generator().manual_seed(0)
        x = torch.randint(0, 256, (n, 3, side, side), dtype=torch.uint8, generator=g)
        x = x.to(run.device)
        for name, make in transform_table(side):
            row = {"section": "transforms", "name": name, "side": side, "batch": n}
            if run.left_s() <= 0:
                yield {**row, "mode": "eager", "note": "skipped: budget spent"}
                continue
            try:
                m = make().to(run.device).train()
                first = _syncs(lambda: m(x), run.device)
                later = _syncs(lambda: m(x), run.device)
                sec = time_batches(m, x, run.iters, run.warmup)
            except Exception as e:  # report and go on: one failure must not hide the rest
                yield {**row, "mode": "eager", "error": f"{type(e).__name__}: {e}"[:300]}
                continue
            eager = {**row, "mode": "eager", "seconds": sec, "images_per_s": n / sec,
                     "syncs_first": first, "syncs_per_call": later,
                     "note": "host syncs: n/a without CUDA"}
            if first is not None:  # checked: a later call never waits for the device
                eager.update(ok=later == 0, note=f"host syncs: first call {first}, "
                                                 f"later call {later}")
            yield eager
            if not cuda:
                yield {**row, "mode": "graph", "note": "skipped: CUDA graphs need CUDA"}
            else:
                try:
                    gr, pool = _pool_bytes(run.device, lambda: B.graphed(m, x))
                    run.extra["graph_pool_bytes"] += pool
                    gsec = time_batches(gr, x, run.iters, run.warmup)
                    yield {**row, "mode": "graph", "seconds": gsec, "images_per_s": n / gsec,
                           "graph_pool_mb": pool / 2**20,
                           "note": f"{sec / gsec:.2f}x eager; graph pool {pool / 2**20:.1f} MiB"}
                    del gr
                except Exception as e:
                    yield {**row, "mode": "graph", "error": f"{type(e).__name__}: {e}"[:300]}
            if "compile" in run.modes and (not run.dry or not compile_plan):
                compile_plan.append((row, make, x, sec))
    for row, make, x, sec in compile_plan:
        if run.left_s() <= COMPILE_S:
            yield {**row, "mode": "compile", "note": f"skipped: {max(0.0, run.left_s()):.0f} s "
                                                     f"of the {run.budget_s:.0f} s budget left"}
            continue
        try:
            torch._dynamo.reset()
            m = torch.compile(make().to(run.device).train(), fullgraph=True)
            t0 = time.perf_counter()
            m(x)  # compiles
            built = time.perf_counter() - t0
            csec = time_batches(m, x, run.iters, run.warmup)
        except Exception as e:
            yield {**row, "mode": "compile", "error": f"{type(e).__name__}: {e}"[:300]}
            continue
        yield {**row, "mode": "compile", "seconds": csec, "images_per_s": row["batch"] / csec,
               "note": f"{sec / csec:.2f}x eager; compiled in {built:.1f} s"}


def _jpeg_column(n: int, lo: int, hi: int):
    """``n`` smooth, photo-like images of sides in [lo, hi], stored as JPEG (quality 90)."""
    from batchaug.data.ragged import RaggedImages

    g = torch.Generator().manual_seed(0)
    images = []
    for _ in range(n):
        h, w = (int(v) for v in torch.randint(lo, hi + 1, (2,), generator=g))
        base = torch.rand(3, 1 + h // 16, 1 + w // 16, generator=g)
        img = torch.nn.functional.interpolate(base[None], size=(h, w), mode="bilinear")[0]
        img = img + 0.05 * torch.randn(3, h, w, generator=g)
        images.append((img.clamp(0, 1) * 255).to(torch.uint8))
    return RaggedImages.from_list(images, storage="jpeg", quality=90)


def section_jpeg_loader(run) -> Iterator[dict]:
    from batchaug import DeviceCache, DeviceLoader, RandomResizedCrop
    from batchaug.data.ragged import RaggedImages

    n = 16 if run.dry else run.jpeg_images
    bs = 4 if run.dry else 256
    out = 24 if run.dry else 224
    column = _jpeg_column(n, 40 if run.dry else 256, 60 if run.dry else 400)
    labels = torch.zeros(n, dtype=torch.int64, device=run.device)
    for placement in ("device", "host"):
        row = {"section": "jpeg_loader", "name": f"JPEG cache, {placement} placement",
               "batch": bs, "mode": "loader"}
        if run.left_s() <= 0:
            yield {**row, "note": "skipped: budget spent"}
            continue
        if placement == "device":
            images = RaggedImages(column.data.to(run.device), column.index, 3, "jpeg",
                                  column.quality)
        else:
            images = column
        try:
            cache = DeviceCache(images, labels, placement=placement)
            loader = DeviceLoader(cache, bs, crop=RandomResizedCrop(out), drop_last=True)
            for _ in loader:  # the first epoch: decoder start-up, buffers grown
                pass
            if run.device.type == "cuda":
                torch.cuda.synchronize(run.device)
            t0, seen = time.perf_counter(), 0
            limit = 0.0 if run.dry else min(run.jpeg_seconds, max(0.0, run.left_s() / 2))
            while True:
                for x, _ in loader:
                    seen += x.shape[0]
                if run.device.type == "cuda":
                    torch.cuda.synchronize(run.device)
                if time.perf_counter() - t0 >= limit:
                    break
            sec = time.perf_counter() - t0
        except Exception as e:
            yield {**row, "error": f"{type(e).__name__}: {e}"[:300]}
            continue
        yield {**row, "seconds": sec / max(1, seen // bs), "images_per_s": seen / sec,
               "note": f"{seen} images in {sec:.1f} s, {n} in the cache, crop {out}"}


def section_memory(run) -> Iterator[dict]:
    row = {"section": "memory"}
    if run.device.type != "cuda":
        yield {**row, "name": "device, pinned host, graph pools", "note": "skipped: no CUDA"}
        return
    d = run.device
    yield {**row, "name": "device peak",
           "note": f"allocated {torch.cuda.max_memory_allocated(d) / 2**20:,.0f} MiB, reserved "
                   f"{torch.cuda.max_memory_reserved(d) / 2**20:,.0f} MiB"}
    stats: Dict[str, int] = {}
    if hasattr(torch.cuda, "host_memory_stats"):
        stats = torch.cuda.host_memory_stats()
    picked = {k: v for k, v in stats.items()
              if ("allocated_bytes" in k or "reserved_bytes" in k)
              and (k.endswith("current") or k.endswith("peak"))}
    yield {**row, "name": "pinned host",
           "note": ", ".join(f"{k} {v / 2**20:,.1f} MiB" for k, v in sorted(picked.items()))
           or "torch reports no host allocator statistics"}
    pool = run.extra.get("graph_pool_bytes")
    yield {**row, "name": "graph pools",
           "note": "no graph captured" if pool is None else
           f"{pool / 2**20:,.1f} MiB reserved by all captures"}
