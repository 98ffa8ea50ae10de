"""A/B two source trees of batchaug through ``DeviceLoader``: is the new tree slower?

Each tree runs in its own persistent worker process (``PYTHONPATH=TREE``, cwd outside both
trees; the worker checks that ``batchaug.__file__`` lies under TREE). A worker builds each
recipe's pipeline once with its own tree's code (cache, crop and augment, untimed) and then
answers "run recipe R at T threads for W seconds" with images/s, once its own threads are idle
again. The parent alternates the two workers in rounds of equal wall-clock windows (which tree
goes first flips from recipe to recipe and from round to round; each window is cut into
slices taken old new new old ..., 8 batches or more per slice, so that a burst of load falls on
both), so a noisy machine hits both trees alike, and prints per recipe and thread count each
tree's median img/s and the same-round ratios new/old: median [min-max]. The rounds are shared
among ``--restarts`` fresh pairs of workers: one process's memory placement can shift a rate
by 10 % for its whole life (seen comparing a tree with itself), and that is not its tree's.

On a machine with more busy threads than cores, torch's OpenMP threads spin-wait on each other
and a 2-thread rate can fall 40-fold at random (both trees alike, but the ratios are then
noise): pass ``--worker-env OMP_WAIT_POLICY=PASSIVE`` there.

The recipes (batchaug's own pipeline of each, through ``DeviceLoader``):

* ``cifar``, ``rotation``, ``imagenet``: ``make bench``'s (``batchaug bench --recipe all``):
  the tree's ``batchaug.bench.contenders.BatchaugLoader`` (``DeviceCache.from_tensors`` +
  ``DeviceLoader`` + the recipe's ``Augment``), batch 256, on the seeded synthetic images of
  ``batchaug.bench.DataSource(None).take`` (checked identical in both trees);
* ``photos``, ``photos_rotation``: ``batchaug bench --recipe photos``'s: a JPEG cache
  (``DeviceCache.from_dataset(ImageFolder(root), storage="jpeg")``, built by each tree) read by
  the tree's ``batchaug.bench.photos.BatchaugJpeg`` (``DeviceLoader(crop=Augment([RandomRotation
  (30),] RandomResizedCrop(224), RandomHorizontalFlip()), decode_threads=threads)`` + Normalize),
  batch 64, over one folder of 512 JPEG files made once by the old tree's
  ``batchaug.bench.photos.make_photo_folder`` and read by both;
* ``bench_photos_c``: ``benchmarks/bench_photos.py``'s section (c), which differs from
  ``photos`` (its own 300 files, ``crop=RandomResizedCrop(224)`` alone, no flip, no Normalize,
  ``decode_threads`` = the thread count). That script is not an importable module and issue 37
  rewrites it, so this pipeline is built here from the public API (``DeviceCache``,
  ``DeviceLoader``, ``RandomResizedCrop``), the same code for both trees.

Timing: the same loop for both trees, as ``batchaug.bench.timing.measure``: a fresh stream per
slice, its ``startup_batches`` untimed, then batches until ``--window / --slices`` seconds have
passed (on CUDA, synchronised); a tree's rate in a round is its images over its seconds summed
over the slices. Each (recipe, threads) is warmed up once per worker before round 1.

Usage::

    git worktree add /tmp/ab-old ef1cc2e
    python tools/ab_trees.py /tmp/ab-old .                 # all recipes: ~5 minutes on 2 busy cores
    python tools/ab_trees.py /tmp/ab-old /tmp/ab-new --recipes photos,bench_photos_c \\
        --rounds 4 --window 1.0 --threads 1,2 --json ab.json
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Tuple

LOADER_RECIPES = ("cifar", "rotation", "imagenet")  # make bench's (batchaug bench --recipe all)
PHOTO_RECIPES = ("photos", "photos_rotation")  # batchaug bench --recipe photos
SECTION_C = "bench_photos_c"  # benchmarks/bench_photos.py's (c)
RECIPES = LOADER_RECIPES + PHOTO_RECIPES + (SECTION_C,)
SECTION_C_IMAGES, SECTION_C_BATCH = 300, 64  # bench_photos.py's --images and --batch defaults


# --- the worker: one per tree, the tree's own batchaug ------------------------------------------


class _SectionC:
    """bench_photos.py (c)'s batchaug loader (its ``_JpegLoader``): JPEG cache +
    ``DeviceLoader(crop=RandomResizedCrop(224), decode_threads=threads)``, one loader per
    thread count, iterated afresh by each stream."""

    startup_batches = 1

    def __init__(self, root: str) -> None:
        import torchvision

        from batchaug import DeviceCache

        self.cache = DeviceCache.from_dataset(torchvision.datasets.ImageFolder(root),
                                              device="cpu", storage="jpeg", quality=90,
                                              progress=False)
        self.loaders: Dict[int, Any] = {}

    def open_stream(self):
        import torch

        from batchaug import DeviceLoader, RandomResizedCrop

        threads = torch.get_num_threads()
        if threads not in self.loaders:
            self.loaders[threads] = DeviceLoader(
                self.cache, SECTION_C_BATCH, shuffle=True, drop_last=True,
                crop=RandomResizedCrop(224), decode_threads=threads)
        loader = self.loaders[threads]

        def gen():
            while True:
                yield from loader

        return gen()


_JPEG_CACHES: Dict[str, Any] = {}


def _build(recipe: str, device: Any, photo_roots: Dict[str, str]) -> Tuple[Any, dict]:
    """The tree's pipeline for ``recipe`` and what the parent checks of its data."""
    if recipe in LOADER_RECIPES:
        from batchaug.bench import DataSource
        from batchaug.bench import contenders as C

        r = C.make_recipe(recipe, 3)
        images, labels = DataSource(None).take(r, r.default_images)
        data = {"images": list(images.shape),
                "checksum": int(images.long().sum()) * 31 + int(labels.sum())}
        return C.BatchaugLoader(r, images, labels, 256, device), data
    if recipe in PHOTO_RECIPES:
        from batchaug.bench.photos import BatchaugJpeg

        if "photos" not in _JPEG_CACHES:  # one cache for both recipes, as the bench's files
            import torchvision

            from batchaug import DeviceCache

            _JPEG_CACHES["photos"] = DeviceCache.from_dataset(
                torchvision.datasets.ImageFolder(photo_roots["photos"]), device="cpu",
                storage="jpeg", progress=False)
        cache = _JPEG_CACHES["photos"]
        data = {"images": len(cache), "cache_nbytes": int(cache.nbytes)}
        return BatchaugJpeg(cache, 64, device, rotation=recipe == "photos_rotation"), data
    if recipe == SECTION_C:
        if device.type != "cpu":
            raise ValueError(f"{SECTION_C} runs on the CPU (bench_photos.py's (c))")
        c = _SectionC(photo_roots[SECTION_C])
        return c, {"images": len(c.cache), "cache_nbytes": int(c.cache.nbytes)}
    raise ValueError(f"unknown recipe {recipe!r}")


