"""Boxes in ragged / JPEG caches: stored at each image's own size, moved by the loader's crop
(an ``Augment``'s ``with_targets`` with ``targets["sizes"]``) by exactly each image's crop box
(torchvision v2's resized_crop on BoundingBoxes)."""
import filecmp

import numpy as np
import pytest
import torch
from torchvision import tv_tensors
from torchvision.transforms.v2 import functional as TF

import batchaug.functional._sized as S
import batchaug.transforms._geometry as G
from batchaug import (Augment, CenterCrop, RandomCrop, RandomHorizontalFlip, RandomResizedCrop,
                      RandomRotation, Resize)
from batchaug.data import DeviceCache, DeviceLoader, write_cache
from batchaug.data.ragged import RaggedImages
from tests.data.loader_crop import LoaderCrop as Crop

SIZES = [(30, 41), (37, 26), (18, 18), (45, 23), (12, 33)]



def _boxes(h, w, g, m=7, thin=True):
    """XYXY boxes around a ``h x w`` image: inside, across its border, outside, thin."""
    x1 = torch.rand(m, generator=g) * (w + 10) - 5
    y1 = torch.rand(m, generator=g) * (h + 10) - 5
    bw = torch.rand(m, generator=g) * w
    bh = torch.rand(m, generator=g) * h
    b = torch.stack((x1, y1, x1 + bw, y1 + bh), 1)
    b[0] = torch.tensor([0.0, 0.0, w, h])
    if thin:
        b[1, 2] = b[1, 0] + 0.5  # too thin to be kept
    return b


def _batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    hm, wm = max(h for h, _ in SIZES), max(w for _, w in SIZES)
    images = torch.randint(0, 256, (len(SIZES), 3, hm, wm), generator=g, dtype=torch.uint8)
    boxes = torch.stack([_boxes(h, w, g) for h, w in SIZES])
    valid = torch.ones(boxes.shape[:2], dtype=torch.bool)
    valid[:, -1] = False  # a padding slot stays invalid
    return images, boxes, valid, torch.tensor(SIZES)


def _reference(crop_kind, box, hw, draw, out):
    """torchvision v2 on one image's boxes (clamped to it first and to the output after),
    then its sanitizer."""
    bb = TF.clamp_bounding_boxes(tv_tensors.BoundingBoxes(box, format="XYXY", canvas_size=hw))
    if crop_kind == "rrc":
        bb = TF.resized_crop(bb, *draw, size=list(out))
    elif crop_kind == "resize":
        bb = TF.resize(bb, list(out))
    elif crop_kind == "center":
        bb = TF.center_crop(bb, list(out))
    elif crop_kind == "random":
        bb = TF.crop(bb, draw[0], draw[1], *out)
    elif crop_kind == "resize_center":
        bb = TF.center_crop(TF.resize(bb, 16), list(out))
    elif crop_kind == "flip_resize_center":
        bb = TF.center_crop(TF.resize(TF.horizontal_flip(bb), 16), list(out))
    elif crop_kind == "resize_random":
        bb = TF.crop(TF.resize(bb, 16), draw[0], draw[1], *out)
    elif crop_kind == "rrc_center":
        bb = TF.center_crop(TF.resized_crop(bb, *draw, size=[10, 10]), list(out))
    assert tuple(bb.canvas_size) == tuple(out)
    bb = TF.clamp_bounding_boxes(bb)  # soft clamping to the output, as the v2 transforms
    _, keep = TF.sanitize_bounding_boxes(bb, min_size=1, min_area=1)
    return bb.as_subclass(torch.Tensor), keep


CROPS = {
    "rrc": lambda: RandomResizedCrop(9),
    "resize": lambda: Resize((12, 9)),
    "center": lambda: CenterCrop(14),
    "random": lambda: RandomCrop(28, pad_if_needed=True, padding=2),
    "resize_center": lambda: Augment(Resize(16), CenterCrop(14)),
    # a warp before Resize(int) + crop: boxes move through both (refused before issue 29)
    "flip_resize_center": lambda: Augment(RandomHorizontalFlip(1.0), Resize(16),
                                          CenterCrop(14)),
    "resize_random": lambda: Augment(Resize(16), RandomCrop(15, pad_if_needed=True)),
    "rrc_center": lambda: Augment(RandomResizedCrop(10), CenterCrop(8)),
}


