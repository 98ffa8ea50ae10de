"""benchmarks/bench_launches.py: the dispatch counter and the script's quick mode."""
import doctest
import importlib.util
import json
import sys
from pathlib import Path

import torch

import batchaug as B

ROOT = Path(__file__).resolve().parents[2]


def _load():
    spec = importlib.util.spec_from_file_location("bench_launches",
                                                  ROOT / "benchmarks" / "bench_launches.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_launches"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_the_counter_counts_aten_ops_and_tells_views_and_allocations_apart():
    bl = _load()
    x = torch.ones(3)
    with bl.OpCounter() as c:
        y = x.add(1).view(3, 1).expand(3, 2)
        torch.empty(4)
        y.sum()
        y.detach()  # a view that is also listed as kernel-free: counted once
    assert c.counts == {"aten.add.Tensor": 1, "aten.view.default": 1, "aten.expand.default": 1,
                        "aten.empty.memory_format": 1, "aten.sum.default": 1,
                        "aten.detach.default": 1}
    assert (c.total, c.views, c.kernels) == (6, 3, 2)
    assert c.top(1) == "add.Tensor 1"
    finder, runner = doctest.DocTestFinder(), doctest.DocTestRunner()
    for test in finder.find(bl.OpCounter, "OpCounter", globs={"torch": torch,
                                                              "OpCounter": bl.OpCounter}):
        runner.run(test)
    assert runner.failures == 0 and runner.tries > 0


def test_fake_cuda_counts_do_not_grow_with_the_batch():
    # a launch count per batch, not per sample: on the CUDA dispatch no transform loops over
    # the batch (the CPU eager fast paths may)
    bl = _load()
    make = lambda: B.Augment(B.RandomCrop(32, padding=4), B.RandomHorizontalFlip())  # noqa: E731
    small = bl.count(make, (3, 32, 32), False, 2, "fake-cuda")
    large = bl.count(make, (3, 32, 32), False, 16, "fake-cuda")
    assert small.counts == large.counts and small.kernels > 0
    keyed = bl.count(make, (3, 32, 32), True, 2, "fake-cuda")
    assert keyed.kernels > small.kernels  # keyed draws hash on the device: more ops


def test_quick_mode_writes_a_row_per_recipe_and_device(tmp_path):
    bl = _load()
    out, md = tmp_path / "l.json", tmp_path / "l.md"
    assert bl.main(["--quick", "--devices", "cpu", "--json", str(out), "--md", str(md)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["recipe"] for r in rows] == list(bl.recipes(32))
    assert all(r["ops"] >= r["kernels"] > 0 and r["batch"] == 4 for r in rows), rows
    assert md.read_text().count("\n") == len(rows) + 2
