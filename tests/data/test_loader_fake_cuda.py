"""The loader on CUDA without a GPU (tests/contract/fake_cuda.py): its crop stage's batched path and its
per-batch assembly issue no host<->device copy and read no device value on the host.

What cannot be faked is stated where it is stood in for: FakeTensorMode has no streams, events,
pinned memory or ``torch.cuda.is_available()``; those calls are replaced by recorders, so the
checks here are about which tensors cross between host and device, and how (pinned,
non-blocking, on which stream), not about timing.
"""
import contextlib

import pytest
import torch

from torch.utils._pytree import tree_flatten

from batchaug import (Augment, CenterCrop, TimmRandomResizedCrop, RandomAffine, RandomCrop, RandomHorizontalFlip,
                      RandomPerspective, RandomResizedCrop, RandomRotation, RandomVerticalFlip,
                      Resize)
from batchaug.data import cache as cache_module
from tests.data.loader_crop import LoaderCrop
from tests.contract.fake_cuda import CudaOnlyFake as _CudaOnlyFake, HostTraffic, fake_cuda

CROPS = {
    "warps+rrc": lambda: Augment(RandomHorizontalFlip(), RandomVerticalFlip(),
                                 RandomRotation(30), RandomAffine(10, shear=5),
                                 RandomPerspective(0.5, p=1.0), RandomResizedCrop(24)),
    "perspective+rrc": lambda: Augment(RandomPerspective(0.4, p=0.5, interpolation="nearest"),
                                       RandomResizedCrop(20)),
    "resize+center": lambda: Augment(Resize(40), CenterCrop(32)),
    "flip+resize+random": lambda: Augment(RandomHorizontalFlip(), Resize(40),
                                          RandomCrop(32, pad_if_needed=True)),
    "rotation+center": lambda: Augment(RandomRotation(20), CenterCrop(30)),
    "random crop": lambda: RandomCrop(30, pad_if_needed=True, padding_mode="reflect"),
    "resize hw": lambda: Resize((20, 30)),
    "timm rrc": lambda: Augment(RandomRotation(15), TimmRandomResizedCrop(24)),
}


@pytest.mark.parametrize("keyed", [False, True])
@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
@pytest.mark.parametrize("name", list(CROPS))
def test_crop_stage_batched_path_has_no_host_traffic_on_cuda(name, dtype, train, keyed):
    stage = LoaderCrop(CROPS[name]()).train(train)  # built on the CPU
    with fake_cuda():
        stage = stage.to("cuda")
        x = torch.zeros(8, 3, 64, 80, dtype=dtype, device="cuda")
        sizes = torch.ones(8, 2, dtype=torch.int64, device="cuda")
        keys = torch.zeros(8, dtype=torch.int64, device="cuda") if keyed else None
        with HostTraffic() as traffic:
            out = stage(x, sizes, keys)
    assert not traffic.ops, traffic.report()
    assert out.device.type == "cuda" and out.dtype == dtype
    assert tuple(out.shape[2:]) == stage.output_size


@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("name", list(CROPS))
def test_crop_stage_moves_masks_and_boxes_with_no_host_traffic_on_cuda(name, train):
    """The targets' paths of the stage (each step's sized with_targets): masks and boxes."""
    stage = LoaderCrop(CROPS[name]()).train(train)
    with fake_cuda():
        stage = stage.to("cuda")
        x = torch.zeros(8, 3, 64, 80, dtype=torch.uint8, device="cuda")
        sizes = torch.ones(8, 2, dtype=torch.int64, device="cuda")
        keys = torch.zeros(8, dtype=torch.int64, device="cuda")
        masks = torch.zeros(8, 1, 64, 80, dtype=torch.uint8, device="cuda")
        boxes = torch.zeros(8, 3, 4, device="cuda")
        valid = torch.ones(8, 3, dtype=torch.bool, device="cuda")
        with HostTraffic() as traffic:
            y, m = stage.with_masks(x, masks, sizes, keys)
            _, b, v, _ = stage.with_boxes(x, boxes, valid, sizes, keys, masks)
    assert not traffic.ops, traffic.report()
    assert m.shape[-2:] == y.shape[-2:]
    assert b.device.type == "cuda" and v.shape == (8, 3)