@pytest.mark.parametrize("kind", sorted(CROPS))
@pytest.mark.parametrize("keyed", [True, False])
@pytest.mark.parametrize("batched", [False, True])
def test_boxes_move_as_torchvision_moves_them_with_each_images_crop(kind, keyed, batched,
                                                                    monkeypatch):
    if batched:  # the batched ragged kernels (accelerators) instead of the per-image loop
        monkeypatch.setattr(S, "eager_cpu", lambda x: False)  # the transforms' predicate
    images, boxes, valid, sizes = _batch(len(kind))
    keys = torch.arange(len(SIZES), dtype=torch.int64) * 7919 + 3 if keyed else None
    stage = Crop(CROPS[kind]())
    draws = []  # the images' own draws, recorded from the image pass (the modules' draws)
    rrc, offset = G.RandomResizedCrop.make_params, G.RandomCrop._offset
    with monkeypatch.context() as mp:
        mp.setattr(G.RandomResizedCrop, "make_params",
                   lambda *a: draws.append(rrc(*a)) or draws[-1])
        mp.setattr(G.RandomCrop, "_offset",
                   lambda *a: draws.append(offset(*a)) or draws[-1])
        torch.manual_seed(5)
        x_ref = stage(images, sizes, keys)
    draws = list(draws)
    torch.manual_seed(5)
    x, b, ok, m = stage.with_boxes(images, boxes, valid, sizes, keys)
    after = torch.rand(1)
    torch.manual_seed(5)
    stage(images, sizes, keys)
    assert torch.equal(torch.rand(1), after)  # the random state as after the images alone
    assert torch.equal(x, x_ref) and m is None
    assert b.shape == boxes.shape and ok.shape == valid.shape
    out = tuple(x.shape[2:])
    for i, hw in enumerate(SIZES):
        draw = None
        if kind.startswith("rrc"):
            draw = [int(t[i]) for t in draws[0]]
        elif kind.endswith("random"):
            draw = [int(draws[0][i]), int(draws[1][i])]
        ref, keep = _reference(kind, boxes[i], hw, draw, out)
        keep = keep & valid[i]
        assert torch.equal(ok[i], keep), (i, ok[i], keep)
        torch.testing.assert_close(b[i][keep], ref[keep], atol=1e-4, rtol=0)
        assert (b[i][~keep] == 0).all()
    assert ok.any() and (~ok[:, :-1]).any()  # both kinds occur


def test_boxes_and_masks_together_and_refusals():
    images, boxes, valid, sizes = _batch(3)
    masks = torch.randint(0, 5, (len(SIZES), 1) + tuple(images.shape[2:]), dtype=torch.uint8)
    stage = Crop(RandomResizedCrop(9))
    keys = torch.arange(len(SIZES), dtype=torch.int64)
    x, b, ok, m = stage.with_boxes(images, boxes, valid, sizes, keys, masks=masks)
    x2, m2 = stage.with_masks(images, masks, sizes, keys)
    x3, b3, ok3, _ = stage.with_boxes(images, boxes, valid, sizes, keys)
    assert torch.equal(x, x2) and torch.equal(m, m2) and torch.equal(b, b3)
    assert torch.equal(ok, ok3)
    # warps before the size-fixing step move boxes (the steps' own with_targets on each
    # image's extent: tests/transforms/test_sizes.py), before Resize(int) + crop too
    Crop(Augment(RandomRotation(10), RandomResizedCrop(9))).with_boxes(
        images, boxes, valid, sizes)
    _, b, ok, _ = Crop(Augment(RandomRotation(10), Resize(12), CenterCrop(9))).with_boxes(
        images, boxes, valid, sizes)
    assert b.shape == boxes.shape and ok.any()
    with pytest.raises(ValueError, match="boxes.*shape"):
        stage.with_boxes(images, boxes[:, :, :3], valid, sizes)
    with pytest.raises(ValueError, match="box_valid.*bool"):
        stage.with_boxes(images, boxes, valid.long(), sizes)


class RaggedDet:
    """Detection items of different sizes; sample i has i % 3 + 1 boxes."""

    def __init__(self, interrupt_at=None):
        self.interrupt_at = interrupt_at

    def __len__(self):
        return len(SIZES)

    def __getitem__(self, i):
        if i == self.interrupt_at:
            raise KeyboardInterrupt
        h, w = SIZES[i]
        g = torch.Generator().manual_seed(i)
        img = torch.randint(0, 256, (3, h, w), generator=g, dtype=torch.uint8)
        b = _boxes(h, w, g, i % 3 + 1, thin=False).clamp_min(0)
        b = torch.minimum(b, torch.tensor([w - 2, h - 2, w, h]))
        b[:, 2:] = torch.maximum(b[:, 2:], b[:, :2] + 1)  # inside, at least 1 x 1
        return img, {"boxes": tv_tensors.BoundingBoxes(b, format="XYXY", canvas_size=(h, w)),
                     "labels": torch.arange(i % 3 + 1) + 10 * i}


