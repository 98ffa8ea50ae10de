"""DeviceCache: constructors, on-disk format (round trip, damage, interruption), guards."""
import errno
import json
import os
import pickle

import numpy as np
import pytest
import torch
from PIL import Image

import batchaug.data.atomic as atomic
import batchaug.data.format as fmt
from batchaug import CacheFormatError, DeviceCache, DeviceLoader, DeviceMemoryError
from batchaug.data.cache import pickling_error
from batchaug.data.storage import check_device_memory, device_free_bytes, memory_check_error

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
DTYPES = [torch.uint8, torch.float16, torch.bfloat16, torch.float32]


def random_cache(n=13, shape=(3, 5, 7), dtype=torch.uint8, channels_last=False, classes=True):
    g = torch.Generator().manual_seed(n)
    images = torch.randint(0, 256, (n, *shape), dtype=torch.uint8, generator=g)
    labels = torch.randint(0, 4, (n,), generator=g)
    return DeviceCache.from_tensors(images, labels, device="cpu", dtype=dtype,
                                    channels_last=channels_last,
                                    classes=["a", "b", "c", "d"] if classes else None)


def rewrite_meta(path, **changes):
    """Edit meta.json as a careless tool would, or (``fix=True``) re-sealing the checksum."""
    fix = changes.pop("fix", False)
    meta = json.loads((path / "meta.json").read_text())
    meta.update(changes)
    if fix:
        meta["meta_sha256"] = fmt._meta_checksum(meta)
    (path / "meta.json").write_text(json.dumps(meta))


# --- constructors -------------------------------------------------------------------------------
def test_from_tensors_numpy_nhwc_and_torch_nchw_agree():
    x = np.random.default_rng(0).integers(0, 256, (6, 9, 8, 3), dtype=np.uint8)
    a = DeviceCache.from_tensors(x, np.arange(6), device="cpu", layout="NHWC")
    b = DeviceCache.from_tensors(torch.from_numpy(x).permute(0, 3, 1, 2), list(range(6)),
                                 device="cpu")
    assert a.images.shape == (6, 3, 9, 8)
    assert torch.equal(a.images, b.images) and torch.equal(a.labels, b.labels)
    assert a.labels.dtype == torch.int64 and len(a) == 6


def test_from_tensors_uses_matching_tensors_without_copy():
    x = torch.zeros(4, 3, 2, 2, dtype=torch.uint8)
    cache = DeviceCache.from_tensors(x, torch.arange(4), device="cpu")
    assert cache.images.data_ptr() == x.data_ptr()


@pytest.mark.parametrize("dtype", DTYPES[1:])
def test_float_storage_is_scaled_to_unit_range(dtype):
    base = random_cache()
    cache = DeviceCache.from_tensors(base.images, base.labels, device="cpu", dtype=dtype)
    assert cache.dtype == dtype
    expected = (base.images.float() / 255).to(dtype)
    assert torch.equal(cache.images, expected)
    back = DeviceCache.from_tensors(cache.images, cache.labels, device="cpu", dtype=torch.uint8)
    assert torch.equal(back.images, base.images)


def test_from_tensors_rejects_bad_input():
    x = torch.zeros(4, 3, 2, 2, dtype=torch.uint8)
    with pytest.raises(ValueError, match=r"labels must have shape \(4,\) to match images"):
        DeviceCache.from_tensors(x, torch.arange(3), device="cpu")
    with pytest.raises(TypeError, match="labels must be an integer tensor"):
        DeviceCache.from_tensors(x, torch.zeros(4), device="cpu")
    with pytest.raises(ValueError, match="labels must be >= 0"):
        DeviceCache.from_tensors(x, torch.tensor([0, 1, -1, 2]), device="cpu")
    with pytest.raises(ValueError, match="layout must be 'NCHW' or 'NHWC'"):
        DeviceCache.from_tensors(x, torch.arange(4), device="cpu", layout="CHWN")
    with pytest.raises(ValueError, match=r"images must be 4-D \(NCHW\)"):
        DeviceCache.from_tensors(x[0], torch.arange(3), device="cpu")
    with pytest.raises(TypeError, match="pass dtype= one of .* or convert them first"):
        DeviceCache.from_tensors(x.long(), torch.arange(4), device="cpu")
    with pytest.raises(ValueError, match="out of range"):
        DeviceCache.from_tensors(x, torch.arange(4), device="cpu", classes=["a", "b"])