# --- the loader's per-batch assembly ------------------------------------------------------------
# FakeTensorMode fakes tensors only: CUDA streams, events, pinned memory and
# torch.cuda.is_available() are stood in for by the recorders below. A host<->device copy is
# allowed in a batch only as the images' own copies are made: non-blocking, from or into pinned
# memory, on a side stream (ordered with the consumer by an event, never by a host wait on
# the default stream). Dispatch modes are per thread, so the loader runs with prefetch=0 (the
# reader's work in the caller's thread).


class _Stream:
    def __init__(self, name):
        self.name = name
        self.synced = 0

    def wait_stream(self, other):
        pass

    def wait_event(self, event):
        pass

    def synchronize(self):
        self.synced += 1


class _Event:
    def record(self, stream=None):
        pass

    def synchronize(self):
        pass

    def query(self):
        return True


class _FakeCudaRuntime:
    """Streams, events, pinning and availability of a CUDA device that does not exist."""

    def __init__(self, monkeypatch):
        self.default = _Stream("default")
        self.current = self.default
        self.pinned = set()
        rt = self

        class Stream(_Stream):
            def __init__(self, device=None):
                super().__init__("side")

        @contextlib.contextmanager
        def stream(s):
            saved, rt.current = rt.current, (s if s is not None else rt.current)
            try:
                yield
            finally:
                rt.current = saved

        empty = torch.empty

        def pinned_empty(*args, pin_memory=False, **kwargs):
            out = empty(*args, **kwargs)
            if pin_memory:
                rt.pinned.add(id(out))
            return out

        def pin(t):
            out = t.clone()
            rt.pinned.add(id(out))
            return out

        # Lightning sets PYTORCH_NVML_BASED_CUDA_CHECK=1 for the process (an earlier test may
        # have imported it): torch.cuda.is_available() would then ask the device_count stand-in
        # below, FakeTensorMode would think a GPU is there and run host->CUDA copies for real
        monkeypatch.delenv("PYTORCH_NVML_BASED_CUDA_CHECK", raising=False)
        # construction may read values (labels in range): not what is checked here
        monkeypatch.setattr(cache_module, "check_labels", lambda labels, n, classes: labels)
        # the CUDA generator's state (seed, offset) lives on the host: no device traffic
        monkeypatch.setattr(torch.cuda, "get_rng_state",
                            lambda device=None: torch.zeros(16, dtype=torch.uint8))
        monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device=None: None)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
        monkeypatch.setattr(torch.cuda, "set_device", lambda d: None)
        monkeypatch.setattr(torch.cuda, "device", lambda d=None: contextlib.nullcontext())
        monkeypatch.setattr(torch.cuda, "Stream", Stream)
        monkeypatch.setattr(torch.cuda, "stream", stream)
        monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: rt.current)
        monkeypatch.setattr(torch.cuda, "Event", lambda *a, **k: _Event())
        monkeypatch.setattr(torch, "empty", pinned_empty)
        monkeypatch.setattr(torch.Tensor, "pin_memory", pin)
        monkeypatch.setattr(torch.Tensor, "record_stream", lambda t, s: None)

    def is_pinned(self, t):
        return id(t) in self.pinned or (t._base is not None and id(t._base) in self.pinned)


