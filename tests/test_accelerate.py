"""examples/accelerate_cifar.py under Hugging Face Accelerate (a test extra): resumed with
``accelerator.load_state`` from a mid-epoch ``save_state`` (the DeviceLoader registered for
checkpointing), the run sees exactly the uninterrupted run's batches and ends with its weights."""
import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("accelerate")

ROOT = Path(__file__).resolve().parent.parent


def _run(tmp_path, name, *args):
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import accelerate_cifar
    finally:
        sys.path.pop(0)
    accelerate_cifar.main(["--smoke", "--record", str(tmp_path / name), "--ckpt-dir",
                           str(tmp_path / "ckpt"), *args])
    return json.loads((tmp_path / f"{name}.rank0").read_text())


def test_accelerate_resume_replays_the_uninterrupted_run(tmp_path):
    full = _run(tmp_path, "full")
    stopped = _run(tmp_path, "stopped", "--max-steps", "7", "--save-every", "5")
    assert stopped["steps"] == full["steps"][:7]
    resumed = _run(tmp_path, "resumed", "--resume", str(tmp_path / "ckpt" / "step_5"))
    assert len(full["steps"]) == 24 and full["steps"][0][0] == 0 and full["steps"][-1][0] == 1
    assert resumed["steps"] == full["steps"][5:]
    assert resumed["weights"] == full["weights"]