def test_accessors_and_repr():
    cache = random_cache(n=10, channels_last=True)
    assert cache.nbytes == 10 * 3 * 5 * 7 + 10 * 8
    assert cache.classes == ["a", "b", "c", "d"]
    text = repr(cache)
    for part in ("(10, 3, 5, 7)", "uint8", "channels_last", "device=cpu", "KiB"):
        assert part in text


@pytest.mark.parametrize("channels_last", [False, True])
def test_dense_and_ragged_columns_answer_the_accessors_alike(channels_last):
    # one cache, its images as a dense tensor and as a (same-size) ragged column: every
    # accessor goes through the column, so both must agree (nbytes: the ragged index on top)
    from batchaug.data.ragged import RaggedImages

    dense = random_cache(n=6, shape=(3, 5, 7), channels_last=channels_last)
    ragged = DeviceCache(RaggedImages.from_list([dense.images[i].contiguous()
                                                  for i in range(6)]),
                         dense.labels, dense.classes)
    assert dense.sizes.tolist() == ragged.sizes.tolist() == [[5, 7]] * 6
    assert all(torch.equal(dense.image(i), ragged.image(i)) for i in range(6))
    assert (dense.storage, dense.ragged) == (ragged.storage, ragged.ragged) == ("raw", False)
    assert dense.channels_last == channels_last and not ragged.channels_last
    assert dense.nbytes + 6 * 5 * 8 == ragged.nbytes
    assert "(6, 3, 5, 7) uint8" in repr(dense) and "(6, 3, 5, 7) uint8" in repr(ragged)
    assert ("channels_last" in repr(dense)) == channels_last
    host = DeviceCache(dense.images, dense.labels, placement="host")
    moved = host.to("cpu")
    assert moved.placement == "device" and moved.channels_last == channels_last
    assert torch.equal(moved.images, dense.images)
    assert moved.images.data_ptr() != dense.images.data_ptr()


# --- from_dataset -------------------------------------------------------------------------------
def _arrays(n=9, h=6, w=5):
    return np.random.default_rng(1).integers(0, 256, (n, h, w, 3), dtype=np.uint8)


@pytest.mark.parametrize("kind", ["pil", "numpy", "tensor", "float_tensor"])
def test_from_dataset_accepts_pil_numpy_and_tensors(kind):
    arrays = _arrays()
    make = {
        "pil": lambda a: Image.fromarray(a),
        "numpy": lambda a: a,
        "tensor": lambda a: torch.from_numpy(a).permute(2, 0, 1),
        "float_tensor": lambda a: torch.from_numpy(a).permute(2, 0, 1).float() / 255,
    }[kind]
    dataset = [(make(a), i % 3) for i, a in enumerate(arrays)]
    cache = DeviceCache.from_dataset(dataset, device="cpu", progress=False)
    assert torch.equal(cache.images, torch.from_numpy(arrays).permute(0, 3, 1, 2))
    assert cache.labels.tolist() == [i % 3 for i in range(len(arrays))]


def test_from_dataset_fakedata_workers_pre_transform_dtype():
    from torchvision.datasets import FakeData
    from torchvision.transforms import CenterCrop, Compose, Resize

    data = FakeData(24, (3, 20, 30), num_classes=5, random_offset=3)
    pre = Compose([Resize(12), CenterCrop(10)])
    one = DeviceCache.from_dataset(data, pre, device="cpu", progress=False)
    two = DeviceCache.from_dataset(data, pre, device="cpu", num_workers=2, progress=False,
                                   dtype=torch.float32, channels_last=True)
    assert one.images.shape == (24, 3, 10, 10) and one.dtype == torch.uint8
    assert torch.equal(one.labels, torch.tensor([int(data[i][1]) for i in range(24)]))
    assert two.channels_last and two.dtype == torch.float32
    assert torch.equal(two.images, one.images.float() / 255)


