"""Dense targets in the data path: DeviceCache masks/boxes, their files, every placement,
write_cache, pre_transform, and DeviceLoader's (images, targets) batches."""
import filecmp
import json

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import transforms as v1
from torchvision import tv_tensors
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

from batchaug.data import DeviceCache, DeviceLoader, write_cache

PLACEMENTS = ["device", "host", "disk", "auto"]
TARGET_FILES = ["masks.npy", "boxes.npy", "box_valid.npy", "box_labels.npy"]


def _image(i, h=12, w=16):
    g = np.random.default_rng(i)
    arr = g.integers(0, 256, (h, w, 3), dtype=np.uint8)
    arr[0, 0] = i  # pixel (0, 0) names the sample: batches are checked against it
    return arr


class Seg:
    """(PIL image, PIL mask) items; the mask's (0, 0) value is the sample index too."""

    def __init__(self, n=7, h=12, w=16, label=False, interrupt_at=None):
        self.n, self.h, self.w, self.label, self.interrupt_at = n, h, w, label, interrupt_at

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == self.interrupt_at:
            raise KeyboardInterrupt
        m = np.random.default_rng(100 + i).integers(0, 6, (self.h, self.w), dtype=np.uint8)
        m[0, 0] = i
        item = (Image.fromarray(_image(i, self.h, self.w)), Image.fromarray(m))
        return item + (i % 3,) if self.label else item


class Det:
    """torchvision detection items: sample i has i % 4 + 1 boxes, box 0's x1 == i."""

    def __init__(self, n=7, h=12, w=16):
        self.n, self.h, self.w = n, h, w

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        m = i % 4 + 1
        boxes = torch.tensor([[float(i), 1.0, float(i) + 3.0, 6.0]] * m)
        boxes[1:, 0] = torch.arange(1, m, dtype=torch.float32)
        return (torch.from_numpy(_image(i, self.h, self.w)).permute(2, 0, 1),
                {"boxes": tv_tensors.BoundingBoxes(boxes, format="XYXY",
                                                   canvas_size=(self.h, self.w)),
                 "labels": torch.arange(m) + 10 * i})


class Items:
    """A dataset of the given items."""

    def __init__(self, items):
        self.items = items

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def test_seg_cache_holds_masks_at_the_images_size():
    cache = DeviceCache.from_dataset(Seg(), device="cpu")
    assert cache.labels is None and set(cache.targets) == {"masks"}
    assert cache.masks.shape == (7, 12, 16) and cache.masks.dtype == torch.uint8
    for i in range(7):
        _, m = Seg()[i]
        assert torch.equal(cache.masks[i], torch.from_numpy(np.array(m)))
        assert torch.equal(cache.images[i], torch.from_numpy(_image(i)).permute(2, 0, 1))


def test_det_cache_pads_boxes_to_the_largest_count():
    cache = DeviceCache.from_dataset(Det(), device="cpu")
    assert cache.boxes.shape == (7, 4, 4) and cache.boxes.dtype == torch.float32
    for i in range(7):
        _, t = Det()[i]
        m = t["boxes"].shape[0]
        assert torch.equal(cache.boxes[i, :m], t["boxes"].as_subclass(torch.Tensor))
        assert cache.box_valid[i].tolist() == [True] * m + [False] * (4 - m)
        assert torch.equal(cache.box_labels[i, :m], t["labels"])
        assert not cache.boxes[i, m:].any() and not cache.box_labels[i, m:].any()


@pytest.mark.parametrize("values, dtype", [((0, 255), torch.uint8), ((-1, 3), torch.int16),
                                           ((0, 70000), torch.int32), ((0, 2**40), torch.int64)])
def test_masks_take_the_narrowest_integer_dtype(values, dtype):
    items = []
    for i, v in enumerate(values):
        m = torch.zeros(4, 5, dtype=torch.int64)
        m[1, 2] = v
        items.append((torch.zeros(3, 4, 5, dtype=torch.uint8), m))
    cache = DeviceCache.from_dataset(Items(items), device="cpu")
    assert cache.masks.dtype == dtype and cache.masks[:, 1, 2].tolist() == list(values)


