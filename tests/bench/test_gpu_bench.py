"""gpu/gpu_bench.py and gpu_check.sh: the parts that run without a GPU.

The script's numbers need CUDA (gpu/gpu_check.sh runs it on a lent GPU); here every
recipe and every transform is built and run once on the CPU (--dry-run), rows must reach the
files as they are measured, and gpu_check.sh --dry-run walks every one of its steps with tiny
sizes.
"""
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


def _load():
    spec = importlib.util.spec_from_file_location("gpu_bench", ROOT / "gpu" / "gpu_bench.py")
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
    subprocess.run(["bash", "-n", str(ROOT / "gpu" / "gpu_check.sh")], check=True)


DRY_STEPS = ["probe", "tests-gpu", "bench"]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_gpu_check_dry_run_walks_every_step(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path / "out"), "GPU_CHECK_PYTHON": sys.executable,
           "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path)}
    env.pop("PYTHONPATH", None)
    before = sorted(p.name for p in ROOT.iterdir())
    done = subprocess.run(["bash", str(ROOT / "gpu" / "gpu_check.sh"), "--dry-run"],
                          capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    out = tmp_path / "out"
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    steps = (out / "steps.txt").read_text().splitlines()
    assert [s.split(":")[0] for s in steps] == DRY_STEPS
    assert all(": exit 0 in " in s for s in steps), steps
    rows = [json.loads(line) for line in (out / "probe.jsonl").read_text().splitlines()]
    probe = _load_probe()
    assert {r["step"] for r in rows} == set(probe.STEPS)  # every probe step ran...
    assert not [r for r in rows if r["ok"] is False]  # ...and none failed
    names = {r["name"] for r in rows if r["step"] == "sync"}
    for storage in ("fixed raw", "fixed raw + masks", "fixed raw + boxes", "ragged raw", "jpeg"):
        for placement in ("device", "host", "disk"):
            assert f"next() {storage}, {placement}, crop" in names
    with tarfile.open(out / "logs.tar.gz") as tar:
        assert {"logs/probe.log", "logs/tests-gpu.log", "logs/bench.log"} <= set(tar.getnames())
        log = tar.extractfile("logs/tests-gpu.log").read().decode()
    # the GPU tests were selected (and, without CUDA, skipped): not the contract's cases
    selected = re.search(r"(\d+) skipped, (\d+) deselected", log)
    assert selected and int(selected.group(1)) >= 10, log[-2000:]
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["logs.tar.gz", "probe.jsonl", "steps.txt", "summary.txt", "gpu_bench.jsonl",
         "gpu_bench.md"])
    bench = [json.loads(line) for line in (out / "gpu_bench.jsonl").read_text().splitlines()]
    assert {r["section"] for r in bench} == {"transforms", "jpeg_loader", "data", "memory"}
    assert not [r for r in bench if "error" in r or r.get("ok") is False]
    summary = done.stdout[done.stdout.index("== gpu_check summary"):]
    assert len(summary.splitlines()) < 40 and "probe: " in summary and "0 failed" in summary
    assert "-- tests-gpu: " in summary and "jpeg_loader: JPEG cache, device placement" in summary
    assert "torch 2." in summary and "torchvision" in summary
    assert not list(tmp_path.glob("gpu_check.*"))  # its temporary folder is gone
    assert sorted(p.name for p in ROOT.iterdir()) == before  # nothing written in the checkout


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_gpu_check_skips_the_steps_the_budget_left_at_their_start_cannot_hold(tmp_path):
    # (--dry-run keeps to a budget only when one is given)
    env = {**os.environ, "OUT": str(tmp_path / "out"), "GPU_CHECK_PYTHON": sys.executable,
           "GPU_CHECK_BUDGET": "15", "TMPDIR": str(tmp_path)}
    done = subprocess.run(["bash", str(ROOT / "gpu" / "gpu_check.sh"), "--dry-run"],
                          capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    steps = (tmp_path / "out" / "steps.txt").read_text().splitlines()
    assert [s.split(":")[0] for s in steps] == DRY_STEPS
    skipped = re.compile(r": skipped \(-?\d+s left of the 15s budget\)")
    assert all(skipped.search(s) for s in steps), steps
    assert "probe: 0 rows" in done.stdout


def test_gpu_check_bounds_every_command_and_needs_no_network():
    text = (ROOT / "gpu" / "gpu_check.sh").read_text()
    code = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    timeouts = [line for line in code if "timeout " in line and "timeout -k" not in line]
    assert not timeouts, timeouts  # every timeout kills what ignores TERM
    assert not [line for line in code if "pip " in line or "pip_install" in line]
    # the steps' limits add up to less than the budget (start-up, kill grace), so one run
    # fits 6 minutes
    assert "GPU_CHECK_BUDGET:-360" in text
    limits = [int(m.group(1)) for m in re.finditer(r"^\s*step [a-z-]+ (\d+) (.*)$", text, re.M)
              if "--dry-run" not in m.group(2)]
    assert len(limits) == 6 and sum(limits) <= 360 - 10, limits
    # the GPU tests by marker, all of them: not `-k cuda` over the contract, no -x
    assert '-m gpu "$REPO/tests/data" "$REPO/tests/transforms"' in text
    assert " -x " not in text and "-k cuda" not in text


def _load_probe():
    spec = importlib.util.spec_from_file_location("gpu_probe", ROOT / "gpu" / "gpu_probe.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gpu_probe"] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def test_probe_tells_a_call_that_waits_for_the_device_from_one_that_does_not(monkeypatch):
    # a stand-in device: _sleep makes it busy for a while, a sync waits until it is idle
    probe_mod = _load_probe()
    busy_until = [0.0]
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: busy_until.__setitem__(
        0, time.perf_counter() + cycles / 1e3))

    def sync(ctx=None):
        time.sleep(max(0.0, busy_until[0] - time.perf_counter()))

    monkeypatch.setattr(probe_mod, "_sync", sync)
    p = probe_mod.SyncProbe(probe_mod.Ctx(torch.device("cpu"), False), sleep_ms=80)
    p.cycles = 80  # 80 ms of "device" work per probe
    ok, note = p.probe(lambda: torch.ones(3).add(1))
    assert ok is True and "WAITED" not in note
    ok, note = p.probe(lambda: sync())  # a host<->device copy, .item(): waits for the sleep
    assert ok is False and note.startswith("WAITED for the device")


