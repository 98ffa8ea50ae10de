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


# --- issue 35 items 4 and 6: where the JPEG ends, and EXIF orientation -----------------------
from batchaug.data import jpeg as jpeg_codec  # noqa: E402
from batchaug.data.jpeg import jpeg_file_bytes  # noqa: E402


def _segment(marker: int, payload: bytes) -> bytes:
    return bytes([0xFF, marker]) + (len(payload) + 2).to_bytes(2, "big") + payload


def _with_segments(data: bytes, *segments: bytes) -> bytes:
    """JPEG bytes with marker segments inserted right after SOI."""
    return data[:2] + b"".join(segments) + data[2:]


def _plain_jpeg(seed=0, h=20, w=28, **kw) -> bytes:
    b = io.BytesIO()
    Image.fromarray(_photo(seed, h, w)).save(b, format="JPEG", quality=90, **kw)
    return b.getvalue()


@pytest.mark.parametrize("options", [{}, {"progressive": True}, {"restart_marker_blocks": 1}])
def test_end_of_stream_is_found_by_the_marker_segments(options):
    base = _plain_jpeg(**options)
    if options.get("restart_marker_blocks"):  # restart markers inside the scan
        assert base.count(b"\xff\xd0") and base.count(b"\xff\xd1")
    assert jpeg_file_bytes(base).numpy().tobytes() == base
    inside = _with_segments(base, _segment(0xFE, b"a comment \xff\xd9 with an end marker"),
                            _segment(0xE1, b"Exif\x00\x00MM\x00\x2a\xff\xd9\x00\x00"))
    # a motion photo: a payload after the image that holds FF D9 itself
    trailer = b"ftypmp4" + bytes(range(256)) * 40 + b"\xff\xd9" + b"\x00" * 3
    assert jpeg_file_bytes(inside + trailer).numpy().tobytes() == inside
    assert jpeg_file_bytes(base + trailer).numpy().tobytes() == base
    assert jpeg_file_bytes(base[:-2]) is None  # no end marker: not kept as a JPEG's bytes
    assert jpeg_file_bytes(b"\xff\xd8\xff\xd9")  .numpy().tobytes() == b"\xff\xd8\xff\xd9"


def test_a_file_with_a_trailing_payload_keeps_only_its_jpeg(tmp_path):
    (tmp_path / "a").mkdir()
    base = _with_segments(_plain_jpeg(), _segment(0xFE, b"\xff\xd9"))
    trailer = b"\x00\x00\x00\x18ftypmp42" + b"\xff\xd9" * 500 + b"tail"
    (tmp_path / "a" / "x.jpg").write_bytes(base + trailer)
    dataset = ImageFolder(str(tmp_path), loader=_rgb)
    cache = DeviceCache.from_dataset(dataset, storage="jpeg")
    assert cache.images.originals == 1
    assert cache.images.bytes_of(0).cpu().numpy().tobytes() == base
    assert torch.equal(cache.image(0), v2.functional.pil_to_tensor(_rgb(tmp_path / "a" / "x.jpg")))


def _oriented(seed: int, orientation: int, h=18, w=30, endian=">") -> bytes:
    exif = Image.Exif()
    exif.endian = endian  # "MM" (PIL's default) or "II" TIFF byte order
    exif[0x010F] = "camera"  # another tag first: the orientation entry is not the first
    exif[0x0112] = orientation
    b = io.BytesIO()
    Image.fromarray(_photo(seed, h, w)).save(b, format="JPEG", quality=90, exif=exif.tobytes())
    return b.getvalue()


@pytest.fixture(params=["torchcodec", "torchvision"])
def decoder(request, monkeypatch):
    """Each JPEG decoder the codec may pick (TorchCodec where installed, else torchvision's)."""
    if request.param == "torchcodec":
        if jpeg_codec._torchcodec("decoder") is None:
            pytest.skip("TorchCodec is not installed")
    else:
        monkeypatch.setitem(jpeg_codec._CODEC, "decoder", None)
    monkeypatch.setattr(jpeg_codec, "_DECODE", None)
    return request.param


