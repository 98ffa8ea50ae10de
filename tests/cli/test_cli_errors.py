"""Issue 7 item 9: the command line and load never show a traceback for a broken pipe or a
hostile meta.json, and ``cache info`` applies exactly the checks ``load`` applies."""
import io
import json
import os
import subprocess
import sys

import pytest
import torch

import batchaug.data.format as fmt
from batchaug import CacheFormatError, DeviceCache
from batchaug.cli import main

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def cache_dir(tmp_path):
    g = torch.Generator().manual_seed(0)
    DeviceCache.from_tensors(torch.randint(0, 256, (6, 3, 4, 4), dtype=torch.uint8, generator=g),
                             torch.tensor([0, 1, 2, 3, 0, 1]), device="cpu",
                             classes=["a", "b", "c", "d"]).save(tmp_path / "c")
    return tmp_path / "c"


def reseal(path, **changes):
    """Edit meta.json and recompute its checksum, as a hostile or buggy writer could."""
    meta = json.loads((path / "meta.json").read_text())
    meta.update(changes)
    meta["meta_sha256"] = fmt._meta_checksum(meta)
    (path / "meta.json").write_text(json.dumps(meta))


def info(path, *flags, capsys):
    status = main(["cache", "info", str(path), *flags])
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    return status, out.out, out.err


