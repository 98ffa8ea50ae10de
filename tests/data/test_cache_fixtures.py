"""Caches written by earlier batchaug (``tests/fixtures/caches``, by
``tools/make_cache_fixtures.py``) still load, in every placement and shard, to the images and
targets recomputed from their generator (``tests/fixtures/cache_content.py``), and a
``DeviceLoader`` over them yields those."""
import shutil
import sys
from pathlib import Path

import pytest
import torch
import torchvision.transforms.v2.functional as TF

from batchaug import CenterCrop, DeviceCache, DeviceLoader

FIXTURES = Path(__file__).parents[1] / "fixtures"
sys.path.insert(0, str(FIXTURES))
import cache_content as cc  # noqa: E402

NAMES = sorted(cc.FIXTURES)
PLACEMENTS = ["device", "host", "disk"]
LABEL_KINDS = ("labels", "boxes")


def _expected(name):
    """Per stored row: (image as the cache stores it, label or None, mask or None,
    (boxes, box labels) or None), from the generator and the documented stored order."""
    spec = cc.FIXTURES[name]
    ds = cc.Items(spec["ragged"], spec["kind"], spec.get("channels", 3))
    order = cc.stored_order(len(ds), spec.get("shuffle", False), spec.get("seed", 0))
    rows = []
    for i in order:
        h, w = cc.sizes(spec["ragged"])[i]
        im = cc.image(i, h, w, spec.get("channels", 3))
        kind = spec["kind"]
        rows.append(dict(
            image=im,
            label=cc.label(i) if kind in LABEL_KINDS else None,
            mask=cc.mask(i, h, w, wide=kind == "wide_masks") if "masks" in kind else None,
            boxes=cc.boxes(i, h, w) if kind.startswith("boxes") else None))
    if spec["kind"].startswith("boxes"):  # padded to the whole cache's largest count
        spec = dict(spec, max_boxes=max(len(r["boxes"][0]) for r in rows))
    return spec, rows


def _check_image(spec, got, want, where):
    dtype = spec.get("dtype", "uint8")
    assert got.shape == want.shape, where
    if spec.get("storage") == "jpeg":
        diff = (got.int() - want.int()).abs().max()
        assert diff <= cc.JPEG_TOLERANCE, f"{where}: JPEG off by {diff}"
    elif dtype == "uint8":
        assert got.dtype == torch.uint8 and torch.equal(got, want), where
    else:
        assert str(got.dtype) == f"torch.{dtype}", where
        tol = 1e-6 if dtype == "float32" else 4e-3  # bfloat16 keeps 8 significant bits
        torch.testing.assert_close(got.float(), want.float() / 255, atol=tol, rtol=0,
                                   msg=where)


def _check_rows(cache, spec, rows, where):
    assert len(cache) == len(rows), where
    kind = spec["kind"]
    for k, row in enumerate(rows):
        _check_image(spec, cache.image(k).cpu(), row["image"], f"{where} image {k}")
    if kind in LABEL_KINDS:
        assert cache.classes == cc.CLASSES
        assert cache.labels.tolist() == [r["label"] for r in rows], where
    else:
        assert cache.labels is None, where
    if "masks" in kind:
        want_dtype = torch.int16 if kind == "wide_masks" else torch.uint8
        assert cache.masks.dtype == want_dtype, where
        for k, row in enumerate(rows):
            got = cache.masks.image(k)[0] if spec["ragged"] or spec.get("storage") else \
                cache.masks[k]
            assert torch.equal(got.cpu().long(), row["mask"]), f"{where} mask {k}"
    else:
        assert cache.masks is None
    if kind.startswith("boxes"):
        assert cache.boxes.shape == (len(rows), spec["max_boxes"], 4), where
        for k, row in enumerate(rows):
            b, bl = row["boxes"]
            j = len(b)
            assert torch.equal(cache.boxes[k, :j].cpu(), b), f"{where} boxes {k}"
            assert torch.equal(cache.box_labels[k, :j].cpu(), bl), f"{where} box labels {k}"
            assert cache.box_valid[k, :j].all() and not cache.box_valid[k, j:].any(), where
            assert not cache.boxes[k, j:].any(), where
    else:
        assert cache.boxes is None


