"""JPEG caches keep a JPEG file's own bytes when the pipeline does not change its pixels.

A JPEG source stored with ``storage="jpeg"`` is not encoded a second time: the cache holds the
file's bytes (so the cache's data is the files' bytes back to back) and decodes to each file's
own pixels (torchvision's ``decode_jpeg`` of the file is the reference). A pre-transform that
changes pixels, a PNG, a grayscale or CMYK file that the loader reads as RGB: encoded at
``quality`` as before. ``cache info`` says which.
"""
import io
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision.datasets import ImageFolder
from torchvision.io import ImageReadMode, decode_jpeg
from torchvision.transforms import v2

from batchaug import DeviceCache
from batchaug.cli import main as cli_main
from batchaug.data import write_cache

pytestmark = pytest.mark.filterwarnings("ignore:The image decoding:DeprecationWarning")


def _photo(seed: int, h: int, w: int) -> np.ndarray:
    g = np.random.default_rng(seed)
    y = np.linspace(0, 1, h)[:, None, None]
    x = np.linspace(0, 1, w)[None, :, None]
    base = y * np.array([150, 90, 40]) + x * np.array([60, 120, 200])
    return np.clip(base + g.integers(0, 30, (h, w, 3)), 0, 255).astype(np.uint8)


def _folder(root: Path, extra: bool = False):
    """An ImageFolder of baseline and progressive RGB JPEGs of mixed sizes (one with bytes after
    its EOI marker); with ``extra`` also a grayscale JPEG, a CMYK JPEG and a PNG."""
    files = []
    for k in range(6):
        d = root / ("cat" if k % 2 else "dog")
        d.mkdir(parents=True, exist_ok=True)
        p = d / f"{k}.jpg"
        Image.fromarray(_photo(k, 40 + 9 * k, 70 - 5 * k)).save(
            p, quality=85 + k, progressive=k == 3, subsampling=k % 3)
        files.append(p)
    with open(files[4], "ab") as f:  # padding some writers leave after the EOI marker
        f.write(b"\x00" * 7)
    if extra:
        Image.fromarray(_photo(9, 33, 47)[..., 0]).save(root / "cat" / "gray.jpg")
        Image.fromarray(_photo(10, 30, 30)).convert("CMYK").save(root / "dog" / "cmyk.jpg")
        Image.fromarray(_photo(11, 31, 29)).save(root / "dog" / "png.png")
    return files


def _file_decode(path: Path) -> torch.Tensor:
    data = torch.frombuffer(bytearray(path.read_bytes()), dtype=torch.uint8)
    return decode_jpeg(data, mode=ImageReadMode.UNCHANGED)


def _rgb(path):
    with open(path, "rb") as f:
        return Image.open(f).convert("RGB")


def _check_originals(cache, dataset):
    """Each image's stored bytes are its file's bytes (up to the EOI) and decode to its pixels."""
    assert cache.storage == "jpeg"
    total = 0
    for i, (path, _) in enumerate(dataset.samples):
        raw = Path(path).read_bytes()
        raw = raw[:raw.rfind(b"\xff\xd9") + 2]
        stored = cache.images.bytes_of(i).cpu().numpy().tobytes()
        assert stored == raw, path
        assert torch.equal(cache.image(i).cpu(), _file_decode(Path(path))), path
        total += len(raw)
    assert cache.images.data.numel() == total  # cache bytes = file bytes (+ the index)
    assert cache.images.originals == len(dataset)


def test_from_dataset_keeps_the_files_bytes(tmp_path):
    files = _folder(tmp_path / "src")
    dataset = ImageFolder(str(tmp_path / "src"), loader=_rgb)
    cache = DeviceCache.from_dataset(dataset, pre_transform=v2.PILToTensor(), storage="jpeg",
                                     quality=50)
    _check_originals(cache, dataset)
    assert len(files) == len(dataset)
    # saved and loaded: the same bytes, and the count in meta.json
    cache.save(tmp_path / "c")
    back = DeviceCache.load(tmp_path / "c")
    _check_originals(back, dataset)


def test_write_cache_and_cli_store_the_same_bytes(tmp_path, capsys):
    _folder(tmp_path / "src")
    dataset = ImageFolder(str(tmp_path / "src"), loader=_rgb)
    write_cache(dataset, tmp_path / "w", storage="jpeg", shuffle=False)
    _check_originals(DeviceCache.load(tmp_path / "w"), dataset)
    assert cli_main(["cache", "build", str(tmp_path / "src"), str(tmp_path / "cli"),
                     "--storage", "jpeg", "--no-shuffle"]) == 0
    _check_originals(DeviceCache.load(tmp_path / "cli"), dataset)
    capsys.readouterr()
    assert cli_main(["cache", "info", str(tmp_path / "cli")]) == 0
    assert "all the source files' own bytes" in capsys.readouterr().out


def test_what_the_pipeline_changes_is_encoded(tmp_path, capsys):
    """Grayscale and CMYK JPEGs read as RGB, a PNG, and a resizing pre-transform: encoded."""
    _folder(tmp_path / "src", extra=True)
    dataset = ImageFolder(str(tmp_path / "src"), loader=_rgb)
    names = [Path(p).name for p, _ in dataset.samples]
    cache = DeviceCache.from_dataset(dataset, storage="jpeg", quality=95)
    assert cache.images.originals == 6 and len(cache) == 9
    for i, name in enumerate(names):
        kept = cache.images.bytes_of(i).cpu().numpy().tobytes()
        same = kept == Path(dataset.samples[i][0]).read_bytes()[:len(kept)]
        assert same == (name[0].isdigit()), name
        assert cache.image(i).shape[0] == 3, name
    resized = DeviceCache.from_dataset(dataset, pre_transform=v2.Resize(24), storage="jpeg")
    assert resized.images.originals == 0
    write_cache(dataset, tmp_path / "w", storage="jpeg", shuffle=False)
    capsys.readouterr()
    assert cli_main(["cache", "info", str(tmp_path / "w")]) == 0
    assert "6 the source files' own bytes, 3 encoded at this quality" in capsys.readouterr().out


def test_resumed_write_counts_the_originals_of_every_chunk(tmp_path):
    _folder(tmp_path / "src", extra=True)
    dataset = ImageFolder(str(tmp_path / "src"), loader=_rgb)

    class Folder(ImageFolder):
        die_at = 5

        def __getitem__(self, i):
            if i == self.die_at:
                raise KeyboardInterrupt
            return super().__getitem__(i)

    dataset = Folder(str(tmp_path / "src"), loader=_rgb)
    with pytest.raises(KeyboardInterrupt):
        write_cache(dataset, tmp_path / "w", storage="jpeg", shuffle=False, chunk_size=2)
    Folder.die_at = None
    write_cache(dataset, tmp_path / "w", storage="jpeg", shuffle=False, chunk_size=2,
                resume=True)
    whole = DeviceCache.from_dataset(dataset, storage="jpeg")
    back = DeviceCache.load(tmp_path / "w")
    assert back.images.originals == whole.images.originals == 6
    assert torch.equal(back.images.data, whole.images.data)
