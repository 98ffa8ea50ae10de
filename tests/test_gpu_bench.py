"""benchmarks/gpu_bench.py and gpu_check.sh: the parts that run without a GPU.

The script's numbers need CUDA (benchmarks/gpu_check.sh runs it on a lent GPU); here every
recipe is built and run once on the CPU (--dry-run), the byte count and the table are checked,
and the shell script must parse.
"""
import importlib.util
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def _load():
    spec = importlib.util.spec_from_file_location("gpu_bench", ROOT / "benchmarks" / "gpu_bench.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_dry_run_on_cpu_runs_every_recipe(tmp_path):
    gb = _load()
    out, md = tmp_path / "r.json", tmp_path / "r.md"
    assert gb.main(["--device", "cpu", "--dry-run", "--json", str(out), "--md", str(md)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert {r["recipe"] for r in rows} == set(gb.recipes())
    for r in rows:
        assert "error" not in r, r
        assert r["batch"] == 4 and r["mode"] == "eager" and r["images_per_s"] > 0
        assert r["gb_per_s"] == pytest.approx(r["bytes"] / r["seconds"] / 1e9)
    text = md.read_text()
    assert all(name in text for name in gb.recipes())


def test_bytes_moved_counts_uint8_in_and_float32_out():
    gb = _load()
    assert gb.bytes_moved(2, 3, (256, 256), (224, 224)) == 2 * 3 * (256 * 256 + 4 * 224 * 224)
    # no GPU: no bandwidth figures, and the table says so instead of dividing by nothing
    assert gb.theoretical_bandwidth(torch.device("cpu")) is None
    row = {"recipe": "cifar", "batch": 4, "mode": "eager", "seconds": 1.0, "images_per_s": 4.0,
           "bytes": 8, "gb_per_s": 8e-9}
    assert "| cifar | 4 | eager |" in gb.markdown([row], None, None)


def test_bad_arguments_are_refused():
    gb = _load()
    with pytest.raises(SystemExit):
        gb.main(["--device", "cpu", "--dry-run", "--recipes", "nope"])
    with pytest.raises(SystemExit):
        gb.main(["--device", "cpu", "--dry-run", "--modes", "jit"])


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_gpu_check_script_parses():
    subprocess.run(["bash", "-n", str(ROOT / "benchmarks" / "gpu_check.sh")], check=True)
