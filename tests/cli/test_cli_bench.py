"""`batchaug bench` on tiny sizes: exit status, printed table, results files, bad arguments.

The timing rules themselves (equal windows, untimed start-up, rotation, workers stopped) and the
contenders' equivalence are tested in test_bench_timing.py and test_bench_contenders.py."""
import json
import math
import os
import re
import subprocess
import sys

import pytest
import torch

from batchaug.bench import contenders as C
from batchaug.cli import main

ERROR_LINE = re.compile(r"^batchaug( bench)?: error: ")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
CONTENDER_KEYS = {"torchvision_w0", "torchvision_v2_per_sample", "torchvision_v2_batch", "kornia",
                  "batchaug"}
WINDOW = "0.02"  # seconds per contender per round: the figures do not matter here


def _run(capsys, *argv):
    if "--train" not in argv and "--window" not in argv:
        argv = (*argv, "--window", WINDOW)
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
        assert CONTENDER_KEYS <= {c["key"] for c in recipe["contenders"]}
        assert recipe["window_s"] == float(WINDOW)
        for t in results["thread_counts"]:
            # The headline's "strongest" really is the fastest usual per-sample contender.
            usual = [c for c in recipe["contenders"] if c["key"] in recipe["usual_per_sample"]]
            assert {c["key"] for c in usual} >= {"torchvision_w0", "torchvision_v2_per_sample"}
            fastest = max(usual, key=lambda c: c["by_threads"][str(t)]["images_per_s"])
            assert recipe["strongest_usual"][str(t)] == fastest["key"]
            for c in recipe["contenders"]:
                fig = c["by_threads"][str(t)]
                assert len(fig["samples_images_per_s"]) == rounds
                assert all(math.isfinite(r) and r > 0 for r in fig["samples_images_per_s"])
                # Every measurement lasted at least the window (the same for every contender).
                assert all(s >= float(WINDOW) for s in fig["seconds_per_measurement"])
    raw = results["measurements"]
    assert len(raw) == sum(len(r["contenders"]) for r in results["recipes"]) * rounds * len(
        results["thread_counts"])
    assert all(m["seconds"] >= float(WINDOW) and m["images"] > 0 for m in raw)


def test_bench_cifar_tiny(capsys, tmp_path):
    out = tmp_path / "out"
    code, stdout, stderr = _run(capsys, "--recipe", "cifar", "--images", "64", "--batch-size",
                                "32", "--rounds", "2", "--out", str(out), "--device", "cpu")
    assert code == 0, stderr
    for label in ("(a) torchvision per-sample, DataLoader num_workers=0",
                  "(a2) torchvision v2 per-sample on uint8 tensors",
                  "(b) torchvision.transforms.v2", "(c) kornia", "(d) batchaug"):
        assert label in stdout
    assert "one random draw per batch" in stdout
    assert "img/s" in stdout
    results, md = _check_results_dir(out)
    recipe = results["recipes"][0]
    labels = {c["key"]: c["label"] for c in recipe["contenders"]}
    for t in results["thread_counts"]:
        strongest = recipe["strongest_usual"][str(t)]
        assert ("batchaug = " in stdout and
                f"the strongest usual per-sample pipeline, {labels[strongest]}" in stdout)
    assert "round 2/2" in stderr  # progress, one line per measurement
    _check_bench_results(results, ["cifar"], rounds=2)
    assert results["recipes"][0]["image_shape"] == [3, 32, 32]
    assert results["recipes"][0]["pool_images"] == 64  # --images is the pool, exactly
    assert "| (d) batchaug DeviceLoader + Augment | yes | - |" in md


def test_bench_all_recipes_tiny(capsys, tmp_path):
    out = tmp_path / "all"
    code, stdout, stderr = _run(capsys, "--recipe", "all", "--images", "16", "--batch-size", "8",
                                "--rounds", "1", "--out", str(out))
    assert code == 0, stderr
    results, md = _check_results_dir(out)
    _check_bench_results(results, ["cifar", "rotation", "imagenet"], rounds=1)
    imagenet = results["recipes"][2]
    assert imagenet["image_shape"] == [3, 256, 256] and imagenet["output_hw"] == [224, 224]
    # Equal work is visible: which contender antialiases its resize.
    antialias = {c["key"]: c["antialias"] for c in imagenet["contenders"]}
    assert antialias["torchvision_w0"] == "yes"  # PIL always antialiases
    assert antialias["batchaug"] == antialias["torchvision_v2_per_sample"] == "yes"
    assert antialias["kornia"] == "no"  # it has no antialias option
    for name in ("## cifar", "## rotation", "## imagenet"):
        assert name in md


