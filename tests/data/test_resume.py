"""Exact mid-epoch resume: DeviceLoader.state_dict / load_state_dict, and the README recipe."""
import io
import json
import re
import tempfile
from pathlib import Path
from unittest import mock

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from batchaug import (Augment, AugmentedModel, DeviceCache, DeviceLoader, Normalize,
                      RandomCrop, RandomHorizontalFlip)
from batchaug.data import prefetch as prefetch_mod

FIELDS = {"version", "seed", "epoch", "batches_yielded", "batch_size", "world_size", "rank",
          "order", "shuffle", "drop_last", "dataset_length", "partitioned"}


def save_cache(path, n, seed=0):
    g = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (n, 3, 4, 4), dtype=torch.uint8, generator=g)
    DeviceCache.from_tensors(images, torch.arange(n), device="cpu").save(path)


def labels_of(batches):
    return [y.tolist() for _, y in batches]


@settings(deadline=None)
@given(n=st.integers(1, 40), bs=st.integers(2, 9), drop_last=st.booleans(),
       world=st.integers(1, 3), order=st.sampled_from(["random", "quasi_random"]),
       shuffle=st.booleans(), seed=st.integers(0, 2**31), epoch=st.integers(0, 5),
       placement=st.sampled_from(["device", "host", "disk"]), prefetch=st.integers(0, 2))
def test_resume_at_every_batch_position_equals_the_uninterrupted_run(
        n, bs, drop_last, world, order, shuffle, seed, epoch, placement, prefetch):
    with tempfile.TemporaryDirectory() as tmp:
        save_cache(Path(tmp) / "c", n, seed % 97)
        kw = dict(batch_size=bs, shuffle=shuffle, drop_last=drop_last, seed=seed,
                  rank=world - 1, world_size=world, order=order, prefetch=prefetch)

        cache = DeviceCache.load(Path(tmp) / "c", device="cpu", placement=placement)

        def make():
            return DeviceLoader(cache, **kw)

        ref = make()
        ref.set_epoch(epoch)
        this_epoch = [(x.clone(), y.clone()) for x, y in ref]
        next_epoch = [(x.clone(), y.clone()) for x, y in ref]
        for k in range(len(this_epoch) + 1):  # every position, the end of the epoch included
            first = make()
            first.set_epoch(epoch)
            it = iter(first)
            for _ in range(k):
                next(it)
            state = json.loads(json.dumps(first.state_dict()))  # JSON-serialisable
            assert set(state) == FIELDS
            if k < len(this_epoch) or not this_epoch:  # (an empty epoch never starts)
                assert (state["epoch"], state["batches_yielded"]) == (epoch, k)
            else:  # the epoch's last batch was handed out: the next epoch, from its start
                assert (state["epoch"], state["batches_yielded"]) == (epoch + 1, 0)
            first.close()
            resumed = make()
            resumed.load_state_dict(state)
            rest = [(x.clone(), y.clone()) for x, y in resumed]
            expect = this_epoch[k:] if k < len(this_epoch) or not this_epoch else next_epoch
            assert len(rest) == len(expect)
            for (x, y), (ex, ey) in zip(rest, expect):
                assert torch.equal(x, ex) and torch.equal(y, ey)
            if k < len(this_epoch):  # and the epoch after that is the uninterrupted one's
                assert labels_of(resumed) == labels_of(next_epoch)


def test_state_after_a_finished_loop_resumes_at_the_next_epoch(tmp_path):
    # torchdata #1437: a state saved at the end of an epoch replayed that epoch.
    save_cache(tmp_path / "c", 20)
    cache = DeviceCache.load(tmp_path / "c", device="cpu")
    loader = DeviceLoader(cache, 6, seed=5, rank=0, world_size=1)
    list(loader)
    state = loader.state_dict()
    assert (state["epoch"], state["batches_yielded"]) == (1, 0)
    epoch1 = labels_of(loader)
    other = DeviceLoader(cache, 6, seed=5, rank=0, world_size=1)
    other.load_state_dict(state)
    assert labels_of(other) == epoch1
    fresh = DeviceLoader(cache, 6, seed=5, rank=0, world_size=1)
    assert fresh.state_dict()["epoch"] == 0 and fresh.state_dict()["batches_yielded"] == 0


