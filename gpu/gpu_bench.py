"""What to run on a GPU, measured: every recipe eager vs ``torch.compile(fullgraph=True)``
with achieved memory bandwidth, and checks of the data path on the device (called by
gpu/gpu_check.sh).

    python gpu/gpu_bench.py                          # CUDA, batch 512 and 4096
    python gpu/gpu_bench.py --jsonl rows.jsonl --md rows.md --budget-s 120
    python gpu/gpu_bench.py --device cpu --dry-run   # smoke test of the script itself

Each row is written (JSON line + markdown row, flushed) as soon as it is measured, so a run cut
short by a timeout keeps every row before the cut; ``--json`` also writes them all at the end.
Sections run in ``SECTIONS`` order; each is a function ``(Run) -> Iterator[row dict]``, and a new
kind of GPU row (decoding, say) is one more function registered there.

* ``bandwidth``: the device's memory bandwidth from its memory clock and bus width
  (theoretical) and from a 1 GiB device-to-device copy (achieved).
* ``data``: a small host-placement cache through ``DeviceLoader``: the cache is not pinned, the
  staging buffers are, the batches equal the device placement's; free-memory accounting counts
  what PyTorch cached (``device_free_bytes`` vs ``mem_get_info``).
* ``recipes``: each recipe's batch (uint8, on the device) augmented ``--iters`` times between
  two CUDA events after warm-up (which includes compiling). GB/s counts the bytes one batch must
  move at least: the uint8 input read once and the float32 output written once
  (``N * C * (H * W + 4 * OH * OW)``), beside the copy figure: near it a recipe is bound by
  memory, far below by launches or arithmetic. Eager rows come first; compiled rows only at
  ``--compile-batches`` (each batch size is another compile) and only while ``--budget-s``
  leaves ``COMPILE_RESERVE_S``: past the budget, rows are written as skipped.

* ``targets``: a segmentation augment's ``with_targets`` (masks, boxes, keypoints) against its
  images-only forward, and a host-sync check of ``with_targets``.
* ``transforms``, ``jpeg_loader``, ``memory``: every transform eager vs graph replay vs compile
  with its host syncs, the JPEG loader on the device, peak and pinned memory
  (``gpu/gpu_sections.py``).

``--dry-run`` runs everything at batch 4 for one iteration, eager only unless ``--modes`` is
given, timed with the wall clock: it checks that the script works, not the speed.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, IO, Iterator, List, Optional, Tuple

try:  # an installed batchaug wins; a bare checkout falls back to its own root (appended)
    import batchaug  # noqa: F401
except ImportError:  # pragma: no cover - depends on how the script is run
    sys.path.append(str(Path(__file__).resolve().parents[1]))

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # gpu_sections, beside this script
import gpu_sections  # noqa: E402

from batchaug.recipes import CIFAR10_MEAN as MEAN, CIFAR10_STD as STD  # noqa: E402
from batchaug.recipes import IMAGENET_MEAN, IMAGENET_STD  # noqa: E402
#: Seconds of budget a compiled row needs to be started (compiling a recipe takes 10-40 s).
COMPILE_RESERVE_S = 30.0


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
        # TrivialAugmentWide per sample (compile: the static path, every op on the batch),
        # erasing, and MixUp/CutMix per sample on 1000-class labels (images timed)
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


@dataclass
class Run:
    """What every section gets: the device, the sizes, the budget and the bandwidth found."""

    device: torch.device
    batches: List[int]
    modes: List[str]
    compile_batches: List[int]
    iters: int
    warmup: int
    names: List[str]
    budget_s: float
    start: float = field(default_factory=time.perf_counter)
    copy_bytes_per_s: Optional[float] = None
    theoretical_bytes_per_s: Optional[float] = None
    dry: bool = False
    transform_batch: int = 256
    transform_sides: List[int] = field(default_factory=lambda: [224, 32])
    jpeg_images: int = 1024
    jpeg_seconds: float = 10.0
    #: figures one section leaves for a later one (the graph pools for ``memory``)
    extra: Dict[str, float] = field(default_factory=dict)

    def left_s(self) -> float:
        return self.budget_s - (time.perf_counter() - self.start)


def section_bandwidth(run: Run) -> Iterator[dict]:
    if run.device.type != "cuda":
        yield {"section": "bandwidth", "name": "device memory", "note": "skipped: no CUDA"}
        return
    run.theoretical_bytes_per_s = theoretical_bandwidth(run.device)
    run.copy_bytes_per_s = copy_bandwidth(run.device)
    for name, value in (("theoretical", run.theoretical_bytes_per_s),
                        ("1 GiB device copy", run.copy_bytes_per_s)):
        yield {"section": "bandwidth", "name": name,
               "gb_per_s": value / 1e9 if value else None,
               "note": "" if value else "not reported by torch"}


def section_data(run: Run) -> Iterator[dict]:
    from batchaug import DeviceCache, DeviceLoader
    from batchaug.data.storage import device_free_bytes

    n, shape = 64, (3, 32, 32)
    with tempfile.TemporaryDirectory() as tmp:
        images = torch.randint(0, 256, (n,) + shape, dtype=torch.uint8,
                               generator=torch.Generator().manual_seed(0))
        DeviceCache.from_tensors(images, torch.arange(n), device="cpu").save(Path(tmp) / "c")
        host = DeviceCache.load(Path(tmp) / "c", device=run.device, placement="host")
        dev = DeviceCache.load(Path(tmp) / "c", device=run.device, placement="device")
        loader = DeviceLoader(host, 16, prefetch=2, rank=0, world_size=1)
        got = [(x.cpu(), y.cpu()) for x, y in loader]
        ref = [(x.cpu(), y.cpu()) for x, y in DeviceLoader(dev, 16, rank=0, world_size=1)]
        same = len(got) == len(ref) and all(
            torch.equal(a, b) and torch.equal(ya, yb) for (a, ya), (b, yb) in zip(got, ref))
        on_device = all(x.device == run.device for x, _ in loader)
        pinned_cache = host.images.is_pinned() if run.device.type == "cuda" else False
        staging = loader._get_delivery().buffers
        pinned_staging = all(b.is_pinned() for b in staging) if run.device.type == "cuda" else None
    ok = same and on_device and not pinned_cache and pinned_staging is not False
    yield {"section": "data", "name": "host placement", "ok": ok,
           "note": f"batches == device placement's: {same}, on {run.device}: {on_device}, cache "
                   f"pinned: {pinned_cache}, staging pinned: {pinned_staging}"}
    if run.device.type != "cuda":
        yield {"section": "data", "name": "free memory", "note": "skipped: no CUDA"}
        return
    torch.cuda.synchronize(run.device)
    x = torch.empty(512 * 2**20, dtype=torch.uint8, device=run.device)
    del x  # cached by PyTorch: not free to the driver, free to the next tensor
    driver = torch.cuda.mem_get_info(run.device)[0]
    ours = device_free_bytes(run.device)
    cached = torch.cuda.memory_reserved(run.device) - torch.cuda.memory_allocated(run.device)
    ok = ours == driver + cached and cached >= 512 * 2**20
    yield {"section": "data", "name": "free memory", "ok": ok,
           "note": f"driver free {driver / 2**30:.2f} GiB + cached-unused {cached / 2**30:.2f} "
                   f"GiB = device_free_bytes {ours / 2**30:.2f} GiB"}


def section_recipes(run: Run) -> Iterator[dict]:
    table = recipes()
    plan = [(name, n, "eager") for name in run.names for n in run.batches if "eager" in run.modes]
    if "compile" in run.modes:
        plan += [(name, n, "compile") for name in run.names for n in run.compile_batches]
    inputs: Dict[int, torch.Tensor] = {}
    for name, n, mode in plan:
        factory, src, out = table[name]
        row = {"section": "recipes", "name": name, "batch": n, "mode": mode}
        needed = COMPILE_RESERVE_S if mode == "compile" else 0.0
        if run.left_s() <= needed:
            yield {**row, "note": f"skipped: {max(0.0, run.left_s()):.0f} s of the "
                                  f"{run.budget_s:.0f} s budget left"}
            continue
        key = n * 100_000 + src[0]
        if key not in inputs:
            inputs.clear()  # one input at a time: batch 4096 of 256x256 is 800 MB
            g = torch.Generator().manual_seed(0)
            inputs[key] = torch.randint(0, 256, (n, 3, src[0], src[1]), generator=g,
                                        dtype=torch.uint8).to(run.device)
        m = factory().to(run.device).train()
        if mode == "compile":
            torch._dynamo.reset()
            m = torch.compile(m, fullgraph=True)
        try:
            sec = time_batches(m, inputs[key], run.iters, run.warmup)
        except Exception as e:  # report and go on: one failure must not hide the rest
            yield {**row, "error": f"{type(e).__name__}: {e}"[:300]}
            continue
        moved = bytes_moved(n, 3, src, out)
        yield {**row, "seconds": sec, "images_per_s": n / sec, "bytes": moved,
               "gb_per_s": moved / sec / 1e9}


def section_targets(run: Run) -> Iterator[dict]:
    """A segmentation/detection augment on the device: ``with_targets`` (uint8 masks, 32 boxes
    and 17 keypoints per sample) against the images-only forward, same module and input, and
    whether ``with_targets`` syncs with the host (``set_sync_debug_mode("error")``)."""
    import batchaug as B

    size = 224
    for n in run.batches:
        row = {"section": "targets", "name": "seg augment", "batch": n, "mode": "eager"}
        if run.left_s() <= 0:
            yield {**row, "note": "skipped: budget spent"}
            continue
        g = torch.Generator().manual_seed(0)
        x = torch.randint(0, 256, (n, 3, 256, 256), generator=g, dtype=torch.uint8)
        masks = torch.randint(0, 21, (n, 256, 256), generator=g, dtype=torch.uint8)
        xy = torch.rand(n, 32, 2, generator=g) * 200
        boxes = torch.cat((xy, xy + 8 + torch.rand(n, 32, 2, generator=g) * 48), dim=2)
        kps = torch.rand(n, 17, 2, generator=g) * 255
        x, masks, boxes, kps = (t.to(run.device) for t in (x, masks, boxes, kps))
        m = B.Augment(B.RandomResizedCrop(size), B.RandomHorizontalFlip(),
                      B.RandomRotation(10, interpolation="bilinear"),
                      B.ColorJitter(0.2, 0.2, 0.2), B.Normalize(IMAGENET_MEAN, IMAGENET_STD))
        m = m.to(run.device).train()

        def targets_call(images: torch.Tensor) -> torch.Tensor:
            out, t = m.with_targets(images, {"masks": masks, "boxes": boxes, "keypoints": kps})
            return out

        try:
            images_s = time_batches(m, x, run.iters, run.warmup)
            targets_s = time_batches(targets_call, x, run.iters, run.warmup)
            note = ""
            if run.device.type == "cuda":
                torch.cuda.synchronize(run.device)
                torch.cuda.set_sync_debug_mode("error")
                try:
                    targets_call(x)
                    note = "with_targets: no host sync"
                except RuntimeError as e:
                    note = f"with_targets SYNCS: {e}"[:200]
                finally:
                    torch.cuda.set_sync_debug_mode(0)
        except Exception as e:  # report and go on
            yield {**row, "error": f"{type(e).__name__}: {e}"[:300]}
            continue
        yield {**row, "name": "seg augment, images only", "seconds": images_s,
               "images_per_s": n / images_s}
        yield {**row, "name": "seg augment, with_targets", "seconds": targets_s,
               "images_per_s": n / targets_s,
               "note": f"{targets_s / images_s:.2f}x the images-only time; {note}"}


#: Sections in the order they run: name -> function yielding rows. Add new GPU rows here.
SECTIONS: Dict[str, Callable[[Run], Iterator[dict]]] = {
    "bandwidth": section_bandwidth,
    "data": section_data,
    "recipes": section_recipes,
    "targets": section_targets,
    "transforms": gpu_sections.section_transforms,
    "jpeg_loader": gpu_sections.section_jpeg_loader,
    "memory": gpu_sections.section_memory,
}

MD_HEADER = ["| section | name | batch | mode | img/s | GB/s | % of copy | compile / eager | "
             "note |", "|---|---|---:|---|---:|---:|---:|---:|---|"]


class RowWriter:
    """Writes each row as it comes: a JSON line and a markdown row, flushed at once."""

    def __init__(self, run: Run, jsonl: Optional[str], md: Optional[str],
                 echo: Optional[IO[str]] = None) -> None:
        self.run = run
        self.rows: List[dict] = []
        self._eager: Dict[Tuple[str, int], float] = {}
        self._jsonl = open(jsonl, "a") if jsonl else None
        self._md = open(md, "a") if md else None
        self._echo = echo
        self._emit_md(MD_HEADER)

    def _emit_md(self, lines: List[str]) -> None:
        for f in (self._md, self._echo):
            if f is not None:
                f.write("\n".join(lines) + "\n")
                f.flush()

    def markdown_row(self, r: dict) -> str:
        ref = self.run.copy_bytes_per_s or self.run.theoretical_bytes_per_s
        note = r.get("note", "")
        if "error" in r:
            note = "error: " + r["error"][:120]
        elif "ok" in r:
            note = ("ok: " if r["ok"] else "FAILED: ") + note
        ips = f"{r['images_per_s']:,.0f}" if "images_per_s" in r else ""
        gbs = f"{r['gb_per_s']:,.1f}" if r.get("gb_per_s") is not None else ""
        pct = (f"{100 * r['gb_per_s'] * 1e9 / ref:.0f}%"
               if ref and r.get("gb_per_s") is not None and r["section"] == "recipes" else "")
        eager = self._eager.get((r["name"], r.get("batch", 0), r.get("side")))
        ratio = (f"{eager / r['seconds']:.2f}x"
                 if eager and r.get("mode") == "compile" and "seconds" in r else "")
        name = f"{r['name']} {r['side']}x{r['side']}" if "side" in r else r["name"]
        return (f"| {r['section']} | {name} | {r.get('batch', '')} | {r.get('mode', '')} | "
                f"{ips} | {gbs} | {pct} | {ratio} | {note} |")

    def add(self, row: dict) -> None:
        row = {**row, "elapsed_s": round(time.perf_counter() - self.run.start, 2)}
        self.rows.append(row)
        if row.get("mode") == "eager" and "seconds" in row:
            self._eager[(row["name"], row["batch"], row.get("side"))] = row["seconds"]
        if self._jsonl is not None:
            self._jsonl.write(json.dumps(row) + "\n")
            self._jsonl.flush()
        self._emit_md([self.markdown_row(row)])

    def close(self) -> None:
        for f in (self._jsonl, self._md):
            if f is not None:
                f.close()


def failed(row: dict) -> bool:
    return "error" in row or row.get("ok") is False


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batch-sizes", default="512,4096")
    ap.add_argument("--compile-batches", default=None,
                    help="batch sizes also run compiled (default: the first of --batch-sizes)")
    ap.add_argument("--recipes", default="all", help="comma list or 'all': " + ",".join(recipes()))
    ap.add_argument("--sections", default="all", help="comma list or 'all': " + ",".join(SECTIONS))
    ap.add_argument("--transform-batch", type=int, default=256)
    ap.add_argument("--transform-sides", default="224,32")
    ap.add_argument("--jpeg-images", type=int, default=1024)
    ap.add_argument("--jpeg-seconds", type=float, default=10.0)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--modes", default="eager,compile")
    ap.add_argument("--budget-s", type=float, default=130.0,
                    help="start no row after this many seconds (a compile needs "
                         f"{COMPILE_RESERVE_S:.0f} s left); rows past it are written as skipped")
    ap.add_argument("--dry-run", action="store_true",
                    help="batch 4, one iteration, eager only unless --modes says otherwise")
    ap.add_argument("--jsonl", default=None, help="append each row to this file as measured")
    ap.add_argument("--md", default=None, help="append each markdown row to this file as measured")
    ap.add_argument("--json", default=None, help="also write all rows to this JSON file at the end")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda but CUDA is not available (use --device cpu --dry-run to test)")
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    names = list(recipes()) if args.recipes == "all" else args.recipes.split(",")
    for n in names:
        if n not in recipes():
            ap.error(f"unknown recipe {n!r}; choose from {list(recipes())}")
    sections = list(SECTIONS) if args.sections == "all" else args.sections.split(",")
    for s in sections:
        if s not in SECTIONS:
            ap.error(f"unknown section {s!r}; choose from {list(SECTIONS)}")
    modes = args.modes.split(",")
    for m in modes:
        if m not in ("eager", "compile"):
            ap.error(f"unknown mode {m!r}; choose from eager, compile")
    batches = [int(b) for b in args.batch_sizes.split(",")]
    compile_batches = ([int(b) for b in args.compile_batches.split(",")]
                       if args.compile_batches else batches[:1])
    iters, warmup = args.iters, args.warmup
    if args.dry_run:
        batches, compile_batches, iters, warmup = [4], [4], 1, 1
        if "--modes" not in " ".join(argv if argv is not None else sys.argv):
            modes = ["eager"]
    run = Run(device, batches, modes, compile_batches, iters, warmup, names, args.budget_s,
              dry=args.dry_run, transform_batch=args.transform_batch,
              transform_sides=[int(v) for v in args.transform_sides.split(",")],
              jpeg_images=args.jpeg_images, jpeg_seconds=args.jpeg_seconds)
    import batchaug

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device: {name}, torch {torch.__version__}, batchaug from "
          f"{Path(batchaug.__file__).parent}", flush=True)
    writer = RowWriter(run, args.jsonl, args.md, echo=sys.stdout)
    try:
        for section in sections:
            try:
                for row in SECTIONS[section](run):
                    writer.add(row)
            except Exception as e:  # a broken section is a row; the next sections still run
                writer.add({"section": section, "name": "(section)",
                            "error": f"{type(e).__name__}: {e}"[:300]})
    finally:
        writer.close()
    rows = writer.rows
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": name, "torch": torch.__version__,
                       "theoretical_bytes_per_s": run.theoretical_bytes_per_s,
                       "copy_bytes_per_s": run.copy_bytes_per_s, "rows": rows}, f, indent=2)
    bad = [r for r in rows if failed(r)]
    skipped = sum(1 for r in rows if str(r.get("note", "")).startswith("skipped"))
    print(f"gpu_bench: {len(rows)} rows, {len(bad)} failed, {skipped} skipped, "
          f"{time.perf_counter() - run.start:.0f} s", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