# (color runs the same code with another recipe kind: its contenders are checked in
# test_bench_contenders.py; one CLI run here, ~9 s like cifar's)
@pytest.mark.parametrize("recipe, shape, out_hw, words", [
    ("simclr", [3, 256, 256], [224, 224], ("RandomResizedCrop(224)", "GaussianBlur(23")),
])
def test_bench_colour_recipes_tiny(capsys, tmp_path, recipe, shape, out_hw, words):
    out = tmp_path / recipe
    code, stdout, stderr = _run(capsys, "--recipe", recipe, "--images", "16", "--batch-size",
                                "8", "--rounds", "1", "--out", str(out))
    assert code == 0, stderr
    results, md = _check_results_dir(out)
    _check_bench_results(results, [recipe], rounds=1)
    r = results["recipes"][0]
    assert r["image_shape"] == shape and r["output_hw"] == out_hw
    assert all(w in r["description"] for w in words), r["description"]
    # the two DataLoader settings of the per-sample torchvision pipeline are both there
    assert {"torchvision_w0", f"torchvision_w{C.worker_count()}"} <= {
        c["key"] for c in r["contenders"]}
    antialias = {c["key"]: c["antialias"] for c in r["contenders"]}
    assert antialias["batchaug"] == ("yes" if recipe == "simclr" else "-")
    assert f"## {recipe}" in md


def test_colour_recipes_sizes_and_channels():
    assert C.make_recipe("color", 3).description.startswith(
        "ColorJitter(0.4, 0.4, 0.4, 0.1) + RandomGrayscale(0.2) + Normalize")
    assert C.make_recipe("color224", 3).source_hw == (224, 224)
    assert C.make_recipe("color224", 3).default_window == 1.0
    assert C.make_recipe("color", 3, (40, 48)).out_hw == (40, 48)  # the data's size
    assert C.make_recipe("simclr", 3, (300, 320)).out_hw == (224, 224)
    for name in ("color", "color224", "simclr"):
        with pytest.raises(ValueError, match=f"recipe {name} needs 3-channel"):
            C.make_recipe(name, 1, (32, 32))
    # `--recipe all` stays the three loader recipes (make bench)
    assert C.ALL_RECIPES == ("cifar", "rotation", "imagenet")


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
    # --images beyond the cache: the pool is the whole cache, and the run says so.
    code, _, stderr = _run(capsys, "--data", str(tmp_path / "c"), "--images", "150",
                           "--batch-size", "50", "--rounds", "1", "--out", str(out))
    assert code == 0, stderr
    assert "the cache holds 100 images, fewer than the 150 asked for" in stderr
    assert _check_results_dir(out)[0]["recipes"][0]["pool_images"] == 100


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
    (["--window", "0"], "--window: expected a positive number, got 0"),
    (["--window", "nan"], "expected a positive number, got nan"),
    (["--train", "--window", "1"], "--window does not apply to --train"),
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
                     "--window", WINDOW, cwd=tmp_path)
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
    # (cifar: torchaug is skipped too, for want of a per-sample RandomCrop)
    assert [s["contender"] for s in recipe["skipped"]] in (["kornia"], ["kornia", "torchaug"])
    assert "kornia" not in {c["key"] for c in recipe["contenders"]}
    assert results["versions"]["kornia"] is None
    ours = {c["key"]: c for c in recipe["contenders"]}["batchaug"]["by_threads"]["1"]
    assert "kornia" not in ours["ratios"] and ours["ratios"]["torchvision_w0"]["median"] > 0
    assert " kornia" not in [line for line in stdout.splitlines() if "batchaug = " in line][0]


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


@pytest.mark.parametrize("train", [False, True])
def test_bench_writes_each_recipe_as_it_completes(capsys, tmp_path, monkeypatch, train):
    """A run stopped (Ctrl-C) in the second recipe keeps the first one's results."""
    real, calls = C.make_recipe, []

    def make_recipe(name, *args, **kwargs):
        calls.append(name)
        if calls.count("rotation") == 2:  # the first call only sizes the image pool
            raise KeyboardInterrupt
        return real(name, *args, **kwargs)

    monkeypatch.setattr(C, "make_recipe", make_recipe)
    out = tmp_path / "out"
    argv = ["--recipe", "all", "--images", "16", "--batch-size", "8", "--out", str(out)]
    argv += ["--train", "--steps", "1"] if train else ["--rounds", "1"]
    code, stdout, stderr = _run(capsys, *argv)
    assert code == 130, stderr
    stem = "train-results" if train else "results"
    results, md = _check_results_dir(out, stem)
    assert [r["name"] for r in results["recipes"]] == ["cifar"]
    assert results["complete"] is False
    assert results["recipes_planned"] == ["cifar", "rotation", "imagenet"]
    assert ("## cifar" in md and "**Partial**: 1 of 3 recipes measured so far (cifar); not "
            "yet: rotation, imagenet." in md), md
    assert f"cifar: done; results so far in {out / stem}.json" in stderr