def test_bool_mask_and_xywh_boxes_are_converted():
    img = torch.zeros(3, 10, 10, dtype=torch.uint8)
    seg = DeviceCache.from_dataset(Items([(img, np.eye(10, dtype=bool))]), device="cpu")
    assert seg.masks.dtype == torch.uint8 and torch.equal(seg.masks[0], torch.eye(10).byte())
    b = tv_tensors.BoundingBoxes(torch.tensor([[1.0, 2.0, 3.0, 4.0]]), format="XYWH",
                                 canvas_size=(10, 10))
    det = DeviceCache.from_dataset(Items([(img, {"boxes": b, "labels": [5]})]), device="cpu")
    assert det.boxes[0].tolist() == [[1.0, 2.0, 4.0, 6.0]] and det.box_labels.tolist() == [[5]]


def _same_targets(a, b):
    assert set(a.targets) == set(b.targets)
    for k in a.targets:
        assert a.targets[k].dtype == b.targets[k].dtype, k
        assert torch.equal(a.targets[k].cpu(), b.targets[k].cpu()), k


@pytest.mark.parametrize("kind", ["seg", "det", "seg+label"])
def test_save_load_every_placement_and_write_cache_round_trip(tmp_path, kind):
    ds = {"seg": Seg(), "det": Det(), "seg+label": Seg(label=True)}[kind]
    cache = DeviceCache.from_dataset(ds, device="cpu")
    cache.save(tmp_path / "s")
    meta = json.loads((tmp_path / "s" / "meta.json").read_text())
    assert meta["format_version"] == 1
    assert set(meta["files"]) == {
        "seg": {"images.npy", "masks.npy"},
        "det": {"images.npy", "boxes.npy", "box_valid.npy", "box_labels.npy"},
        "seg+label": {"images.npy", "labels.npy", "masks.npy"}}[kind]
    for placement in PLACEMENTS:
        loaded = DeviceCache.load(tmp_path / "s", device="cpu", placement=placement)
        _same_targets(cache, loaded)
        assert torch.equal(loaded.images, cache.images)
        assert (loaded.labels is None) == (kind != "seg+label")
        copy = loaded.to("cpu")
        _same_targets(cache, copy)
    DeviceCache.load(tmp_path / "s", device="cpu", verify=True)
    write_cache(ds, tmp_path / "w", shuffle=False, chunk_size=3, progress=False)
    for name in ["images.npy", "labels.npy"] + TARGET_FILES:
        assert (tmp_path / "s" / name).exists() == (tmp_path / "w" / name).exists(), name
        if (tmp_path / "s" / name).exists():
            assert filecmp.cmp(tmp_path / "s" / name, tmp_path / "w" / name, shallow=False)
    _same_targets(cache, DeviceCache.load(tmp_path / "w", device="cpu"))


def test_write_cache_with_targets_resumes_to_the_same_files(tmp_path):
    write_cache(Seg(n=9), tmp_path / "clean", chunk_size=2, shuffle=False, progress=False)
    with pytest.raises(KeyboardInterrupt):
        write_cache(Seg(n=9, interrupt_at=5), tmp_path / "c", chunk_size=2, shuffle=False,
                    progress=False)
    r = write_cache(Seg(n=9), tmp_path / "c", chunk_size=2, shuffle=False, resume=True,
                    progress=False)
    assert r.resumed_from == 4
    for name in ("images.npy", "masks.npy"):
        assert filecmp.cmp(tmp_path / "clean" / name, tmp_path / "c" / name, shallow=False)


class RaggedSeg(Seg):
    """``Seg`` with images (and masks) of three sizes: a ragged cache's masks.bin."""

    def __getitem__(self, i):
        self.h, self.w = (12, 16) if i % 3 == 0 else (16, 8) if i % 3 == 1 else (8, 12)
        return super().__getitem__(i)