class _Assembly(HostTraffic):
    """``HostTraffic`` that also says how each crossing was made (``ok``: as the images').

    ``epoch_start``: the recorded ``next()`` starts an epoch, whose order (and keys) go to the
    device once, on the caller's stream (its own kernels read them there): such a crossing
    must still be a non-blocking copy out of pinned memory (no host wait for the queued
    training step); ``on_current`` lists those.
    """

    def __init__(self, rt, epoch_start=False):
        super().__init__()
        self.rt = rt
        self.epoch_start = epoch_start
        self.bad = []
        self.on_current = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        before = len(self.ops)
        out = super().__torch_dispatch__(func, types, args, kwargs)
        if len(self.ops) > before:
            kwargs = kwargs or {}
            name = str(func)
            if name == "aten._to_copy.default":  # t.to(device)
                host, non_blocking = [args[0], out], kwargs.get("non_blocking", False)
            elif name == "aten.copy_.default":  # dst.copy_(src, non_blocking)
                host = list(args[:2])
                non_blocking = args[2] if len(args) > 2 else kwargs.get("non_blocking", False)
            else:
                host, non_blocking = [], False
            host = [t for t in host if t.device.type == "cpu"]
            ok = bool(host) and non_blocking and all(self.rt.is_pinned(t) for t in host)
            if ok and self.rt.current is self.rt.default:
                if self.epoch_start:
                    self.on_current.append(self.ops[-1])
                else:
                    ok = False
            if not ok:
                self.bad.append(self.ops[-1] + (self.rt.current.name,))
        return out

    def report(self):
        return "\n".join([f"{len(self.bad)} blocking or default-stream crossing(s):"]
                         + [f"  {op} {devs} at {where} on the {s} stream"
                            for op, devs, where, s in self.bad[:20]])


def _batches(loader, n, rt, epochs=2):
    """The first ``n`` batches of each of ``epochs`` epochs, each ``next()`` recorded:
    ``(last batch, records, firsts)``, ``records`` the later batches', ``firsts`` each epoch's
    first (which also starts the epoch: its order and keys go to the device once per epoch,
    not per batch; ``_check_firsts`` checks them)."""
    records, firsts = [], []
    for _ in range(epochs):
        it = iter(loader)
        with _Assembly(rt, epoch_start=True) as rec:
            batch = next(it)
        firsts.append(rec)
        for _ in range(n - 1):
            with _Assembly(rt) as rec:
                batch = next(it)
            records.append(rec)
        it.close()
    return batch, records, firsts


def _check_firsts(firsts, per_batch):
    """Each epoch's first batch: its own ``per_batch`` crossings as any batch's, plus the
    epoch's order (and keys: computed on the device from it, no second copy) once, pinned and
    non-blocking on the caller's stream."""
    for rec in firsts:
        assert not rec.bad, rec.report()
        assert len(rec.on_current) == 1, rec.on_current  # the order; the keys are made there
        assert len(rec.ops) == per_batch + 1, HostTraffic.report(rec)


def _fixed_cache(placement, masks):
    from batchaug import DeviceCache

    n, where = 12, ("cuda" if placement == "device" else "cpu")
    images = torch.zeros(n, 3, 24, 28, dtype=torch.uint8, device=where)
    targets = {"masks": torch.zeros(n, 24, 28, dtype=torch.int64, device=where)} if masks \
        else None
    return DeviceCache(images, torch.zeros(n, dtype=torch.int64, device="cuda"),
                       placement=placement, targets=targets)


# the loader compares storage pointers (a host-side check): fake tensors have none
@pytest.mark.filterwarnings("ignore:Accessing the data pointer of FakeTensor")
@pytest.mark.parametrize("keyed", [False, True])
@pytest.mark.parametrize("masks", [False, True])
@pytest.mark.parametrize("placement", ["device", "host"])
def test_fixed_size_batches_cross_only_as_async_pinned_side_stream_copies(
        monkeypatch, placement, masks, keyed):
    from batchaug import DeviceLoader

    rt = _FakeCudaRuntime(monkeypatch)
    crop = Augment(RandomHorizontalFlip(), RandomResizedCrop(16))
    with _CudaOnlyFake():
        cache = _fixed_cache(placement, masks)
        loader = DeviceLoader(cache, 4, prefetch=0, crop=crop, return_keys=keyed)
        batch, records, firsts = _batches(loader, 3, rt)
    for rec in records:
        assert not rec.bad, rec.report()
        if placement == "device":
            assert not rec.ops, rec.report()
    if placement == "device":
        _check_firsts(firsts, 0)
    else:
        for rec in firsts:
            assert not rec.bad, rec.report()
            assert len(rec.on_current) == 1, rec.on_current
    x = batch[0]
    assert x.device.type == "cuda" and tuple(x.shape) == (4, 3, 16, 16)
    if masks:
        assert batch[1]["masks"].device.type == "cuda"


