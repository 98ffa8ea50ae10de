"""Photos where users keep them: Hugging Face ``datasets`` and WebDataset tar shards.

The same JPEG files reach the cache from an ImageFolder, a ``datasets.Dataset`` and tar shards:
each route stores the files' own bytes (``storage="jpeg"``) and the same labels, and decodes
to each file's pixels; raw storage holds the decoded pixels. References: the files themselves
and torchvision's ``decode_jpeg``.
"""
import io
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision.io import ImageReadMode, decode_jpeg

from batchaug import DeviceCache
from batchaug.cli import main as cli_main
from batchaug.data import HuggingFaceImages, TarShards, write_cache
from batchaug.data.sources import expand_shards

pytestmark = pytest.mark.filterwarnings("ignore:The image decoding:DeprecationWarning")
datasets = pytest.importorskip("datasets")


def _jpeg(seed: int, h: int, w: int, **kw) -> bytes:
    g = np.random.default_rng(seed)
    y = np.linspace(0, 1, h)[:, None, None]
    x = np.linspace(0, 1, w)[None, :, None]
    arr = np.clip(y * np.array([150, 90, 40]) + x * np.array([60, 120, 200])
                  + g.integers(0, 30, (h, w, 3)), 0, 255).astype(np.uint8)
    b = io.BytesIO()
    Image.fromarray(arr).save(b, format="JPEG", quality=80 + seed, **kw)
    return b.getvalue()


FILES = [(_jpeg(k, 30 + 7 * k, 50 - 3 * k, progressive=k == 2), k % 3) for k in range(7)]


def _decoded(data: bytes) -> torch.Tensor:
    return decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8),
                       mode=ImageReadMode.UNCHANGED)


def _check(cache, files=FILES):
    assert len(cache) == len(files)
    assert torch.equal(cache.labels.cpu(), torch.tensor([c for _, c in files]))
    for i, (data, _) in enumerate(files):
        assert torch.equal(cache.image(i).cpu(), _decoded(data)), i
        if cache.storage == "jpeg":
            assert cache.images.bytes_of(i).cpu().numpy().tobytes() == data, i
    if cache.storage == "jpeg":
        assert cache.images.data.numel() == sum(len(d) for d, _ in files)
        assert cache.images.originals == len(files)


def _hf(files=FILES, image="image", label="label"):
    feats = datasets.Features({image: datasets.Image(),
                               label: datasets.ClassLabel(names=["a", "b", "c"]),
                               "caption": datasets.Value("string")})
    return datasets.Dataset.from_dict(
        {image: [{"bytes": d, "path": None} for d, _ in files], label: [c for _, c in files],
         "caption": ["x"] * len(files)}, features=feats)


def _shards(root: Path, files=FILES, per=3, extra_member=True):
    paths = []
    for s in range(0, len(files), per):
        p = root / f"train-{s // per:06d}.tar"
        with tarfile.open(p, "w") as tar:
            for k in range(s, min(s + per, len(files))):
                data, cls = files[k]
                members = [(f"sample{k:04d}.jpg", data), (f"sample{k:04d}.cls", str(cls).encode())]
                if extra_member:
                    members.append((f"sample{k:04d}.json", b"{}"))
                for name, blob in members:
                    info = tarfile.TarInfo(name)
                    info.size = len(blob)
                    tar.addfile(info, io.BytesIO(blob))
        paths.append(p)
    return paths


@pytest.mark.parametrize("storage", ["jpeg", "raw"])
def test_hugging_face_dataset_from_dataset_and_write_cache(tmp_path, storage):
    ds = _hf()
    cache = DeviceCache.from_dataset(ds, storage=storage)
    _check(cache)
    assert cache.classes == ["a", "b", "c"]
    write_cache(ds, tmp_path / "w", storage=storage, shuffle=False)
    back = DeviceCache.load(tmp_path / "w")
    _check(back)
    assert back.classes == ["a", "b", "c"]


def test_hugging_face_columns_are_found_or_named():
    ds = _hf(image="img", label="fine")
    assert HuggingFaceImages(ds).image_column == "img"
    _check(DeviceCache.from_dataset(HuggingFaceImages(ds, "img", "fine"), storage="jpeg"))
    two = ds.add_column("other", [0] * len(ds)).cast_column(
        "other", datasets.ClassLabel(names=["p", "q"]))
    with pytest.raises(ValueError, match="label_column"):
        HuggingFaceImages(two)
    assert HuggingFaceImages(two, label_column="other").classes == ["p", "q"]
    with pytest.raises(ValueError, match="image_column='nope' is not a column"):
        HuggingFaceImages(ds, image_column="nope")
    with pytest.raises(TypeError, match="ClassLabel or integer"):
        HuggingFaceImages(ds, label_column="caption")
    with pytest.raises(TypeError, match="datasets.Dataset"):
        HuggingFaceImages([1, 2])