def test_from_dataset_mismatched_sizes_name_the_index_and_shapes():
    # uint8 images of different sizes make a ragged cache; a floating one cannot hold them.
    arrays = [np.zeros((8, 8, 3), np.uint8)] * 3 + [np.zeros((9, 8, 3), np.uint8)]
    with pytest.raises(ValueError) as info:
        DeviceCache.from_dataset([(a, 0) for a in arrays], device="cpu", progress=False,
                                 dtype=torch.float32)
    msg = str(info.value)
    assert "dataset[3]" in msg and "(3, 9, 8)" in msg and "(3, 8, 8)" in msg
    assert "pre_transform" in msg


def test_from_dataset_bad_samples():
    with pytest.raises(TypeError, match=r"dataset\[1\]"):
        DeviceCache.from_dataset([(np.zeros((2, 2, 3), np.uint8), 0), ("x", 0)], device="cpu")
    with pytest.raises(TypeError, match=r"dataset\[0\]: label must be an int"):
        DeviceCache.from_dataset([(np.zeros((2, 2, 3), np.uint8), 0.5)], device="cpu")
    with pytest.raises(ValueError, match="dataset is empty: nothing to cache"):
        DeviceCache.from_dataset([], device="cpu")


# --- on-disk format -----------------------------------------------------------------------------
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_save_load_round_trip_is_exact(tmp_path, dtype, channels_last):
    cache = random_cache(dtype=dtype, channels_last=channels_last)
    cache.save(tmp_path / "c")
    back = DeviceCache.load(tmp_path / "c", device="cpu", verify=True)
    assert back.dtype == dtype and back.channels_last == channels_last
    assert torch.equal(back.images, cache.images) and torch.equal(back.labels, cache.labels)
    assert back.classes == cache.classes and back.source["kind"] == "tensors"
    # images.npy is a plain .npy anyone can memory-map (bf16 as raw uint16 bits)
    arr = np.load(tmp_path / "c" / "images.npy", mmap_mode="r", allow_pickle=False)
    assert arr.shape[0] == len(cache)


def test_round_trip_without_classes_and_empty_directory_replaced(tmp_path):
    (tmp_path / "c").mkdir()
    cache = random_cache(classes=False)
    cache.save(tmp_path / "c", overwrite=True)
    assert DeviceCache.load(tmp_path / "c", device="cpu").classes is None


def test_save_refuses_to_clobber(tmp_path):
    random_cache().save(tmp_path / "c")
    with pytest.raises(FileExistsError, match="overwrite"):
        random_cache().save(tmp_path / "c")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("precious")
    with pytest.raises(FileExistsError, match="not a batchaug cache"):
        random_cache().save(tmp_path / "mine", overwrite=True)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "precious"


def test_truncated_images_npy(tmp_path):
    random_cache().save(tmp_path / "c")
    p = tmp_path / "c" / "images.npy"
    os.truncate(p, p.stat().st_size - 50)
    with pytest.raises(CacheFormatError, match="images.npy.*truncated") as info:
        DeviceCache.load(tmp_path / "c", device="cpu")
    assert info.value.path == str(p)


def test_truncated_images_npy_with_resealed_meta(tmp_path):
    # Even if meta.json is made to agree with the short file, the .npy header does not.
    random_cache().save(tmp_path / "c")
    p = tmp_path / "c" / "images.npy"
    os.truncate(p, p.stat().st_size - 50)
    meta = json.loads((tmp_path / "c" / "meta.json").read_text())
    files = meta["files"]
    files["images.npy"]["size"] = p.stat().st_size
    rewrite_meta(tmp_path / "c", files=files, fix=True)
    with pytest.raises(CacheFormatError, match="images.npy"):
        DeviceCache.load(tmp_path / "c", device="cpu")