def _ragged_cache(masks):
    """A ragged raw cache on the (fake) device: its bytes there, its index on the host."""
    from batchaug import DeviceCache
    from batchaug.data.ragged import RaggedImages

    sizes = [(20, 30), (31, 17), (25, 25), (18, 40), (40, 22), (33, 33)]

    def on_device(c):
        cpu = RaggedImages.from_list([torch.zeros(c, h, w, dtype=torch.uint8)
                                       for h, w in sizes])
        return RaggedImages(torch.zeros(cpu.data.numel(), dtype=torch.uint8, device="cuda"),
                             cpu.index, c)

    targets = {"masks": on_device(1)} if masks else None
    return DeviceCache(on_device(3), torch.zeros(len(sizes), dtype=torch.int64, device="cuda"),
                       placement="device", targets=targets)


@pytest.mark.filterwarnings("ignore:Accessing the data pointer of FakeTensor")
@pytest.mark.parametrize("keyed", [False, True])
@pytest.mark.parametrize("masks", [False, True])
def test_ragged_device_batches_cross_only_as_async_pinned_side_stream_copies(monkeypatch,
                                                                              masks, keyed):
    from batchaug import DeviceLoader

    rt = _FakeCudaRuntime(monkeypatch)
    crop = Augment(RandomRotation(10), RandomResizedCrop(16))
    with _CudaOnlyFake():
        loader = DeviceLoader(_ragged_cache(masks), 2, prefetch=0, crop=crop,
                              return_keys=keyed)
        batch, records, firsts = _batches(loader, 3, rt)
    # the sizes once (the masks reuse them), and each padded column's row starts (pad_rows)
    per_batch = 1 + 1 + masks
    for rec in records:
        assert not rec.bad, rec.report()
        assert len(rec.ops) == per_batch, rec.report()
    _check_firsts(firsts, per_batch)
    assert batch[0].device.type == "cuda" and tuple(batch[0].shape) == (2, 3, 16, 16)


@pytest.mark.filterwarnings("ignore:Accessing the data pointer of FakeTensor")
def test_ragged_host_batches_go_through_the_reused_pinned_buffers(monkeypatch):
    """A host-placed ragged cache takes the dense columns' delivery: each batch's bytes are
    gathered into one of the delivery's own pinned buffers (reused, not one per batch), cross
    as one async side-stream copy, and a buffer is refilled only after its copy's event."""
    from batchaug import DeviceCache, DeviceLoader
    from batchaug.data.ragged import RaggedImages

    rt = _FakeCudaRuntime(monkeypatch)
    waits = []
    monkeypatch.setattr(_Event, "synchronize", lambda self: waits.append(self))
    sizes = [(20, 30), (31, 17), (25, 25), (18, 40), (40, 22), (33, 33)] * 2
    with _CudaOnlyFake():
        images = RaggedImages.from_list([torch.full((3, h, w), k, dtype=torch.uint8)
                                         for k, (h, w) in enumerate(sizes)])
        cache = DeviceCache(images, torch.zeros(len(sizes), dtype=torch.int64, device="cuda"),
                            placement="host")
        loader = DeviceLoader(cache, 2, prefetch=0, crop=Augment(RandomResizedCrop(16)))
        batch, records, firsts = _batches(loader, 5, rt, epochs=1)
    delivery = loader._get_delivery()
    for rec in records:
        assert not rec.bad, rec.report()
        assert len(rec.ops) == 3, rec.report()  # the bytes, the row starts, the sizes
    _check_firsts(firsts, 3)
    assert len(delivery.buffers) == 2 and all(rt.is_pinned(b) for b in delivery.buffers)
    assert len(waits) == 5 - 2  # 5 batches, 2 buffers: each reuse waited for its last copy
    assert batch[0].device.type == "cuda" and tuple(batch[0].shape) == (2, 3, 16, 16)