@pytest.mark.parametrize("storage", ["raw", "jpeg"])
def test_bench_runs_photos_at_their_own_sizes_with_the_crop_in_the_loader(capsys, tmp_path,
                                                                          storage):
    """A cache of photos at their own sizes: the default recipe crops each photo as training
    does (the loader's RandomResizedCrop on its own extent), nothing squared, and says so."""
    from batchaug import DeviceCache
    from batchaug.bench import photos as bench_photos

    g = torch.Generator().manual_seed(0)
    sizes = [(40 + 9 * k, 90 - 5 * k) for k in range(12)]
    photos = [torch.randint(0, 256, (3, h, w), dtype=torch.uint8, generator=g) for h, w in sizes]
    data = [(p, k % 3) for k, p in enumerate(photos)]  # a list of (image, label): a dataset
    DeviceCache.from_dataset(data, device="cpu", storage=storage,
                             progress=False).save(tmp_path / "c")
    out = tmp_path / "out"
    code, stdout, stderr = _run(capsys, "--data", str(tmp_path / "c"), "--batch-size", "4",
                                "--rounds", "1", "--out", str(out))
    assert code == 0, stderr
    results, md = _check_results_dir(out)
    recipe = results["recipes"][0]
    assert recipe["name"] == "imagenet" and recipe["output_hw"] == [224, 224]
    assert recipe["description"] == bench_photos.OWN_SIZES_DESCRIPTION
    assert "at their own sizes" in recipe["source"] and recipe["pool_images"] == 12
    assert {c["key"] for c in recipe["contenders"]} == {"torchvision_w0", "torchvision_w2",
                                                          "batchaug"}
    assert "photos at their own sizes (height 40/" in results["data_note"]
    assert "centre-cropped" not in results["data_note"]  # nothing squared
    for text in (stdout, md):
        assert "your photos at their own sizes: RandomResizedCrop(224) + flip in the loader" \
            in text


def test_bench_own_size_crops_equal_training_crops():
    """The batchaug contender yields what DeviceLoader(crop=RandomResizedCrop + flip) gives
    training on the same cache and seed, then Normalize."""
    import batchaug as B
    from batchaug.bench import photos as bench_photos

    g = torch.Generator().manual_seed(1)
    photos = [torch.randint(0, 256, (3, 30 + 7 * k, 70 - 4 * k), dtype=torch.uint8,
                            generator=g) for k in range(8)]
    cache = B.DeviceCache.from_dataset([(p, k) for k, p in enumerate(photos)], device="cpu",
                                       progress=False)
    (contender,) = [c for c in bench_photos.own_sizes_contenders(cache, 224, 4,
                                                                  torch.device("cpu"))
                    if c.key == "batchaug"]
    torch.manual_seed(0)
    stream = contender.open_stream()
    got, labels = next(stream)
    stream.close()
    torch.manual_seed(0)
    loader = B.DeviceLoader(cache, 4, shuffle=True, drop_last=True, seed=0,
                            crop=B.Augment(B.RandomResizedCrop(224), B.RandomHorizontalFlip()))
    loader.set_epoch(0)
    want, want_labels = next(iter(loader))
    assert torch.equal(labels, want_labels)
    normalize = B.Normalize(bench_photos.IMAGENET_MEAN, bench_photos.IMAGENET_STD)
    assert got.shape == (4, 3, 224, 224)
    assert torch.equal(got, normalize(want))


def test_bench_squares_photos_only_for_a_recipe_that_needs_one_size(capsys, tmp_path):
    from batchaug import DeviceCache

    g = torch.Generator().manual_seed(0)
    data = [(torch.randint(0, 256, (3, 30 + 3 * k, 40 - 2 * k), dtype=torch.uint8,
                           generator=g), k % 2) for k in range(8)]
    DeviceCache.from_dataset(data, device="cpu", progress=False).save(tmp_path / "c")
    out = tmp_path / "out"
    code, _, stderr = _run(capsys, "--data", str(tmp_path / "c"), "--recipe", "cifar",
                           "--batch-size", "4", "--rounds", "1", "--out", str(out))
    assert code == 0, stderr
    results, md = _check_results_dir(out)
    assert "centre-cropped to 26x26" in results["data_note"]  # the shortest side, 40 - 14
    assert results["recipes"][0]["image_shape"] == [3, 26, 26]