@pytest.mark.parametrize("storage", ["raw", "jpeg"])
def test_ragged_write_with_masks_resumes_to_the_same_files(tmp_path, storage):
    # a ragged cache's masks go through the same target parts as a dense cache's
    kw = dict(chunk_size=2, shuffle=False, progress=False, storage=storage)
    write_cache(RaggedSeg(n=9), tmp_path / "clean", **kw)
    with pytest.raises(KeyboardInterrupt):
        write_cache(RaggedSeg(n=9, interrupt_at=5), tmp_path / "c", **kw)
    r = write_cache(RaggedSeg(n=9), tmp_path / "c", resume=True, **kw)
    assert r.resumed_from == 4
    for name in ("images.bin", "index.npy", "masks.bin"):
        assert filecmp.cmp(tmp_path / "clean" / name, tmp_path / "c" / name, shallow=False)
    cache = DeviceCache.load(tmp_path / "c", device="cpu")
    assert cache.labels is None and cache.ragged
    for i in range(9):
        mask = cache.masks.image(i)[0]
        assert mask.shape == cache.image(i).shape[1:] and int(mask[0, 0]) == i


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("kind", ["seg", "det"])
def test_loader_targets_follow_their_images(tmp_path, placement, kind):
    ds = Seg(n=11) if kind == "seg" else Det(n=11)
    DeviceCache.from_dataset(ds, device="cpu").save(tmp_path / "c")
    cache = DeviceCache.load(tmp_path / "c", device="cpu", placement=placement)
    loader = DeviceLoader(cache, batch_size=4, seed=3, return_keys=True)
    plain = DeviceLoader(DeviceCache.from_tensors(cache.images.clone(), torch.arange(11),
                                                  device="cpu"), 4, seed=3, return_keys=True)
    for epoch in range(2):
        seen = []
        for (x, t, k), (x2, y2, k2) in zip(loader, plain):
            assert torch.equal(x, x2) and torch.equal(k, k2)  # same order as images only
            idx = x[:, 0, 0, 0].long()  # each image names its sample
            assert torch.equal(idx, y2)
            seen += idx.tolist()
            for key, stored in cache.targets.items():
                assert t[key].device == x.device
                assert torch.equal(t[key], stored[idx].to(t[key].dtype)), key
            if kind == "seg":
                assert torch.equal(t["masks"][:, 0, 0].long(), idx)
            else:
                assert torch.equal(t["boxes"][:, 0, 0].long(), idx)
            assert "labels" not in t
        assert sorted(seen) == list(range(11))  # nothing lost or duplicated


def test_loader_resume_and_labels_with_targets():
    cache = DeviceCache.from_dataset(Seg(n=10, label=True), device="cpu")
    first = DeviceLoader(cache, 3, seed=1)
    it = iter(first)
    next(it)
    resumed = DeviceLoader(cache, 3, seed=1)
    resumed.load_state_dict(first.state_dict())
    rest = list(it)
    again = list(resumed)
    assert len(rest) == len(again) == 3
    for (x, t), (x2, t2) in zip(rest, again):
        assert torch.equal(x, x2) and t.keys() == t2.keys() == {"masks", "labels"}
        for key in t:
            assert torch.equal(t[key], t2[key])
        assert torch.equal(t["labels"], x[:, 0, 0, 0].long() % 3)


def test_images_only_cache_unchanged(tmp_path):
    cache = DeviceCache.from_tensors(torch.zeros(5, 3, 4, 4, dtype=torch.uint8), torch.arange(5),
                                     device="cpu")
    assert cache.targets == {} and cache.masks is None and cache.boxes is None
    cache.save(tmp_path / "old")
    meta = json.loads((tmp_path / "old" / "meta.json").read_text())
    # exactly the fields (and files) a cache had before targets existed: old readers read it
    assert set(meta) == {"format", "format_version", "created_by", "shape", "dtype",
                         "value_range", "layout", "classes", "source", "files", "meta_sha256"}
    assert set(meta["files"]) == {"images.npy", "labels.npy"} and meta["format_version"] == 1
    for placement in PLACEMENTS:
        loaded = DeviceCache.load(tmp_path / "old", device="cpu", placement=placement)
        x, y = next(iter(DeviceLoader(loaded, 5, shuffle=False)))
        assert isinstance(y, torch.Tensor) and y.tolist() == [0, 1, 2, 3, 4]
        x, y, k = next(iter(DeviceLoader(loaded, 5, shuffle=False, return_keys=True)))
        assert y.tolist() == [0, 1, 2, 3, 4]


def _ref_seg(i, size, crop):
    """torchvision v2 on tv_tensors: the reference of a Resize + CenterCrop pre_transform."""
    im, m = Seg(n=7, h=15, w=20)[i]
    mask = tv_tensors.Mask(torch.from_numpy(np.array(m)))
    mask = F.center_crop(F.resize(mask, [size]), [crop])
    image = v1.CenterCrop(crop)(v1.Resize(size)(im))
    return torch.from_numpy(np.array(image)).permute(2, 0, 1), mask.as_subclass(torch.Tensor)


