"""The streaming cache writer, ``batchaug.data.write_cache`` (issue 8 item 5).

Its output is compared byte for byte, all three files, with ``DeviceCache.from_dataset(...)
.save(...)``: meta.json holds no timestamp, so the directories are identical. Kills happen in
subprocesses (``os._exit`` inside ``dataset[i]``), decodes are counted in a file the dataset
appends to (worker processes count too), and peak memory is the kernel's VmHWM.
"""
from __future__ import annotations

import collections
import errno
import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from batchaug import DeviceCache
from batchaug.data import atomic, writer
from batchaug.data.ingest import BadImageError
from batchaug.data.writer import DiskFullError, write_cache

FILES = ("images.npy", "labels.npy", "meta.json")
HERE = Path(__file__).resolve().parent


class Synthetic:
    """``n`` deterministic CHW uint8 images (a pure function of the index) and labels.

    ``log``: a file each ``__getitem__`` appends its index to (counts decodes in workers too).
    ``die_at``: ``os._exit`` when that index is read (a killed writer). ``bad``: indices whose
    read fails like a corrupt file. ``odd``: index -> other (C, H, W) shape.
    """

    classes = ["a", "b", "c"]

    def __init__(self, n, shape=(3, 9, 7), log=None, die_at=None, bad=(), odd=None,
                 interrupt_at=None, label_at=None):
        self.n, self.shape, self.log, self.die_at = n, tuple(shape), log, die_at
        self.bad, self.odd, self.interrupt_at = set(bad), dict(odd or {}), interrupt_at
        self.label_at = dict(label_at or {})

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.log is not None:
            with open(self.log, "a") as f:
                f.write(f"{i}\n")
        if i == self.die_at:
            os._exit(3)
        if i == self.interrupt_at:
            raise KeyboardInterrupt
        if i in self.bad:
            raise OSError("image file is truncated")
        g = torch.Generator().manual_seed(i)
        shape = self.odd.get(i, self.shape)
        return (torch.randint(0, 256, shape, dtype=torch.uint8, generator=g),
                self.label_at.get(i, i % 3))


ORDER_FIELDS = ("order", "shuffle_seed")


def _meta_without_order(path: Path) -> dict:
    meta = json.loads((path / "meta.json").read_text())
    meta.pop("meta_sha256")
    meta["source"] = {k: v for k, v in meta["source"].items() if k not in ORDER_FIELDS}
    return meta


def same_files(a: Path, b: Path) -> bool:
    """The same images.npy, labels.npy and meta.json; meta.json's record of the stored order
    (which only ``write_cache`` writes) aside."""
    return sorted(os.listdir(a)) == sorted(FILES) == sorted(os.listdir(b)) and all(
        (a / f).read_bytes() == (b / f).read_bytes() for f in FILES[:2]) and (
        _meta_without_order(a) == _meta_without_order(b))


def decodes(log: Path) -> list:
    return [int(v) for v in log.read_text().split()] if log.exists() else []


# --- same files as from_dataset(...).save(...) --------------------------------------------------
@pytest.mark.parametrize("dtype,channels_last", [(torch.uint8, False), (torch.float16, True),
                                                 (torch.bfloat16, False)])
def test_same_files_as_from_dataset_then_save(tmp_path, dtype, channels_last):
    ds = Synthetic(150)
    DeviceCache.from_dataset(ds, device="cpu", dtype=dtype,
                             channels_last=channels_last).save(tmp_path / "saved")
    r = write_cache(ds, tmp_path / "written", dtype=dtype, channels_last=channels_last,
                    chunk_size=32, shuffle=False)
    assert same_files(tmp_path / "saved", tmp_path / "written")
    assert (r.rows, r.shape, r.resumed_from, r.skipped) == (150, (150, 3, 9, 7), 0, [])
    back = DeviceCache.load(tmp_path / "written", device="cpu", verify=True)
    assert back.dtype == dtype and back.channels_last == channels_last
    assert sorted(os.listdir(tmp_path)) == ["saved", "written"]  # no work files, no lock


class Floating(Synthetic):
    """CHW float32 images in [0, 1] (what ``ToTensor`` gives)."""

    def __getitem__(self, i):
        image, label = super().__getitem__(i)
        return image.float() / 255, label


