"""The loader's CPU work split by images over threads (batchaug.functional._utils): the same
batches at any thread count, keyed and unkeyed, every sample once, no draw shared between images;
the warp's window reads only the pixels its preimage needs."""
import math
import threading
import os

import pytest
import torch

import batchaug as B
from batchaug.functional import _utils
from batchaug.data import roi_decode
from batchaug.functional import _sized as R
from tests.data.test_roi_crop import _cache

CROPS = {
    "rotation_rrc_flip": lambda: B.Augment(B.RandomRotation(30), B.RandomResizedCrop(40),
                                           B.RandomHorizontalFlip()),
    "flip_affine_rrc": lambda: B.Augment(B.RandomHorizontalFlip(),
                                         B.RandomAffine(20, translate=(0.1, 0.1), fill=9),
                                         B.RandomResizedCrop(32)),
    "rrc": lambda: B.Augment(B.RandomResizedCrop(36), B.RandomHorizontalFlip()),
    "resize_center": lambda: B.Augment(B.Resize(40), B.CenterCrop(40)),
}


def _epoch(cache, crop, threads, keyed, roi, monkeypatch, seed=0):
    with monkeypatch.context() as m:
        if not roi:
            m.setattr(roi_decode, "available", lambda: False)
        loader = B.DeviceLoader(cache, 5, seed=3, return_keys=keyed, crop=crop,
                                decode_threads=threads)
        assert (loader.window_decode == "roi") == roi
        torch.manual_seed(seed)
        return [(b[0], b[1]) for b in loader]


# Resize(int) + CenterCrop decodes whole images: it has no window-decode case
@pytest.mark.parametrize("name,roi", [(n, False) for n in sorted(CROPS)] +
                         [(n, True) for n in sorted(CROPS) if n != "resize_center"])
@pytest.mark.parametrize("keyed", [True, False])
def test_batches_are_the_same_at_1_2_and_4_threads(name, keyed, roi, monkeypatch):
    if roi and not roi_decode.available():
        pytest.skip("nvImageCodec is not installed")
    cache = _cache()
    ref = _epoch(cache, CROPS[name](), 1, keyed, roi, monkeypatch)
    for threads in (2, 4):
        got = _epoch(cache, CROPS[name](), threads, keyed, roi, monkeypatch)
        assert len(got) == len(ref)
        for (x, y), (xr, yr) in zip(got, ref):
            assert torch.equal(x, xr) and torch.equal(y, yr)
    labels = torch.cat([y for _, y in ref])
    assert labels.numel() == len(cache)  # every sample once (labels: 0 and 1 alternating)
    assert labels.sum() == len(cache) // 2


def test_unkeyed_draws_differ_between_images_of_every_part(monkeypatch):
    """The same photo 12 times, 4 threads: every output differs from every other (one draw
    per image, none repeated across the threads' parts), and a new seed gives new draws."""
    monkeypatch.setattr(roi_decode, "available", lambda: False)
    image = torch.randint(0, 256, (3, 90, 70), dtype=torch.uint8)
    cache = B.DeviceCache.from_tensors(image.expand(12, 3, 90, 70).contiguous(),
                                       torch.arange(12), device="cpu")
    ragged = B.DeviceCache.from_dataset(
        [(image[:, :80 + k, :60 + k], k) for k in range(12)], device="cpu", progress=False)
    crop = B.Augment(B.RandomRotation(40), B.RandomResizedCrop(24))
    for c in (cache, ragged):
        loader = B.DeviceLoader(c, 12, crop=crop, decode_threads=4, shuffle=False)
        torch.manual_seed(0)
        out = next(iter(loader))[0].flatten(1)
        assert len({tuple(o.tolist()) for o in out}) == 12
        torch.manual_seed(1)
        again = next(iter(loader))[0].flatten(1)
        assert not torch.equal(out, again)


def test_every_sample_once_at_4_threads(monkeypatch):
    monkeypatch.setattr(roi_decode, "available", lambda: False)
    images = [torch.full((3, 20 + k, 30 - k), k, dtype=torch.uint8) for k in range(23)]
    cache = B.DeviceCache.from_dataset(list(zip(images, range(23))), device="cpu",
                                       progress=False)
    loader = B.DeviceLoader(cache, 4, crop=B.Augment(B.RandomRotation(10), B.CenterCrop(8)),
                            decode_threads=4, seed=5)
    seen = []
    for x, y in loader:
        # the centre of each output is its own image's value: images kept with their labels
        assert torch.equal(x[:, 0, 4, 4].long(), y)
        seen += y.tolist()
    assert sorted(seen) == list(range(23))


def test_default_threads_are_the_cores_the_process_may_use(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 2, 5}, raising=False)
    assert _utils.cpu_count() == 3
    cache = B.DeviceCache.from_tensors(torch.zeros(4, 3, 8, 8, dtype=torch.uint8),
                                       torch.arange(4), device="cpu")
    assert B.DeviceLoader(cache, 2).decode_threads == 3
    assert B.DeviceLoader(cache, 2, decode_threads=1).decode_threads == 1
    with pytest.raises(ValueError, match="decode_threads"):
        B.DeviceLoader(cache, 2, decode_threads=0)


