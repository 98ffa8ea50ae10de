"""How many batchaug functions (and files) RandomResizedCrop's paths visit: issue 37's reader
measure ("a reader who wants to understand RandomResizedCrop visits N functions in M files").

The paths: ``forward`` in train and in eval, ``with_targets`` (masks, boxes, keypoints),
``with_sizes``, ``with_targets`` on a ragged batch (targets and sizes together),
``Augment(RandomRotation, RandomResizedCrop).with_sizes``, and a loader batch of a JPEG cache
cropped by ``RandomResizedCrop`` (the window decode where nvImageCodec is installed). Every
Python function under ``batchaug/`` entered on those calls counts once (``sys.setprofile``),
except the loader's own files (everything under ``batchaug/data/`` but the crop's
``crop.py`` and ``roi_crop.py``: the cache, the order, the decoder and the prefetch serve every
crop alike) and comprehensions and lambdas (not functions a reader visits). The transforms
are built before the profile starts: their constructors are not on the paths.

Usage: ``python tools/rrc_paths.py [--list]``
"""
import argparse
import io
import os
import sys
from collections import defaultdict

import torch

import batchaug as B

ROOT = os.path.dirname(os.path.abspath(B.__file__))
KEPT_DATA = {"data/crop.py", "data/roi_crop.py"}
ANONYMOUS = ("<listcomp>", "<genexpr>", "<lambda>", "<dictcomp>", "<setcomp>")


def _photos(n=12):
    """(JPEG bytes, label) of ``n`` photos of mixed sizes, as an ImageFolder of photos."""
    from PIL import Image
    g = torch.Generator().manual_seed(0)
    items = []
    for k in range(n):
        h, w = 60 + 17 * k, 110 - 5 * k
        pixels = torch.randint(0, 256, (h, w, 3), generator=g, dtype=torch.uint8).numpy()
        buf = io.BytesIO()
        Image.fromarray(pixels).save(buf, format="JPEG", quality=90)
        items.append((buf.getvalue(), k % 2))

    class Files:
        classes = ["a", "b"]

        def __len__(self):
            return len(items)

        def __getitem__(self, i):
            return Image.open(io.BytesIO(items[i][0])), items[i][1]
    return Files()


def paths():
    """Run each path once; yields its name after running it."""
    torch.manual_seed(0)
    x = torch.randint(0, 256, (4, 3, 48, 64), dtype=torch.uint8)
    sizes = torch.tensor([[48, 64], [40, 30], [17, 64], [48, 9]])
    targets = {"masks": torch.zeros(4, 48, 64, dtype=torch.int64),
               "boxes": torch.tensor([[[2.0, 3.0, 30.0, 40.0]]]).expand(4, 1, 4).clone(),
               "keypoints": torch.tensor([[[5.0, 6.0], [20.0, 30.0]]]).expand(4, 2, 2).clone(),
               "labels": torch.arange(4)}
    rrc = B.RandomResizedCrop(24)
    pair = B.Augment(B.RandomRotation(30), B.RandomResizedCrop(24))
    return [
        ("forward (train)", lambda: rrc.train()(x)),
        ("forward (eval)", lambda: rrc.eval()(x)),
        ("with_targets", lambda: rrc.train().with_targets(x, dict(targets))),
        ("with_sizes", lambda: rrc.train().with_sizes(x, sizes)),
        ("with_targets + sizes", lambda: rrc.train().with_targets(x, dict(targets, sizes=sizes))),
        ("Augment(RandomRotation, RandomResizedCrop).with_sizes",
         lambda: pair.with_sizes(x, sizes)),
        ("loader batch (JPEG cache)", _loader_batch()),
    ]


def _loader_batch():
    cache = B.DeviceCache.from_dataset(_photos(), device="cpu", storage="jpeg", progress=False)
    loader = B.DeviceLoader(cache, 4, seed=1, crop=B.RandomResizedCrop(24), prefetch=0,
                           decode_threads=1)  # every function on this thread
    return lambda: next(iter(loader))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="list the functions")
    args = parser.parse_args(argv)
    todo = paths()
    for _, run in todo:  # warm up: imports, lazy initialisation, first-call caches
        run()
    seen = set()
    per_path = {}

    def profile(frame, event, arg):
        if event != "call":
            return
        path = frame.f_code.co_filename
        if not path.startswith(ROOT):
            return
        rel = os.path.relpath(path, ROOT).replace(os.sep, "/")
        if rel.startswith("data/") and rel not in KEPT_DATA:
            return
        if frame.f_code.co_name in ANONYMOUS:
            return
        current.add((rel, frame.f_code.co_firstlineno, frame.f_code.co_qualname))

    for name, run in todo:
        current = set()
        sys.setprofile(profile)
        threading_profile(profile)
        try:
            run()
        finally:
            sys.setprofile(None)
            threading_profile(None)
        per_path[name] = current
        seen |= current
    files = defaultdict(list)
    for rel, line, qual in sorted(seen):
        files[rel].append(f"{qual}:{line}")
    for name, fns in per_path.items():
        print(f"{name:58s} {len(fns):4d} functions in {len({f for f, _, _ in fns}):3d} files")
    print(f"{'all paths':58s} {len(seen):4d} functions in {len(files):3d} files")
    if args.list:
        for rel, fns in files.items():
            print(f"\n{rel} ({len(fns)})")
            for f in fns:
                print("   ", f)


def threading_profile(fn):
    import threading
    if hasattr(threading, "setprofile_all_threads"):  # the pool threads already running
        threading.setprofile_all_threads(fn)
    else:
        threading.setprofile(fn)


if __name__ == "__main__":
    main()
