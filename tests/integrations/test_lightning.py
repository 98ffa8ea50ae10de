"""examples/lightning_cifar.py under PyTorch Lightning (a test extra): a fit resumed from its
own mid-epoch checkpoint sees exactly the uninterrupted run's batches and ends with the same
weights; strategy="ddp" with 2 CPU processes (gloo) gives each rank a disjoint share with
equal batch counts; every epoch reshuffles."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("pytorch_lightning")

import batchaug  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "lightning_cifar.py"
N, BATCH = 48, 4  # the example's --smoke data set and batch size


def _main():
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import lightning_cifar
    finally:
        sys.path.pop(0)
    return lightning_cifar.main


def _run(tmp_path, name, *args):
    _main()(["--smoke", "--record", str(tmp_path / name), "--ckpt-dir",
             str(tmp_path / "ckpt"), *args])
    return json.loads((tmp_path / f"{name}.rank0").read_text())


def _indices(steps, epoch):
    """Sample indices of an epoch's steps, from their keys (seed 0)."""
    lookup = {int(k): i for i, k in enumerate(batchaug.sample_keys(0, epoch, torch.arange(N)))}
    return [[lookup[k] for k in keys] for e, keys, _ in steps if e == epoch]


def test_resume_from_a_mid_epoch_checkpoint_replays_the_uninterrupted_fit(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    full = _run(tmp_path, "full")
    stopped = _run(tmp_path, "stopped", "--max-steps", "7", "--save-every", "5")
    assert stopped["steps"] == full["steps"][:7]  # stopped after 7 steps, checkpoint at 5
    resumed = _run(tmp_path, "resumed", "--resume", str(tmp_path / "ckpt" / "step=5.ckpt"))
    assert len(full["steps"]) == 2 * N // BATCH
    assert resumed["steps"] == full["steps"][5:]  # keys and augmented-batch checksums
    assert resumed["weights"] == full["weights"]  # bit for bit
    # every epoch: each sample once, in a new order
    e0, e1 = _indices(full["steps"], 0), _indices(full["steps"], 1)
    assert sorted(sum(e0, [])) == list(range(N)) == sorted(sum(e1, []))
    assert e0 != e1


def test_ddp_two_cpu_processes_split_each_epoch(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-W", "ignore", str(EXAMPLE), "--smoke", "--devices",
                          "2", "--strategy", "ddp", "--record", str(tmp_path / "ddp")],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"ddp.rank{r}").read_text()) for r in range(2)]
    assert [r["world"] for r in ranks] == [2, 2]
    orders = []
    for epoch in range(2):
        shares = [_indices(r["steps"], epoch) for r in ranks]
        assert len(shares[0]) == len(shares[1]) == N // (2 * BATCH)  # equal batch counts
        a, b = set(sum(shares[0], [])), set(sum(shares[1], []))
        assert not a & b and a | b == set(range(N))  # disjoint, together the whole set
        orders.append(shares[0])
    assert orders[0] != orders[1]  # reshuffled
    assert ranks[0]["weights"] == ranks[1]["weights"]  # DDP kept the replicas equal
