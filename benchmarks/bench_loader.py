"""DeviceLoader vs torch DataLoader(TensorDataset) for one CIFAR-shaped epoch; cache load GB/s.

    python benchmarks/bench_loader.py [--images 50000] [--batch-size 256] [--rounds 5]
                                      [--load-gb 1.0] [--json results.json]

Contenders run interleaved in rounds (every contender once per round, for each thread setting)
and the table quotes medians and the median of same-round ratios, because this class of machine
has bursts where 2-thread OpenMP work runs 10-70x slower. Each figure is one full epoch:
iterating every batch (shuffled) until the last one, images and labels on the target device.
The DataLoader with workers keeps them alive across epochs (persistent_workers=True), so its
worker start-up is not counted. ``DeviceCache.load`` is timed from a warm page cache (the file
is read once before timing), i.e. it measures the copy, not the disk.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from batchaug import DeviceCache, DeviceLoader  # noqa: E402


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def epoch_time(make_iter, device: torch.device) -> float:
    sync(device)
    t0 = time.perf_counter()
    n = 0
    for x, y in make_iter():
        n += x.shape[0]
    sync(device)
    return time.perf_counter() - t0


def loader_contenders(images: torch.Tensor, labels: torch.Tensor, batch: int,
                      device: torch.device):
    cache = DeviceCache.from_tensors(images, labels, device=device)
    dl = DeviceLoader(cache, batch, shuffle=True, rank=0, world_size=1)
    ds = TensorDataset(images, labels)
    pin = device.type == "cuda"
    dl0 = DataLoader(ds, batch_size=batch, shuffle=True, num_workers=0, pin_memory=pin)
    dl2 = DataLoader(ds, batch_size=batch, shuffle=True, num_workers=2, pin_memory=pin,
                     persistent_workers=True)

    def to_device(loader):
        def it():
            for x, y in loader:
                yield x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        return it

    return {
        "DeviceLoader": lambda: iter(dl),
        "DataLoader(workers=0)": to_device(dl0),
        "DataLoader(workers=2)": to_device(dl2),
    }


def bench_loaders(args, device: torch.device) -> dict:
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (args.images, 3, 32, 32), dtype=torch.uint8, generator=g)
    labels = torch.randint(0, 10, (args.images,), generator=g)
    contenders = loader_contenders(images, labels, args.batch_size, device)
    default_threads = torch.get_num_threads()
    settings = [("1 thread", 1), (f"{default_threads} threads (default)", default_threads)]
    times = {(s, c): [] for s, _ in settings for c in contenders}
    for mk in contenders.values():  # warm-up: start persistent workers, first allocations
        epoch_time(mk, device)
    for r in range(args.rounds):
        for sname, nthreads in settings:
            torch.set_num_threads(nthreads)
            for cname, mk in contenders.items():
                times[(sname, cname)].append(epoch_time(mk, device))
        print(f"  loader round {r + 1}/{args.rounds} done", file=sys.stderr)
    torch.set_num_threads(default_threads)
    rows = []
    for sname, _ in settings:
        base = times[(sname, "DataLoader(workers=0)")]
        for cname in contenders:
            t = times[(sname, cname)]
            rows.append({
                "device": str(device), "threads": sname, "contender": cname,
                "epoch_s_median": statistics.median(t),
                "images_per_s": args.images / statistics.median(t),
                "speedup_vs_workers0_same_round_median": statistics.median(
                    b / x for b, x in zip(base, t)),
                "epoch_s_all": t,
            })
    return {"rows": rows}


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
    out = {"bytes": nbytes, "rows": n}
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
    times = {k: [] for k in cases}
    for _ in range(args.rounds):
        for k, fn in cases.items():
            sync(device)
            t0 = time.perf_counter()
            res = fn()
            sync(device)
            times[k].append(time.perf_counter() - t0)
            del res
    out["cases"] = [{"case": k, "s_median": statistics.median(t),
                     "GB_per_s": nbytes / statistics.median(t) / 1e9, "s_all": t}
                    for k, t in times.items()]
    return out


def markdown(result: dict) -> str:
    lines = [f"### One epoch, {result['images']} x 3x32x32 uint8, batch {result['batch_size']}, "
             f"median of {result['rounds']} interleaved rounds", "",
             "| device | threads | loader | epoch (s) | images/s | x DataLoader(workers=0), same round |",
             "|---|---|---|---:|---:|---:|"]
    for dev in result["loaders"]:
        for r in dev["rows"]:
            lines.append(f"| {r['device']} | {r['threads']} | {r['contender']} | "
                         f"{r['epoch_s_median']:.4f} | {r['images_per_s']:,.0f} | "
                         f"{r['speedup_vs_workers0_same_round_median']:.1f}x |")
    load = result["load"]
    lines += ["", f"### Loading a {load['bytes'] / 1e9:.2f} GB cache ({load['rows']} x 3x224x224 "
                  f"uint8) from a warm page cache", "", "| case | seconds | GB/s |", "|---|---:|---:|"]
    for c in load["cases"]:
        lines.append(f"| {c['case']} | {c['s_median']:.3f} | {c['GB_per_s']:.2f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--images", type=int, default=50_000)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--load-gb", type=float, default=1.0)
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--json", default=None, help="write the results here as JSON")
    args = p.parse_args(argv)
    devices = [torch.device("cpu")]
    if args.device in ("auto", "cuda") and torch.cuda.is_available():
        devices.append(torch.device("cuda", torch.cuda.current_device()))
    if args.device == "cuda" and len(devices) == 1:
        p.error("--device cuda: CUDA is not available")
    if args.device == "cuda":
        devices = devices[1:]
    result = {"images": args.images, "batch_size": args.batch_size, "rounds": args.rounds,
              "torch": torch.__version__, "machine": platform.machine(),
              "cpu_count": torch.get_num_threads(), "loaders": []}
    for dev in devices:
        print(f"loader epochs on {dev} ...", file=sys.stderr)
        result["loaders"].append(bench_loaders(args, dev))
    with tempfile.TemporaryDirectory(prefix="batchaug-bench-") as tmp:
        print("cache load ...", file=sys.stderr)
        result["load"] = bench_load(args, devices[-1], Path(tmp))
    text = markdown(result)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
