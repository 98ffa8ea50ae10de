"""benchmarks/bench_transforms.py: rotating order, one window for every contender, the report."""
import importlib.util
import json
import sys
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_transforms.py"


@pytest.fixture(scope="module")
def bt():
    spec = importlib.util.spec_from_file_location("bench_transforms", PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


def test_order_rotates_and_windows_are_equal(bt, monkeypatch):
    calls = []
    names = {}

    def fake_window(fn, x, window, device):
        calls.append((names[fn], window))
        return 100.0 if names[fn] == "batchaug" else 10.0

    builders = {}
    for key in ("batchaug", "plain_torch", "torchvision_per_sample"):
        def build(recipe, device, key=key):
            fn = lambda x: x  # noqa: E731
            names[fn] = key
            return fn
        builders[key] = build
    monkeypatch.setattr(bt, "CONTENDERS", builders)
    monkeypatch.setattr(bt, "time_window", fake_window)
    out = bt.bench_recipe("cifar", 4, 3, "cpu", 0.7, list(builders))
    assert [c[0] for c in calls[::3]] == ["batchaug", "plain_torch", "torchvision_per_sample"]
    assert [c[0] for c in calls[3:6]] == ["plain_torch", "torchvision_per_sample", "batchaug"]
    assert {w for _, w in calls} == {0.7}  # the per-sample loop gets the same window as the rest
    assert out["batchaug_over"]["torchvision_per_sample"] == {"median": 10.0, "min": 10.0,
                                                               "max": 10.0}


def test_tiny_real_run(bt, tmp_path, capsys):
    path = tmp_path / "r.json"
    assert bt.main(["--recipes", "cifar", "--rounds", "2", "--window", "0.01", "--batch-size",
                    "8", "--threads", "1", "--json", str(path)]) == 0
    table = capsys.readouterr().out
    assert "| cifar | cpu | 8 | 1 | torchvision_per_sample | - |" in table
    result = json.loads(path.read_text())["results"][0]
    assert set(result["median_images_per_s"]) >= {"batchaug", "plain_torch",
                                                   "torchvision_per_sample"}
    for ratio in result["batchaug_over"].values():
        assert ratio["min"] <= ratio["median"] <= ratio["max"]


def test_policy_recipes_tiny_real_run(bt, capsys):
    """The issue-10 recipes build and run for every kind of contender (DataLoader workers 0
    and 2, kornia's per-batch policy, single ops), and the report states both targets."""
    assert bt.main(["--recipes", "policy,policy_ops", "--rounds", "1", "--window", "0.01",
                    "--batch-size", "4", "--threads", "1", "--contenders",
                    "batchaug,kornia,torchvision_loader_w0,torchvision_loader_w2,op_Rotate,"
                    "op_Sharpness"]) == 0
    table = capsys.readouterr().out
    assert "| policy | cpu | 4 | 1 | kornia | no | per batch |" in table
    assert "| policy | cpu | 4 | 1 | torchvision_loader_w2 | yes | per sample |" in table
    assert "| policy_ops | cpu | 4 | 1 | op_Sharpness |" in table
    assert "batchaug / torchvision DataLoader workers 0 = " in table
    assert "TrivialAugmentWide cost / " in table and "(the most expensive op)" in table