def test_a_batch_that_fails_before_it_is_handed_out_is_not_counted(monkeypatch):
    # the padded path counted a batch when it arrived, before its crop: a state taken after that
    # crop raised said the batch was yielded, and a resume from it skipped the batch
    cache = DeviceCache.from_tensors(torch.zeros(12, 1, 4, 4, dtype=torch.uint8),
                                     torch.arange(12), device="cpu")
    loader = DeviceLoader(cache, 4, seed=5, rank=0, world_size=1, prefetch=0)
    real, calls = loader._crop_batch, []

    def failing(*args):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("crop failed")
        return real(*args)

    monkeypatch.setattr(loader, "_crop_batch", failing)
    it = iter(loader)
    next(it)
    with pytest.raises(RuntimeError, match="crop failed"):
        next(it)
    assert loader.state_dict()["batches_yielded"] == 1


def test_set_epoch_after_loading_keeps_the_resume_point_only_for_that_epoch(tmp_path):
    save_cache(tmp_path / "c", 30)
    cache = DeviceCache.load(tmp_path / "c", device="cpu")
    loader = DeviceLoader(cache, 4, seed=1, rank=0, world_size=1)
    loader.set_epoch(3)
    full = labels_of(loader)
    src = DeviceLoader(cache, 4, seed=1, rank=0, world_size=1)
    src.set_epoch(3)
    it = iter(src)
    next(it), next(it)
    state = src.state_dict()
    a = DeviceLoader(cache, 4, seed=1, rank=0, world_size=1)
    a.load_state_dict(state)
    a.set_epoch(3)  # the usual `for epoch in range(start, E): loader.set_epoch(epoch)` loop
    assert labels_of(a) == full[2:]
    b = DeviceLoader(cache, 4, seed=1, rank=0, world_size=1)
    b.load_state_dict(state)
    b.set_epoch(4)
    assert len(labels_of(b)) == len(full)


def test_resume_does_not_read_the_skipped_batches(tmp_path):
    save_cache(tmp_path / "c", 40)
    for order in ("random", "quasi_random"):
        cache = DeviceCache.load(tmp_path / "c", device="cpu", placement="disk")
        src = DeviceLoader(cache, 5, seed=2, order=order, rank=0, world_size=1)
        it = iter(src)
        for _ in range(6):
            next(it)
        state = src.state_dict()
        src.close()
        rest_rows = set(src.indices(0)[30:].tolist())
        resumed = DeviceLoader(cache, 5, seed=2, order=order, rank=0, world_size=1)
        resumed.load_state_dict(state)
        asked = []
        real = prefetch_mod.DiskGather.__call__

        def spy(self, idx, out):
            asked.extend(idx.tolist())
            return real(self, idx, out)

        with mock.patch.object(prefetch_mod.DiskGather, "__call__", spy):
            got = [y for _, y in resumed]
        assert len(got) == 2
        assert set(asked) == rest_rows  # only the two remaining batches were gathered