@pytest.mark.parametrize("pre", ["v1", "v2", "v1-tensor", "v1-float"])
def test_pre_transform_resizes_masks_as_torchvision_nearest(pre):
    size, crop = 9, 8
    tf = {"v1": v1.Compose([v1.Resize(size), v1.CenterCrop(crop)]),
          "v2": v2.Compose([v2.Resize(size), v2.CenterCrop(crop)]),
          "v1-tensor": v1.Compose([v1.Resize(size), v1.CenterCrop(crop), v1.PILToTensor()]),
          "v1-float": v1.Compose([v1.Resize(size), v1.CenterCrop(crop), v1.ToTensor()])}[pre]
    cache = DeviceCache.from_dataset(Seg(n=7, h=15, w=20), tf, device="cpu")
    assert cache.masks.shape == (7, crop, crop)
    for i in range(7):
        image, mask = _ref_seg(i, size, crop)
        assert torch.equal(cache.images[i], image)
        assert torch.equal(cache.masks[i].long(), mask)


def test_pre_transform_moves_and_sanitizes_boxes_as_torchvision():
    h, w = 20, 30
    boxes = torch.tensor([[2.0, 3.0, 25.0, 18.0],  # kept, cropped
                          [0.0, 0.0, 4.0, 4.0],  # outside the centre crop: dropped
                          [14.0, 9.0, 14.5, 9.5],  # under one pixel after the resize: dropped
                          [10.0, 5.0, 20.0, 15.0]])  # inside
    labels = torch.tensor([1, 2, 3, 4])
    item = (torch.zeros(3, h, w, dtype=torch.uint8), {"boxes": boxes, "labels": labels})
    tf = v1.Compose([v1.Resize(10), v1.CenterCrop(10)])
    cache = DeviceCache.from_dataset(Items([item]), tf, device="cpu")
    ref = tv_tensors.BoundingBoxes(boxes, format="XYXY", canvas_size=(h, w))
    ref = F.center_crop(F.resize(ref, [10]), [10])
    kept = v2.SanitizeBoundingBoxes(min_size=1, min_area=1)(
        {"boxes": F.clamp_bounding_boxes(ref), "labels": labels})
    valid = cache.box_valid[0]
    assert valid.tolist() == [True, False, False, True]
    assert torch.allclose(cache.boxes[0][valid], kept["boxes"].as_subclass(torch.Tensor))
    assert torch.equal(cache.box_labels[0][valid], kept["labels"])
    assert not cache.boxes[0][~valid].any() and not cache.box_labels[0][~valid].any()


def _img(h=6, w=8):
    return torch.zeros(3, h, w, dtype=torch.uint8)


@pytest.mark.parametrize("items, error, match", [
    ([(_img(), torch.zeros(6, 8))], TypeError, "integer .*class ids"),
    ([(_img(), torch.zeros(5, 8, dtype=torch.long))], ValueError, "mask must have its image"),
    ([(_img(), Image.new("RGB", (8, 6)))], ValueError, "one-channel"),
    ([(_img(), {"boxes": torch.zeros(2, 5), "labels": torch.zeros(2)})], ValueError,
     r"\(M, 4\)"),
    ([(_img(), {"boxes": torch.zeros(2, 4), "labels": torch.zeros(3, dtype=torch.long)})],
     ValueError, r"'labels' must have shape \(2,\)"),
    ([(_img(), {"boxes": torch.tensor([[3.0, 0, 1, 2]]), "labels": [1]})], ValueError,
     "x1 <= x2"),
    ([(_img(), {"boxes": torch.tensor([[float("nan"), 0, 1, 2]]), "labels": [1]})],
     ValueError, "finite"),
    ([(_img(), {"boxes": torch.zeros(1, 4), "labels": [1], "masks": 0})], ValueError,
     "'boxes' .* and 'labels'"),
    ([(_img(), torch.zeros(6, 8, dtype=torch.long)), (_img(), 3)], ValueError,
     r"\(image, label\) item but dataset\[0\] is an \(image, mask\)"),
    ([(_img(), torch.zeros(6, 8, dtype=torch.long)),
      (_img(), {"boxes": torch.zeros(1, 4), "labels": [1]})], ValueError, "one kind"),
    ([(_img(), torch.zeros(6, 8, dtype=torch.long)),
      (_img(7, 8), torch.full((7, 8), 256))], ValueError,
     r"dataset\[1\]: .*uint8.*\[256, 256\]"),
])
def test_bad_target_items_are_refused(items, error, match):
    with pytest.raises(error, match=match):
        DeviceCache.from_dataset(Items(items), device="cpu")