def test_every_fixture_is_listed():
    on_disk = {p.name for p in (FIXTURES / "caches").iterdir() if p.is_dir()}
    assert on_disk == set(cc.FIXTURES)


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("name", NAMES)
def test_fixture_loads(name, placement):
    spec, rows = _expected(name)
    cache = DeviceCache.load(FIXTURES / "caches" / name, device="cpu", placement=placement,
                             verify=placement == "device")
    assert cache.placement == placement
    assert cache.ragged == spec["ragged"]
    assert cache.storage == spec.get("storage", "raw")
    assert cache.channels_last == spec.get("channels_last", False)
    assert cache.sizes.tolist() == [list(r["image"].shape[1:]) for r in rows]
    _check_rows(cache, spec, rows, f"{name} {placement}")
    if placement != "device":  # read into the device: the same rows, every column
        moved = cache.to("cpu")
        assert moved.placement == "device" and moved is not cache
        _check_rows(moved, spec, rows, f"{name} {placement} .to('cpu')")


@pytest.mark.parametrize("name", NAMES)
def test_fixture_shards(name, tmp_path):
    spec, rows = _expected(name)
    n = len(rows)
    for rank in range(2):
        cache = DeviceCache.load(FIXTURES / "caches" / name, device="cpu", shard=(rank, 2))
        start, end = rank * n // 2, (rank + 1) * n // 2  # the documented contiguous parts
        assert cache.global_len == n
        _check_rows(cache, spec, rows[start:end], f"{name} shard {rank}")
        # a part saved on its own: its columns start at their first row (rebased)
        cache.save(tmp_path / f"part{rank}")
        part = DeviceCache.load(tmp_path / f"part{rank}", device="cpu", verify=True)
        if spec["kind"].startswith("boxes"):
            spec = dict(spec, max_boxes=int(cache.boxes.shape[1]))
        _check_rows(part, spec, rows[start:end], f"{name} shard {rank} saved")


def _loader_batches(cache, crop, prefetch):
    loader = DeviceLoader(cache, batch_size=2, shuffle=False, crop=crop, prefetch=prefetch,
                          rank=0, world_size=1)
    return list(loader)


def _cropped_row(row, spec):
    """The row as CenterCrop(8) leaves it (torchvision's kernels), boxes shifted."""
    im = row["image"]
    h, w = im.shape[1:]
    top, left = (h - 8) // 2, (w - 8) // 2
    out = dict(row, image=TF.center_crop(im, [8, 8]))
    if row["mask"] is not None:
        out["mask"] = TF.center_crop(row["mask"][None], [8, 8])[0]
    if row["boxes"] is not None:
        b, bl = row["boxes"]
        out["boxes"] = (b - torch.tensor([left, top, left, top], dtype=torch.float32), bl)
    return out


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("name", NAMES)
def test_fixture_loader(name, placement):
    spec, rows = _expected(name)
    cache = DeviceCache.load(FIXTURES / "caches" / name, device="cpu", placement=placement)
    crops = [CenterCrop(8)] + ([] if not cache.dense else [None])
    kind = spec["kind"]
    for crop, prefetch in zip(crops, (0, 2)):
        want = rows if crop is None else [_cropped_row(r, spec) for r in rows]
        batches = _loader_batches(cache, crop, prefetch)
        where = f"{name} {placement} crop={crop}"
        images = torch.cat([b[0] for b in batches])
        assert images.shape[0] == len(rows)
        for k, row in enumerate(want):
            _check_image(spec, images[k], row["image"], f"{where} batch image {k}")
        targets = [b[1] for b in batches]
        if kind == "labels":
            assert torch.cat(targets).tolist() == [r["label"] for r in rows], where
            continue
        if kind in LABEL_KINDS:
            assert torch.cat([t["labels"] for t in targets]).tolist() == \
                [r["label"] for r in rows], where
        else:
            assert all("labels" not in t for t in targets), where
        if "masks" in kind:
            masks = torch.cat([t["masks"] for t in targets])
            for k, row in enumerate(want):
                assert torch.equal(masks[k].long(), row["mask"]), f"{where} mask {k}"
        if kind.startswith("boxes"):
            for k, row in enumerate(want):
                t = targets[k // 2]
                b, bl = row["boxes"]
                valid = t["box_valid"][k % 2]
                assert valid.sum() == len(b), where
                torch.testing.assert_close(t["boxes"][k % 2][valid], b, msg=where)
                assert torch.equal(t["box_labels"][k % 2][valid], bl), where


def test_fixture_copy_saves_and_loads_unchanged(tmp_path):
    """A loaded fixture saved again loads to the same rows (every kind: save reads what load
    made)."""
    for name in NAMES:
        spec, rows = _expected(name)
        cache = DeviceCache.load(FIXTURES / "caches" / name, device="cpu")
        cache.save(tmp_path / name)
        again = DeviceCache.load(tmp_path / name, device="cpu", verify=True)
        _check_rows(again, spec, rows, f"{name} saved again")
        shutil.rmtree(tmp_path / name)