@pytest.mark.parametrize("endian", ["<", ">"])
@pytest.mark.parametrize("orientation", [2, 3, 6, 8])
def test_exif_orientation_is_not_applied_by_any_decoder(orientation, endian, decoder):
    data = _oriented(orientation, orientation, endian=endian)
    assert data[:40].count(b"II*\x00" if endian == "<" else b"MM\x00*") == 1
    t = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    stored = torch.from_numpy(np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
                              ).permute(2, 0, 1)  # ImageFolder + PIL: not applied
    assert torch.equal(jpeg_codec.decode_jpegs([t], torch.device("cpu"))[0], stored)
    assert torch.equal(jpeg_codec.decode_jpegs([t, t], torch.device("cpu"), threads=2)[1], stored)
    window = torch.tensor([[2, 3, 11, 17]])
    got = jpeg_codec.decode_jpegs([t], torch.device("cpu"), windows=window)[0]
    assert torch.equal(got, stored[:, 2:13, 3:20])
    assert torch.equal(t, torch.frombuffer(bytearray(data), dtype=torch.uint8))  # not modified
    neutral = jpeg_codec.without_orientation(t).numpy().tobytes()
    exif = Image.open(io.BytesIO(neutral)).getexif()
    assert exif[0x0112] == 1 and exif[0x010F] == "camera" and len(neutral) == len(data)


def test_exif_rotated_files_are_kept_and_read_the_same_by_every_decoder(tmp_path, monkeypatch):
    """Built with torchvision's decoder, loaded with TorchCodec's (and the other way): the same
    pixels, the files' own bytes kept, and the loader's batches equal each image alone."""
    from batchaug import CenterCrop
    from batchaug.data import DeviceLoader

    for k, o in enumerate([1, 3, 6, 8, 5]):
        d = tmp_path / "src" / "c"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{k}.jpg").write_bytes(_oriented(k, o, 18 + k, 30 - k))
    dataset = ImageFolder(str(tmp_path / "src"), loader=_rgb)
    want = [v2.functional.pil_to_tensor(_rgb(p)) for p, _ in dataset.samples]
    decoders = ["torchvision"] + (["torchcodec"] if jpeg_codec._torchcodec("decoder") else [])
    for build in decoders:
        for load in decoders:
            with monkeypatch.context() as m:
                m.setattr(jpeg_codec, "_DECODE", None)
                if build == "torchvision":
                    m.setitem(jpeg_codec._CODEC, "decoder", None)
                write_cache(dataset, tmp_path / build, storage="jpeg", shuffle=False,
                            overwrite=True)
            with monkeypatch.context() as m:
                m.setattr(jpeg_codec, "_DECODE", None)
                if load == "torchvision":
                    m.setitem(jpeg_codec._CODEC, "decoder", None)
                cache = DeviceCache.load(tmp_path / build)
                assert cache.images.originals == len(want), (build, load)
                for i, w in enumerate(want):
                    assert torch.equal(cache.image(i), w), (build, load, i)
                loader = DeviceLoader(cache, 5, crop=CenterCrop((12, 20)), shuffle=False)
                x, _ = next(iter(loader))
                for i, w in enumerate(want):
                    assert torch.equal(x[i], v2.functional.center_crop(w, [12, 20])), i


def test_a_pre_transform_that_changes_pixels_but_not_the_shape_is_encoded(tmp_path):
    """The file's bytes are kept only when they decode to the pipeline's pixels: an inverting
    pre-transform keeps every shape, yet each image is encoded (and decodes near the
    inverted pixels, not the file's)."""
    _folder(tmp_path / "src")
    dataset = ImageFolder(str(tmp_path / "src"), loader=_rgb)
    invert = v2.Compose([v2.PILToTensor(), v2.RandomInvert(p=1.0)])
    cache = DeviceCache.from_dataset(dataset, pre_transform=invert, storage="jpeg", quality=95)
    assert cache.images.originals == 0
    for i, (path, _) in enumerate(dataset.samples):
        want = 255 - _file_decode(Path(path))
        assert cache.image(i).shape == want.shape
        assert (cache.image(i).float() - want.float()).abs().mean() < 8, path


def test_a_part_of_a_cache_does_not_keep_the_whole_caches_originals_count(tmp_path, capsys):
    """6 of 9 images are the files' own bytes: a shard of the cache cannot
    say how many of its own are (not recorded per image), unless it is all of it or none
    were (the count then holds for every part)."""
    _folder(tmp_path / "src", extra=True)
    dataset = ImageFolder(str(tmp_path / "src"), loader=_rgb)
    cache = DeviceCache.from_dataset(dataset, storage="jpeg", quality=95)
    assert cache.images.originals == 6 and len(cache) == 9
    cache.save(tmp_path / "c")
    assert DeviceCache.load(tmp_path / "c").images.originals == 6
    part = DeviceCache.load(tmp_path / "c", shard=(1, 2))
    assert len(part) < 9 and part.images.originals is None
    assert "encoded" not in repr(part)  # not "6 own bytes, -1 encoded"
    encoded = DeviceCache.from_dataset(dataset, pre_transform=v2.Resize(20), storage="jpeg")
    assert encoded.images.originals == 0
