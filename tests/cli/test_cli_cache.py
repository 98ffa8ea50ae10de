"""`batchaug cache build` / `cache info` on small ImageFolder and CIFAR directories the tests write."""
import io
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
import torch
from PIL import Image

from batchaug import DeviceCache
from batchaug.cli import main
from batchaug.data import atomic

RNG = np.random.default_rng(0)


def write_imagefolder(root, sizes=((12, 10), (14, 16), (12, 12))):
    """Two classes; PNG and JPEG files of the given (H, W) sizes; returns {path: class}."""
    made = {}
    for cls in ("cat", "dog"):
        (root / cls).mkdir(parents=True)
        for i, (h, w) in enumerate(sizes):
            ext = "png" if i % 2 else "jpg"
            p = root / cls / f"{cls}{i}.{ext}"
            Image.fromarray(RNG.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(p)
            made[str(p)] = cls
    (root / "cat" / "notes.txt").write_text("not an image, ignored")
    return made


def write_cifar10(root, per_batch=4):
    """The exact torchvision layout: cifar-10-batches-py/{data_batch_1..5,test_batch,batches.meta}."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    batches = {}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        entry = {"batch_label": name, "data": RNG.integers(0, 256, (per_batch, 3072), dtype=np.uint8),
                 "labels": RNG.integers(0, 10, per_batch).tolist(),
                 "filenames": [f"{name}_{i}.png" for i in range(per_batch)]}
        with open(folder / name, "wb") as f:
            pickle.dump(entry, f)
        batches[name] = entry
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({"label_names": [f"class{i}" for i in range(10)],
                     "num_cases_per_batch": per_batch, "num_vis": 3072}, f)
    return folder, batches


def write_cifar100(root, n=6):
    folder = root / "cifar-100-python"
    folder.mkdir(parents=True)
    for name in ("train", "test"):
        with open(folder / name, "wb") as f:
            pickle.dump({"data": RNG.integers(0, 256, (n, 3072), dtype=np.uint8),
                         "fine_labels": RNG.integers(0, 100, n).tolist(),
                         "coarse_labels": RNG.integers(0, 20, n).tolist()}, f)
    with open(folder / "meta", "wb") as f:
        pickle.dump({"fine_label_names": [f"f{i}" for i in range(100)],
                     "coarse_label_names": [f"c{i}" for i in range(20)]}, f)
    return folder


def test_imagefolder_build_matches_the_files(tmp_path, capsys):
    made = write_imagefolder(tmp_path / "src")
    assert main(["cache", "build", str(tmp_path / "src"), str(tmp_path / "out"),
                 "--resize", "8", "--center-crop", "8"]) == 0
    assert "wrote" in capsys.readouterr().out
    cache = DeviceCache.load(tmp_path / "out", device="cpu", verify=True)
    assert cache.images.shape == (6, 3, 8, 8) and cache.classes == ["cat", "dog"]
    assert sorted(cache.labels.tolist()) == [0, 0, 0, 1, 1, 1]
    # Same pixels as decoding + resizing each file ourselves (torchvision on PIL); the cache
    # holds them in a shuffled order (so contiguous shards mix classes), each with its label.
    from torchvision.transforms import CenterCrop, Compose, PILToTensor, Resize

    ref = Compose([Resize(8), CenterCrop(8), PILToTensor()])
    expected = sorted((ref(Image.open(p).convert("RGB")).numpy().tobytes(), cls)
                      for p, cls in made.items())
    got = sorted((cache.images[i].numpy().tobytes(), cache.classes[cache.labels[i]])
                 for i in range(len(cache)))
    assert got == expected
    assert "shuffled" in cache.source["order"]


def test_imagefolder_order_is_shuffled_so_shards_mix_classes(tmp_path):
    root = tmp_path / "src"
    for c in range(2):
        (root / f"c{c}").mkdir(parents=True)
        for i in range(20):
            Image.fromarray(np.full((4, 4, 3), i, np.uint8)).save(root / f"c{c}" / f"{i}.png")
    assert main(["cache", "build", str(root), str(tmp_path / "out")]) == 0
    first_half = DeviceCache.load(tmp_path / "out", device="cpu", shard=(0, 2))
    assert set(first_half.labels.tolist()) == {0, 1}  # class-sorted order would give {0}


def test_imagefolder_different_sizes_without_resize_keeps_each_size(tmp_path, capsys):
    write_imagefolder(tmp_path / "src")
    assert main(["cache", "build", str(tmp_path / "src"), str(tmp_path / "out")]) == 0
    cache = DeviceCache.load(tmp_path / "out", device="cpu")
    assert cache.ragged and cache.storage == "raw"
    for i, (path, label) in enumerate(cache_samples(tmp_path / "src")):
        with Image.open(path) as im:  # each image exactly as decoded, at its own size
            expect = torch.from_numpy(np.asarray(im.convert("RGB")).copy()).permute(2, 0, 1)
        assert torch.equal(cache.image(i), expect) and int(cache.labels[i]) == label


@pytest.mark.parametrize("damage", ["garbage", "truncated_jpeg"])
def test_bad_image_stops_with_its_path_or_is_skipped(tmp_path, capsys, damage):
    write_imagefolder(tmp_path / "src", sizes=((8, 8), (8, 8)))
    bad = tmp_path / "src" / "dog" / "broken.jpg"
    if damage == "garbage":
        bad.write_bytes(b"definitely not a JPEG")
    else:
        buf = io.BytesIO()
        Image.fromarray(RNG.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(buf, "JPEG")
        bad.write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
    args = ["cache", "build", str(tmp_path / "src"), str(tmp_path / "out")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "--skip-bad" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()
    assert main(args + ["--skip-bad", "--workers", "2"]) == 0
    err = capsys.readouterr().err
    assert "skipped 1 unreadable image(s) of 5" in err and str(bad) in err
    cache = DeviceCache.load(tmp_path / "out", device="cpu")
    assert len(cache) == 4 and cache.source["skipped"] == 1


def test_cifar10_build_both_splits(tmp_path, capsys):
    folder, batches = write_cifar10(tmp_path / "data")
    assert main(["cache", "build", str(tmp_path / "data"), str(tmp_path / "train")]) == 0
    # pointing at the batch folder itself works too
    assert main(["cache", "build", str(folder), str(tmp_path / "test"), "--split", "test"]) == 0
    train = DeviceCache.load(tmp_path / "train", device="cpu", verify=True)
    test = DeviceCache.load(tmp_path / "test", device="cpu", verify=True)
    rows = np.concatenate([batches[f"data_batch_{i}"]["data"] for i in range(1, 6)])
    labels = torch.tensor(sum((batches[f"data_batch_{i}"]["labels"] for i in range(1, 6)), []))
    # Stored in write_cache's default order: torch.randperm seeded with --seed (0).
    order = torch.randperm(len(rows), generator=torch.Generator().manual_seed(0))
    assert torch.equal(train.images, torch.from_numpy(rows.reshape(-1, 3, 32, 32))[order])
    assert torch.equal(train.labels, labels[order])
    assert train.classes == [f"class{i}" for i in range(10)]
    order = torch.randperm(len(test), generator=torch.Generator().manual_seed(0))
    assert torch.equal(test.images, torch.from_numpy(
        batches["test_batch"]["data"].reshape(-1, 3, 32, 32))[order])
    assert test.source["split"] == "test" and train.source["kind"] == "cifar10"


def test_cifar10_with_resize_and_workers(tmp_path):
    write_cifar10(tmp_path / "data")
    assert main(["cache", "build", str(tmp_path / "data"), str(tmp_path / "out"),
                 "--resize", "40", "--center-crop", "36", "--workers", "2"]) == 0
    resized = DeviceCache.load(tmp_path / "out", device="cpu")
    assert resized.images.shape == (20, 3, 36, 36)
    # The in-memory path (no resize) and the streaming writer store the same order.
    assert main(["cache", "build", str(tmp_path / "data"), str(tmp_path / "plain")]) == 0
    assert torch.equal(DeviceCache.load(tmp_path / "plain", device="cpu").labels, resized.labels)


def test_cifar100_build(tmp_path):
    write_cifar100(tmp_path / "data")
    assert main(["cache", "build", str(tmp_path / "data"), str(tmp_path / "out")]) == 0
    cache = DeviceCache.load(tmp_path / "out", device="cpu")
    assert cache.images.shape == (6, 3, 32, 32) and len(cache.classes) == 100


def test_incomplete_cifar_and_missing_src(tmp_path, capsys):
    folder, _ = write_cifar10(tmp_path / "data")
    (folder / "data_batch_3").unlink()
    assert main(["cache", "build", str(tmp_path / "data"), str(tmp_path / "out")]) == 2
    assert "data_batch_3" in capsys.readouterr().err
    assert main(["cache", "build", str(tmp_path / "nowhere"), str(tmp_path / "out")]) == 2
    assert "nowhere" in capsys.readouterr().err


def test_existing_out_needs_overwrite(tmp_path, capsys):
    write_cifar10(tmp_path / "data")
    args = ["cache", "build", str(tmp_path / "data"), str(tmp_path / "out")]
    assert main(args) == 0
    assert main(args) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert main(args + ["--overwrite"]) == 0


def test_info_and_verify(tmp_path, capsys):
    write_cifar10(tmp_path / "data")
    main(["cache", "build", str(tmp_path / "data"), str(tmp_path / "out")])
    capsys.readouterr()
    assert main(["cache", "info", str(tmp_path / "out"), "--verify"]) == 0
    out = capsys.readouterr().out
    for part in ("20 x 3 x 32 x 32", "uint8", "10: class0", "SHA-256", "OK", "bytes"):
        assert part in out
    p = tmp_path / "out" / "images.npy"
    data = bytearray(p.read_bytes())
    data[-1] ^= 1
    p.write_bytes(bytes(data))
    assert main(["cache", "info", str(tmp_path / "out")]) == 0  # sizes still agree
    capsys.readouterr()
    assert main(["cache", "info", str(tmp_path / "out"), "--verify"]) == 1
    assert "FAILED" in capsys.readouterr().out
    assert main(["cache", "info", str(tmp_path / "data")]) == 2  # not a cache: one line
    assert "meta.json" in capsys.readouterr().err


def test_python_m_batchaug_exit_status(tmp_path):
    write_cifar10(tmp_path / "data")
    assert main(["cache", "build", str(tmp_path / "data"), str(tmp_path / "out")]) == 0
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    run = lambda *a: subprocess.run([sys.executable, "-m", "batchaug", "cache", *a],
                                    capture_output=True, text=True, env=env, timeout=120)
    ok = run("info", str(tmp_path / "out"), "--verify")
    assert ok.returncode == 0 and "integrity: OK" in ok.stdout, ok.stderr
    (tmp_path / "out" / "labels.npy").unlink()
    bad = run("info", str(tmp_path / "out"), "--verify")
    assert bad.returncode == 1 and "labels.npy" in bad.stdout


# --- destinations are checked before any decoding -----------------------------------------------
@pytest.fixture
def no_decoding(monkeypatch):
    from batchaug.data import build

    def fail(*args, **kwargs):
        raise AssertionError("decoded before refusing the destination")

    monkeypatch.setattr(build, "write_cache", fail)
    monkeypatch.setattr(build.DeviceCache, "from_tensors", fail)


def test_bad_destinations_are_refused_before_decoding(tmp_path, capsys, no_decoding):
    write_imagefolder(tmp_path / "src", sizes=((8, 8),))
    foreign = tmp_path / "photos"
    foreign.mkdir()
    (foreign / "holiday.jpg").write_bytes(b"precious")
    (tmp_path / "afile").write_text("x")
    src = str(tmp_path / "src")
    cases = [
        ([src, str(foreign), "--overwrite"], "not a batchaug cache"),
        ([src, str(foreign)], "--overwrite"),
        ([src, src, "--overwrite"], "is SRC itself"),
        ([src, str(tmp_path / "src" / "cat" / ".."), "--overwrite"], "is SRC itself"),
        ([src, str(tmp_path / "src" / "cat" / "cache")], "inside SRC"),
        ([str(tmp_path / "src" / "cat"), src, "--overwrite"], "inside OUT"),
        ([src, str(tmp_path / "afile" / "cache")], "not a directory"),
    ]
    for argv, expected in cases:
        assert main(["cache", "build", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert expected in err and "Traceback" not in err, (argv, err)
    assert (foreign / "holiday.jpg").read_bytes() == b"precious"
    assert sorted(p.name for p in (tmp_path / "src" / "cat").iterdir()) == ["cat0.jpg", "notes.txt"]
    # A CIFAR source is refused the same way, before its arrays are wrapped or decoded.
    write_cifar10(tmp_path / "data")
    assert main(["cache", "build", str(tmp_path / "data"), str(foreign), "--overwrite"]) == 2


def test_overwrite_replaces_an_earlier_cache(tmp_path, capsys):
    write_imagefolder(tmp_path / "src", sizes=((8, 8),))
    args = ["cache", "build", str(tmp_path / "src"), str(tmp_path / "out")]
    assert main(args) == 0
    (tmp_path / "empty").mkdir()
    assert main(args + ["--overwrite"]) == 0
    assert main(["cache", "build", str(tmp_path / "src"), str(tmp_path / "empty")]) == 2
    assert main(["cache", "build", str(tmp_path / "src"), str(tmp_path / "empty"),
                 "--overwrite"]) == 0
    assert len(DeviceCache.load(tmp_path / "empty", device="cpu")) == 2


# --- --center-crop never pads -------------------------------------------------------------------
def test_center_crop_without_resize_refuses_small_images_by_name(tmp_path, capsys, no_decoding):
    made = write_imagefolder(tmp_path / "src", sizes=((12, 10), (14, 16), (20, 20)))
    small = sorted(p for p in made if Image.open(p).size[0] < 12 or Image.open(p).size[1] < 12)
    assert len(small) == 2  # the 12x10 ones
    argv = ["cache", "build", str(tmp_path / "src"), str(tmp_path / "out")]
    assert main(argv + ["--center-crop", "12"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "2 of 6 images are smaller than 12" in err and "--resize" in err
    assert all(f"{p} (10x12)" in err for p in small)
    assert main(argv + ["--resize", "10", "--center-crop", "12"]) == 2
    assert "larger than --resize" in capsys.readouterr().err
    write_cifar10(tmp_path / "data")
    assert main(["cache", "build", str(tmp_path / "data"), str(tmp_path / "out"),
                 "--center-crop", "36"]) == 2
    assert "32x32" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_center_crop_alone_when_every_image_is_large_enough(tmp_path):
    write_imagefolder(tmp_path / "src", sizes=((12, 14), (16, 12)))
    assert main(["cache", "build", str(tmp_path / "src"), str(tmp_path / "out"),
                 "--center-crop", "12"]) == 0
    cache = DeviceCache.load(tmp_path / "out", device="cpu")
    assert cache.images.shape == (4, 3, 12, 12)
    # A crop from inside each image: no black (padded) rows or columns. The random pixels
    # are all in 0..255, so check the pixels against the files instead of against zero.
    from torchvision.transforms import CenterCrop, PILToTensor

    ref = sorted(PILToTensor()(CenterCrop(12)(Image.open(p).convert("RGB"))).numpy().tobytes()
                 for p in (tmp_path / "src").rglob("*.*g"))
    assert sorted(cache.images[i].numpy().tobytes() for i in range(4)) == ref


# --- what was found, and where it came from ----------------------------------------------------
def test_split_folders_are_reported_and_info_names_the_dataset(tmp_path, capsys):
    for split in ("train", "test"):
        write_imagefolder(tmp_path / "src" / split, sizes=((8, 8),))
    assert main(["cache", "build", str(tmp_path / "src"), str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    assert "found 2 classes: test, train" in err
    assert "look like dataset splits" in err and str(tmp_path / "src" / "test") in err
    assert main(["cache", "info", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "dataset=ImageFolder" in out and "_Reordered" not in out
    # An ordinary class list gets no warning.
    write_imagefolder(tmp_path / "pets", sizes=((8, 8),))
    assert main(["cache", "build", str(tmp_path / "pets"), str(tmp_path / "pets-out")]) == 0
    err = capsys.readouterr().err
    assert "found 2 classes: cat, dog" in err and "warning" not in err


def test_cifar_source_names_the_dataset(tmp_path, capsys):
    write_cifar10(tmp_path / "data")
    assert main(["cache", "build", str(tmp_path / "data"), str(tmp_path / "out"),
                 "--resize", "32"]) == 0
    assert DeviceCache.load(tmp_path / "out", device="cpu").source["dataset"] == "CIFAR10"


# --- 16-bit PNGs --------------------------------------------------------------------------------
def test_16bit_png_is_scaled_not_saturated(tmp_path, monkeypatch):
    from batchaug.data import ingest

    monkeypatch.setattr(ingest, "_warned_16bit", False)
    (tmp_path / "src" / "scan").mkdir(parents=True)
    values = np.linspace(0, 65535, 8 * 8).round().astype(np.uint16).reshape(8, 8)
    Image.fromarray(values).save(tmp_path / "src" / "scan" / "deep.png")
    with pytest.warns(UserWarning, match="16-bit"):
        assert main(["cache", "build", str(tmp_path / "src"), str(tmp_path / "out")]) == 0
    cache = DeviceCache.load(tmp_path / "out", device="cpu")
    expected = torch.from_numpy(((values.astype(np.int64) + 128) // 257).astype(np.uint8))
    assert cache.images.shape == (1, 3, 8, 8)
    assert all(torch.equal(cache.images[0, c], expected) for c in range(3))


# --- the streaming writer: rate, --resume, a full disk (issue 8 item 5) -----------------------
def _small_chunks(monkeypatch, interrupt_at=None):
    """``cache build`` with 4-sample chunks; ``interrupt_at``: Ctrl-C at that image read."""
    import functools

    from batchaug.data import build, writer

    monkeypatch.setattr(build, "write_cache", functools.partial(writer.write_cache, chunk_size=4))
    real, reads = build.load_image, []

    def load(path):
        reads.append(path)
        if len(reads) == interrupt_at:
            raise KeyboardInterrupt
        return real(path)

    monkeypatch.setattr(build, "load_image", load)
    return reads


def test_build_reports_the_write_rate(tmp_path, capsys):
    write_imagefolder(tmp_path / "src", sizes=((8, 8),) * 3)
    assert main(["cache", "build", str(tmp_path / "src"), str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "wrote" in out and " img/s, " in out and "MB/s written" in out, out


def test_interrupted_build_resumes_to_the_same_cache(tmp_path, capsys, monkeypatch):
    write_imagefolder(tmp_path / "src", sizes=((8, 8),) * 7)  # 14 images: 4 chunks of 4
    src = str(tmp_path / "src")
    assert main(["cache", "build", src, str(tmp_path / "clean")]) == 0
    reads = _small_chunks(monkeypatch, interrupt_at=10)
    assert main(["cache", "build", src, str(tmp_path / "out")]) == 130
    err = capsys.readouterr().err
    assert "interrupted" in err and "--resume" in err and "8 of 14" in err, err
    assert not (tmp_path / "out").exists()
    reads.clear()
    assert main(["cache", "build", src, str(tmp_path / "out"), "--resume"]) == 0
    assert "resumed after 8 of 14 images" in capsys.readouterr().err
    assert len(reads) == 6  # only the images after the completed chunks
    for name in ("images.npy", "labels.npy", "meta.json"):
        assert (tmp_path / "out" / name).read_bytes() == (tmp_path / "clean" / name).read_bytes()


def test_jpeg_build_resumed_without_storage_jpeg_is_refused(tmp_path, capsys, monkeypatch):
    write_imagefolder(tmp_path / "src", sizes=((8, 8),) * 7)
    src, out = str(tmp_path / "src"), str(tmp_path / "out")
    _small_chunks(monkeypatch, interrupt_at=10)
    assert main(["cache", "build", src, out, "--storage", "jpeg"]) == 130
    _small_chunks(monkeypatch)
    capsys.readouterr()
    assert main(["cache", "build", src, out, "--resume"]) == 2
    err = capsys.readouterr().err
    assert "was made with storage='jpeg', this one has storage='raw'; use the same options" \
        in err and "Traceback" not in err, err
    assert main(["cache", "build", src, out, "--resume", "--storage", "jpeg"]) == 0
    assert "resumed after 8 of 14 images" in capsys.readouterr().err
    assert DeviceCache.load(out, device="cpu").storage == "jpeg"


def test_build_without_resume_refuses_to_drop_an_interrupted_one(tmp_path, capsys, monkeypatch):
    write_imagefolder(tmp_path / "src", sizes=((8, 8),) * 7)
    src, out = str(tmp_path / "src"), str(tmp_path / "out")
    _small_chunks(monkeypatch, interrupt_at=10)
    assert main(["cache", "build", src, out]) == 130
    _small_chunks(monkeypatch)
    capsys.readouterr()
    assert main(["cache", "build", src, out]) == 2
    err = capsys.readouterr().err
    assert ("8 of 14 samples done" in err and "would be lost; add --resume to continue it, or "
            "--overwrite to discard it and start over" in err), err
    assert "resume=True" not in err and "Traceback" not in err
    (left,) = atomic.leftovers(tmp_path / "out")  # kept
    # `cache info` on the missing OUT names the interrupted build and its progress.
    assert main(["cache", "info", out]) == 2
    err = capsys.readouterr().err
    assert "no such cache directory" in err and "(8 of 14 samples done)" in err, err
    assert "`batchaug cache build SRC OUT --resume` continues it" in err, err
    assert main(["cache", "build", src, out, "--overwrite"]) == 0
    err = capsys.readouterr().err
    assert "warning: an interrupted write of" in err and "is discarded (--overwrite)" in err
    assert atomic.leftovers(tmp_path / "out") == []


def test_info_of_a_cache_reports_an_interrupted_rebuild(tmp_path, capsys, monkeypatch):
    write_imagefolder(tmp_path / "src", sizes=((8, 8),) * 7)
    src, out = str(tmp_path / "src"), str(tmp_path / "out")
    assert main(["cache", "build", src, out]) == 0
    _small_chunks(monkeypatch, interrupt_at=10)
    assert main(["cache", "build", src, out, "--overwrite"]) == 130
    capsys.readouterr()
    assert main(["cache", "info", out]) == 0
    text = capsys.readouterr().out
    assert "interrupted: an interrupted write of" in text and "(8 of 14 samples done)" in text


def test_both_writers_store_the_same_order(tmp_path, capsys):
    """`cache build` and write_cache(ImageFolder(...)) give the same rows, for each seed."""
    from torchvision.datasets import ImageFolder

    from batchaug.data import write_cache

    root = tmp_path / "src"
    for c in range(3):
        (root / f"c{c}").mkdir(parents=True)
        for i in range(6):
            pixels = np.full((4, 4, 3), 10 * i + c, np.uint8)
            Image.fromarray(pixels).save(root / f"c{c}" / f"{i}.png")
    for seed, extra in ((0, []), (5, ["--seed", "5"])):
        assert main(["cache", "build", str(root), str(tmp_path / f"cli{seed}"), *extra]) == 0
        write_cache(ImageFolder(str(root)), tmp_path / f"py{seed}", seed=seed)
        cli = DeviceCache.load(tmp_path / f"cli{seed}", device="cpu")
        py = DeviceCache.load(tmp_path / f"py{seed}", device="cpu")
        assert torch.equal(cli.images, py.images) and torch.equal(cli.labels, py.labels)
        assert cli.source["shuffle_seed"] == py.source["shuffle_seed"] == seed
    assert not torch.equal(DeviceCache.load(tmp_path / "cli0", device="cpu").labels,
                           DeviceCache.load(tmp_path / "cli5", device="cpu").labels)
    assert main(["cache", "build", str(root), str(tmp_path / "kept"), "--no-shuffle"]) == 0
    kept = DeviceCache.load(tmp_path / "kept", device="cpu")
    assert kept.labels.tolist() == sorted(kept.labels.tolist())
    assert kept.source["order"] == "dataset"


def test_build_on_a_full_disk_is_one_line_and_leaves_nothing(tmp_path, capsys, monkeypatch):
    import collections

    from batchaug.data import writer

    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(writer.shutil, "disk_usage", lambda p: usage(10**6, 10**6 - 10, 10))
    write_imagefolder(tmp_path / "src", sizes=((8, 8),))
    assert main(["cache", "build", str(tmp_path / "src"), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "batchaug: error: not enough disk space to write" in err and "[Errno" not in err, err
    assert sorted(os.listdir(tmp_path)) == ["src"]


def cache_samples(src):
    """ImageFolder's samples in the order `cache build` writes them (seeded shuffle)."""
    from torchvision.datasets import ImageFolder

    from batchaug.data.build import is_image_file
    from batchaug.data.writer import stored_order

    samples = ImageFolder(str(src), is_valid_file=is_image_file).samples
    return [samples[i] for i in stored_order(len(samples), True, 0)]