def test_device_jpeg_bytes_come_back_on_the_side_stream_into_pinned_memory(monkeypatch):
    """A device-placed JPEG cache: nvJPEG reads host bitstreams, so each batch's bytes come
    back. The gather and the copy run on the reader's side stream into pinned memory, and the
    reader waits for that stream only (a copy on the default stream would queue behind, and
    wait for, the training step). nvJPEG itself cannot be faked: the batch is checked up to
    the bytes it is given."""
    from batchaug.data import ragged_batches as RB
    from batchaug.data.ragged import RaggedImages, batch_bytes
    from batchaug.data.prefetch import Delivery

    rt = _FakeCudaRuntime(monkeypatch)
    cpu = RaggedImages.from_list([torch.zeros(3, 9 + i, 7, dtype=torch.uint8)
                                   for i in range(5)], storage="jpeg", quality=90)
    idx = torch.tensor([3, 0, 4])
    with _CudaOnlyFake():
        images = RaggedImages(torch.zeros(cpu.data.numel(), dtype=torch.uint8, device="cuda"),
                               cpu.index, 3, "jpeg", 90)
        side = torch.cuda.Stream()
        with _Assembly(rt) as rec:
            buf, local = batch_bytes(images, idx, pin=True, stream=side)
        assert not rec.bad, rec.report()
        assert len(rec.ops) == 1 and side.synced == 1 and rt.default.synced == 0
        assert buf.numel() == int(cpu.index[idx, 1].sum())

        seen = {}

        def record(*args, **kwargs):
            seen.update(kwargs)
            raise StopIteration  # the bytes' way is what is checked, not the decode

        monkeypatch.setattr(RB, "batch_bytes", record)
        cuda = torch.device("cuda", 0)
        delivery = Delivery(RB.RaggedRows(images, cuda), cuda, 3, 1)
        with pytest.raises(StopIteration):
            delivery.produce(idx)
    assert seen["stream"] is delivery.stream and seen["stream"] is not rt.default


# --- the same on a real GPU: a host-timing sync probe ------------------------------------------
def _sleep_cycles(ms):
    """``torch.cuda._sleep`` cycles for about ``ms`` milliseconds of device time."""
    import time

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    torch.cuda._sleep(10_000_000)
    torch.cuda.synchronize()
    return int(10_000_000 * ms / ((time.perf_counter() - t0) * 1e3))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("kind", ["fixed", "ragged", "jpeg"])
def test_cuda_next_does_not_wait_for_the_training_step(tmp_path, kind):
    """The default stream busy for ~300 ms (a training step): ``next()`` of a device-placed
    cache returns long before, as it only queues work (a host sync would wait it out)."""
    import time

    from batchaug import DeviceCache, DeviceLoader

    g = torch.Generator().manual_seed(0)
    if kind == "fixed":
        cache = DeviceCache.from_tensors(torch.randint(0, 256, (64, 3, 40, 48),
                                                       dtype=torch.uint8, generator=g),
                                         torch.zeros(64, dtype=torch.int64), device="cuda")
    else:
        from batchaug.data.ragged import RaggedImages

        imgs = [torch.randint(0, 256, (3, 30 + i % 17, 50 - i % 13), dtype=torch.uint8,
                              generator=g) for i in range(64)]
        storage = "jpeg" if kind == "jpeg" else "raw"
        c = RaggedImages.from_list(imgs, storage=storage, quality=90)
        images = RaggedImages(c.data.cuda(), c.index, 3, storage, c.quality)
        cache = DeviceCache(images, torch.zeros(64, dtype=torch.int64, device="cuda"),
                            placement="device")
    loader = DeviceLoader(cache, 16, prefetch=0, crop=Augment(RandomRotation(10),
                                                              RandomResizedCrop(24)))
    it = iter(loader)
    next(it)  # warm-up: first kernels, handles, the epoch's order
    cycles = _sleep_cycles(300)
    for _ in range(2):
        torch.cuda._sleep(cycles)
        t0 = time.perf_counter()
        next(it)
        waited = (time.perf_counter() - t0) * 1e3
        torch.cuda.synchronize()
        assert waited < 100, f"next() took {waited:.0f} ms behind a 300 ms step: a host sync"