def test_both_builders_refuse_a_wide_ragged_mask_with_one_message(tmp_path):
    # one accumulator (TargetParts) checks the ids of both builds, naming the sample
    items = Items([(_img(), torch.zeros(6, 8, dtype=torch.long)),
                   (_img(7, 8), torch.full((7, 8), 300))])
    with pytest.raises(ValueError) as memory:
        DeviceCache.from_dataset(items, device="cpu")
    with pytest.raises(ValueError) as disk:
        write_cache(items, tmp_path / "c", shuffle=False)
    assert str(memory.value) == str(disk.value)
    assert str(memory.value).startswith("dataset[1]: a ragged (or JPEG) cache stores masks")


def test_refusals_that_would_lose_targets(tmp_path):
    items = Items([(_img(), torch.zeros(6, 8, dtype=torch.long))] * 2)
    with pytest.raises(TypeError, match="v2 transform"):
        DeviceCache.from_dataset(items, pre_transform=lambda im: im, device="cpu")


def test_from_tensors_checks_targets():
    x = torch.zeros(2, 3, 4, 5, dtype=torch.uint8)
    with pytest.raises(TypeError, match="masks must hold integer"):
        DeviceCache.from_tensors(x, None, device="cpu", masks=torch.zeros(2, 4, 5))
    with pytest.raises(ValueError, match=r"masks must have shape \(2, 4, 5\)"):
        DeviceCache.from_tensors(x, None, device="cpu", masks=torch.zeros(2, 5, 4).long())
    with pytest.raises(ValueError, match="boxes must be an"):
        DeviceCache.from_tensors(x, None, device="cpu", boxes=torch.zeros(2, 3))
    with pytest.raises(ValueError, match="labels are required"):
        DeviceCache.from_tensors(x, None, device="cpu")
    c = DeviceCache.from_tensors(x, [0, 1], device="cpu", boxes=torch.ones(2, 3, 4))
    assert c.box_valid.all() and c.box_labels.shape == (2, 3) and c.labels.tolist() == [0, 1]


def test_cli_info_reports_targets_and_verifies_their_files(tmp_path, capsys):
    from batchaug.cli import main

    DeviceCache.from_dataset(Det(), device="cpu").save(tmp_path / "d")
    assert main(["cache", "info", str(tmp_path / "d"), "--verify"]) == 0
    out = capsys.readouterr().out
    assert "boxes 7 x 4 (padded)" in out and "no per-image labels" in out and "OK" in out
    p = tmp_path / "d" / "boxes.npy"
    data = bytearray(p.read_bytes())
    data[-1] ^= 1
    p.write_bytes(bytes(data))
    assert main(["cache", "info", str(tmp_path / "d"), "--verify"]) == 1
    assert "boxes.npy" in capsys.readouterr().out
    from batchaug.data import CacheFormatError

    with pytest.raises(CacheFormatError, match="boxes.npy"):
        DeviceCache.load(tmp_path / "d", device="cpu", verify=True)


class Ragged:
    """(image, mask) items of different sizes; the image's 3 channels are its mask (so a crop
    with nearest and fill 0 gives the image's channel 0 == the moved mask)."""

    def __init__(self, n=9, interrupt_at=None):
        self.n, self.interrupt_at = n, interrupt_at

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == self.interrupt_at:
            raise KeyboardInterrupt
        h, w = 10 + (i * 5) % 9, 21 - (i * 3) % 8
        m = torch.from_numpy(np.random.default_rng(i).integers(1, 250, (h, w),
                                                               dtype=np.uint8))
        return m.unsqueeze(0).expand(3, h, w).contiguous(), m


def _nearest_crop():
    from batchaug import Augment, RandomHorizontalFlip, RandomResizedCrop, RandomRotation

    return Augment(RandomHorizontalFlip(), RandomRotation(30),
                   RandomResizedCrop(7, interpolation="nearest", antialias=False))