@pytest.mark.parametrize("storage", ["raw", "jpeg"])
def test_ragged_box_cache_round_trip_and_loader(tmp_path, storage):
    ds = RaggedDet()
    cache = DeviceCache.from_dataset(ds, device="cpu", storage=storage)
    assert not cache.dense and cache.boxes.shape == (len(SIZES), 3, 4) and cache.labels is None
    for i in range(len(SIZES)):
        b = ds[i][1]["boxes"].as_subclass(torch.Tensor)
        m = b.shape[0]
        assert torch.equal(cache.boxes[i, :m], b) and not cache.box_valid[i, m:].any()
        assert cache.box_labels[i, :m].tolist() == ds[i][1]["labels"].tolist()
    cache.save(tmp_path / "s")
    write_cache(ds, tmp_path / "w", shuffle=False, chunk_size=2, progress=False,
                storage=storage)
    with pytest.raises(KeyboardInterrupt):
        write_cache(RaggedDet(interrupt_at=3), tmp_path / "r", shuffle=False, chunk_size=2,
                    progress=False, storage=storage)
    r = write_cache(ds, tmp_path / "r", shuffle=False, chunk_size=2, resume=True,
                    progress=False, storage=storage)
    assert r.resumed_from == 2
    for name in ("boxes.npy", "box_valid.npy", "box_labels.npy", "images.bin"):
        assert filecmp.cmp(tmp_path / "s" / name, tmp_path / "w" / name, shallow=False)
        assert filecmp.cmp(tmp_path / "s" / name, tmp_path / "r" / name, shallow=False)
    assert not (tmp_path / "w" / "labels.npy").exists()
    for placement in ("device", "host", "disk"):
        loaded = DeviceCache.load(tmp_path / "w", device="cpu", placement=placement,
                                  verify=True)
        for key in ("boxes", "box_valid", "box_labels"):
            assert torch.equal(getattr(loaded, key), getattr(cache, key))
        crop = Augment(Resize(16), CenterCrop(14))
        loader = DeviceLoader(loaded, 2, crop=crop, shuffle=False)
        got = [t for _, t in loader]
        b = torch.cat([t["boxes"] for t in got])
        ok = torch.cat([t["box_valid"] for t in got])
        assert torch.equal(torch.cat([t["box_labels"] for t in got]), cache.box_labels)
        for i, hw in enumerate(SIZES):
            ref, keep = _reference("resize_center", cache.boxes[i], hw, None, (14, 14))
            keep = keep & cache.box_valid[i]
            assert torch.equal(ok[i], keep)
            torch.testing.assert_close(b[i][keep], ref[keep], atol=1e-4, rtol=0)
    DeviceLoader(loaded, 2, crop=Augment(RandomRotation(5), RandomResizedCrop(8)))
    # warps before Resize(int) + crop move boxes too (the steps' own sized with_targets)
    got = list(DeviceLoader(loaded, 2, crop=Augment(RandomRotation(5), Resize(9),
                                                    CenterCrop(8)), shuffle=False))
    assert all(x.shape[-2:] == (8, 8) and t["boxes"].shape[1:] == (3, 4) for x, t in got)
    arr = np.load(tmp_path / "w" / "boxes.npy")
    assert arr.dtype == np.float32 and arr.shape == (len(SIZES), 3, 4)


def test_ragged_cache_from_tensors_checks_boxes():
    imgs = RaggedImages.from_list([torch.zeros(3, h, w, dtype=torch.uint8) for h, w in SIZES])
    with pytest.raises(ValueError, match="boxes must be an"):
        DeviceCache(imgs, None, targets={"boxes": torch.zeros(len(SIZES), 2)})
    c = DeviceCache(imgs, None, targets={"boxes": torch.ones(len(SIZES), 2, 4)})
    assert c.box_valid.all() and c.box_labels.shape == (len(SIZES), 2)


def test_loader_moves_masks_and_boxes_of_a_ragged_cache_together():
    g = torch.Generator().manual_seed(1)
    masks = [torch.randint(0, 9, (1, h, w), generator=g, dtype=torch.uint8) for h, w in SIZES]
    boxes = torch.stack([_boxes(h, w, g) for h, w in SIZES])
    imgs = RaggedImages.from_list([m.expand(3, -1, -1).contiguous() for m in masks])
    both = DeviceCache(imgs, None, targets={"masks": RaggedImages.from_list(masks),
                                             "boxes": boxes})
    only = DeviceCache(imgs, None, targets={"boxes": boxes})
    crop = RandomResizedCrop(7, interpolation="nearest", antialias=False)
    for keyed in (True, False):
        torch.manual_seed(3)
        a = list(DeviceLoader(both, 2, crop=crop, seed=4, return_keys=keyed))
        torch.manual_seed(3)
        b = list(DeviceLoader(only, 2, crop=crop, seed=4, return_keys=keyed))
        for (x, t, *_), (x2, t2, *_) in zip(a, b):
            assert torch.equal(x[:, 0], t["masks"])  # each mask cropped exactly as its image
            assert torch.equal(x, x2) and torch.equal(t["boxes"], t2["boxes"])
            assert torch.equal(t["box_valid"], t2["box_valid"]) and set(t2) == {
                "boxes", "box_valid", "box_labels"}