def _measure(pipeline: Any, window: float, device: Any) -> Tuple[int, int, float]:
    """``batchaug.bench.timing.measure``'s loop: (images, batches, seconds) over one window."""
    import torch

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    done = batches = 0
    stream = pipeline.open_stream()
    try:
        with torch.no_grad():
            for _ in range(pipeline.startup_batches):
                next(stream)
            sync()
            start = time.perf_counter()
            while True:
                batch = next(stream)[0]
                done += batch.shape[0]
                batches += 1
                if time.perf_counter() - start >= window:
                    break
            sync()
            seconds = time.perf_counter() - start
    finally:
        stream.close()
    return done, batches, seconds


def _quiesce(limit: float = 3.0) -> None:
    """Return once this process uses no CPU (< 10 % over 20 ms): a loader's prefetch or decode
    threads finishing a batch after the stream closed would otherwise run inside the other
    tree's next window."""
    deadline = time.perf_counter() + limit
    while time.perf_counter() < deadline:
        cpu = time.process_time()
        time.sleep(0.02)
        if time.process_time() - cpu < 0.002:
            return


def worker(tree: str, device_name: str) -> int:
    """Answer the parent's JSON lines on stdin; replies go to the original stdout only."""
    reply_fd = os.dup(1)
    os.dup2(2, 1)  # whatever batchaug prints goes to stderr, not into the replies
    replies = os.fdopen(reply_fd, "w", buffering=1)
    import torch

    import batchaug

    found = getattr(batchaug, "__file__", None)
    where = os.path.realpath(found) if found else "a namespace package (no __init__.py)"
    if not where.startswith(os.path.realpath(tree) + os.sep):
        raise SystemExit(f"worker for {tree}: imported batchaug from {where}")
    device = torch.device(device_name)
    pipelines: Dict[str, Any] = {}
    for line in sys.stdin:
        request = json.loads(line)
        try:
            if request["cmd"] == "hello":
                answer = {"file": where, "version": getattr(batchaug, "__version__", "?")}
            elif request["cmd"] == "build":
                start = time.perf_counter()
                pipelines[request["recipe"]], data = _build(request["recipe"], device,
                                                            request["photo_roots"])
                answer = {"data": data, "seconds": time.perf_counter() - start}
            elif request["cmd"] == "run":
                torch.set_num_threads(request["threads"])
                images, batches, seconds = _measure(pipelines[request["recipe"]],
                                                    request["window"], device)
                answer = {"images": images, "batches": batches, "seconds": seconds}
            else:
                break
        except Exception as exc:  # the parent reports it and drops the recipe
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        _quiesce()
        replies.write(json.dumps(answer) + "\n")
    return 0


