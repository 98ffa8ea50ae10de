"""benchmarks/gpu_bench.py and gpu_check.sh: the parts that run without a GPU.

The script's numbers need CUDA (benchmarks/gpu_check.sh runs it on a lent GPU); here every
recipe is built and run once on the CPU (--dry-run), rows must reach the files as they are
measured, and gpu_check.sh --dry-run walks every one of its steps with tiny sizes.
"""
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def _load():
    spec = importlib.util.spec_from_file_location("gpu_bench", ROOT / "benchmarks" / "gpu_bench.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gpu_bench"] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def test_dry_run_on_cpu_runs_every_recipe(tmp_path):
    gb = _load()
    out, md, jsonl = tmp_path / "r.json", tmp_path / "r.md", tmp_path / "r.jsonl"
    assert gb.main(["--device", "cpu", "--dry-run", "--json", str(out), "--md", str(md),
                    "--jsonl", str(jsonl)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [json.loads(line) for line in jsonl.read_text().splitlines()] == rows
    recipe_rows = [r for r in rows if r["section"] == "recipes"]
    assert {r["name"] for r in recipe_rows} == set(gb.recipes())
    for r in recipe_rows:
        assert "error" not in r, r
        assert r["batch"] == 4 and r["mode"] == "eager" and r["images_per_s"] > 0
        assert r["gb_per_s"] == pytest.approx(r["bytes"] / r["seconds"] / 1e9)
    assert {r["section"] for r in rows} == set(gb.SECTIONS)
    host = next(r for r in rows if r["name"] == "host placement")
    assert host["ok"] is True and "cache pinned: False" in host["note"]
    text = md.read_text()
    assert all(f"| recipes | {name} | 4 | eager |" in text for name in gb.recipes())


def test_rows_reach_the_files_as_they_are_measured(tmp_path, monkeypatch):
    # A run killed after its second row (as by a timeout) keeps both rows in both files.
    gb = _load()
    jsonl, md = tmp_path / "r.jsonl", tmp_path / "r.md"
    seen = []

    def section(run):
        for i in range(3):
            if i == 2:  # the files already hold rows 0 and 1 when row 2 is being measured
                seen.append((jsonl.read_text(), md.read_text()))
                raise KeyboardInterrupt
            yield {"section": "fake", "name": f"row{i}", "note": "measured"}

    monkeypatch.setattr(gb, "SECTIONS", {"fake": section})
    with pytest.raises(KeyboardInterrupt):
        gb.main(["--device", "cpu", "--dry-run", "--jsonl", str(jsonl), "--md", str(md)])
    lines, table = seen[0]
    assert [json.loads(x)["name"] for x in lines.splitlines()] == ["row0", "row1"]
    assert "| fake | row0 |" in table and "| fake | row1 |" in table


def test_rows_past_the_budget_are_written_as_skipped(tmp_path):
    gb = _load()
    jsonl = tmp_path / "r.jsonl"
    assert gb.main(["--device", "cpu", "--dry-run", "--sections", "recipes", "--recipes",
                    "cifar,rotation", "--modes", "eager,compile", "--budget-s", "0",
                    "--jsonl", str(jsonl)]) == 0
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert [(r["name"], r["mode"]) for r in rows] == [
        ("cifar", "eager"), ("rotation", "eager"), ("cifar", "compile"), ("rotation", "compile")]
    assert all(r["note"].startswith("skipped: 0 s of the 0 s budget left") for r in rows)


def test_compiles_only_at_the_compile_batches(tmp_path, monkeypatch):
    gb = _load()
    run = gb.Run(torch.device("cpu"), [8, 16], ["eager", "compile"], [8], 1, 0, ["cifar"], 1e9)
    monkeypatch.setattr(gb, "time_batches", lambda fn, x, iters, warmup: 1.0)
    monkeypatch.setattr(torch, "compile", lambda m, fullgraph: m)
    plan = [(r["batch"], r["mode"]) for r in gb.section_recipes(run)]
    assert plan == [(8, "eager"), (16, "eager"), (8, "compile")]


def test_bytes_moved_and_the_markdown_without_a_gpu():
    gb = _load()
    assert gb.bytes_moved(2, 3, (256, 256), (224, 224)) == 2 * 3 * (256 * 256 + 4 * 224 * 224)
    # no GPU: no bandwidth figures, and the table says so instead of dividing by nothing
    assert gb.theoretical_bandwidth(torch.device("cpu")) is None
    run = gb.Run(torch.device("cpu"), [4], ["eager"], [4], 1, 0, ["cifar"], 1.0)
    writer = gb.RowWriter(run, None, None)
    row = {"section": "recipes", "name": "cifar", "batch": 4, "mode": "eager", "seconds": 1.0,
           "images_per_s": 4.0, "bytes": 8, "gb_per_s": 8e-9}
    assert writer.markdown_row(row).startswith("| recipes | cifar | 4 | eager | 4 | 0.0 |  |")
    assert "FAILED: " in writer.markdown_row({"section": "data", "name": "x", "ok": False})


def test_bad_arguments_are_refused():
    gb = _load()
    with pytest.raises(SystemExit):
        gb.main(["--device", "cpu", "--dry-run", "--recipes", "nope"])
    with pytest.raises(SystemExit):
        gb.main(["--device", "cpu", "--dry-run", "--modes", "jit"])
    with pytest.raises(SystemExit):
        gb.main(["--device", "cpu", "--dry-run", "--sections", "decode"])


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_gpu_check_script_parses():
    subprocess.run(["bash", "-n", str(ROOT / "benchmarks" / "gpu_check.sh")], check=True)


STEPS = ["tests-cuda", "gpu-bench", "bench-cuda", "bench-loader-placements", "bench-transforms",
         "bench-color", "bench-cuda-train", "bench-loader", "bench-photos", "tests-all"]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_gpu_check_dry_run_walks_every_step_from_the_installed_package(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path / "out"), "GPU_CHECK_PYTHON": sys.executable,
           "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path)}
    env.pop("PYTHONPATH", None)
    built = sorted(p.name for p in ROOT.glob("*") if p.name == "build" or "egg-info" in p.name)
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--dry-run"],
                          capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    out = tmp_path / "out"
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    steps = (out / "steps.txt").read_text().splitlines()
    assert [s.split(":")[0] for s in steps] == STEPS
    assert all(": exit 0 in " in s for s in steps), steps
    assert "installed batchaug from a copy of the sources" in (out / "summary.txt").read_text()
    env_txt = (out / "environment.txt").read_text()
    assert "(the installed copy)" in env_txt and str(ROOT) not in env_txt.splitlines()[2]
    rows = [json.loads(line) for line in (out / "gpu_bench.jsonl").read_text().splitlines()]
    assert {r["section"] for r in rows} >= {"bandwidth", "data", "recipes"}
    with tarfile.open(out / "logs.tar.gz") as tar:
        names = set(tar.getnames())
    assert {f"logs/{s}.log" for s in STEPS} <= names
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["environment.txt", "gpu_bench.jsonl", "gpu_bench.md", "logs.tar.gz", "steps.txt",
         "summary.txt"])  # a handful of files at the top, whatever the number of steps
    summary = done.stdout[done.stdout.index("== gpu_check summary"):]
    assert len(summary.splitlines()) < 40 and "| recipes | cifar | 4 | eager |" in summary
    assert not list(tmp_path.glob("gpu_check.*"))  # its temporary folder is gone
    assert sorted(p.name for p in ROOT.glob("*")
                  if p.name == "build" or "egg-info" in p.name) == built  # built elsewhere


@pytest.mark.skipif(shutil.which("bash") is None or torch.cuda.is_available(),
                    reason="checks the message on a machine without CUDA")
def test_gpu_check_without_cuda_says_so_in_one_line(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path / "out"), "GPU_CHECK_PYTHON": sys.executable,
           "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh")],
                          capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert done.returncode == 3
    assert done.stdout.strip().splitlines() == [
        "gpu_check: CUDA is not available (no Python here has a torch that sees a GPU): "
        "nothing to check"]
