"""Ingest (``DeviceCache.from_dataset`` / ``from_tensors``): no silent change of the data.

16-bit images are scaled, not clipped; fractional labels are refused, not truncated; images of
different channel counts and corrupt files get messages that name them and say what to do.
"""
import io
import warnings

import numpy as np
import pytest
import torch
from PIL import Image

from batchaug import DeviceCache
from batchaug.data import ingest
from batchaug.data.ingest import BadImageError


@pytest.fixture
def fresh_16bit_warning(monkeypatch):
    monkeypatch.setattr(ingest, "_warned_16bit", False)  # the warning is once per process


def write_16bit_png(path, h=6, w=7):
    """A real 16-bit grayscale PNG (PIL mode I;16) spanning 0..65535; returns its values."""
    values = np.linspace(0, 65535, h * w).round().astype(np.uint16).reshape(h, w)
    values[0, 0], values[0, 1], values[0, 2] = 128, 129, 385  # rounding edges: 0, 1, 1 / 2
    Image.fromarray(values).save(path)
    assert Image.open(path).mode.startswith("I")
    return values


def truncated_jpeg(path, size=32):
    buf = io.BytesIO()
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)).save(buf, "JPEG")
    path.write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])


# --- 16-bit images ------------------------------------------------------------------------------
def test_16bit_png_is_scaled_to_8_bits_with_one_warning(tmp_path, fresh_16bit_warning):
    values = write_16bit_png(tmp_path / "a.png")
    expected = torch.from_numpy(((values.astype(np.int64) + 128) // 257).astype(np.uint8))
    assert expected.max() == 255 and len(expected.unique()) > 30  # not saturated to 0/255
    assert expected[0, :3].tolist() == [0, 1, 1]  # round(v / 257)
    dataset = [(Image.open(tmp_path / "a.png"), 0), (Image.open(tmp_path / "a.png"), 1)]
    with pytest.warns(UserWarning, match=r"16-bit .*round\(value / 257\)") as record:
        cache = DeviceCache.from_dataset(dataset, device="cpu", progress=False)
    assert len([w for w in record if "16-bit" in str(w.message)]) == 1
    assert cache.images.shape == (2, 1, 6, 7)
    assert torch.equal(cache.images[0, 0], expected) and torch.equal(cache.images[1, 0], expected)


def test_32bit_integer_image_outside_16_bits_is_refused(fresh_16bit_warning):
    image = Image.fromarray(np.array([[0, 70000]], dtype=np.int32))
    assert image.mode == "I"
    with pytest.raises(BadImageError, match=r"dataset\[0\].*outside the 16-bit range"):
        DeviceCache.from_dataset([(image, 0)], device="cpu", progress=False)


def test_32bit_integer_image_of_8bit_values_is_kept_as_is(fresh_16bit_warning):
    """Mode I (int32, no declared depth) holding 0..255: 8-bit values, not scaled as 16-bit
    (which made every pixel 0 or 1, with a warning); above 255 it is 16-bit, scaled."""
    values = np.array([[0, 1, 128, 200, 255], [3, 7, 64, 99, 254]], dtype=np.int32)
    image = Image.fromarray(values)
    assert image.mode == "I"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no 16-bit warning
        cache = DeviceCache.from_dataset([(image, 0)], device="cpu", progress=False)
    assert torch.equal(cache.images[0, 0], torch.from_numpy(values.astype(np.uint8)))
    wide = Image.fromarray(np.array([[0, 256, 65535]], dtype=np.int32))
    with pytest.warns(UserWarning, match="16-bit"):
        cache = DeviceCache.from_dataset([(wide, 0)], device="cpu", progress=False)
    assert cache.images[0, 0, 0].tolist() == [0, 1, 255]


# --- labels -------------------------------------------------------------------------------------
@pytest.mark.parametrize("labels", [[0.5, 1.9, 2.7], [0.0, 1.0, 2.0], [0, 1, 2.5],
                                    [True, False, True], np.array([0.5, 1.9, 2.7]),
                                    ["a", "b", "c"]])
def test_from_tensors_refuses_non_integer_labels(labels):
    x = torch.zeros(3, 1, 2, 2, dtype=torch.uint8)
    with pytest.raises(TypeError,
                       match="labels must be (an integer tensor|integer class indices)"):
        DeviceCache.from_tensors(x, labels, device="cpu")


def test_from_tensors_integer_label_sequences():
    x = torch.zeros(3, 1, 2, 2, dtype=torch.uint8)
    for labels in ([2, 0, 1], [np.int64(2), np.int32(0), 1], (2, 0, 1), torch.tensor([2, 0, 1]),
                   [torch.tensor(2), torch.tensor(0), torch.tensor(1)]):
        cache = DeviceCache.from_tensors(x, labels, device="cpu")
        assert cache.labels.dtype == torch.int64
    assert DeviceCache.from_tensors(x, [2, 0, 1], device="cpu").labels.tolist() == [2, 0, 1]
    empty = DeviceCache.from_tensors(torch.zeros(0, 1, 2, 2, dtype=torch.uint8), [], device="cpu")
    assert len(empty) == 0 and empty.labels.dtype == torch.int64


# --- channel counts -----------------------------------------------------------------------------
def test_mixed_channel_counts_name_the_images_and_the_conversion():
    rgb = Image.new("RGB", (5, 4))
    dataset = [(rgb, 0), (Image.new("L", (5, 4)), 0), (Image.new("RGBA", (5, 4)), 1)]
    with pytest.raises(ValueError) as info:
        DeviceCache.from_dataset(dataset, device="cpu", progress=False)
    msg = str(info.value)
    assert "dataset[1] has 1 channel(s)" in msg and "dataset[0] has 3" in msg
    assert "im.convert('RGB')" in msg and "resizing pre_transform" not in msg
    cache = DeviceCache.from_dataset(dataset, pre_transform=lambda im: im.convert("RGB"),
                                     device="cpu", progress=False)
    assert cache.images.shape == (3, 3, 4, 5)


# --- corrupt files ------------------------------------------------------------------------------
def _imagefolder(root, bad_name="broken.jpg"):
    for cls in ("a", "b"):
        (root / cls).mkdir(parents=True)
        for i in range(2):
            Image.new("RGB", (8, 8), (i * 50, 0, 0)).save(root / cls / f"{i}.png")
    bad = root / "b" / bad_name
    truncated_jpeg(bad)
    return bad


def test_corrupt_file_names_its_path_and_skip_bad(tmp_path):
    from torchvision.datasets import ImageFolder

    bad = _imagefolder(tmp_path / "src")
    dataset = ImageFolder(str(tmp_path / "src"))  # torchvision's own loader: a bare OSError
    with pytest.raises(BadImageError) as info:
        DeviceCache.from_dataset(dataset, device="cpu", progress=False)
    msg = str(info.value)
    assert str(bad) in msg and "truncated" in msg
    assert "pass skip_bad=True to skip unreadable images" in msg and "--skip-bad" not in msg
    with pytest.warns(UserWarning, match=r"skipped 1 of 5 images") as record:
        cache = DeviceCache.from_dataset(dataset, device="cpu", progress=False, skip_bad=True)
    assert any(str(bad) in str(w.message) for w in record)
    assert len(cache) == 4 and cache.source["skipped"] == 1


def test_corrupt_file_without_paths_is_named_by_index(tmp_path):
    truncated_jpeg(tmp_path / "x.jpg")
    good = Image.new("RGB", (8, 8))

    class Lazy:  # opens lazily: the decode error happens inside the ingest pass
        def __len__(self):
            return 3

        def __getitem__(self, i):
            return (Image.open(tmp_path / "x.jpg") if i == 1 else good), 0

    with pytest.raises(BadImageError, match=r"dataset\[1\]: cannot read image .*skip_bad"):
        DeviceCache.from_dataset(Lazy(), device="cpu", progress=False,
                                 pre_transform=lambda im: im.resize((8, 8)))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        cache = DeviceCache.from_dataset(Lazy(), device="cpu", progress=False, skip_bad=True,
                                         pre_transform=lambda im: im.resize((8, 8)))
    assert len(cache) == 2
    messages = [str(w.message) for w in record if "skipped" in str(w.message)]
    assert len(messages) == 1 and "skipped 1 of 3 images" in messages[0]
    assert "dataset[1]: cannot read image (OSError" in messages[0]


def test_other_errors_are_not_skipped():
    dataset = [(Image.new("RGB", (4, 4)), 0), ("not an image", 0)]
    with pytest.raises(TypeError, match=r"dataset\[1\]"):
        DeviceCache.from_dataset(dataset, device="cpu", progress=False, skip_bad=True)


class _KindThenUnreadable:
    """Item 2 is an (image, mask) item among (image, label) ones; item 5 cannot be read."""

    def __len__(self):
        return 8

    def __getitem__(self, i):
        if i == 5:
            raise OSError("truncated file")
        image = torch.full((3, 4, 4), i, dtype=torch.uint8)
        return (image, torch.zeros(4, 4, dtype=torch.uint8)) if i == 2 else (image, i)


@pytest.mark.parametrize("writer", ["from_dataset", "write_cache"])
def test_both_passes_raise_errors_in_sample_order_whichever_step_finds_them(writer, tmp_path):
    # one sample loop (ingest.fill) checks each sample and takes its label before
    # the next is checked: item 2's mixed kind is reported, not item 5's unreadable file
    from batchaug.data.writer import write_cache

    with pytest.raises(ValueError, match=r"dataset\[2\] is an \(image, mask\) item but "
                                         r"dataset\[0\] is an \(image, label\) item"):
        if writer == "from_dataset":
            DeviceCache.from_dataset(_KindThenUnreadable(), device="cpu", progress=False)
        else:
            write_cache(_KindThenUnreadable(), tmp_path / "c", chunk_size=8, shuffle=False,
                        progress=False)