def test_edited_meta_json(tmp_path):
    random_cache().save(tmp_path / "c")
    rewrite_meta(tmp_path / "c", classes=["w", "x", "y", "z"])
    with pytest.raises(CacheFormatError, match="meta.json.*edited"):
        DeviceCache.load(tmp_path / "c", device="cpu")
    (tmp_path / "c" / "meta.json").write_text("{not json")
    with pytest.raises(CacheFormatError, match="meta.json.*JSON"):
        DeviceCache.load(tmp_path / "c", device="cpu")


def test_meta_shape_disagreeing_with_npy_header(tmp_path):
    random_cache().save(tmp_path / "c")
    rewrite_meta(tmp_path / "c", shape=[13, 3, 7, 5], fix=True)
    with pytest.raises(CacheFormatError, match="images.npy.*meta.json records"):
        DeviceCache.load(tmp_path / "c", device="cpu")


def test_flipped_byte_caught_by_verify(tmp_path):
    cache = random_cache()
    cache.save(tmp_path / "c")
    p = tmp_path / "c" / "images.npy"
    data = bytearray(p.read_bytes())
    data[-3] ^= 0xFF
    p.write_bytes(bytes(data))
    loaded = DeviceCache.load(tmp_path / "c", device="cpu")  # sizes alone cannot see it
    assert not torch.equal(loaded.images, cache.images)
    with pytest.raises(CacheFormatError, match="images.npy.*SHA-256"):
        DeviceCache.load(tmp_path / "c", device="cpu", verify=True)


@pytest.mark.parametrize("name", ["images.npy", "labels.npy"])
def test_missing_file(tmp_path, name):
    random_cache().save(tmp_path / "c")
    (tmp_path / "c" / name).unlink()
    with pytest.raises(CacheFormatError, match=f"{name}.*missing"):
        DeviceCache.load(tmp_path / "c", device="cpu")


def test_newer_format_version(tmp_path):
    random_cache().save(tmp_path / "c")
    rewrite_meta(tmp_path / "c", format_version=fmt.FORMAT_VERSION + 1, fix=True)
    with pytest.raises(CacheFormatError, match="meta.json.*newer.*upgrade"):
        DeviceCache.load(tmp_path / "c", device="cpu")


def test_foreign_directories(tmp_path):
    (tmp_path / "photos").mkdir()
    (tmp_path / "photos" / "a.jpg").write_bytes(b"x")
    with pytest.raises(CacheFormatError, match="meta.json.*not a batchaug cache"):
        DeviceCache.load(tmp_path / "photos", device="cpu")
    (tmp_path / "photos" / "meta.json").write_text(json.dumps({"format": "other", "v": 1}))
    with pytest.raises(CacheFormatError, match="not a batchaug cache"):
        DeviceCache.load(tmp_path / "photos", device="cpu")
    with pytest.raises(FileNotFoundError):
        DeviceCache.load(tmp_path / "nothing", device="cpu")


def test_labels_outside_the_recorded_classes(tmp_path):
    random_cache().save(tmp_path / "c")
    rewrite_meta(tmp_path / "c", classes=["only"], fix=True)
    with pytest.raises(CacheFormatError, match="labels.npy.*out of range"):
        DeviceCache.load(tmp_path / "c", device="cpu")


def test_pickled_npy_is_refused_not_loaded(tmp_path):
    random_cache().save(tmp_path / "c")
    p = tmp_path / "c" / "labels.npy"
    np.save(p, np.array([object()] * 13, dtype=object), allow_pickle=True)
    meta = json.loads((tmp_path / "c" / "meta.json").read_text())
    meta["files"]["labels.npy"] = {"size": p.stat().st_size, "sha256": fmt.sha256_file(p)}
    rewrite_meta(tmp_path / "c", files=meta["files"], fix=True)
    with pytest.raises(CacheFormatError, match="labels.npy"):
        DeviceCache.load(tmp_path / "c", device="cpu", verify=True)