def test_mismatches_are_value_errors_naming_the_field(tmp_path):
    save_cache(tmp_path / "c", 30)
    save_cache(tmp_path / "d", 31)
    cache = DeviceCache.load(tmp_path / "c", device="cpu")
    loader = DeviceLoader(cache, 4, seed=1, rank=0, world_size=2)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    other = DeviceCache.load(tmp_path / "d", device="cpu")
    cases = [  # (field, this loader's value, the loader)
        ("dataset_length", 31, DeviceLoader(other, 4, seed=1, rank=0, world_size=2)),
        ("batch_size", 8, DeviceLoader(cache, 8, seed=1, rank=0, world_size=2)),
        ("order", "quasi_random",
         DeviceLoader(cache, 4, seed=1, rank=0, world_size=2, order="quasi_random")),
        ("seed", 2, DeviceLoader(cache, 4, seed=2, rank=0, world_size=2)),
        ("drop_last", True, DeviceLoader(cache, 4, seed=1, rank=0, world_size=2, drop_last=True)),
        ("shuffle", False, DeviceLoader(cache, 4, seed=1, rank=0, world_size=2, shuffle=False)),
        ("rank", 1, DeviceLoader(cache, 4, seed=1, rank=1, world_size=2)),
    ]
    for field, value, target in cases:
        msg = (f"state field '{field}' is {state[field]!r} but this loader has {value!r}; build "
               f"the loader (and load the cache) as in the run that saved the state")
        with pytest.raises(ValueError, match=re.escape(msg)):
            target.load_state_dict(state)
    # the same global batch (8) on one rank: documented as refused, not remapped
    with pytest.raises(ValueError, match=re.escape(
            "state field 'world_size' is 2 but this loader has 1 (the same global batch size): "
            "an epoch's padding and rank split depend on the world size, so it cannot be "
            "continued with another one; finish it with the old world size, or start the next "
            "epoch with loader.set_epoch(0 + 1)")):
        DeviceLoader(cache, 8, seed=1, rank=0, world_size=1).load_state_dict(state)
    same = DeviceLoader(cache, 4, seed=1, rank=0, world_size=2)
    with pytest.raises(ValueError, match=r"state field .version. is 99; this batchaug reads version 1"):
        same.load_state_dict({**state, "version": 99})
    with pytest.raises(ValueError, match=r"state is missing the field\(s\) \[.order.\]"):
        same.load_state_dict({k: v for k, v in state.items() if k != "order"})
    with pytest.raises(ValueError, match=re.escape(
            f"state field 'batches_yielded' is {len(same) + 1} but an epoch has only "
            f"{len(same)} batches")):
        same.load_state_dict({**state, "batches_yielded": len(same) + 1})
    with pytest.raises(TypeError, match="state must be a dict from DeviceLoader.state_dict"):
        same.load_state_dict([("epoch", 0)])
    # equal values of another type (1 == True, 1.0 == 1): a hand-edited or converted state
    for field, value in (("shuffle", int(state["shuffle"])), ("seed", float(state["seed"])),
                         ("drop_last", int(state["drop_last"])),
                         ("batch_size", float(state["batch_size"]))):
        assert value == state[field]
        with pytest.raises(ValueError, match=f"state field '{field}' is {value!r}"):
            same.load_state_dict({**state, field: value})
    same.load_state_dict(state)  # the right one still loads


def _train(loader, model, optimizer, epochs, start_epoch=0, stop_at=None, record=None):
    """The README loop; returns a checkpoint when it reaches ``stop_at`` = (epoch, batch)."""
    for epoch in range(start_epoch, epochs):
        loader.set_epoch(epoch)
        for images, labels in loader:
            model.train()
            augmented = model.augment(images)
            if record is not None:
                record.append(augmented.clone())
            loss = F.cross_entropy(model.model(augmented), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            done = loader.state_dict()
            if stop_at is not None and (epoch, done["batches_yielded"]) == stop_at:
                buf = io.BytesIO()
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                            "loader": loader.state_dict(), "epoch": epoch,
                            "rng": torch.get_rng_state()}, buf)
                return buf.getvalue()
    return None


def _setup(path, placement):
    torch.manual_seed(0)
    cache = DeviceCache.load(path, device="cpu", placement=placement)
    loader = DeviceLoader(cache, 8, seed=3, rank=0, world_size=1)
    augment = Augment(RandomCrop(4, padding=1), RandomHorizontalFlip(),
                      Normalize((0.5, 0.5, 0.5), (0.25, 0.25, 0.25)))
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(48, 40))
    model = AugmentedModel(augment, net)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return loader, model, optimizer


@pytest.mark.parametrize("placement", ["device", "disk"])
def test_readme_recipe_resumes_with_bit_identical_augmented_batches(tmp_path, placement):
    save_cache(tmp_path / "c", 40)
    loader, model, optimizer = _setup(tmp_path / "c", placement)
    reference = []
    _train(loader, model, optimizer, 3, record=reference)
    final = {k: v.clone() for k, v in model.state_dict().items()}

    loader, model, optimizer = _setup(tmp_path / "c", placement)
    before = []
    ckpt = _train(loader, model, optimizer, 3, stop_at=(1, 2), record=before)
    assert ckpt is not None and len(before) == 5 + 2

    torch.manual_seed(12345)  # a new process: another RNG state until the checkpoint's
    loader, model, optimizer = _setup(tmp_path / "c", placement)
    state = torch.load(io.BytesIO(ckpt), weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    loader.load_state_dict(state["loader"])
    torch.set_rng_state(state["rng"])
    after = []
    _train(loader, model, optimizer, 3, start_epoch=state["loader"]["epoch"], record=after)
    assert len(before) + len(after) == len(reference)
    for got, want in zip(before + after, reference):
        assert torch.equal(got, want)  # the same augmented pixels, batch for batch
    for k, v in model.state_dict().items():
        assert torch.equal(v, final[k]), k
