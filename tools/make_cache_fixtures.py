"""Write the old-cache fixtures in ``tests/fixtures/caches/`` (one directory per on-disk kind).

Run ONCE, on the commit that defined the formats (``python tools/make_cache_fixtures.py``, with
the repository root on ``PYTHONPATH``); do not regenerate the fixtures later: they are caches
written by that batchaug, and ``tests/data/test_cache_fixtures.py`` checks that every later batchaug
still loads them to the same images and targets (recomputed from
``tests/fixtures/cache_content.py``). A new on-disk kind gets a new fixture directory, written
by the commit that defines it (pass its name: ``python tools/make_cache_fixtures.py NAME``).
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))

import cache_content as cc  # noqa: E402

from batchaug.data import DeviceCache, write_cache  # noqa: E402

OUT = ROOT / "tests" / "fixtures" / "caches"
DTYPES = {"uint8": torch.uint8, "float32": torch.float32, "bfloat16": torch.bfloat16}


def write(name: str) -> None:
    spec = cc.FIXTURES[name]
    out = OUT / name
    if out.exists():
        shutil.rmtree(out)
    ds = cc.Items(spec["ragged"], spec["kind"], spec.get("channels", 3))
    dtype = DTYPES[spec.get("dtype", "uint8")]
    storage = spec.get("storage", "raw")
    # a fixed source record: the fixtures must not depend on where they were written
    source = {"fixture": name}
    if spec["writer"] == "write_cache":
        write_cache(ds, out, dtype=dtype, channels_last=spec.get("channels_last", False),
                    storage=storage, quality=cc.JPEG_QUALITY, progress=False, chunk_size=2,
                    shuffle=spec.get("shuffle", False), seed=spec.get("seed", 0),
                    source=source)
    else:
        cache = DeviceCache.from_dataset(ds, device="cpu", dtype=dtype,
                                         channels_last=spec.get("channels_last", False),
                                         storage=storage, quality=cc.JPEG_QUALITY,
                                         progress=False)
        cache.source = source
        cache.save(out)


def main(names) -> None:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    for name in names or cc.FIXTURES:
        write(name)
    (OUT / "WRITTEN_BY.txt").write_text(
        f"Written by tools/make_cache_fixtures.py at commit {commit}; do not regenerate.\n")


if __name__ == "__main__":
    main(sys.argv[1:])