@pytest.mark.parametrize("fail_on", ["labels.npy", "meta.json"])
def test_interrupted_save_leaves_nothing_loadable(tmp_path, monkeypatch, fail_on):
    real = fmt.write_file

    def failing(path, data):
        if path.name == fail_on:
            real(path, data[: len(data) // 2])  # half-written, then the "crash"
            raise KeyboardInterrupt
        return real(path, data)

    monkeypatch.setattr(fmt, "write_file", failing)
    with pytest.raises(KeyboardInterrupt):
        random_cache().save(tmp_path / "c")
    assert list(tmp_path.iterdir()) == []  # no cache, no temporary directory
    with pytest.raises(FileNotFoundError):
        DeviceCache.load(tmp_path / "c", device="cpu")


def test_interrupted_overwrite_keeps_the_old_cache(tmp_path, monkeypatch):
    old = random_cache(n=5)
    old.save(tmp_path / "c")

    def failing(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(fmt, "write_file", failing)
    with pytest.raises(OSError, match="disk full"):
        random_cache(n=9).save(tmp_path / "c", overwrite=True)
    assert [p.name for p in tmp_path.iterdir()] == ["c"]
    assert torch.equal(DeviceCache.load(tmp_path / "c", device="cpu", verify=True).images,
                       old.images)


@pytest.mark.parametrize("exchange", ["fails", "unsupported"])
def test_failed_publish_keeps_the_old_cache(tmp_path, monkeypatch, exchange):
    # The atomic exchange fails outright, or is unsupported (NFS...) and the fallback's second
    # rename fails: either way the old cache stays at PATH and nothing else is left.
    old = random_cache(n=5)
    old.save(tmp_path / "c")

    def swap(a, b):
        raise OSError(errno.EIO if exchange == "fails" else errno.EINVAL, "exchange failed")

    real = os.rename

    def rename(src, dst):
        if ".tmp-" in str(src):
            raise OSError("rename failed")
        return real(src, dst)

    monkeypatch.setattr(atomic, "_exchange", swap)
    monkeypatch.setattr(atomic.os, "rename", rename)
    with pytest.raises(OSError, match="exchange failed" if exchange == "fails" else "rename"):
        random_cache(n=9).save(tmp_path / "c", overwrite=True)
    assert [p.name for p in tmp_path.iterdir()] == ["c"]
    assert torch.equal(DeviceCache.load(tmp_path / "c", device="cpu").images, old.images)


def test_shard_loads_the_right_contiguous_part(tmp_path):
    cache = random_cache(n=10)
    cache.save(tmp_path / "c")
    parts = [DeviceCache.load(tmp_path / "c", device="cpu", shard=(r, 3)) for r in range(3)]
    assert [len(p) for p in parts] == [3, 3, 4]
    assert torch.equal(torch.cat([p.images for p in parts]), cache.images)
    assert torch.equal(torch.cat([p.labels for p in parts]), cache.labels)
    assert all(p.shard == (r, 3) and p.global_len == 10 for r, p in enumerate(parts))
    assert torch.equal(parts[1].images, cache.images[3:6])
    with pytest.raises(ValueError, match="shard must satisfy 0 <= rank < world_size"):
        DeviceCache.load(tmp_path / "c", device="cpu", shard=(3, 3))
    with pytest.raises(TypeError, match=r"shard must be a \(rank, world_size\) pair of ints"):
        DeviceCache.load(tmp_path / "c", device="cpu", shard=1)


# --- guards -------------------------------------------------------------------------------------
def test_memory_check_decision():
    assert memory_check_error(100, 100) is None
    err = memory_check_error(3 * 2**30, 2**30, "cuda:0")
    assert isinstance(err, DeviceMemoryError) and isinstance(err, MemoryError)
    msg = str(err)
    assert str(3 * 2**30) in msg and str(2**30) in msg and "cuda:0" in msg
    assert "uint8" in msg and "shard=" in msg and "resize" in msg
    assert (err.needed, err.free) == (3 * 2**30, 2**30)


def test_memory_check_queries_cuda_free_memory(monkeypatch):
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (1000, 8000))
    check_device_memory(1000, torch.device("cuda", 0))
    with pytest.raises(DeviceMemoryError, match="1001 bytes"):
        check_device_memory(1001, torch.device("cuda", 0))
    check_device_memory(10**15, torch.device("cpu"))  # the CPU is not checked


def test_memory_check_counts_memory_pytorch_cached_but_does_not_use(monkeypatch):
    # The driver reports 1000 bytes free; PyTorch's allocator holds 600 bytes of which tensors
    # use 100: the other 500 are free for a new tensor too (the allocator reuses, or releases
    # and retries, before an out-of-memory error).
    asked = []
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (1000, 8000))
    monkeypatch.setattr(torch.cuda, "memory_reserved",
                        lambda device=None: asked.append(device) or 600)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 100)
    dev = torch.device("cuda", 1)
    assert device_free_bytes(dev) == 1500 and asked == [dev]  # the device asked about
    check_device_memory(1500, dev)
    with pytest.raises(DeviceMemoryError, match=r"1501 bytes\) on cuda:1 but only 1.5 KiB "
                                                r"\(1500 bytes\) are free"):
        check_device_memory(1501, dev)
    assert device_free_bytes(torch.device("cpu")) is None


