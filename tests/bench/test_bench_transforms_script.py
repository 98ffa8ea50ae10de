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


def test_every_contender_is_a_timed_call_of_the_whole_input(bt, monkeypatch):
    """bench_recipe hands batchaug.bench.timing one Call per contender that can run the recipe,
    each counting the images of its input (the DataLoader contender with 2 workers gets it
    twice) and timed over the script's own rounds, window and threads."""
    seen = {}

    def fake_compare(calls, args, name, device, quiet):
        seen.update(calls=calls, args=args, name=name)
        return {}

    monkeypatch.setattr(bt.timing, "compare", fake_compare)
    args = bt.argparse.Namespace(rounds=3, window=0.7, threads=[1])
    out = bt.bench_recipe("policy", 4, "cpu", ["batchaug", "batchaug_noaa", "torchvision_loader_w2",
                                               "op_Rotate"], args)
    calls = {c.key: c for c in seen["calls"]}
    assert set(calls) == {"batchaug", "torchvision_loader_w2"}  # noaa: rrc only; op_: policy_ops
    assert calls["batchaug"].images == 4 and calls["torchvision_loader_w2"].images == 8
    assert seen["args"] is args and seen["name"] == "policy"
    assert out["antialias"] == {"batchaug": "yes", "torchvision_loader_w2": "yes"}


def test_tiny_real_run(bt, tmp_path, capsys):
    path = tmp_path / "r.json"
    assert bt.main(["--recipes", "cifar", "--rounds", "2", "--window", "0.01", "--batch-size",
                    "8", "--threads", "1", "--json", str(path)]) == 0
    table = capsys.readouterr().out
    assert "| cifar | cpu | 8 | 1 | torchvision_per_sample | - |" in table
    summary = json.loads(path.read_text())["results"][0]["summary"]
    assert set(summary) >= {"batchaug@1", "plain_torch@1", "torchvision_per_sample@1",
                            "batchaug_unfused@1"}
    assert len(summary["batchaug@1"]["samples_images_per_s"]) == 2  # one per round
    for ratio in summary["batchaug@1"]["ratios"].values():
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
