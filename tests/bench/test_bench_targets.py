"""benchmarks/bench_targets.py --smoke: every module case is measured (with_targets vs images
only, same keys) or listed as skipped with its reason; the rows are well formed."""
import importlib.util
import json
from pathlib import Path

import torch

PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_targets.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_targets", PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_smoke_modules_and_loader(tmp_path):
    bench = _bench()
    out = tmp_path / "t.json"
    results = bench.main(["--smoke", "--part", "all", "--json", str(out)])
    data = json.loads(out.read_text())
    measured = set(results)
    skipped = data["results"]["skipped"]
    labels = [label for label, _ in bench._modules(32)]
    assert set(labels) <= measured | set(skipped) and not measured & set(skipped)
    # the flips have with_targets since the protocol landed: always measured
    assert {"RandomHorizontalFlip", "RandomVerticalFlip"} <= measured, skipped
    assert any(label.startswith("(a) fixed") for label in measured)
    assert any(label.startswith("(b) ragged") for label in measured)
    for label, summary in results.items():
        assert set(summary) == {("images_only", 1), ("with_targets", 1)}, label
        r = summary[("images_only", 1)]["ratios"]["with_targets"]
        assert r["min"] <= r["median"] <= r["max"] and r["median"] > 0
    assert all(why for why in skipped.values())


def test_module_contenders_use_the_same_draws():
    """with_targets' images equal the images-only contender's (same keys): the two time the
    same work but the targets."""
    bench = _bench()
    cases, _ = bench.module_contenders(3, 32)
    assert cases
    for label, images, with_targets in cases:
        a = next(images.open_stream())[0]
        b = next(with_targets.open_stream())[0]
        assert torch.equal(a, b), label