def test_pickling_guard():
    cpu = random_cache()
    back = pickle.loads(pickle.dumps(cpu))
    assert torch.equal(back.images, cpu.images) and back.classes == cpu.classes
    assert pickling_error(torch.device("cpu")) is None
    err = pickling_error(torch.device("cuda", 0))
    assert isinstance(err, pickle.PicklingError)
    assert "DeviceLoader" in str(err) and "num_workers=0" in str(err)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA message")
def test_asking_for_cuda_without_cuda_is_a_clear_error():
    with pytest.raises(ValueError, match="CUDA is not available"):
        DeviceCache.from_tensors(torch.zeros(2, 1, 1, 1, dtype=torch.uint8), [0, 1],
                                 device="cuda")


@needs_cuda
def test_cuda_cache_refuses_pickling_and_round_trips(tmp_path):
    cache = random_cache(channels_last=True).to("cuda")
    with pytest.raises(pickle.PicklingError, match="DeviceLoader"):
        pickle.dumps(cache)
    cache.save(tmp_path / "c")
    back = DeviceCache.load(tmp_path / "c", device="cuda", verify=True)
    assert back.device.type == "cuda" and back.channels_last
    assert torch.equal(back.images.cpu(), cache.images.cpu())
    x, y = next(iter(DeviceLoader(back, 4)))
    assert x.is_cuda and y.is_cuda


@needs_cuda
def test_cuda_memory_check_is_real():
    dev = torch.device("cuda", torch.cuda.current_device())
    with pytest.raises(DeviceMemoryError):
        check_device_memory(device_free_bytes(dev) + 2**30, dev)


@needs_cuda
def test_cuda_free_memory_counts_what_the_allocator_cached():
    dev = torch.device("cuda", torch.cuda.current_device())
    x = torch.empty(256 * 2**20, dtype=torch.uint8, device=dev)
    del x  # its block stays reserved by PyTorch: the driver no longer counts it as free
    driver_free = torch.cuda.mem_get_info(dev)[0]
    assert device_free_bytes(dev) >= driver_free + 256 * 2**20
    check_device_memory(driver_free + 128 * 2**20, dev)  # fits only when the cache counts
    y = torch.empty(driver_free + 128 * 2**20, dtype=torch.uint8, device=dev)  # and it does
    del y
    torch.cuda.empty_cache()  # give the whole device back to the driver for the next tests
