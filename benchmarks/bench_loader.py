"""DeviceLoader vs torch DataLoader for one epoch; cache load GB/s; placements on a cold disk.

    python benchmarks/bench_loader.py [--sections epochs,load,placements] [--images 50000]
        [--batch-size 256] [--rounds 5] [--load-gb 1.0] [--cache-gb 0.5] [--row 3x224x224]
        [--placement-rounds 3] [--no-cold] [--json results.json]

Sections: ``epochs`` (a CIFAR-shaped epoch from memory), ``load`` (``DeviceCache.load`` GB/s)
and ``placements`` (issue 8: a class-sorted on-disk cache of ``--cache-gb`` GB read one epoch
at a time by each placement and order, next to (a) a plain sequential read of the same file,
(b) ``torch.utils.data.DataLoader(num_workers=2, pin_memory=<CUDA>)`` reading the same memmap
rows in the same order, and (c) today's device placement; "cold" epochs start after
``posix_fadvise(DONTNEED)`` evicted the file from the page cache, "warm" ones after reading it
whole; plus the order's shuffle quality, and on CUDA the host-to-device rate and the share of
the copy hidden behind a model step).

``epochs`` and ``load`` are timed by ``batchaug.bench.timing`` (interleaved rounds of equal
windows, at 1 thread and the default thread count for ``epochs``): medians and same-round
ratios, because this class of machine has bursts where 2-thread OpenMP work runs 10-70x
slower. An epoch iterates every batch (shuffled), images and labels on the target device; the
DataLoader with workers keeps them alive across epochs (persistent_workers=True), so its
worker start-up is not counted. ``DeviceCache.load`` is timed from a warm page cache (the file
is read once before timing), i.e. it measures the copy, not the disk. ``placements`` times one
whole epoch per contender and round, each after setting its page cache state.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

# The checkout as a fallback only (appended): an installed batchaug, if any, is the one measured.
sys.path.append(str(Path(__file__).resolve().parents[1]))
from batchaug import DeviceCache, DeviceLoader  # noqa: E402
from batchaug.bench import timing  # noqa: E402
from batchaug.bench.timing import Call, Epochs  # noqa: E402


class _OnDevice:
    """A DataLoader's batches moved to ``device`` as a training loop moves them."""

    def __init__(self, loader: DataLoader, device: torch.device) -> None:
        self.loader, self.device = loader, device

    def __iter__(self):
        return ((x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True))
                for x, y in self.loader)


def bench_loaders(args, device: torch.device) -> dict:
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (args.images, 3, 32, 32), dtype=torch.uint8, generator=g)
    labels = torch.randint(0, 10, (args.images,), generator=g)
    batch, pin = args.batch_size, device.type == "cuda"
    ds = TensorDataset(images, labels)
    dl0 = DataLoader(ds, batch_size=batch, shuffle=True, num_workers=0, pin_memory=pin)
    dl2 = DataLoader(ds, batch_size=batch, shuffle=True, num_workers=2, pin_memory=pin,
                     persistent_workers=True)
    cache = DeviceCache.from_tensors(images, labels, device=device)
    return timing.compare([
        Epochs("DeviceLoader", DeviceLoader(cache, batch, shuffle=True, rank=0, world_size=1)),
        Epochs("DataLoader(workers=0)", _OnDevice(dl0, device)),
        Epochs("DataLoader(workers=2)", _OnDevice(dl2, device), startup_batches=2),
    ], args, f"epochs/{device}", device, quiet=False)