def test_broken_pipe_ends_quietly(cache_dir):
    # `batchaug cache info C | head -1`: the reader is gone before anything is written.
    proc = subprocess.Popen([sys.executable, "-m", "batchaug", "cache", "info", str(cache_dir)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(os.environ, PYTHONPATH=REPO, OMP_NUM_THREADS="1"))
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141 and err == "", err


def test_broken_pipe_in_process(cache_dir, monkeypatch):
    class Gone(io.StringIO):
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", Gone())  # no file descriptor: still quiet
    assert main(["cache", "info", str(cache_dir)]) == 141


def test_deeply_nested_meta_json(cache_dir, capsys):
    (cache_dir / "meta.json").write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(CacheFormatError, match="meta.json.*nested") as exc:
        DeviceCache.load(cache_dir, device="cpu")
    assert exc.value.path.endswith("meta.json")
    status, _, err = info(cache_dir, capsys=capsys)
    assert status == 2 and "meta.json" in err and len(err.strip().splitlines()) == 1
    # Replacing such a directory is refused like any other non-cache, not a traceback.
    with pytest.raises(FileExistsError, match="not a batchaug cache"):
        DeviceCache.from_tensors(torch.zeros(1, 1, 1, 1, dtype=torch.uint8), [0],
                                 device="cpu").save(cache_dir, overwrite=True)


@pytest.mark.parametrize("files", [
    "extra-int",  # the 0.1.0 `cache info` TypeError; `load` accepted it
    "list-entry",
    "bool-size",
    "short-hash",
    "missing-labels",
])
def test_bad_files_entries_rejected_by_load_and_info_alike(cache_dir, capsys, files):
    meta = json.loads((cache_dir / "meta.json").read_text())
    rec = meta["files"]
    if files == "extra-int":
        rec["notes.txt"] = 5
    elif files == "list-entry":
        rec["images.npy"] = [rec["images.npy"]["size"], rec["images.npy"]["sha256"]]
    elif files == "bool-size":
        rec["labels.npy"]["size"] = True
    elif files == "short-hash":
        rec["labels.npy"]["sha256"] = "abc"
    else:
        del rec["labels.npy"]
    reseal(cache_dir, files=rec)
    with pytest.raises(CacheFormatError, match="meta.json.*files"):
        DeviceCache.load(cache_dir, device="cpu")
    status, _, err = info(cache_dir, capsys=capsys)
    assert status == 2 and "meta.json" in err and "files" in err


@pytest.mark.parametrize("field,value", [
    ("shape", [6, 3, 4, "4"]), ("shape", [6, 3, 4, 4.0]), ("shape", [6, 3, 4]),
    ("shape", [True, 3, 4, 4]), ("dtype", "int8"), ("layout", "CHWN"), ("classes", "abcd"),
    ("source", [1]), ("format_version", True),
])
def test_bad_fields_rejected_by_load_and_info_alike(cache_dir, capsys, field, value):
    reseal(cache_dir, **{field: value})
    with pytest.raises(CacheFormatError, match="meta.json"):
        DeviceCache.load(cache_dir, device="cpu")
    status, _, err = info(cache_dir, capsys=capsys)
    assert status == 2 and "meta.json" in err


@pytest.mark.parametrize("flags", [(), ("--verify",)])
def test_fewer_classes_than_labels_fails_info_as_it_fails_load(cache_dir, capsys, flags):
    reseal(cache_dir, classes=["a", "b"])  # labels go up to 3
    with pytest.raises(CacheFormatError, match="labels.npy.*out of range"):
        DeviceCache.load(cache_dir, device="cpu")
    status, out, _ = info(cache_dir, *flags, capsys=capsys)
    assert status == 1 and "FAILED" in out and "labels.npy" in out and "out of range" in out


def test_negative_label_in_file_fails_info_and_load(cache_dir, capsys):
    import numpy as np

    p = cache_dir / "labels.npy"
    labels = np.load(p)
    labels[2] = -1
    np.save(p, labels)
    meta = json.loads((cache_dir / "meta.json").read_text())
    meta["files"]["labels.npy"] = {"size": p.stat().st_size, "sha256": fmt.sha256_file(p)}
    reseal(cache_dir, files=meta["files"])
    with pytest.raises(CacheFormatError, match="labels.npy.*>= 0"):
        DeviceCache.load(cache_dir, device="cpu")
    status, out, _ = info(cache_dir, "--verify", capsys=capsys)
    assert status == 1 and "labels.npy" in out


def test_a_good_cache_still_passes(cache_dir, capsys):
    status, out, _ = info(cache_dir, "--verify", capsys=capsys)
    assert status == 0 and "integrity: OK" in out
    assert len(DeviceCache.load(cache_dir, device="cpu", verify=True)) == 6


# --- issue 18 items 5 and 6: bounded sizes, output errors in one line, flags vs arguments -----
def _imagefolder(root, sizes=((8, 8), (8, 8))):
    from PIL import Image

    for c, name in enumerate(("cat", "dog")):
        (root / name).mkdir(parents=True)
        for i, (h, w) in enumerate(sizes):
            Image.new("RGB", (w, h), (40 * c, 30 * i, 90)).save(root / name / f"{i}.png")
    return root


def _one_error_line(err):
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err and len(lines) == 1, err
    return lines[0]


def test_resize_and_center_crop_are_bounded_like_the_transforms(tmp_path, capsys):
    from batchaug._validation import MAX_SIZE

    src = _imagefolder(tmp_path / "src")
    for flag in ("--resize", "--center-crop"):
        assert main(["cache", "build", str(src), str(tmp_path / "out"), flag, "100000000"]) == 2
        line = _one_error_line(capsys.readouterr().err)
        assert f"argument {flag}: expected at most {MAX_SIZE} pixels, got 100000000" in line
    assert main(["cache", "build", str(src), str(tmp_path / "out"), "--seed", str(2 ** 63)]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert f"argument --seed: expected an integer in [0, 2**63), got {2 ** 63}" in line, line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("failure", ["memory", "write"])
def test_out_of_memory_and_write_errors_are_one_line(tmp_path, capsys, monkeypatch, failure):
    from batchaug.data import build, writer

    src = _imagefolder(tmp_path / "src")

    def no_memory(path):
        raise MemoryError

    def no_write(fd, data, offset):
        raise OSError(5, "Input/output error", "x/images.npy")

    if failure == "memory":  # what PIL raises for an image too large to resize
        monkeypatch.setattr(build, "load_image", no_memory)
    else:
        monkeypatch.setattr(writer, "_pwrite_all", no_write)
    resize = "60000" if failure == "memory" else "8"  # (the memory case never resizes)
    status = main(["cache", "build", str(src), str(tmp_path / "out"), "--resize", resize])
    line = _one_error_line(capsys.readouterr().err.split("\n", 1)[1])  # after "reading ..."
    assert status != 0
    if failure == "memory":
        assert line.startswith("batchaug: error: out of memory") and "--resize" in line, line
    else:
        assert line == "batchaug: error: x/images.npy: Input/output error", line
    assert not (tmp_path / "out").exists()


def test_command_line_messages_name_flags_and_python_messages_name_arguments(tmp_path, capsys):
    from batchaug.data import BadImageError, write_cache
    from batchaug.data.build import load_image

    src = _imagefolder(tmp_path / "src")
    (src / "dog" / "broken.png").write_bytes(b"not a png")
    out = tmp_path / "out"
    # A bad image: the flag on the command line, the argument in Python.
    assert main(["cache", "build", str(src), str(out)]) == 2
    line = _one_error_line(capsys.readouterr().err.split("\n", 1)[1])
    assert "add --skip-bad to skip unreadable images" in line and "skip_bad" not in line, line
    from torchvision.datasets import ImageFolder

    with pytest.raises(BadImageError, match="pass skip_bad=True to skip") as info:
        write_cache(ImageFolder(str(src), loader=load_image), out)
    assert "--skip-bad" not in str(info.value)
    (src / "dog" / "broken.png").unlink()
    # Images of different sizes: kept at their own sizes (uint8, as the command line stores);
    # a floating cache cannot hold them, and the Python message names pre_transform.
    import shutil

    from PIL import Image

    Image.new("RGB", (9, 7)).save(src / "dog" / "odd.png")
    assert main(["cache", "build", str(src), str(out)]) == 0
    assert "up to" in capsys.readouterr().out  # the compact summary line
    shutil.rmtree(out)
    with pytest.raises(ValueError, match=r"pass a resizing pre_transform, e\.g\. pre_transform="):
        write_cache(ImageFolder(str(src), loader=load_image), out, dtype=torch.float32)
    (src / "dog" / "odd.png").unlink()
    # An existing OUT.
    assert main(["cache", "build", str(src), str(out)]) == 0
    capsys.readouterr()
    assert main(["cache", "build", str(src), str(out)]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "already exists; add --overwrite to replace it" in line and "overwrite=" not in line
    with pytest.raises(FileExistsError, match="already exists; pass overwrite=True to replace"):
        write_cache(ImageFolder(str(src), loader=load_image), out)


def _all_parsers(parser):
    import argparse

    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _all_parsers(sub)


def test_help_text_shows_defaults_and_no_rst_markup():
    from batchaug.cli import build_parser

    parsers = list(_all_parsers(build_parser()))
    assert len(parsers) == 6  # batchaug, cache, build, info, bench, show
    checked = 0
    for parser in parsers:
        text = " ".join(parser.format_help().split())  # unwrapped
        assert "``" not in text, (parser.prog, text)
        for action in parser._actions:
            if action.option_strings and action.default not in (None, False, "==SUPPRESS=="):
                assert f"(default: {action.default})" in text, (parser.prog, action.dest, text)
                checked += 1
    assert checked >= 10  # --workers, --split, --seed, --recipe, --device, --out, --n ...


def test_quality_without_storage_jpeg_is_refused_naming_storage(tmp_path, capsys):
    """--quality is the JPEG quality: given with raw storage it would be ignored silently."""
    src = _imagefolder(tmp_path / "src")
    out = tmp_path / "out"
    for extra in ([], ["--storage", "raw"]):
        assert main(["cache", "build", str(src), str(out), "--quality", "50", *extra]) == 2
        line = _one_error_line(capsys.readouterr().err)
        assert "--quality 50 is the JPEG quality: add --storage jpeg" in line, line
        assert not out.exists()
    assert main(["cache", "build", str(src), str(out), "--quality", "50", "--storage",
                 "jpeg"]) == 0
    loaded = DeviceCache.load(out, device="cpu")
    assert loaded.storage == "jpeg" and loaded.images.quality == 50


def test_resize_with_max_size_keeps_one_pixel_of_a_thin_strip(tmp_path, capsys):
    """--resize 16 --max-size 40 on a 1 x 400 strip: torchvision's size is 0 x 40 ("height
    and width must be > 0", no file named); the strip is kept 1 x 40, every other image gets
    torchvision Resize's pixels and meta.json records torchvision's Resize."""
    import numpy as np
    from PIL import Image
    from torchvision import transforms as T
    from torchvision.transforms.functional import pil_to_tensor

    src = tmp_path / "src"
    rng = np.random.default_rng(0)
    paths = []
    for name, (h, w) in (("cat", (1, 400)), ("cat", (30, 70)), ("dog", (400, 3)),
                         ("dog", (50, 41))):
        (src / name).mkdir(parents=True, exist_ok=True)
        p = src / name / f"{h}x{w}.png"
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(p)
        paths.append(p)
    out = tmp_path / "out"
    assert main(["cache", "build", str(src), str(out), "--resize", "16", "--max-size", "40",
                 "--no-shuffle"]) == 0, capsys.readouterr().err
    cache = DeviceCache.load(out, device="cpu")
    got = {tuple(cache.image(i).shape[1:]) for i in range(len(cache))}
    assert (1, 40) in got and (40, 1) in got, got  # not refused, not 0 pixels
    ref = T.Resize(16, max_size=40)
    for p in paths[1::2]:  # ordinary images: exactly torchvision's
        want = pil_to_tensor(ref(Image.open(p).convert("RGB")))
        assert any(torch.equal(cache.image(i), want) for i in range(len(cache))), p
    assert "Resize(size=16, interpolation=bilinear, max_size=40" in cache.source["pre_transform"]