def test_tar_shards_every_route_and_workers(tmp_path, capsys):
    paths = _shards(tmp_path)
    pattern = str(tmp_path / "train-{000000..000002}.tar")
    assert expand_shards(pattern) == [str(p) for p in paths]
    _check(DeviceCache.from_dataset(pattern, storage="jpeg"))
    _check(DeviceCache.from_dataset([str(p) for p in paths]))
    write_cache(TarShards(pattern), tmp_path / "w", storage="jpeg", shuffle=False,
                num_workers=2, chunk_size=2)
    _check(DeviceCache.load(tmp_path / "w"))
    assert cli_main(["cache", "build", pattern, str(tmp_path / "cli"), "--storage", "jpeg",
                     "--no-shuffle"]) == 0
    _check(DeviceCache.load(tmp_path / "cli"))
    capsys.readouterr()


def test_tar_shards_resume_and_a_node_part(tmp_path):
    """An interrupted write resumes; a node caches its own subset of shards."""
    paths = _shards(tmp_path)

    class Dying(TarShards):
        die_at = 4

        def __getitem__(self, i):
            if i == self.die_at:
                raise KeyboardInterrupt
            return super().__getitem__(i)

    with pytest.raises(KeyboardInterrupt):
        write_cache(Dying(paths), tmp_path / "w", storage="jpeg", shuffle=False, chunk_size=2)
    Dying.die_at = None
    write_cache(Dying(paths), tmp_path / "w", storage="jpeg", shuffle=False, chunk_size=2,
                resume=True)
    _check(DeviceCache.load(tmp_path / "w"))
    rank, world = 1, 2
    part = paths[rank::world]
    write_cache([str(p) for p in part], tmp_path / "part", storage="jpeg", shuffle=False)
    _check(DeviceCache.load(tmp_path / "part"), FILES[3:6])