@pytest.mark.parametrize("workers", [0, 2])
def test_floating_images_same_files(tmp_path, workers):
    ds = Floating(70, bad={9} if workers else ())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        DeviceCache.from_dataset(ds, device="cpu", dtype=torch.float16,
                                 skip_bad=True).save(tmp_path / "saved")
        write_cache(ds, tmp_path / "written", dtype=torch.float16, chunk_size=16,
                    num_workers=workers, skip_bad=True, shuffle=False)
    assert same_files(tmp_path / "saved", tmp_path / "written")


def test_skipped_images_same_files_and_warning(tmp_path):
    ds = Synthetic(100, bad={0, 40, 41, 99})  # first sample bad; last chunk shortened
    with pytest.warns(UserWarning, match="skipped 4 of 100"):
        DeviceCache.from_dataset(ds, device="cpu", skip_bad=True).save(tmp_path / "saved")
    with pytest.warns(UserWarning, match="skipped 4 of 100"):
        r = write_cache(ds, tmp_path / "written", skip_bad=True, chunk_size=16, shuffle=False)
    assert same_files(tmp_path / "saved", tmp_path / "written")
    assert r.rows == 96 and [i for i, _ in r.skipped] == [0, 40, 41, 99]
    assert json.loads((tmp_path / "written" / "meta.json").read_text())["source"]["skipped"] == 4


class ClassSorted(Synthetic):
    """Labels in blocks, as an ImageFolder lists its files: 0 0 ... 1 1 ... 2 2 ..."""

    def __getitem__(self, i):
        return super().__getitem__(i)[0], i * 3 // self.n


