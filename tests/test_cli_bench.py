"""`batchaug bench` on tiny sizes: exit status, printed table, results files, bad arguments."""
import json
import math
import os
import re
import statistics
import subprocess
import sys

import pytest
import torch

from batchaug.bench import timing
from batchaug.cli import main

ERROR_LINE = re.compile(r"^batchaug( bench)?: error: ")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
CONTENDER_KEYS = {"torchvision_w0", "torchvision_v2_batch", "kornia", "batchaug"}


@pytest.fixture(autouse=True)
def quick_measurements(monkeypatch):
    # The real minimum (a quarter second per measurement) only matters for stable figures.
    monkeypatch.setattr(timing, "MIN_SECONDS", 0.0)
    monkeypatch.setattr(timing, "MAX_SECONDS", 5.0)


def _run(capsys, *argv):
    code = main(["bench", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _check_results_dir(out_dir, stem="results"):
    with open(out_dir / f"{stem}.json") as f:
        results = json.load(f)
    png = (out_dir / f"{stem}.png").read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 1000
    md = (out_dir / f"{stem}.md").read_text()
    return results, md


def _check_bench_results(results, recipes, rounds):
    assert results["mode"] == "bench"
    assert results["device"] == "cpu"
    assert results["rounds"] == rounds
    assert results["thread_counts"][0] == 1
    assert "augmentation cost does not depend" in results["data_note"]
    assert [r["name"] for r in results["recipes"]] == recipes
    for recipe in results["recipes"]:
        keys = {c["key"] for c in recipe["contenders"]}
        assert CONTENDER_KEYS <= keys
        by_key = {c["key"]: c for c in recipe["contenders"]}
        assert by_key["torchvision_v2_batch"]["per_sample"] is False
        assert by_key["batchaug"]["per_sample"] is True
        for t in results["thread_counts"]:
            base = by_key["torchvision_w0"]["by_threads"][str(t)]
            assert base["ratio_to_baseline"] == pytest.approx(1.0)
            for c in recipe["contenders"]:
                fig = c["by_threads"][str(t)]
                rates = fig["samples_images_per_s"]
                assert len(rates) == rounds
                assert all(math.isfinite(r) and r > 0 for r in rates)
                assert fig["images_per_s"] == pytest.approx(statistics.median(rates))
                # Ratios are same-round quotients of the figures above.
                expected = [r / b for r, b in zip(rates, base["samples_images_per_s"])]
                assert fig["samples_ratio"] == pytest.approx(expected)
                assert fig["ratio_to_baseline"] == pytest.approx(statistics.median(expected))
                # Every measurement processed at least the requested images.
                assert all(n >= recipe["images_per_round"]
                           for n in fig["images_per_measurement"])
    raw = results["measurements"]
    assert len(raw) == sum(len(r["contenders"]) for r in results["recipes"]) * rounds * len(
        results["thread_counts"])
    assert all(m["seconds"] > 0 and m["images"] > 0 for m in raw)


def test_bench_cifar_tiny(capsys, tmp_path):
    out = tmp_path / "out"
    code, stdout, stderr = _run(capsys, "--recipe", "cifar", "--images", "64", "--batch-size",
                                "32", "--rounds", "2", "--out", str(out), "--device", "cpu")
    assert code == 0, stderr
    for label in ("(a) torchvision per-sample, DataLoader num_workers=0",
                  "(b) torchvision.transforms.v2", "(c) kornia", "(d) batchaug"):
        assert label in stdout
    assert "one random draw per batch" in stdout
    assert "img/s" in stdout and "batchaug = " in stdout
    assert "round 2/2" in stderr  # progress, one line per measurement
    results, md = _check_results_dir(out)
    _check_bench_results(results, ["cifar"], rounds=2)
    assert results["recipes"][0]["image_shape"] == [3, 32, 32]
    assert "| (d) batchaug DeviceLoader + Augment | yes |" in md


def test_bench_all_recipes_tiny(capsys, tmp_path):
    out = tmp_path / "all"
    code, stdout, stderr = _run(capsys, "--recipe", "all", "--images", "16", "--batch-size", "8",
                                "--rounds", "1", "--out", str(out))
    assert code == 0, stderr
    results, md = _check_results_dir(out)
    _check_bench_results(results, ["cifar", "rotation", "imagenet"], rounds=1)
    imagenet = results["recipes"][2]
    assert imagenet["image_shape"] == [3, 256, 256] and imagenet["output_hw"] == [224, 224]
    for name in ("## cifar", "## rotation", "## imagenet"):
        assert name in md


def test_bench_reads_a_cache_dir(capsys, tmp_path):
    from batchaug import DeviceCache

    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (100, 3, 24, 20), dtype=torch.uint8, generator=g)
    DeviceCache.from_tensors(images, torch.arange(100) % 4, device="cpu").save(tmp_path / "c")
    out = tmp_path / "out"
    code, stdout, stderr = _run(capsys, "--data", str(tmp_path / "c"), "--images", "16",
                                "--batch-size", "8", "--rounds", "1", "--out", str(out))
    assert code == 0, stderr
    results, _ = _check_results_dir(out)
    recipe = results["recipes"][0]
    # The crop recipe follows the cache's image size.
    assert recipe["image_shape"] == [3, 24, 20] and recipe["output_hw"] == [24, 20]
    # Only the leading part the pool needs is read from a bigger cache.
    assert recipe["pool_images"] == 16
    assert f"{tmp_path / 'c'}: 100 images 3x24x20 uint8 (the first 16 read)" in results["data_note"]


def test_bench_train_tiny(capsys, tmp_path):
    out = tmp_path / "train"
    code, stdout, stderr = _run(capsys, "--train", "--steps", "2", "--images", "64",
                                "--batch-size", "16", "--out", str(out))
    assert code == 0, stderr
    assert "data-wait" in stdout and "augment inside model" in stdout
    results, md = _check_results_dir(out, stem="train-results")
    assert results["mode"] == "train"
    runs = results["recipes"][0]["runs"]
    assert CONTENDER_KEYS <= {r["key"] for r in runs}
    for r in runs:
        assert r["steps"] == 2 and len(r["step_ms"]) == 2
        assert all(w >= 0 and c > 0 for w, c in r["step_ms"])
        total = r["wait_ms_total"] + r["compute_ms_total"]
        assert r["wait_fraction"] == pytest.approx(r["wait_ms_total"] / total)
        assert 0 <= r["wait_fraction"] < 1
        assert math.isfinite(r["final_loss"]) and r["images_per_s"] > 0
    assert {r["key"]: r["augment_in_model"] for r in runs}["batchaug"] is True


@pytest.mark.parametrize("argv, fragment", [
    (["--recipe", "mnist"], "invalid choice: 'mnist'"),
    (["--batch-size", "0"], "expected a positive integer, got 0"),
    (["--rounds", "-1"], "expected a positive integer"),
    (["--data", "/nonexistent/cache-dir"], "no such cache directory: /nonexistent/cache-dir"),
    (["--steps", "3"], "--steps only applies together with --train"),
])
def test_bench_bad_arguments(capsys, tmp_path, argv, fragment):
    code, stdout, stderr = _run(capsys, *argv, "--out", str(tmp_path / "o"))
    assert code == 2
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and ERROR_LINE.match(lines[0]), stderr
    assert fragment in lines[0]
    assert not (tmp_path / "o").exists()


def test_bench_data_that_is_not_a_cache(capsys, tmp_path):
    (tmp_path / "notacache").mkdir()
    (tmp_path / "notacache" / "x.txt").write_text("hello")
    code, _, stderr = _run(capsys, "--data", str(tmp_path / "notacache"))
    assert code == 2
    assert len(stderr.strip().splitlines()) == 1 and "notacache" in stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a CPU-only machine")
def test_bench_cuda_without_cuda(capsys, tmp_path):
    code, _, stderr = _run(capsys, "--device", "cuda", "--out", str(tmp_path / "o"))
    assert code == 2
    assert len(stderr.strip().splitlines()) == 1
    assert "CUDA is not available" in stderr and "--device cpu" in stderr


def _subprocess(*argv, cwd):
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    return subprocess.run([sys.executable, "-m", "batchaug", "bench", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_bench_subprocess_exit_status(tmp_path):
    ok = _subprocess("--images", "32", "--batch-size", "16", "--rounds", "1", "--out", "res",
                     cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert "(d) batchaug" in ok.stdout
    assert (tmp_path / "res" / "results.json").is_file()
    bad = _subprocess("--recipe", "nope", cwd=tmp_path)
    assert bad.returncode == 2
    assert "Traceback" not in bad.stderr
    assert ERROR_LINE.match(bad.stderr.strip())
    assert len(bad.stderr.strip().splitlines()) == 1


def test_bench_without_kornia_skips_it_with_a_message(capsys, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "kornia", None)  # makes `import kornia` raise ImportError
    code, stdout, stderr = _run(capsys, "--images", "16", "--batch-size", "8", "--rounds", "1",
                                "--out", str(tmp_path / "o"))
    assert code == 0, stderr
    assert "skipping (c) kornia: kornia is not importable" in stderr
    assert "skipped: kornia is not importable" in stdout
    results, _ = _check_results_dir(tmp_path / "o")
    recipe = results["recipes"][0]
    assert [s["contender"] for s in recipe["skipped"]] == ["kornia"]
    assert "kornia" not in {c["key"] for c in recipe["contenders"]}
    assert results["versions"]["kornia"] is None
    ours = {c["key"]: c for c in recipe["contenders"]}["batchaug"]["by_threads"]["1"]
    assert ours["ratio_to_other"] is None and ours["ratio_to_baseline"] > 0


@pytest.mark.parametrize("train", [False, True])
def test_bench_unusable_out_is_refused_before_measuring(capsys, tmp_path, monkeypatch, train):
    from batchaug import bench

    def fail(*args, **kwargs):
        raise AssertionError("measured before checking --out")

    monkeypatch.setattr(bench, "DataSource", fail)
    (tmp_path / "results.txt").write_text("earlier results")
    stem = "train-results" if train else "results"
    (tmp_path / "dir" / f"{stem}.json").mkdir(parents=True)
    extra = ["--train"] if train else []
    for out, fragment in [(tmp_path / "results.txt", "exists and is not a directory"),
                          (tmp_path / "results.txt" / "sub", "is not a directory"),
                          (tmp_path / "dir", f"{stem}.json is a directory")]:
        code, _, stderr = _run(capsys, *extra, "--out", str(out))
        assert code == 2
        lines = stderr.strip().splitlines()
        assert len(lines) == 1 and ERROR_LINE.match(lines[0]) and fragment in lines[0], stderr
    assert (tmp_path / "results.txt").read_text() == "earlier results"