# --- the parent ---------------------------------------------------------------------------------


class Worker:
    """A persistent child process running ``worker`` with ``tree``'s batchaug."""

    def __init__(self, name: str, tree: str, python: str, device: str, cwd: str,
                 extra_env: Dict[str, str]) -> None:
        self.name, self.tree = name, os.path.realpath(tree)
        env = dict(os.environ, **extra_env, PYTHONPATH=self.tree)
        self.proc = subprocess.Popen(
            [python, os.path.abspath(__file__), "--worker", self.tree, "--device", device],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=cwd, env=env, text=True,
            bufsize=1)

    def ask(self, **request: Any) -> dict:
        self.send(**request)
        return self.receive()

    def send(self, **request: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()

    def receive(self) -> dict:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.name} worker ({self.tree}) exited "
                               f"(status {self.proc.wait()}); see its stderr above")
        return json.loads(line)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.send(cmd="quit")
                assert self.proc.stdin is not None
                self.proc.stdin.close()
            except (BrokenPipeError, OSError):  # it died on its own: its stderr says why
                pass
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _make_photos(python: str, tree: str, cwd: str, roots: Dict[str, str],
                 recipes: List[str]) -> None:
    """The JPEG folders, made once with ``tree``'s ``make_photo_folder`` (seed 0)."""
    counts = {"photos": 512, SECTION_C: SECTION_C_IMAGES}
    for key, root in roots.items():
        if key == "photos" and not set(PHOTO_RECIPES) & set(recipes):
            continue
        if key == SECTION_C and SECTION_C not in recipes:
            continue
        code = ("import sys; from batchaug.bench.photos import make_photo_folder; "
                "make_photo_folder(sys.argv[1], int(sys.argv[2]))")
        subprocess.run([python, "-c", code, root, str(counts[key])], cwd=cwd, check=True,
                       env=dict(os.environ, PYTHONPATH=os.path.realpath(tree)))