def bench_load(args, device: torch.device, tmp: Path) -> dict:
    # ImageNet-shaped rows (3x224x224 uint8 = 150,528 bytes) up to about --load-gb.
    row = 3 * 224 * 224
    n = max(1, int(args.load_gb * 1e9) // row)
    g = torch.Generator().manual_seed(1)
    images = torch.randint(0, 256, (n, 3, 224, 224), dtype=torch.uint8, generator=g)
    DeviceCache.from_tensors(images, torch.zeros(n, dtype=torch.int64), device="cpu").save(tmp / "c")
    del images
    path = tmp / "c" / "images.npy"
    nbytes = path.stat().st_size
    path.read_bytes()  # warm the page cache
    cases = {
        "DeviceCache.load(cpu)": lambda: DeviceCache.load(tmp / "c", device="cpu"),
        "DeviceCache.load(cpu, verify=True)":
            lambda: DeviceCache.load(tmp / "c", device="cpu", verify=True),
        "np.load (reference, no mmap)": lambda: np.load(path, allow_pickle=False),
    }
    if device.type == "cuda":
        cases[f"DeviceCache.load({device})"] = lambda: DeviceCache.load(tmp / "c", device=device)
        pinned = torch.empty(nbytes, dtype=torch.uint8).pin_memory()
        cases["host-to-device copy (pinned)"] = lambda: pinned.to(device, non_blocking=True)
    once = argparse.Namespace(rounds=args.rounds, window=args.window,
                              threads=[torch.get_num_threads()])
    summary = timing.compare([Call(k, fn, images=nbytes) for k, fn in cases.items()], once,
                             "load", device)  # "images" here: bytes
    return {"bytes": nbytes, "rows": n, "summary": summary}


# --- placements: device / host / disk, random / quasi_random, cold page cache (issue 8) --------
def evict(path: Path) -> None:
    """Drop ``path``'s pages from the page cache (clean pages only: the file was fsynced)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def sequential_read(path: Path) -> int:
    buf = bytearray(8 << 20)
    n = 0
    with open(path, "rb", buffering=0) as f:
        while True:
            k = f.readinto(buf)
            if not k:
                return n
            n += k


class MemmapRows(torch.utils.data.Dataset):
    """What a user writes today: one memory-mapped row of images.npy per ``__getitem__``.

    Each row is mapped, copied and unmapped: a map kept open by the persistent workers would
    pin the pages it touched in the page cache, so ``POSIX_FADV_DONTNEED`` could not make the
    next epoch cold.
    """

    def __init__(self, path: Path, labels: np.ndarray) -> None:
        mm = np.load(path, mmap_mode="r")
        self.path, self.labels = path, labels
        self.offset, self.dtype, self.row_shape = mm.offset, mm.dtype, mm.shape[1:]
        self.row_bytes = int(np.prod(self.row_shape)) * mm.dtype.itemsize
        del mm

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        row = np.memmap(self.path, dtype=self.dtype, mode="r", shape=self.row_shape,
                        offset=self.offset + i * self.row_bytes)
        return torch.from_numpy(np.array(row)), int(self.labels[i])


def write_bench_cache(path: Path, gb: float, row_shape, classes: int) -> int:
    """A class-sorted cache of about ``gb`` GB, written from a stride-0 view of one random row
    (no dataset-sized tensor; the bytes on disk, not their values, are what is timed)."""
    c, h, w = row_shape
    n = max(classes, int(gb * 1e9) // (c * h * w))
    row = torch.randint(0, 256, (1, c, h, w), dtype=torch.uint8,
                        generator=torch.Generator().manual_seed(0))
    labels = torch.arange(n) * classes // n  # class-sorted, as an ImageFolder build writes it
    DeviceCache(row.expand(n, -1, -1, -1), labels).save(path)
    return n


def order_quality(idx: torch.Tensor, labels: torch.Tensor, batch: int, row_bytes: int) -> dict:
    """Mean |consecutive index gap| / (n/3, a random permutation's expectation), mean distinct
    classes per batch, and mean distinct 1 MiB blocks of the file per batch (what decides how
    many separate reads a batch costs)."""
    n = len(labels)
    gap = (idx[1:] - idx[:-1]).abs().double().mean().item() / (n / 3) if len(idx) > 1 else 0.0
    rows_per_mib = max(1, (1 << 20) // row_bytes)
    batches = idx.split(batch)
    return {"gap_vs_random": gap,
            "classes_per_batch": statistics.mean(labels[b].unique().numel() for b in batches),
            "mib_blocks_per_batch": statistics.mean(
                (b // rows_per_mib).unique().numel() for b in batches)}


def imagenet_order_quality(batch: int) -> dict:
    """The same metrics for ImageNet's geometry (1,281,167 rows of 3x256x256, 1000 sorted
    classes), computed from the order functions alone (nothing read)."""
    from batchaug.data.order import epoch_order, quasi_random_geometry

    n, classes = 1_281_167, 1000
    labels = torch.arange(n) * classes // n
    geo = quasi_random_geometry(3 * 256 * 256, batch)
    out = {"geometry": {"block_rows": geo[0], "window_blocks": geo[1]}}
    for order in ("random", "quasi_random"):
        out[order] = order_quality(epoch_order(n, 0, 0, True, order, *geo)[:batch * 200],
                                   labels, batch, 3 * 256 * 256)
    return out


def bench_placements(args, device: torch.device, tmp: Path) -> dict:
    path = tmp / "big"
    row_shape = tuple(int(v) for v in args.row.split("x"))
    n = write_bench_cache(path, args.cache_gb, row_shape, args.classes)
    images_npy = path / "images.npy"
    nbytes = n * int(np.prod(row_shape))
    labels = torch.arange(n) * args.classes // n
    batch = args.placement_batch
    out = {"rows": n, "row_shape": list(row_shape), "bytes": nbytes, "batch": batch,
           "classes": args.classes, "cold": args.cold, "loads": {}, "rows_table": []}

    def timed(fn):
        timing.synchronize(device)
        t0 = time.perf_counter()
        fn()
        timing.synchronize(device)
        return time.perf_counter() - t0

    caches = {}
    for placement in ("device", "host", "disk"):
        evict(images_npy)
        t = timed(lambda: caches.__setitem__(placement, DeviceCache.load(
            path, device=device, placement=placement)))
        out["loads"][placement] = {"s": t, "cold": True}
    loaders = {}
    for placement, cache in caches.items():
        for order in ("random", "quasi_random"):
            loaders[(placement, order)] = DeviceLoader(cache, batch, seed=0, order=order,
                                                       rank=0, world_size=1,
                                                       prefetch=args.prefetch)
    out["order_quality"] = {
        order: order_quality(loaders[("device", order)].indices(0), labels, batch,
                             int(np.prod(row_shape)))
        for order in ("random", "quasi_random")}
    out["order_quality_imagenet"] = imagenet_order_quality(batch)
    random_batches = [b.tolist() for b in loaders[("device", "random")].indices(0).split(batch)]
    pin = device.type == "cuda"
    dl = DataLoader(MemmapRows(images_npy, labels.numpy()), batch_sampler=random_batches,
                    num_workers=2, pin_memory=pin, persistent_workers=True)

    def epoch(loader, epoch_no):
        def run():
            if isinstance(loader, DeviceLoader):
                loader.set_epoch(epoch_no)  # the same order every round: same reads
                it = iter(loader)
            else:
                it = ((x.to(device, non_blocking=True), y.to(device, non_blocking=True))
                      for x, y in loader)
            for x, y in it:
                pass
        return run

    default_threads = torch.get_num_threads()
    # (name, torch threads, page cache before the epoch: cold / warm / "-" (images in RAM), fn)
    disk_state = "cold" if args.cold else "warm"
    contenders = [("(a) sequential read of images.npy", None, "cold",
                   lambda: sequential_read(images_npy))]
    for threads in args.threads:
        contenders.append(("(c) placement=device, random (today)", threads, "-",
                           epoch(loaders[("device", "random")], 0)))
        for order in ("random", "quasi_random"):
            contenders.append((f"placement=host, {order}", threads, "-",
                               epoch(loaders[("host", order)], 0)))
    for order in ("random", "quasi_random"):
        contenders.append((f"placement=disk, {order}", None, disk_state,
                           epoch(loaders[("disk", order)], 0)))
    if args.cold:
        contenders.append(("placement=disk, quasi_random", None, "warm",
                           epoch(loaders[("disk", "quasi_random")], 0)))
    name_b = f"(b) DataLoader(workers=2, pin_memory={pin}), memmap rows, random"
    contenders.append((name_b, None, disk_state, epoch(dl, 0)))
    if args.cold:
        contenders.append((name_b, None, "warm", epoch(dl, 0)))
    times = {i: [] for i in range(len(contenders))}
    epoch(dl, 0)()  # start the persistent workers outside the timing
    for r in range(args.placement_rounds):
        for i, (name, threads, state, fn) in enumerate(contenders):
            torch.set_num_threads(threads or default_threads)
            if state == "cold":
                evict(images_npy)
            elif state == "warm":
                sequential_read(images_npy)  # the whole file in the page cache
            times[i].append(timed(fn))
            torch.set_num_threads(default_threads)
        print(f"  placement round {r + 1}/{args.placement_rounds} done", file=sys.stderr)
    seq = statistics.median(times[0])
    for i, (name, threads, state, _) in enumerate(contenders):
        t = times[i]
        med = statistics.median(t)
        out["rows_table"].append({
            "contender": name, "threads": threads or default_threads, "page_cache": state,
            "s_median": med, "s_min": min(t), "s_max": max(t),
            "images_per_s": n / med, "GB_per_s": nbytes / med / 1e9,
            "x_sequential_read": seq / med, "s_all": t})
    if device.type == "cuda":
        out["cuda"] = bench_cuda_copies(caches["host"], loaders[("host", "random")], device,
                                        batch)
    del dl  # stops the persistent workers
    for cache in caches.values():
        if cache.mapped is not None:
            cache.mapped.close()
    return out


def bench_cuda_copies(cache, loader: DeviceLoader, device: torch.device, batch: int) -> dict:
    """Host placement's host-to-device rate vs one bare pinned copy of the same bytes, and the
    share of its copy time hidden behind a model step (StallMeter)."""
    from batchaug import StallMeter

    nbytes = cache.images.numel() * cache.images.element_size()
    pinned = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)

    def t(fn):
        torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize(device)
        return time.perf_counter() - t0

    bare = statistics.median(t(lambda: pinned.to(device, non_blocking=True)) for _ in range(3))
    alone = statistics.median(t(lambda: [None for _ in loader]) for _ in range(3))
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 64, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.Conv2d(64, 64, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                              torch.nn.Linear(64, 10)).to(device)
    meter = StallMeter(device)
    for x, _ in meter.wrap(loader):
        with meter.compute():
            net(x.float()).sum().backward()
    s = meter.summary()
    return {"bytes": nbytes, "bare_pinned_copy_GB_per_s": nbytes / bare / 1e9,
            "host_placement_loader_GB_per_s": nbytes / alone / 1e9,
            "loader_epoch_s_without_compute": alone,
            "wait_ms_total_with_compute": s.wait_ms_total,
            "compute_ms_total": s.compute_ms_total,
            "copy_time_hidden_share": max(0.0, 1 - s.wait_ms_total / 1000 / alone)}


def markdown_placements(p: dict) -> str:
    lines = [f"### Placements: {p['rows']} x {'x'.join(map(str, p['row_shape']))} uint8 "
             f"({p['bytes'] / 1e9:.2f} GB, {p['classes']} class-sorted classes), batch "
             f"{p['batch']}, one epoch each, median [min-max] of "
             f"{len(p['rows_table'][0]['s_all'])} interleaved rounds", "",
             "| contender | threads | page cache | epoch (s) | images/s | GB/s | x (a) |",
             "|---|---:|---|---:|---:|---:|---:|"]
    for r in p["rows_table"]:
        lines.append(f"| {r['contender']} | {r['threads']} | {r['page_cache']} | "
                     f"{r['s_median']:.2f} [{r['s_min']:.2f}-{r['s_max']:.2f}] | "
                     f"{r['images_per_s']:,.0f} | {r['GB_per_s']:.2f} | "
                     f"{r['x_sequential_read']:.2f} |")
    lines += ["", "Cold loads (page cache evicted first): " + ", ".join(
        f"{k} {v['s']:.2f} s" for k, v in p["loads"].items()), "",
        "| order quality | mean consecutive gap / random's | classes per batch | "
        "1 MiB blocks per batch |", "|---|---:|---:|---:|"]
    rows = [(f"{o}, this file", q) for o, q in p["order_quality"].items()]
    inet = p["order_quality_imagenet"]
    rows += [(f"{o}, ImageNet geometry ({inet['geometry']['block_rows']} rows/block, "
              f"{inet['geometry']['window_blocks']} blocks/window; first 200 batches)", inet[o])
             for o in ("random", "quasi_random")]
    for name, q in rows:
        lines.append(f"| {name} | {q['gap_vs_random']:.4f} | {q['classes_per_batch']:.1f} | "
                     f"{q['mib_blocks_per_batch']:.1f} |")
    if "cuda" in p:
        c = p["cuda"]
        lines += ["", f"CUDA: host placement {c['host_placement_loader_GB_per_s']:.2f} GB/s "
                      f"host-to-device vs bare pinned copy {c['bare_pinned_copy_GB_per_s']:.2f} "
                      f"GB/s; copy time hidden behind the model step: "
                      f"{100 * c['copy_time_hidden_share']:.0f}%"]
    return "\n".join(lines)


def markdown(result: dict) -> str:
    lines = []
    for dev, summary in result["loaders"].items():
        lines += [f"### Epochs of {result['images']} x 3x32x32 uint8, batch "
                  f"{result['batch_size']}", ""] + timing.table(summary, "DeviceLoader", dev)
    load = result.get("load")
    if load is None:
        return "\n".join(lines)
    lines += ["", f"### Loading a {load['bytes'] / 1e9:.2f} GB cache ({load['rows']} x 3x224x224 "
              f"uint8) from a warm page cache", "", "| case | GB/s |", "|---|---:|"]
    for (case, _), s in load["summary"].items():
        lines.append(f"| {case} | {s['images_per_s'] / 1e9:.2f} |")
    return "\n".join(lines)


def markdown_all(result: dict) -> str:
    parts = []
    if result["loaders"] or "load" in result:
        parts.append(markdown(result))
    if "placements" in result:
        parts.append(markdown_placements(result["placements"]))
    return "\n\n".join(parts)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--images", type=int, default=50_000)
    p.add_argument("--batch-size", type=int, default=256)
    timing.add_arguments(p, rounds=5, window=1.0)
    p.add_argument("--load-gb", type=float, default=1.0)
    p.add_argument("--sections", default="epochs,load,placements",
                   help="comma-separated: epochs, load, placements")
    p.add_argument("--cache-gb", type=float, default=0.5,
                   help="size of the placements section's on-disk cache (the issue asks >= 2)")
    p.add_argument("--row", default="3x224x224", help="CxHxW of its uint8 rows")
    p.add_argument("--classes", type=int, default=100, help="class-sorted classes in it")
    p.add_argument("--placement-batch", type=int, default=256)
    p.add_argument("--placement-rounds", type=int, default=3)
    p.add_argument("--prefetch", type=int, default=2)
    p.add_argument("--no-cold", dest="cold", action="store_false",
                   help="disk contenders from a warm page cache only (no eviction)")
    p.add_argument("--tmp", default=None, help="directory for the cache files (default: $TMPDIR)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    args = p.parse_args(argv)
    sections = set(args.sections.split(","))
    if not sections <= {"epochs", "load", "placements"}:
        p.error(f"--sections: unknown {sorted(sections - {'epochs', 'load', 'placements'})}")
    devices = [torch.device("cpu")]
    if args.device in ("auto", "cuda") and torch.cuda.is_available():
        devices.append(torch.device("cuda", torch.cuda.current_device()))
    if args.device == "cuda" and len(devices) == 1:
        p.error("--device cuda: CUDA is not available")
    if args.device == "cuda":
        devices = devices[1:]
    result = {"images": args.images, "batch_size": args.batch_size, "rounds": args.rounds,
              "torch": torch.__version__, "machine": platform.machine(),
              "cpu_count": torch.get_num_threads(), "loaders": {}}
    for dev in devices if "epochs" in sections else []:
        result["loaders"][str(dev)] = bench_loaders(args, dev)
    with tempfile.TemporaryDirectory(prefix="batchaug-bench-", dir=args.tmp) as tmp:
        if "load" in sections:
            print("cache load ...", file=sys.stderr)
            result["load"] = bench_load(args, devices[-1], Path(tmp))
        if "placements" in sections:
            print(f"placements ({args.cache_gb} GB on disk) on {devices[-1]} ...",
                  file=sys.stderr)
            result["placements"] = bench_placements(args, devices[-1], Path(tmp))
    text = markdown_all(result)
    print(text)
    timing.write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