def test_ragged_cache_keeps_each_mask_at_its_images_size(tmp_path):
    cache = DeviceCache.from_dataset(Ragged(), device="cpu")
    assert cache.ragged and torch.equal(cache.masks.sizes, cache.sizes)
    for i in range(9):
        image, mask = Ragged()[i]
        assert torch.equal(cache.masks.image(i)[0], mask)
        assert torch.equal(cache.image(i), image)
    cache.save(tmp_path / "s")
    write_cache(Ragged(), tmp_path / "w", shuffle=False, chunk_size=2, progress=False)
    for name in ("images.bin", "index.npy", "masks.bin"):
        assert filecmp.cmp(tmp_path / "s" / name, tmp_path / "w" / name, shallow=False)
    assert not (tmp_path / "w" / "labels.npy").exists()
    with pytest.raises(KeyboardInterrupt):
        write_cache(Ragged(interrupt_at=5), tmp_path / "r", shuffle=False, chunk_size=2,
                    progress=False)
    r = write_cache(Ragged(), tmp_path / "r", shuffle=False, chunk_size=2, resume=True,
                    progress=False)
    assert r.resumed_from == 4
    assert filecmp.cmp(tmp_path / "s" / "masks.bin", tmp_path / "r" / "masks.bin",
                       shallow=False)
    for placement in PLACEMENTS:
        loaded = DeviceCache.load(tmp_path / "w", device="cpu", placement=placement)
        assert loaded.labels is None
        for i in range(9):
            assert torch.equal(loaded.masks.image(i), cache.masks.image(i))