def test_for_each_runs_every_index_once_and_raises_after_all_parts():
    hits = [0] * 37
    with _utils.image_threads(4):
        assert _utils.current_threads() == 4
        assert torch.get_num_threads() == 1
        _utils.for_each(lambda i: hits.__setitem__(i, hits[i] + 1), 37)
    assert hits == [1] * 37 and _utils.current_threads() == 1
    done = []

    def fail_on_3(i):
        if i == 3:
            raise KeyError("image 3")
        done.append(i)

    with pytest.raises(KeyError, match="image 3"), _utils.image_threads(3):
        _utils.for_each(fail_on_3, 12)
    # no index ran twice, 3 never finished, and none started after the failure was seen
    assert len(done) == len(set(done)) and 3 not in done and set(done) <= set(range(12))

    started, release = [], threading.Event()

    def slow_then_fail(i):
        started.append(i)
        if i == 0:
            raise KeyError("image 0")
        release.wait(5)  # the others are busy while image 0 fails
        done.append(i)

    done.clear()
    with pytest.raises(KeyError, match="image 0"), _utils.image_threads(3):
        threading.Timer(0.2, release.set).start()
        _utils.for_each(slow_then_fail, 30)
    # raised only after the running images (one per thread) finished; none started after
    assert sorted(done) == sorted(i for i in started if i != 0) and len(started) <= 3

    def nested(i):  # a worker's own loops run inline: no wait on a full pool
        with _utils.image_threads(4):
            _utils.for_each(lambda j: None, 4)

    with _utils.image_threads(2):
        _utils.for_each(nested, 8)


@pytest.mark.parametrize("threads", [2, 3])
def test_normalize_split_by_images_equals_one_thread(threads):
    x = torch.randint(0, 256, (37, 3, 64, 64), dtype=torch.uint8)
    norm = B.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        ref = norm(x)
        torch.set_num_threads(threads)
        assert torch.equal(norm(x), ref)
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("interpolation", ["nearest", "bilinear", "bicubic"])
@pytest.mark.parametrize("seed", range(6))
def test_warp_window_reads_only_its_source_rect(interpolation, seed):
    """The box of the warp computed from the image equals the one computed from only the
    pixels ``source_rect`` names, the rest NaN (read once, it would show)."""
    g = torch.Generator().manual_seed(seed)
    h, w = 60 + seed * 7, 90 - seed * 5
    img = torch.rand(1, 3, h, w, generator=g) * 255
    angle = torch.rand(1, generator=g) * 120 - 60
    mat = R.rotation_matrix(angle, h, w)
    if seed % 2:
        mat[:, :, 2] += torch.rand(1, 2, generator=g) * 40 - 20  # a shift: boxes leave it
    top, left = int(torch.randint(0, h // 2, (1,), generator=g)), \
        int(torch.randint(0, w // 2, (1,), generator=g))
    bh, bw = h // 2, w // 3
    fill = [1.0, 2.0, 3.0]
    ref = R.warp_window(img, mat, top, left, bh, bw, interpolation, fill, placed=[0, 0, h, w])
    t0, l0, rh, rw = R.source_rect(mat[0].tolist(), h, w, top, left, bh, bw)
    assert 0 <= t0 and t0 + rh <= h and 0 <= l0 and l0 + rw <= w
    poisoned = torch.full_like(img, math.nan)
    poisoned[:, :, t0:t0 + rh, l0:l0 + rw] = img[:, :, t0:t0 + rh, l0:l0 + rw]
    got = R.warp_window(poisoned, mat, top, left, bh, bw, interpolation, fill)
    assert torch.equal(got, ref)
    part = img[:, :, t0:t0 + rh, l0:l0 + rw]
    assert torch.equal(R.warp_window(part, mat, top, left, bh, bw, interpolation, fill,
                                     placed=[t0, l0, h, w]), ref)
    if rh > 1:
        with pytest.raises(ValueError, match="does not hold"):
            R.warp_window(part[:, :, 1:], mat, top, left, bh, bw, interpolation, fill,
                          placed=[t0 + 1, l0, h, w])


def _in_a_forked_child(check) -> None:
    """``check()`` (True: passed) in a forked child (as a DataLoader worker is); fails if it is
    False, raises or has not returned within 20 s (a loop waiting on the parent's threads)."""
    import signal
    import time

    pid = os.fork()
    if pid == 0:
        ok = False
        try:
            # as a DataLoader worker: an OpenMP region after fork would wait for the parent's
            # OpenMP threads
            torch.set_num_threads(1)
            ok = bool(check())
        finally:
            os._exit(0 if ok else 1)
    deadline = time.monotonic() + 20
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child's loop hung on the parent's pool")
        time.sleep(0.05)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_starts_its_own_pool():
    """The parent's pool threads do not exist in a forked child (a DataLoader worker): its
    loops must still run, not wait for tasks that no thread takes."""
    import time

    with _utils.image_threads(3):
        _utils.for_each(lambda i: time.sleep(0.01), 6)  # the parent's pool, now idle

    def child() -> bool:
        out = []
        with _utils.image_threads(3):
            _utils.for_each(out.append, 6)
        return sorted(out) == list(range(6))

    _in_a_forked_child(child)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_decodes_jpegs_on_threads():
    """``decode_jpegs(..., threads=3)`` in a forked child after the parent decoded on threads:
    the same images (a kept pool of the parent's would take the parts and never run them)."""
    from batchaug.data.jpeg import decode_jpegs, encode_jpeg

    images = [torch.randint(0, 256, (3, 300 + k, 400), dtype=torch.uint8) for k in range(6)]
    data = [encode_jpeg(x, 90) for x in images]
    for _ in range(3):  # parts long enough that every thread of a pool is started
        want = decode_jpegs(data, torch.device("cpu"), threads=3)
    assert [tuple(x.shape) for x in want] == [tuple(x.shape) for x in images]
    _in_a_forked_child(lambda: all(
        torch.equal(a, b) for a, b in zip(decode_jpegs(data, torch.device("cpu"), threads=3),
                                          want)))