@pytest.mark.filterwarnings("ignore:Accessing the data pointer of FakeTensor")
@pytest.mark.parametrize("ragged", [False, True])
def test_a_host_cache_stays_pageable_and_its_batches_go_through_pinned_buffers(
        monkeypatch, tmp_path, ragged):
    """docs/data.md: a ``"host"`` cache is ordinary (pageable) CPU memory, only the loader's
    staging buffers are pinned (pinning the whole cache rounds it up to a power of two and
    keeps it). The CUDA tests (tests/data/test_loader.py, gpu/gpu_bench.py) check the same."""
    from batchaug import DeviceCache, DeviceLoader
    from batchaug.data.ragged import RaggedImages

    rt = _FakeCudaRuntime(monkeypatch)
    g = torch.Generator().manual_seed(0)
    if ragged:
        images = RaggedImages.from_list([torch.randint(0, 256, (3, 20 + k, 30 - k),
                                                       dtype=torch.uint8, generator=g)
                                         for k in range(8)])
    else:
        images = torch.randint(0, 256, (8, 3, 20, 24), dtype=torch.uint8, generator=g)
    DeviceCache(images, torch.arange(8), placement="device").save(tmp_path / "c")
    # the load's device checks (torch.cuda.is_available itself must stay False: FakeTensorMode
    # would then run host->CUDA copies for real)
    monkeypatch.setattr(cache_module, "resolve_device", torch.device)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (2**40, 2**40))
    with _CudaOnlyFake():
        cache = DeviceCache.load(tmp_path / "c", device="cuda", placement="host")
        column = cache.images.data if ragged else cache.images
        assert column.device.type == "cpu" and not rt.is_pinned(column)
        loader = DeviceLoader(cache, 4, prefetch=0, crop=RandomResizedCrop(16))
        x, _ = next(iter(loader))
    delivery = loader._get_delivery()
    assert x.device.type == "cuda"
    assert delivery.buffers and all(rt.is_pinned(b) for b in delivery.buffers)


@pytest.mark.filterwarnings("ignore:Accessing the data pointer of FakeTensor")
def test_nvjpeg_outputs_live_until_the_event_after_their_pad_copies(monkeypatch):
    """nvJPEG writes its outputs on its own stream: freed right after the pad's copies were
    queued, their memory could go to the next decode while the copies still read it. The
    delivery holds a batch's decoded images until its buffer's event has completed."""
    import gc
    import weakref

    from batchaug.data import ragged_batches as RB
    from batchaug.data.prefetch import Delivery
    from batchaug.data.ragged import RaggedImages

    rt = _FakeCudaRuntime(monkeypatch)
    decoded, synced = [], []

    def decode(streams, device, threads=1, names=None):
        out = [torch.empty(*shape_of[n], 3, dtype=torch.uint8, device=device).permute(2, 0, 1)
               for n in names]
        decoded.append([weakref.ref(p) for p in out])
        return out

    def synchronize(event):  # when the reader waits for a buffer's last batch
        synced.append([all(r() is not None for r in refs) for refs in decoded])

    monkeypatch.setattr(RB, "decode_jpegs", decode)
    monkeypatch.setattr(_Event, "synchronize", synchronize)
    images = RaggedImages.from_list([torch.zeros(3, 9 + i, 7 + 2 * i, dtype=torch.uint8)
                                     for i in range(6)], storage="jpeg", quality=90)
    shape_of = dict(enumerate(tuple(s) for s in images.index[:, 2:4].tolist()))
    with _CudaOnlyFake():
        cuda = torch.device("cuda", 0)
        delivery = Delivery(RB.RaggedRows(images, cuda), cuda, 3, 1)  # one buffer
        for idx in (torch.tensor([3, 0, 4]), torch.tensor([1, 5, 2])):
            item = delivery.produce(idx)
            gc.collect()
            # the batch's padding is queued, not done: its decoded images are still held
            assert all(r() is not None for r in decoded[-1])
            x, _ = delivery.receive(item)
            assert x.shape[:2] == (3, 3)
            delivery.release(item)
        gc.collect()
    # the second batch waited for the first one's event with its images still alive, and
    # they were let go only then
    assert synced == [[True]]
    assert all(r() is None for r in decoded[0])