def _start(workers: List[Worker], recipes: List[str], threads: List[int],
           roots: Dict[str, str], window: float, slices: Dict[Tuple[str, int], int],
           session: int) -> List[str]:
    """Build and warm up every recipe in both workers; returns the recipes both can run.
    The first session sets ``slices`` per (recipe, threads) from the warm-up's batch time:
    8 batches or more per slice, 2 to 10 slices (an even count)."""
    for w in workers:
        _log(f"session {session + 1}, {w.name}: {w.ask(cmd='hello')}")
    ready = []
    for recipe in recipes:
        for w in workers:  # both build at once: setup is not what is compared
            w.send(cmd="build", recipe=recipe, photo_roots=roots)
        built = [w.receive() for w in workers]
        errors = [f"{w.name}: {b['error']}" for w, b in zip(workers, built) if "error" in b]
        if errors:
            _log(f"{recipe}: skipped, not built ({'; '.join(errors)})")
            continue
        if built[0]["data"] != built[1]["data"]:
            _log(f"{recipe}: WARNING the trees' data differ: old {built[0]['data']}, "
                 f"new {built[1]['data']}")
        _log(f"{recipe}: built in {built[0]['seconds']:.1f} s (old), "
             f"{built[1]['seconds']:.1f} s (new); {built[0]['data']}")
        ok = True
        for t in threads:  # warm-up: first-call costs, untimed
            per_batch = 0.0
            for w in workers:
                answer = w.ask(cmd="run", recipe=recipe, threads=t, window=min(window, 0.3))
                if "error" in answer:
                    _log(f"{recipe}: skipped, {w.name} failed: {answer['error']}")
                    ok = False
                    break
                per_batch = max(per_batch, answer["seconds"] / max(1, answer["batches"]))
            if ok and (recipe, t) not in slices:
                count = int(window / (8 * per_batch)) if per_batch > 0 else 10
                slices[(recipe, t)] = max(2, min(10, count - count % 2))
        if ok:
            ready.append(recipe)
    return ready


def _slot(order: List[Worker], recipe: str, threads: int, window: float,
          slices: int) -> List[Tuple[Worker, float]]:
    """Each worker's img/s over ``window`` seconds in ``slices`` slices, old new new old ..."""
    done = {w.name: [0, 0.0] for w in order}  # images, seconds
    for k in range(slices):
        for w in (order if k % 2 == 0 else order[::-1]):
            answer = w.ask(cmd="run", recipe=recipe, threads=threads, window=window / slices)
            if "error" in answer:
                raise RuntimeError(f"{recipe} at {threads} threads, {w.name}: "
                                   f"{answer['error']}")
            done[w.name][0] += answer["images"]
            done[w.name][1] += answer["seconds"]
    return [(w, done[w.name][0] / done[w.name][1]) for w in order]