def test_probe_steps_subset_and_unknown_step(tmp_path, capsys):
    probe = _load_probe()
    jsonl = tmp_path / "p.jsonl"
    assert probe.main(["--dry-run", "--steps", "versions,keyed-boxes", "--jsonl", str(jsonl)]) == 0
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert [r["step"] for r in rows][0] == "versions" and rows[-1]["step"] == "keyed-boxes"
    assert any(r["name"] == "torch >= 2.9" and r["ok"] is True for r in rows)
    with pytest.raises(SystemExit):
        probe.main(["--dry-run", "--steps", "decode"])
    assert "unknown step 'decode'" in capsys.readouterr().err


def test_probe_covers_every_public_transform():
    import batchaug

    probe = _load_probe()
    names = set(probe.transform_cases())
    assert set(batchaug.transforms.__all__) <= names, set(batchaug.transforms.__all__) - names


@pytest.mark.skipif(shutil.which("bash") is None or torch.cuda.is_available(),
                    reason="checks the message on a machine without CUDA")
def test_gpu_check_without_cuda_says_so_in_one_line(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path / "out"), "GPU_CHECK_PYTHON": sys.executable,
           "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}
    done = subprocess.run(["bash", str(ROOT / "gpu" / "gpu_check.sh")],
                          capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert done.returncode == 3
    assert done.stdout.strip().splitlines() == [
        "gpu_check: CUDA is not available (no Python here has a torch that sees a GPU): "
        "nothing to check"]


def test_every_transform_gets_eager_graph_and_compile_rows(monkeypatch):
    gb = _load()
    import gpu_sections

    run = gb.Run(torch.device("cpu"), [4], ["eager", "compile"], [4], 1, 0, ["cifar"], 1e9,
                 dry=True)
    monkeypatch.setattr(torch, "compile", lambda m, fullgraph: m)
    rows = list(gpu_sections.section_transforms(run))
    names = [n for n, _ in gpu_sections.transform_table(16)]
    assert len(names) >= 35 and "RandomResizedCrop" in names and "AugMix" in names
    eager = [r for r in rows if r["mode"] == "eager"]
    assert [r["name"] for r in eager] == names and not [r for r in eager if "error" in r]
    assert all(r["note"] == "host syncs: n/a without CUDA" and "ok" not in r for r in eager)
    graph = [r for r in rows if r["mode"] == "graph"]
    assert len(graph) == len(names) and all("need CUDA" in r["note"] for r in graph)
    compiled = [r for r in rows if r["mode"] == "compile"]  # the dry run compiles one
    assert len(compiled) == 1 and compiled[0]["images_per_s"] > 0
    run.budget_s = 0.0
    late = list(gpu_sections.section_transforms(run))
    assert all(r["note"].startswith("skipped") for r in late)


def test_the_sync_counter_counts_synchronizing_calls(monkeypatch):
    # without a GPU: the debug mode's warnings stood in for (one per synchronizing call)
    import warnings

    _load()
    import gpu_sections

    modes = []
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", modes.append)

    def two_syncs():
        for _ in range(2):
            warnings.warn("called a synchronizing CUDA operation", UserWarning)
        warnings.warn("something else", UserWarning)

    assert gpu_sections._syncs(two_syncs, torch.device("cuda")) == 2
    assert modes == ["warn", "default"]
    assert gpu_sections._syncs(two_syncs, torch.device("cpu")) is None
