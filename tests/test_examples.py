"""Each example runs end to end with --smoke (synthetic data, seconds) in a fresh process."""
import os
import re
import subprocess
import sys
from pathlib import Path

import torch

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run_example(name, *args, cwd):
    # One thread: this 2-core VM has bursts where 2-thread OpenMP work is 10-70x slower, and
    # the smoke runs check behaviour, not speed.
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    proc = subprocess.run([sys.executable, str(EXAMPLES / name), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{name} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def test_train_cifar10_smoke(tmp_path):
    out = run_example("train_cifar10.py", "--smoke", "--out", "model.pt", cwd=tmp_path)
    assert "SYNTHETIC" in out  # says clearly that it is not real CIFAR-10
    epochs = re.findall(r"epoch (\d)/2: .* test acc ([\d.]+)%, data-wait ([\d.]+)%", out)
    assert [e[0] for e in epochs] == ["1", "2"]
    assert all(0 <= float(acc) <= 100 and 0 <= float(wait) < 100 for _, acc, wait in epochs)
    assert "reloaded output matches" in out
    # The saved TorchScript model loads without the example's code and takes raw uint8.
    model = torch.jit.load(str(tmp_path / "model.pt"))
    logits = model(torch.randint(0, 256, (3, 3, 32, 32), dtype=torch.uint8))
    assert logits.shape == (3, 10) and torch.isfinite(logits).all()


def test_train_cifar10_missing_data_dir(tmp_path):
    proc = subprocess.run([sys.executable, str(EXAMPLES / "train_cifar10.py"), "--data",
                           str(tmp_path / "nope")], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "is not a directory" in proc.stderr


def test_finetune_imagefolder_smoke_with_local_weights(tmp_path):
    import torchvision

    # A local checkpoint, as a user would pass one (nothing is downloaded).
    torch.manual_seed(1)
    start = torchvision.models.resnet18(weights=None).state_dict()
    torch.save(start, tmp_path / "r18.pth")
    out = run_example("finetune_imagefolder.py", "--smoke", "--weights", "r18.pth",
                      "--out", "ft.pt", cwd=tmp_path)
    assert "built cache" in out and out.count("loaded DeviceCache") == 2
    assert "loaded r18.pth" in out and "missing" not in out
    assert re.search(r"epoch 2/2: .* val acc [\d.]+%, data-wait [\d.]+%", out)
    state = torch.load(tmp_path / "ft.pt", weights_only=True)
    net = torchvision.models.resnet18(weights=None, num_classes=2)
    net.load_state_dict(state)  # the plain model's weights, new 2-class head
    # Fine-tuning started from the given checkpoint and changed it.
    assert not torch.equal(state["conv1.weight"], start["conv1.weight"])


def test_export_smoke(tmp_path):
    out = run_example("export.py", "--smoke", "--out-dir", "exp", cwd=tmp_path)
    assert out.count("-> OK") == 2 and "all exports match" in out
    assert (tmp_path / "exp" / "model.pt").stat().st_size > 0
    program = torch.export.load(str(tmp_path / "exp" / "model.pt2"))
    x = torch.randint(0, 256, (4, 3, 36, 36), dtype=torch.uint8)
    scripted = torch.jit.load(str(tmp_path / "exp" / "model.pt"))
    with torch.no_grad():
        torch.testing.assert_close(program.module()(x), scripted(x), atol=1e-5, rtol=1e-4)