def test_rows_are_stored_in_the_seeded_shuffled_order_by_default(tmp_path):
    ds = ClassSorted(90)
    r = write_cache(ds, tmp_path / "w", chunk_size=16)
    order = torch.randperm(90, generator=torch.Generator().manual_seed(0)).tolist()
    DeviceCache.from_dataset([ds[i] for i in order], device="cpu",
                             classes=ds.classes).save(tmp_path / "ref")
    for name in FILES[:2]:
        assert (tmp_path / "w" / name).read_bytes() == (tmp_path / "ref" / name).read_bytes()
    assert r.shape == (90, 3, 9, 7)
    source = DeviceCache.load(tmp_path / "w", device="cpu").source
    assert source["shuffle_seed"] == 0 and source["order"].startswith("shuffled")
    # Every contiguous part mixes the classes (the dataset's order gives each shard one or two).
    for rank in range(3):
        part = DeviceCache.load(tmp_path / "w", device="cpu", shard=(rank, 3))
        assert set(part.labels.tolist()) == {0, 1, 2}
    write_cache(ds, tmp_path / "s7", chunk_size=16, seed=7)
    labels7 = DeviceCache.load(tmp_path / "s7", device="cpu").labels
    order7 = torch.randperm(90, generator=torch.Generator().manual_seed(7))
    assert torch.equal(labels7, order7 * 3 // 90)


def test_shuffle_false_keeps_the_dataset_order_and_says_so(tmp_path):
    ds = ClassSorted(30)
    write_cache(ds, tmp_path / "w", shuffle=False)
    cache = DeviceCache.load(tmp_path / "w", device="cpu")
    assert cache.labels.tolist() == [i * 3 // 30 for i in range(30)]
    assert cache.source["order"] == "dataset" and "shuffle_seed" not in cache.source
    assert set(DeviceCache.load(tmp_path / "w", device="cpu", shard=(0, 3)).labels.tolist()) == {0}


def test_resume_refuses_another_order(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        write_cache(Synthetic(90, interrupt_at=50), tmp_path / "c", chunk_size=10, seed=1)
    with pytest.raises(ValueError, match=r"shuffle_seed': 1.*shuffle_seed': 2.*overwrite=True "
                                         r"instead of resume=True"):
        write_cache(Synthetic(90), tmp_path / "c", chunk_size=10, seed=2, resume=True)


def test_the_work_files_are_the_ones_a_killed_save_may_leave():
    # atomic's clean-up removes a dead writer's staging directory only if it knows these names.
    from batchaug.data import target_writer

    assert {writer.PROGRESS, writer.PROGRESS_NEW, writer.LABELS_PART,
            writer.INDEX_PART, target_writer.MASKS_PART,
            target_writer.BOXES_PART} == atomic.WORK_FILES


def test_num_workers_2_same_files(tmp_path):
    log = tmp_path / "decodes.log"
    write_cache(Synthetic(200), tmp_path / "w0", chunk_size=24)
    write_cache(Synthetic(200, log=log), tmp_path / "w2", chunk_size=24, num_workers=2)
    assert same_files(tmp_path / "w0", tmp_path / "w2")
    assert sorted(decodes(log)) == list(range(200))  # each sample decoded once, in workers


# --- bad input: the same errors as from_dataset, nothing left behind -------------------------
@pytest.mark.parametrize("kwargs,error", [
    (dict(bad={5}), BadImageError),
    # (another size makes a ragged cache: tests/data/test_ragged_cache.py)
    (dict(odd={7: (1, 9, 7)}), ValueError),  # another channel count
    (dict(label_at={6: 3}), ValueError),  # beyond the 3 classes
    (dict(label_at={6: -1}), ValueError),
    (dict(label_at={6: 1.5}), TypeError),
])
def test_bad_samples_raise_what_from_dataset_raises(tmp_path, kwargs, error):
    ds = Synthetic(20, **kwargs)
    with pytest.raises(error) as expected:
        DeviceCache.from_dataset(ds, device="cpu")
    with pytest.raises(error) as got:
        write_cache(ds, tmp_path / "c", chunk_size=8, shuffle=False)
    assert str(got.value) == str(expected.value)
    assert os.listdir(tmp_path) == []  # failed in the first chunk: nothing to resume, nothing left


def test_16bit_images_as_from_dataset(tmp_path, monkeypatch):
    from PIL import Image

    from batchaug.data import ingest

    values = np.linspace(0, 65535, 6 * 5).round().astype(np.uint16).reshape(6, 5)
    ds = [(Image.fromarray(values), 0), (Image.fromarray(values[::-1].copy()), 1)]
    for name in ("saved", "written"):
        monkeypatch.setattr(ingest, "_warned_16bit", False)
        with pytest.warns(UserWarning, match="16-bit"):
            if name == "saved":
                DeviceCache.from_dataset(ds, device="cpu").save(tmp_path / name)
            else:
                write_cache(ds, tmp_path / name, shuffle=False)
    assert same_files(tmp_path / "saved", tmp_path / "written")


@pytest.mark.parametrize("kwargs,match", [
    (dict(chunk_size=0), "chunk_size"), (dict(chunk_size=True), "chunk_size"),
    (dict(resume="yes"), "resume"), (dict(overwrite=1), "overwrite"),
    (dict(num_workers=-1), "num_workers"), (dict(dtype=torch.int32), "dtype"),
    (dict(source=[1]), "source"), (dict(pre_transform=3), "pre_transform"),
    (dict(shuffle=1), "shuffle must be a bool"), (dict(seed=-1), r"seed must be an int in"),
    (dict(seed=1.5), r"seed must be an int in"),
])
def test_bad_arguments_name_themselves(tmp_path, kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        write_cache(Synthetic(4), tmp_path / "c", **kwargs)
    assert os.listdir(tmp_path) == []


def test_refuses_what_save_refuses(tmp_path):
    write_cache(Synthetic(4), tmp_path / "c")
    with pytest.raises(FileExistsError, match="overwrite"):
        write_cache(Synthetic(4), tmp_path / "c")
    (tmp_path / "photos").mkdir()
    (tmp_path / "photos" / "x.jpg").write_bytes(b"precious")
    with pytest.raises(FileExistsError, match="not a batchaug cache"):
        write_cache(Synthetic(4), tmp_path / "photos", overwrite=True)
    write_cache(Synthetic(5), tmp_path / "c", overwrite=True)
    assert len(DeviceCache.load(tmp_path / "c", device="cpu")) == 5


# --- not enough disk space ----------------------------------------------------------------------
def test_disk_too_small_is_refused_before_decoding_on(tmp_path, monkeypatch):
    log = tmp_path / "decodes.log"
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(writer.shutil, "disk_usage", lambda p: usage(10**9, 10**9 - 1000, 1000))
    with pytest.raises(DiskFullError, match=r"not enough disk space .* needs .* \(1000 bytes\) "
                                            r"are free"):
        write_cache(Synthetic(100, log=log), tmp_path / "c", chunk_size=10)
    assert len(decodes(log)) == 10  # the first chunk fixes the row size; no more
    assert os.listdir(tmp_path) == ["decodes.log"]


def test_disk_filling_up_while_writing_leaves_nothing(tmp_path, monkeypatch):
    real, calls = writer._pwrite_all, []

    def full_later(fd, data, offset):
        calls.append(offset)
        if len(calls) == 6:  # after the header and two chunks (rows + labels each)
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data, offset)

    monkeypatch.setattr(writer, "_pwrite_all", full_later)
    with pytest.raises(DiskFullError, match="not enough disk space"):
        write_cache(Synthetic(100), tmp_path / "c", chunk_size=10)
    assert os.listdir(tmp_path) == []  # not kept for resuming: the space is given back


# --- interrupted, then resumed ------------------------------------------------------------------
KILL = textwrap.dedent("""
    import sys
    sys.path.insert(0, {here!r})
    from test_writer import INVERT, Synthetic
    from batchaug.data import write_cache
    write_cache(Synthetic({n}, log={log!r}, die_at={die}), {out!r}, chunk_size={chunk},
                progress=False, pre_transform=INVERT, shuffle=False)
""")
# A lambda on purpose: its repr holds a memory address, which differs between the killed and the
# resuming process and must not reach meta.json (nor the resume check).
INVERT = lambda x: 255 - x  # noqa: E731


@pytest.mark.parametrize("die", [0, 64, 199])  # before any chunk, at a boundary, in the last
def test_killed_write_leaves_nothing_loadable_and_resumes_to_the_same_files(tmp_path, die):
    n, chunk = 200, 32
    # A lambda pre_transform: its repr (in meta.json, and compared on resume) has no address.
    write_cache(Synthetic(n), tmp_path / "clean", chunk_size=chunk,
                pre_transform=INVERT, shuffle=False)
    log, out = tmp_path / "decodes.log", tmp_path / "c"
    code = KILL.format(here=str(HERE), n=n, log=str(log), die=die, out=str(out), chunk=chunk)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 3, proc.stderr
    assert not out.exists()  # never a valid-looking cache at the path
    with pytest.raises(FileNotFoundError):
        DeviceCache.load(out, device="cpu")
    assert decodes(log) == list(range(die + 1))
    left = atomic.leftovers(out)
    assert len(left) == 1 and not (left[0] / "meta.json").exists()
    r = write_cache(Synthetic(n, log=log), out, chunk_size=chunk, resume=True,
                    pre_transform=INVERT, shuffle=False)
    assert same_files(tmp_path / "clean", out)
    assert "<function <lambda>>" in (out / "meta.json").read_text()  # no " at 0x..."
    assert r.resumed_from == die // chunk * chunk
    total = len(decodes(log))
    # Every sample at least once; again only those of the chunk the kill interrupted.
    assert n <= total <= n + chunk and total == n + die + 1 - r.resumed_from
    assert atomic.leftovers(out) == []


def test_interrupt_keeps_completed_chunks_says_how_to_resume(tmp_path):
    write_cache(Synthetic(90), tmp_path / "clean", chunk_size=20)
    with pytest.raises(KeyboardInterrupt) as info:
        write_cache(Synthetic(90, interrupt_at=50), tmp_path / "c", chunk_size=20)
    assert "resume=True" in " ".join(getattr(info.value, "__notes__", []))
    assert not (tmp_path / "c").exists() and len(atomic.leftovers(tmp_path / "c")) == 1
    with pytest.raises(ValueError, match="chunk_size=20.*chunk_size=10"):
        write_cache(Synthetic(90), tmp_path / "c", chunk_size=10, resume=True)  # mismatch
    with pytest.raises(ValueError, match="dtype='uint8'.*dtype='float16'"):
        write_cache(Synthetic(90), tmp_path / "c", chunk_size=20, dtype=torch.float16,
                    resume=True)
    r = write_cache(Synthetic(90), tmp_path / "c", chunk_size=20, resume=True)
    assert r.resumed_from == 40 and same_files(tmp_path / "clean", tmp_path / "c")


@pytest.mark.parametrize("damaged", ["images.npy", "labels.part"])
def test_resume_refuses_files_that_no_longer_match_their_record(tmp_path, damaged):
    # What an OS crash can leave: progress.json on disk, some of the data it counts not.
    with pytest.raises(KeyboardInterrupt):
        write_cache(Synthetic(90, interrupt_at=50), tmp_path / "c", chunk_size=20)
    (left,) = atomic.leftovers(tmp_path / "c")
    with open(left / damaged, "r+b") as f:
        f.seek(200)
        byte = f.read(1)
        f.seek(200)
        f.write(bytes([byte[0] ^ 1]))
    with pytest.raises(ValueError, match="does not match its progress record"):
        write_cache(Synthetic(90), tmp_path / "c", chunk_size=20, resume=True)
    assert os.listdir(tmp_path) == []  # removed, not kept for another failing resume


def test_a_new_write_refuses_to_discard_an_interrupted_one(tmp_path):
    c = tmp_path / "c"
    with pytest.raises(KeyboardInterrupt):
        write_cache(Synthetic(90, interrupt_at=50), c, chunk_size=20, shuffle=False)
    (left,) = atomic.leftovers(c)
    with pytest.raises(FileExistsError, match=r"40 of 90 samples done.*would be lost; pass "
                       r"resume=True to continue it, or overwrite=True to discard it"):
        write_cache(Synthetic(90), c, chunk_size=20, shuffle=False)
    assert atomic.leftovers(c) == [left] and (left / writer.PROGRESS).exists()  # kept
    # Loading the path that does not exist yet points at the interrupted write.
    with pytest.raises(FileNotFoundError, match=r"interrupted write of .* is in .*\.c\.tmp-.*"
                       r"\(40 of 90 samples done\); write_cache\(\.\.\., resume=True\) "
                       r"continues it"):
        DeviceCache.load(c, device="cpu")
    with pytest.warns(UserWarning, match=r"40 of 90 samples done.*is discarded \(overwrite=True"):
        r = write_cache(Synthetic(90), c, chunk_size=20, shuffle=False, overwrite=True)
    assert r.resumed_from == 0 and r.rows == 90 and atomic.leftovers(c) == []


@pytest.mark.parametrize("ragged", [False, True])
def test_save_refuses_to_discard_an_interrupted_write_too(tmp_path, ragged):
    # one save for every storage: a ragged cache's save once discarded the chunks silently
    from batchaug.data.ragged import RaggedImages

    c = tmp_path / "c"
    with pytest.raises(KeyboardInterrupt):
        write_cache(Synthetic(90, interrupt_at=50), c, chunk_size=20, shuffle=False)
    small = DeviceCache.from_dataset(Synthetic(4), device="cpu")
    if ragged:
        small = DeviceCache(RaggedImages.from_list([torch.zeros(3, 4, 1 + k, dtype=torch.uint8)
                                                     for k in range(4)]), torch.arange(4))
    with pytest.raises(FileExistsError, match=r"40 of 90 samples done.*pass resume=True"):
        small.save(c)
    assert len(atomic.leftovers(c)) == 1 and not c.exists()
    with pytest.warns(UserWarning, match="is discarded"):
        small.save(c, overwrite=True)
    assert atomic.leftovers(c) == [] and len(DeviceCache.load(c, device="cpu")) == 4


def test_load_of_a_cache_reports_an_interrupted_rewrite_of_it(tmp_path):
    c = tmp_path / "c"
    write_cache(Synthetic(30), c, chunk_size=8)
    with pytest.raises(KeyboardInterrupt):
        write_cache(Synthetic(90, interrupt_at=50), c, chunk_size=20, shuffle=False,
                    overwrite=True)
    with pytest.warns(UserWarning, match=r"loaded .*c, but an interrupted write of .*\(40 of 90 "
                      r"samples done\)"):
        assert len(DeviceCache.load(c, device="cpu")) == 30  # the old cache, intact
    r = write_cache(Synthetic(90), c, chunk_size=20, shuffle=False, overwrite=True, resume=True)
    assert r.resumed_from == 40
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(DeviceCache.load(c, device="cpu")) == 90


def test_resume_with_nothing_to_resume_starts_from_the_beginning(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = write_cache(Synthetic(30), tmp_path / "c", chunk_size=8, resume=True)
    assert r.resumed_from == 0 and r.rows == 30


def test_resume_after_skips_keeps_them(tmp_path):
    ds = Synthetic(60, bad={3, 45})
    with pytest.warns(UserWarning):
        write_cache(ds, tmp_path / "clean", chunk_size=10, skip_bad=True)
    with pytest.raises(KeyboardInterrupt):
        write_cache(Synthetic(60, bad={3, 45}, interrupt_at=35), tmp_path / "c", chunk_size=10,
                    skip_bad=True)
    with pytest.warns(UserWarning, match="skipped 2 of 60"):
        r = write_cache(ds, tmp_path / "c", chunk_size=10, skip_bad=True, resume=True)
    # Shuffled (the default): the interrupted read is dataset[35], at its stored position.
    position = torch.randperm(60, generator=torch.Generator().manual_seed(0)).tolist().index(35)
    assert r.resumed_from == position // 10 * 10 and same_files(tmp_path / "clean",
                                                                   tmp_path / "c")
    assert sorted(i for i, _ in r.skipped) == [3, 45]  # dataset indices, not positions


# --- peak memory does not grow with the dataset -----------------------------------------------
PEAK = textwrap.dedent("""
    import sys
    sys.path.insert(0, {here!r})
    from test_writer import Synthetic
    from batchaug.data import write_cache
    write_cache(Synthetic({n}, shape=(3, 96, 96)), {out!r}, chunk_size=32, progress=False)
    status = open("/proc/self/status").read()
    print(int(status.split("VmHWM:")[1].split()[0]) * 1024)
""")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
def test_peak_memory_does_not_grow_with_the_dataset(tmp_path):
    peaks = {}
    for n in (200, 2400):  # 5.5 MB and 66 MB of images
        code = PEAK.format(here=str(HERE), n=n, out=str(tmp_path / f"c{n}"))
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=120, env=dict(os.environ, OMP_NUM_THREADS="1"))
        assert proc.returncode == 0, proc.stderr
        peaks[n] = int(proc.stdout.split()[-1])
    data_growth = (2400 - 200) * 3 * 96 * 96
    # Holding the images would add 61 MB; a few chunks of 0.9 MB may differ.
    assert peaks[2400] - peaks[200] < data_growth / 4, (peaks, data_growth)


# --- issue 35: the ragged writer ------------------------------------------------------------
class Widths:
    """uint8 images of one height and different widths (ragged by width alone)."""

    def __init__(self, n=30, interrupt_at=None):
        self.n, self.interrupt_at = n, interrupt_at

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == self.interrupt_at:
            raise KeyboardInterrupt
        g = torch.Generator().manual_seed(i)
        return torch.randint(0, 256, (3, 12, 10 + i % 7), generator=g, dtype=torch.uint8), i % 3


@pytest.mark.parametrize("storage", ["raw", "jpeg"])
def test_images_of_one_height_and_different_widths_are_ragged(tmp_path, storage):
    write_cache(Widths(), tmp_path / "c", storage=storage, shuffle=False)
    cache = DeviceCache.load(tmp_path / "c", device="cpu")
    assert cache.ragged and cache.sizes[:, 1].tolist() == [10 + i % 7 for i in range(30)]
    mem = DeviceCache.from_dataset(Widths(), storage=storage, device="cpu")
    assert mem.ragged
    for i in range(30):
        assert torch.equal(cache.image(i), mem.image(i)), i
        if storage == "raw":
            assert torch.equal(cache.image(i), Widths()[i][0])


@pytest.mark.parametrize("damaged", ["images.bin", "index.part"])
def test_ragged_resume_refuses_a_changed_byte(tmp_path, damaged):
    with pytest.raises(KeyboardInterrupt):
        write_cache(Widths(interrupt_at=25), tmp_path / "c", chunk_size=10, shuffle=False)
    (left,) = atomic.leftovers(tmp_path / "c")
    with open(left / damaged, "r+b") as f:
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 1]))
    with pytest.raises(ValueError, match="does not match its progress record"):
        write_cache(Widths(), tmp_path / "c", chunk_size=10, resume=True, shuffle=False)
    assert os.listdir(tmp_path) == []
