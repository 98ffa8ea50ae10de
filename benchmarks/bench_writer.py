"""Decode+write rate of the streaming writer vs the in-memory path `cache build` used before it.

Both read the same folder of JPEGs this script writes (ImageFolder, the same loader, order and
``--resize 256 --center-crop 224`` pre-transform as ``batchaug cache build``) and write the same
cache directory (checked: identical SHA-256s in meta.json):

  in_memory_wN   what ``cache build --workers N`` did before issue 8: decode everything into one
                 CPU tensor (``DeviceCache.from_dataset``), then ``save`` it
  writer_wN      ``batchaug.data.write_cache(..., num_workers=N)``, what ``cache build`` runs now

Each run is a fresh subprocess (so its peak RSS, VmHWM, is its own); the time is that of the
pass alone, measured inside it, not the interpreter start. Contenders run interleaved in
rounds, the order rotating per round, each at 1 torch thread and at the default thread count;
``batchaug.bench.timing.summarize`` gives per-contender medians and the same-round ratios
writer_w2 / it, median [min-max].

    flock /tmp/batchaug-bench.lock python benchmarks/bench_writer.py --images 250 --rounds 3
    flock /tmp/batchaug-bench.lock python benchmarks/bench_writer.py --threads 1   # 1 thread only
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

import numpy as np

CONTENDERS = ["in_memory_w0", "in_memory_w2", "writer_w0", "writer_w2"]

RUN = r"""
import json, sys, time, torch
threads, kind, workers = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
src, out = sys.argv[4], sys.argv[5]
if threads:
    torch.set_num_threads(threads)
from torchvision.datasets import ImageFolder
from batchaug import DeviceCache
from batchaug.data import build, write_cache
from batchaug.data.writer import stored_order
ds = ImageFolder(src, loader=build.load_image, is_valid_file=build.is_image_file)
pre = build._pre_transform(256, 224)
source = {"kind": "imagefolder", "dataset": "ImageFolder"}
t0 = time.perf_counter()
if kind == "in_memory":  # in write_cache's (shuffled) order, so that the files compare equal
    shuffled = torch.utils.data.Subset(ds, stored_order(len(ds)))
    DeviceCache.from_dataset(shuffled, pre_transform=pre, device="cpu", num_workers=workers,
                             progress=False, classes=ds.classes).save(out)
else:
    write_cache(ds, out, pre_transform=pre, num_workers=workers, progress=False, source=source)
seconds = time.perf_counter() - t0
hwm = int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) * 1024
meta = json.load(open(out + "/meta.json"))
print(json.dumps({"seconds": seconds, "vmhwm": hwm, "threads": torch.get_num_threads(),
                  "sha": [meta["files"][f]["sha256"] for f in ("images.npy", "labels.npy")],
                  "bytes": meta["files"]["images.npy"]["size"]}))
"""


def write_jpegs(root: Path, n: int) -> None:
    """``n`` photo-like JPEGs (smooth colour fields plus noise, 500x375 and 375x500), 2 classes."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for i in range(n):
        h, w = (375, 500) if i % 3 else (500, 375)
        yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
        base = np.stack([np.sin(xx / rng.uniform(20, 80) + c) * np.cos(yy / rng.uniform(20, 80))
                         for c in range(3)], -1)
        img = ((base + 1) * 110 + rng.normal(0, 12, (h, w, 3))).clip(0, 255).astype(np.uint8)
        d = root / ("cat" if i % 2 else "dog")
        d.mkdir(parents=True, exist_ok=True)
        Image.fromarray(img).save(d / f"{i:05d}.jpg", quality=90)


def run_one(kind_workers: str, threads: int, src: Path, out: Path) -> Dict:
    kind, w = kind_workers.rsplit("_w", 1)
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    proc = subprocess.run([sys.executable, "-c", RUN, str(threads), kind, w, str(src), str(out)],
                          capture_output=True, text=True, env=env, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"{kind_workers}: {proc.stderr[-2000:]}")
    shutil.rmtree(out)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    from batchaug.bench import timing

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--images", type=int, default=300)
    timing.add_arguments(ap, rounds=3)
    ap.set_defaults(window=None)  # a run is one whole pass, not a window
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="bench-writer-"))
    runs: List[Dict] = []
    measurements = []
    try:
        src = tmp / "jpegs"
        t0 = time.perf_counter()
        write_jpegs(src, args.images)
        src_bytes = sum(p.stat().st_size for p in src.rglob("*.jpg"))
        print(f"{args.images} JPEGs, {src_bytes / 1e6:.1f} MB, written in "
              f"{time.perf_counter() - t0:.1f} s; cpu_count={os.cpu_count()}", file=sys.stderr)
        for r in range(args.rounds):
            order = CONTENDERS[r % len(CONTENDERS):] + CONTENDERS[:r % len(CONTENDERS)]
            for t in args.threads:
                for c in order:
                    res = dict(run_one(c, t, src, tmp / "out"), round=r, contender=c)
                    runs.append(res)
                    measurements.append(timing.Measurement("writer", c, t, r, args.images,
                                                           res["seconds"]))
                    print(f"round {r} threads {t} {c}: {args.images / res['seconds']:.0f} img/s, "
                          f"VmHWM {res['vmhwm'] / 2**20:.0f} MiB", file=sys.stderr)
        shas = {tuple(res["sha"]) for res in runs}
        assert len(shas) == 1, f"the contenders wrote different caches: {shas}"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    summary = timing.summarize(measurements)
    print(f"\n{args.images} JPEGs (500x375) -> Resize(256) + CenterCrop(224) -> uint8 cache "
          f"({runs[0]['bytes'] / 1e6:.1f} MB); {args.rounds} rounds; all runs wrote identical "
          f"files\n")
    print("\n".join(timing.table(summary, "writer_w2")))
    print("\n| contender | torch threads | peak RSS (MiB), median (min-max) |\n|---|---|---|")
    for (c, t) in summary:
        rss = sorted(x["vmhwm"] / 2**20 for x in runs if x["contender"] == c
                     and x["threads"] == t)
        print(f"| {c} | {t} | {rss[len(rss) // 2]:.0f} ({rss[0]:.0f}-{rss[-1]:.0f}) |")
    timing.write_json(args.json, {"summary": summary, "runs": runs})
    return 0


if __name__ == "__main__":
    sys.exit(main())