def _summary(old: List[float], new: List[float]) -> dict:
    ratios = [n / o for o, n in zip(old, new)]
    return {"old_img_s": statistics.median(old), "new_img_s": statistics.median(new),
            "ratio": statistics.median(ratios), "ratio_min": min(ratios),
            "ratio_max": max(ratios), "old_samples": old, "new_samples": new}


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=f"recipes: {', '.join(RECIPES)}; the module docstring says what each runs. "
               "Example: git worktree add /tmp/ab-old ef1cc2e && "
               "python tools/ab_trees.py /tmp/ab-old .")
    ap.add_argument("old", nargs="?", help="the old tree (a checkout of the repository)")
    ap.add_argument("new", nargs="?", help="the new tree")
    ap.add_argument("--recipes", default=",".join(RECIPES),
                    help="comma-separated (default: all: %(default)s)")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--window", type=float, default=1.0,
                    help="seconds each tree is timed per recipe, thread count and round")
    ap.add_argument("--slices", type=int, default=None,
                    help="each tree's window is cut into this many slices taken in turn, "
                         "old new new old ... (default: 8 batches or more per slice, 2 to 10)")
    ap.add_argument("--restarts", type=int, default=3,
                    help="the rounds are shared among this many fresh pairs of worker "
                         "processes, so that one process's luck (memory placement) is not "
                         "taken for its tree's speed (default %(default)s)")
    ap.add_argument("--threads", default="1,2", help="torch thread counts (default %(default)s)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda (bench_photos_c: cpu only)")
    ap.add_argument("--python", default=sys.executable, help="the workers' interpreter")
    ap.add_argument("--json", default=None, help="also write the results here")
    ap.add_argument("--worker-env", action="append", default=[], metavar="KEY=VALUE",
                    help="set in both workers' environment (repeatable), e.g. "
                         "OMP_WAIT_POLICY=PASSIVE on a machine with more busy threads than cores")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker is not None:
        return worker(args.worker, args.device)
    if args.old is None or args.new is None:
        ap.error("OLD and NEW trees are required")
    for name in ("old", "new"):
        if not os.path.isdir(os.path.join(getattr(args, name), "batchaug")):
            ap.error(f"{name}: {getattr(args, name)} holds no batchaug/ package")
    recipes = [r for r in args.recipes.split(",") if r]
    unknown = [r for r in recipes if r not in RECIPES]
    if unknown:
        ap.error(f"--recipes: unknown {unknown}; expected some of {list(RECIPES)}")
    threads = [int(t) for t in args.threads.split(",")]
    if not all("=" in kv for kv in args.worker_env):
        ap.error(f"--worker-env: expected KEY=VALUE, got {args.worker_env}")
    extra_env = dict(kv.split("=", 1) for kv in args.worker_env)
    if min(args.rounds, args.restarts, args.slices or 1, *threads) < 1 or args.window <= 0:
        ap.error("--rounds, --restarts, --slices and --threads must be >= 1, --window > 0")

    started = time.perf_counter()
    slices: Dict[Tuple[str, int], int] = (
        {(r, t): args.slices for r in recipes for t in threads} if args.slices else {})
    scratch = tempfile.mkdtemp(prefix="ab-trees-")  # the workers' cwd: outside both trees
    roots = {"photos": os.path.join(scratch, "photos"),
             SECTION_C: os.path.join(scratch, "bench_photos_c")}
    workers: List[Worker] = []
    try:
        _make_photos(args.python, args.old, scratch, roots, recipes)
        rates: Dict[Tuple[str, int], Dict[str, List[float]]] = {}
        for session in range(args.restarts):
            rounds = range(args.rounds * session // args.restarts,
                           args.rounds * (session + 1) // args.restarts)
            if not rounds:
                continue
            workers = [Worker(name, tree, args.python, args.device, scratch, extra_env)
                       for name, tree in (("old", args.old), ("new", args.new))]
            ready = _start(workers, recipes, threads, roots, args.window, slices, session)
            for key in slices:
                rates.setdefault(key, {"old": [], "new": []})
            for rnd in rounds:
                slot = 0
                for recipe in recipes:
                    for t in threads:
                        if recipe not in ready or (recipe, t) not in slices:
                            continue
                        # who goes first flips from slot to slot and from round to round
                        order = workers if (rnd + slot) % 2 == 0 else workers[::-1]
                        slot += 1
                        line = []
                        for w, rate in _slot(order, recipe, t, args.window,
                                             slices[(recipe, t)]):
                            rates[(recipe, t)][w.name].append(rate)
                            line.append(f"{w.name} {rate:,.0f}")
                        _log(f"round {rnd + 1}/{args.rounds} {recipe} threads={t}: "
                             f"{', '.join(line)} img/s")
            for w in workers:
                w.close()
            workers = []
    finally:
        for w in workers:
            w.close()
        shutil.rmtree(scratch, ignore_errors=True)

    results = {"old": os.path.realpath(args.old), "new": os.path.realpath(args.new),
               "rounds": args.rounds, "window_s": args.window,
               "restarts": args.restarts, "device": args.device,
               "elapsed_s": time.perf_counter() - started, "recipes": {}}
    print(f"\nA/B {results['old']} (old) vs {results['new']} (new), {args.device}, "
          f"{args.rounds} rounds of {args.window:g} s windows, {args.restarts} pairs of worker "
          f"processes, {results['elapsed_s']:.0f} s")
    print("| recipe | threads | slices | old img/s | new img/s | "
          "new/old same-round median [min-max] |")
    print("|---|---|---|---|---|---|")
    for (recipe, t), by_tree in rates.items():
        if not by_tree["old"]:
            continue
        s = _summary(by_tree["old"], by_tree["new"])
        s["slices"] = slices[(recipe, t)]
        results["recipes"][f"{recipe}@{t}"] = s
        print(f"| {recipe} | {t} | {s['slices']} | {s['old_img_s']:,.0f} | "
              f"{s['new_img_s']:,.0f} | "
              f"{s['ratio']:.2f}x [{s['ratio_min']:.2f}-{s['ratio_max']:.2f}] |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