def test_tar_shards_refuse_what_they_cannot_read(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such shard"):
        TarShards(str(tmp_path / "missing-000.tar"))
    with pytest.raises(ValueError, match="runs backwards"):
        expand_shards("s-{5..1}.tar")
    bad = tmp_path / "bad.tar"
    with tarfile.open(bad, "w") as tar:
        info = tarfile.TarInfo("a.jpg")
        info.size = len(FILES[0][0])
        tar.addfile(info, io.BytesIO(FILES[0][0]))
    with pytest.raises(ValueError, match=r"'a' has no \.cls label"):
        TarShards(str(bad))
    notes = tmp_path / "notes.tar"
    notes.write_bytes(b"not a tar at all" * 100)
    with pytest.raises(ValueError, match="not a readable uncompressed tar"):
        TarShards(str(notes))


# --- issue 35: WebDataset's grouping, paths that are not shards, HF datasets as they come ----
def _tar(path: Path, members) -> str:
    with tarfile.open(path, "w") as tar:
        for name, blob in members:
            info = tarfile.TarInfo(name)
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    return str(path)


def _png(seed: int, h: int, w: int, mode: str) -> bytes:
    arr = np.random.default_rng(seed).integers(0, 256, (h, w) if mode == "L" else (h, w, 3),
                                               dtype=np.uint8)
    b = io.BytesIO()
    Image.fromarray(arr, mode).save(b, format="PNG")
    return b.getvalue()


def test_tar_consecutive_members_with_one_key_form_one_sample(tmp_path):
    """WebDataset's rule: a key seen again after another key starts a new sample."""
    (a0, _), (b0, _), (a1, _) = FILES[:3]
    path = _tar(tmp_path / "s.tar", [("a.jpg", a0), ("a.cls", b"0"), ("b.jpg", b0),
                                      ("b.cls", b"1"), ("a.jpg", a1), ("a.cls", b"2")])
    shards = TarShards(path)
    assert len(shards) == 3 and shards.keys == ["a", "b", "a"]
    _check(DeviceCache.from_dataset(path, storage="jpeg"), [(a0, 0), (b0, 1), (a1, 2)])


def test_tar_two_members_with_one_suffix_in_a_sample_are_refused(tmp_path):
    path = _tar(tmp_path / "s.tar", [("a.jpg", FILES[0][0]), ("a.jpg", FILES[1][0]),
                                     ("a.cls", b"0")])
    with pytest.raises(ValueError, match="'a' has two 'jpg' members"):
        TarShards(path)


def test_tar_dotted_member_names_belong_to_their_key(tmp_path):
    # KEY.seg.png is KEY's "seg.png" member (not an image of a sample "KEY.seg")
    seg = _png(9, 4, 4, "L")
    path = _tar(tmp_path / "s.tar", [("k.jpg", FILES[0][0]), ("k.seg.png", seg),
                                     ("k.cls", b"2")])
    shards = TarShards(path)
    assert shards.keys == ["k"] and shards.source_bytes(0) == FILES[0][0]
    assert shards[0][1] == 2


def test_tar_grayscale_images_are_read_as_rgb(tmp_path):
    gray = _png(3, 6, 5, "L")
    path = _tar(tmp_path / "s.tar", [("g.png", gray), ("g.cls", b"1")])
    img, label = TarShards(path)[0]
    assert img.mode == "RGB" and label == 1
    want = np.asarray(Image.open(io.BytesIO(gray)).convert("RGB"))
    assert np.array_equal(np.asarray(img), want)


def test_tar_member_cut_short_is_named(tmp_path):
    path = _tar(tmp_path / "s.tar", [("a.jpg", FILES[0][0]), ("a.cls", b"12")])
    shards = TarShards(path)
    cls_offset = int(shards.index[0, 3])
    with open(path, "r+b") as f:  # the file now ends inside the .cls member
        f.truncate(cls_offset + 1)
    with pytest.raises(ValueError, match="truncated"):
        shards[0]


def test_shard_range_of_one():
    assert expand_shards("s-{07..07}.tar") == ["s-07.tar"]
    assert expand_shards("s-{3..3}.tar") == ["s-3.tar"]


@pytest.mark.parametrize("path", ["s.tar.gz", "images/", "s.tgz"])
def test_a_path_that_is_not_tar_shards_is_named(tmp_path, path):
    with pytest.raises(ValueError, match=r"dataset='.*' is a path but not uncompressed tar"):
        DeviceCache.from_dataset(str(tmp_path / path))
    with pytest.raises(ValueError, match="unpack a .tar.gz first"):
        write_cache(tmp_path / path, tmp_path / "w")


def test_hugging_face_transform_set_is_refused_naming_the_fix():
    ds = _hf().with_transform(lambda batch: {"image": [im.convert("L") for im in batch["image"]],
                                             "label": batch["label"]})
    with pytest.raises(ValueError, match=r"with_format\(None\)"):
        DeviceCache.from_dataset(ds)
    _check(DeviceCache.from_dataset(ds.with_format(None), storage="jpeg"))


def test_hugging_face_column_with_decode_false_is_decoded():
    ds = _hf().cast_column("image", datasets.Image(decode=False))
    _check(DeviceCache.from_dataset(ds, storage="jpeg"))
    _check(DeviceCache.from_dataset(ds, storage="raw"))


def test_hugging_face_label_and_labels_columns_are_ambiguous():
    ds = datasets.Dataset.from_dict(
        {"image": [{"bytes": d, "path": None} for d, _ in FILES[:2]], "label": [0, 1],
         "labels": [1, 0]}, features=datasets.Features({
             "image": datasets.Image(), "label": datasets.Value("int64"),
             "labels": datasets.Value("int64")}))
    with pytest.raises(ValueError, match="label_column"):
        HuggingFaceImages(ds)
    assert [HuggingFaceImages(ds, label_column="labels")[i][1] for i in range(2)] == [1, 0]


def test_hugging_face_unsigned_label_column():
    ds = datasets.Dataset.from_dict(
        {"image": [{"bytes": d, "path": None} for d, _ in FILES], "label": [c for _, c in FILES]},
        features=datasets.Features({"image": datasets.Image(), "label": datasets.Value("uint8")}))
    _check(DeviceCache.from_dataset(ds, storage="jpeg"))


def test_hugging_face_stored_bytes_win_over_the_stored_path(tmp_path):
    other = tmp_path / "other.jpg"  # written after the rows: datasets keeps both then
    feats = datasets.Features({"image": datasets.Image(), "label": datasets.Value("int64")})
    ds = datasets.Dataset.from_dict(
        {"image": [{"bytes": FILES[0][0], "path": str(other)}], "label": [0]}, features=feats)
    other.write_bytes(FILES[1][0])
    assert HuggingFaceImages(ds).source_bytes(0) == FILES[0][0]
    only_path = datasets.Dataset.from_dict(
        {"image": [{"bytes": None, "path": str(other)}], "label": [0]}, features=feats)
    assert HuggingFaceImages(only_path).source_bytes(0) == FILES[1][0]
