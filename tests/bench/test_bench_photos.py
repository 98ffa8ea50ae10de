"""benchmarks/bench_photos.py: the photo set, the stored forms, the padded batches, the report."""
import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("skimage")  # in the test extra; the benchmark's photo source
PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_photos.py"


@pytest.fixture(scope="module")
def bp():
    spec = importlib.util.spec_from_file_location("bench_photos", PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


def test_photo_set_has_varied_sizes_and_stored_forms(bp, tmp_path):
    paths = bp.make_photo_folder(str(tmp_path), 10)
    assert len(paths) == 10 and all(Path(p).suffix == ".jpg" for p in paths)
    ragged, fixed = bp.stored_images(paths)
    shapes = {tuple(r.shape[1:]) for r in ragged}
    assert len(shapes) > 5  # different sizes and aspects
    assert all(min(r.shape[1:]) == 256 for r in ragged)
    assert all(tuple(f.shape) == (3, 256, 256) for f in fixed)
    canvas, sizes = bp.padded_batch(ragged[:4])
    for i, r in enumerate(ragged[:4]):
        assert sizes[i].tolist() == list(r.shape[1:])
        assert torch.equal(canvas[i, :, :r.shape[1], :r.shape[2]], r)


def test_report_runs_end_to_end(bp, tmp_path, capsys):
    out = tmp_path / "r.json"
    bp.main(["--images", "8", "--batch", "4", "--batches", "1", "--rounds", "1",
             "--window", "0.05", "--threads", "1", "--sections", "a,b,c,d", "--out", "32",
             "--json", str(out)])
    text = capsys.readouterr().out
    assert "(a) bytes per image" in text and "| rrc | 1 |" in text
    assert "| rotation_rrc | 1 |" in text
    report = json.loads(out.read_text())["results"]
    assert 0 < report["bytes"]["jpeg_over_raw"] < 1
    assert set(report["crop"]) == {"rrc", "rotation_rrc"}
    storage = report["storage"]["1"]  # (d) at one thread: every storage against raw
    assert set(storage) == {"jpeg (the files' own bytes)@1", "raw, own sizes@1",
                            "raw, pre_transform=Resize(37)@1"}
    assert "raw, own sizes" in storage["jpeg (the files' own bytes)@1"]["ratios"]


# --- `batchaug bench --recipe photos` (batchaug.bench.photos) ----------------------------------

def _dali_importable():
    try:
        import nvidia.dali  # noqa: F401
    except Exception:
        return False
    return True


def test_photos_recipe_runs_tiny(tmp_path, capsys):
    from batchaug.cli import main
    from batchaug.data import roi_decode

    out = tmp_path / "out"
    code = main(["bench", "--recipe", "photos", "--images", "16", "--batch-size", "8",
                 "--rounds", "1", "--window", "0.02", "--device", "cpu", "--out", str(out)])
    text = capsys.readouterr().out
    assert code == 0
    results = json.loads((out / "results.json").read_text())
    assert [r["name"] for r in results["recipes"]] == ["photos", "photos_rotation"]
    workers = f"torchvision_w{torch.get_num_threads()}"
    for recipe in results["recipes"]:
        rotation = recipe["name"] == "photos_rotation"
        assert recipe["pool_images"] == 16 and "16 JPEG files" in recipe["source"]
        assert ("RandomRotation(30) + RandomResizedCrop(224)" in recipe["description"]) == \
            rotation
        keys = {c["key"] for c in recipe["contenders"]}
        assert {"torchvision_w0", workers, "batchaug"} <= keys
        assert ("decode_ceiling" in keys) == roi_decode.available()
        dali = {"dali_full"} if rotation else {"dali_full", "dali_roi"}
        if _dali_importable():
            assert dali <= keys
        else:  # skipped, saying why and how to install it
            assert {s["contender"] for s in recipe["skipped"]} >= dali
            assert all("nvidia-dali-cuda130" in s["reason"] for s in recipe["skipped"]
                       if s["contender"] in dali)
        for c in recipe["contenders"]:
            fig = c["by_threads"]["1"]
            assert fig["images_per_s"] > 0 and all(s >= 0.02
                                                   for s in fig["seconds_per_measurement"])
    if _dali_importable():
        assert "DALI's CPU ROI-decode pipeline" in text
    else:
        assert "skipped: DALI is not importable" in text
    if roi_decode.available():
        assert "the decode-only ceiling (the same windows decoded, nothing else)" in text
    if torch.get_num_threads() > 1:
        assert f"batchaug at {torch.get_num_threads()} threads = " in text


@pytest.mark.parametrize("rotation", [False, True])
def test_photos_recipe_skips_dali_with_reason(rotation, monkeypatch):
    from batchaug.bench import photos
    from batchaug.data import roi_decode

    monkeypatch.setitem(sys.modules, "nvidia.dali", None)  # `import nvidia.dali` raises
    contenders, skipped, note, cleanup = photos.build_contenders(4, 2, torch.device("cpu"),
                                                                 log=lambda s: None,
                                                                 rotation=rotation)
    workers = sorted({0, torch.get_num_threads()})
    try:
        assert [c.key for c in contenders] == [f"torchvision_w{w}" for w in workers] + \
            ["batchaug"] + ["decode_ceiling"] * roi_decode.available()
        dali = ["dali_full"] if rotation else ["dali_full", "dali_roi"]
        assert [s["contender"] for s in skipped if s["contender"] != "decode_ceiling"] == dali
        assert all("DALI is not importable (ModuleNotFoundError" in s["reason"] and
                   "pip install nvidia-dali-cuda130" in s["reason"] for s in skipped
                   if s["contender"] in dali)
    finally:
        cleanup()


@pytest.mark.parametrize("rotation", [False, True])
def test_photos_contenders_give_normalised_crops(rotation):
    """Every contender (DALI's too, when installed) hands over (B, 3, 224, 224) float32 batches
    normalised with ImageNet's mean/std, whose crops are not all the same, and labels; the
    decode-only ceiling batches of that shape, unwritten."""
    from batchaug.bench import photos
    from batchaug.bench.contenders import IMAGENET_MEAN, IMAGENET_STD
    from batchaug.data import roi_decode

    contenders, skipped, note, cleanup = photos.build_contenders(12, 4, torch.device("cpu"),
                                                                 log=lambda s: None,
                                                                 rotation=rotation)
    mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    try:
        workers = len({0, torch.get_num_threads()})
        assert len(contenders) == workers + 1 + roi_decode.available() + \
            (1 if rotation else 2) * _dali_importable()
        for c in contenders:
            stream = c.open_stream()
            try:
                x, y = next(stream)
                x2, _ = next(stream)
            finally:
                stream.close()
            if c.key == "decode_ceiling":
                assert x.shape == (4, 3, 224, 224) and x.dtype == torch.uint8
                continue
            assert x.shape == (4, 3, 224, 224) and x.dtype == torch.float32, c.key
            assert y.shape == (4,) and set(y.tolist()) <= {0, 1}, c.key
            pixels = x * std + mean  # back in [0, 1] if normalised as ImageNet's
            assert pixels.min() >= -0.02 and pixels.max() <= 1.02, c.key
            assert pixels.std() > 0.05 and not torch.equal(x, x2), c.key
    finally:
        for c in contenders:
            c.close()
        cleanup()


def test_bench_decode_runs_and_checks_exactness(tmp_path, capsys):
    """benchmarks/bench_decode.py on a few photos: every decoder measured, each full decode
    equal to torchvision's, each ROI decode equal to full decode + crop."""
    spec = importlib.util.spec_from_file_location("bench_decode", PATH.parent / "bench_decode.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "d.json"
    assert module.main(["--images", "8", "--batch", "4", "--rounds", "1", "--window", "0.02",
                        "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["results"]["decoders"]
    assert {"torchvision full", "batchaug decode_jpegs",
            "batchaug decode_jpegs windows="} <= set(rows)
    for name, row in rows.items():
        assert row["images_per_s"] > 0, name
        if row["mode"] == "full":
            assert row["check"] == "8/8 equal torchvision", name
        if row["mode"] == "roi":
            assert row["check"] == "8/8 exact", name
    assert "| batchaug decode_jpegs windows= | roi | 1 |" in capsys.readouterr().out


@pytest.mark.parametrize("extra", [["--train"], ["--data", "."]])
def test_photos_recipe_refuses_train_and_data(extra, capsys):
    from batchaug.cli import main

    assert main(["bench", "--recipe", "photos", *extra]) != 0
    err = capsys.readouterr().err
    assert f"{extra[0]} does not apply to --recipe photos" in err and "run it without" in err