def test_cli_info_shows_ragged_masks_as_ragged(tmp_path, capsys):
    """Not "masks 9 x 18 x 21" (which reads as a padded array) for masks at their own sizes;
    a fixed-size cache keeps the array shape."""
    from batchaug.cli import main

    DeviceCache.from_dataset(Ragged(), device="cpu").save(tmp_path / "r")
    assert main(["cache", "info", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "targets:  masks 9, each at its image's size (up to 18 x 21), uint8" in out, out
    assert "masks 9 x 18 x 21" not in out
    fixed = Items([(_img(), torch.zeros(6, 8, dtype=torch.long))] * 3)
    DeviceCache.from_dataset(fixed, device="cpu").save(tmp_path / "f")
    assert main(["cache", "info", str(tmp_path / "f")]) == 0
    assert "targets:  masks 3 x 6 x 8 " in capsys.readouterr().out


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_loader_crop_moves_ragged_masks_with_their_images(tmp_path, placement):
    DeviceCache.from_dataset(Ragged(), device="cpu").save(tmp_path / "c")
    cache = DeviceCache.load(tmp_path / "c", device="cpu", placement=placement)
    loader = DeviceLoader(cache, 4, crop=_nearest_crop(), return_keys=True, seed=2)
    n = 0
    for x, t, k in loader:
        assert set(t) == {"masks"} and t["masks"].shape == (x.shape[0], 7, 7)
        assert torch.equal(x[:, 0], t["masks"])  # each mask cropped exactly as its image
        n += x.shape[0]
    assert n == 9
    for x, t in DeviceLoader(cache, 5, crop=_nearest_crop()):  # un-keyed draws too
        assert torch.equal(x[:, 0], t["masks"])


def test_jpeg_cache_masks_are_cropped_as_the_raw_caches(tmp_path):
    raw = DeviceCache.from_dataset(Ragged(), device="cpu")
    jpeg = DeviceCache.from_dataset(Ragged(), device="cpu", storage="jpeg")
    jpeg.save(tmp_path / "j")
    jpeg = DeviceCache.load(tmp_path / "j", device="cpu")
    a = list(DeviceLoader(raw, 4, crop=_nearest_crop(), return_keys=True))
    b = list(DeviceLoader(jpeg, 4, crop=_nearest_crop(), return_keys=True))
    assert len(a) == len(b) == 3
    for (_, ta, ka), (_, tb, kb) in zip(a, b):
        assert torch.equal(ka, kb) and torch.equal(ta["masks"], tb["masks"])


def test_fixed_size_cache_crop_moves_masks():
    items = [(m.expand(3, -1, -1).contiguous(), m[0]) for m in
             torch.randint(1, 9, (6, 1, 12, 14), dtype=torch.uint8)]
    cache = DeviceCache.from_dataset(Items(items), device="cpu")
    for x, t in DeviceLoader(cache, 4, crop=_nearest_crop()):
        assert torch.equal(x[:, 0], t["masks"]) and t["masks"].shape[1:] == (7, 7)


@pytest.mark.parametrize("kind", ["seg", "det", "ragged"])
def test_shards_split_the_targets_with_their_images(tmp_path, kind):
    ds = {"seg": Seg(), "det": Det(), "ragged": Ragged(n=7)}[kind]
    whole = DeviceCache.from_dataset(ds, device="cpu")
    whole.save(tmp_path / "c")
    parts = [DeviceCache.load(tmp_path / "c", device="cpu", shard=(r, 3),
                              placement="disk" if r == 1 else "device") for r in range(3)]
    assert sum(len(p) for p in parts) == 7
    for key in whole.targets:
        if kind == "ragged":
            got = [p.masks.image(i) for p in parts for i in range(len(p))]
            assert all(torch.equal(a, whole.masks.image(i)) for i, a in enumerate(got))
        else:
            assert torch.equal(torch.cat([p.targets[key] for p in parts]), whole.targets[key])


@pytest.mark.parametrize("kind", ["seg", "det"])
def test_loader_batches_go_straight_into_with_targets(kind):
    from batchaug import RandomHorizontalFlip

    cache = DeviceCache.from_dataset(Seg(label=True) if kind == "seg" else Det(), device="cpu")
    flip = RandomHorizontalFlip(1.0)
    for x, t, k in DeviceLoader(cache, 4, return_keys=True):
        x2, t2 = flip.with_targets(x, t, k)
        assert torch.equal(x2, x.flip(-1)) and set(t2) == set(t)
        if kind == "seg":
            assert torch.equal(t2["masks"], t["masks"].flip(-1))
            assert torch.equal(t2["labels"], t["labels"])
        else:
            w = x.shape[-1]
            flipped = torch.stack((w - t["boxes"][..., 2], t["boxes"][..., 1],
                                   w - t["boxes"][..., 0], t["boxes"][..., 3]), dim=-1)
            valid = t["box_valid"]
            assert torch.equal(t2["box_valid"], valid)
            assert torch.equal(t2["boxes"][valid], flipped[valid])
            assert torch.equal(t2["box_labels"], t["box_labels"])


def test_box_cache_crop_runs_the_steps_with_targets(monkeypatch):
    """crop= on a cache with boxes: each step's with_targets in order, with its substream."""
    from batchaug import Augment, CenterCrop, RandomHorizontalFlip, _random

    calls = []

    def fake(self, images, targets, keys=None):  # records; moves boxes as a centre crop would
        calls.append(keys)
        out = self(images, keys) if getattr(self, "takes_keys", False) else self(images)
        dy = (images.shape[-2] - out.shape[-2]) // 2
        dx = (images.shape[-1] - out.shape[-1]) // 2
        shift = torch.tensor([dx, dy, dx, dy], dtype=torch.float32)
        return out, {**targets, "boxes": targets["boxes"] - shift}

    monkeypatch.setattr(CenterCrop, "with_targets", fake, raising=False)
    cache = DeviceCache.from_dataset(Det(), device="cpu")
    loader = DeviceLoader(cache, 4, return_keys=True, shuffle=False,
                          crop=Augment(RandomHorizontalFlip(1.0), CenterCrop((8, 10))))
    x, t, k = next(iter(loader))
    assert x.shape[-2:] == (8, 10) and calls[0] is not None
    assert torch.equal(calls[0], _random.substream(k, 1))  # the second step's substream
    w = cache.images.shape[-1]
    b = cache.boxes[:4]
    flipped = torch.stack((w - b[..., 2], b[..., 1], w - b[..., 0], b[..., 3]), dim=-1)
    ok = cache.box_valid[:4]
    expect = flipped - torch.tensor([3.0, 2.0, 3.0, 2.0])
    assert torch.equal(t["boxes"][ok], expect[ok])
    assert torch.equal(x, cache.images[:4].flip(-1)[..., 2:10, 3:13])


def test_box_cache_crop_needs_with_targets_on_every_step(monkeypatch):
    from batchaug import CenterCrop

    cache = DeviceCache.from_dataset(Det(), device="cpu")
    if hasattr(CenterCrop, "with_targets"):  # ported: a step without it is simulated
        monkeypatch.setattr("batchaug.data.loader.crop_steps",
                            lambda stage: [object()])
    with pytest.raises(ValueError, match="each step's with_targets"):
        DeviceLoader(cache, 2, crop=CenterCrop(4))
    with pytest.raises(ValueError, match="each step's with_targets"):
        DeviceLoader(cache, 2).set_crop(CenterCrop(4))


def test_disk_masks_are_read_checked_not_through_the_map(tmp_path):
    from batchaug.data import CacheFormatError

    DeviceCache.from_dataset(Seg(n=8), device="cpu").save(tmp_path / "c")
    cache = DeviceCache.load(tmp_path / "c", device="cpu", placement="disk")
    assert cache.mapped_masks is not None
    loader = DeviceLoader(cache, 4, prefetch=0)
    x, t = next(iter(loader))
    assert torch.equal(t["masks"][:, 0, 0].long(), x[:, 0, 0, 0].long())
    with open(tmp_path / "c" / "masks.npy", "r+b") as f:  # truncated after loading
        f.truncate(200)
    with pytest.raises(CacheFormatError, match="masks.npy"):
        next(iter(loader))


class _Voc(Ragged):
    """Ragged items whose masks hold VOC's ignore label 255 (object borders) and 0."""

    def __init__(self, n=5, edge=255):
        super().__init__(n)
        self.edge = edge

    def __getitem__(self, i):
        image, m = super().__getitem__(i)
        m = m.to(torch.int64)
        m[0, :] = self.edge
        m[-1, 0] = 0
        return image, m


@pytest.mark.parametrize("edge, ok", [(255, True), (256, False), (-1, False)])
def test_ragged_masks_accept_voc_ignore_label_255_and_refuse_wider_ids(tmp_path, edge, ok):
    """A ragged cache stores masks as uint8: 0..255 exactly (255 is VOC's "ignore" label),
    anything else refused by both writers with the fix, never wrapped."""
    ds = _Voc(edge=edge)
    if not ok:
        with pytest.raises(ValueError, match=r"map the ids into 0\.\.255"):
            DeviceCache.from_dataset(ds, device="cpu")
        with pytest.raises(ValueError, match=r"map the ids into 0\.\.255"):
            write_cache(ds, tmp_path / "w", shuffle=False, progress=False)
        return
    cache = DeviceCache.from_dataset(ds, device="cpu")
    write_cache(ds, tmp_path / "w", shuffle=False, progress=False)
    written = DeviceCache.load(tmp_path / "w", device="cpu")
    for i in range(len(ds)):
        want = ds[i][1].to(torch.uint8)
        assert torch.equal(cache.masks.image(i)[0], want), i
        assert torch.equal(written.masks.image(i)[0], want), i


class NoBoxes:
    """A detection set whose images all have zero boxes (issue 35 item 9)."""

    def __init__(self, sizes):
        self.sizes = sizes

    def __len__(self):
        return len(self.sizes)

    def __getitem__(self, i):
        h, w = self.sizes[i]
        boxes = tv_tensors.BoundingBoxes(torch.zeros(0, 4), format="XYXY", canvas_size=(h, w))
        img = torch.full((3, h, w), i, dtype=torch.uint8)
        return img, {"boxes": boxes, "labels": torch.zeros(0, dtype=torch.int64)}


@pytest.mark.parametrize("sizes", [[(8, 8)] * 3, [(8, 8), (6, 10), (9, 7)]])
def test_cache_with_no_boxes_at_all_saves_writes_and_loads(tmp_path, sizes):
    cache = DeviceCache.from_dataset(NoBoxes(sizes), device="cpu")
    assert cache.boxes.shape[:2] == (3, 0)
    cache.save(tmp_path / "saved")
    write_cache(NoBoxes(sizes), tmp_path / "written", shuffle=False)
    for name in ("saved", "written"):
        back = DeviceCache.load(tmp_path / name)
        assert back.boxes.shape == cache.boxes.shape and len(back) == 3
        for i in range(3):
            assert torch.equal(back.image(i), cache.image(i))
