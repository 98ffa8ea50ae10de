"""docs/targets.md: its examples run, and the own-transform examples do what the page says
(targets moved by a user's GeometricTransform, scripted == eager)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "targets.md"


def _blocks():
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)


def test_the_pages_examples_run_and_print_what_it_says(tmp_path):
    blocks = _blocks()
    assert len(blocks) >= 4
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    run = subprocess.run([sys.executable, "-c", "\n".join(blocks)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    promised = re.search(r"^# (torch\.Size.*)$", PAGE.read_text(), re.M).group(1)
    assert run.stdout.strip() == promised


def test_the_pages_own_geometric_transform_moves_targets_and_scripts(tmp_path):
    import importlib.util

    # a real file: TorchScript reads the classes' source back
    source = tmp_path / "own_transforms.py"
    source.write_text("\n".join(b for b in _blocks() if "class RandomRotate180" in b
                                or "class RandomInvert" in b))
    spec = importlib.util.spec_from_file_location("own_transforms", source)
    module = importlib.util.module_from_spec(spec)
    sys.modules["own_transforms"] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules["own_transforms"]
    namespace = vars(module)
    rot = namespace["RandomRotate180"](p=1.0)
    x = torch.arange(2 * 3 * 6 * 8, dtype=torch.float32).view(2, 3, 6, 8)
    masks = torch.zeros(2, 6, 8, dtype=torch.int64)
    masks[:, 0:2, 0:3] = 1
    targets = {"masks": masks, "boxes": torch.tensor([[[0.0, 0.0, 3.0, 2.0]]] * 2),
               "keypoints": torch.tensor([[[0.5, 0.5]]] * 2)}
    out, moved = rot.with_targets(x, targets)
    assert torch.equal(out, x.flip(-2, -1))
    assert torch.equal(moved["masks"], masks.flip(-2, -1))  # exact: an integer mapping
    assert torch.equal(moved["boxes"], torch.tensor([[[5.0, 4.0, 8.0, 6.0]]] * 2))
    torch.testing.assert_close(moved["keypoints"], torch.tensor([[[7.5, 5.5]]] * 2))
    scripted = torch.jit.script(rot)
    s_out, s_moved = scripted.with_targets(x, targets)
    assert torch.equal(s_out, out) and all(torch.equal(s_moved[k], moved[k]) for k in moved)
    inv = torch.jit.script(namespace["RandomInvert"](p=1.0))
    u8 = torch.randint(0, 256, (2, 3, 4, 4), dtype=torch.uint8)
    i_out, i_t = inv.with_targets(u8, {"masks": masks[:, :4, :4]})
    assert torch.equal(i_out, 255 - u8) and torch.equal(i_t["masks"], masks[:, :4, :4])
