"""Sizes in the transform protocol: ``with_sizes(x, sizes, keys)`` and ``targets["sizes"]``.

A ragged batch is a padded ``(N, C, H, W)`` canvas with image ``i`` in
``x[i, :, :sizes[i, 0], :sizes[i, 1]]``. References: the fixed-size pipeline applied to each
image alone (keyed draws depend only on the key and the image's size), on both implementations
(per image on an eager CPU batch, batched elsewhere: forced by patching the predicate); the
loader's crop runs exactly this path (checked against torchvision in test_crop.py). A
transform's own ragged tests are in its class (test_geometry.py, test_warps.py).
"""
import re

import pytest
import torch
from torchvision.transforms import v2

import batchaug
import batchaug.functional._sized as S
from batchaug import (Augment, CenterCrop, ColorJitter, Normalize, Pad, RandomAffine,
                      RandomApply, RandomChoice, RandomCrop, RandomHorizontalFlip,
                      RandAugment, RandomInvert, RandomPerspective, RandomResizedCrop,
                      RandomRotation, RandomVerticalFlip, Resize, TimmRandAugment,
                      TimmRandomResizedCrop, ToDtype)
from batchaug._random import substream
from batchaug.transforms._base import GeometricTransform
from batchaug.data.crop import check_crop

SIZES = [[70, 90], [40, 64], [66, 33], [20, 20], [70, 12], [64, 80]]
N = len(SIZES)
KEYS = torch.arange(N) * 7919 + 5

PIPELINES = {
    "flip_rrc": lambda: Augment(RandomHorizontalFlip(), RandomResizedCrop(32)),
    "vflip_rot_rrc": lambda: Augment(RandomVerticalFlip(), RandomRotation(30),
                                     RandomResizedCrop((24, 40))),
    "affine_center": lambda: Augment(
        RandomAffine(20, translate=(0.1, 0.2), scale=(0.8, 1.2), shear=(5, 10, -3, 4),
                     interpolation="bilinear"), CenterCrop(48)),
    "persp_crop": lambda: Augment(RandomPerspective(0.5, p=0.7),
                                  RandomCrop(40, padding=3, pad_if_needed=True, fill=7)),
    "rot_resize": lambda: Augment(RandomRotation(45, interpolation="bilinear", fill=[1, 2, 3],
                                                 center=[10.0, 5.0]), Resize((30, 31))),
    "crop_reflect_flip": lambda: Augment(
        RandomCrop(50, pad_if_needed=True, padding_mode="reflect"), RandomHorizontalFlip()),
    "rrc_bicubic": lambda: Augment(RandomResizedCrop(32, interpolation="bicubic")),
    # Resize(int) then a crop: one window of each resized image (the pair table's rule)
    "flip_resize_center": lambda: Augment(RandomHorizontalFlip(), Resize(30), CenterCrop(28)),
    "resize_max_random": lambda: Augment(Resize(24, max_size=40),
                                         RandomCrop(26, pad_if_needed=True, fill=3)),
}


def _batch(seed=0, dtype=torch.uint8):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (N, 3, 70, 90), generator=g, dtype=torch.uint8)
    return x.to(dtype), torch.tensor(SIZES)


@pytest.fixture(params=["per_image", "batched"])
def path(request, monkeypatch):
    if request.param == "batched":
        monkeypatch.setattr(S, "eager_cpu", lambda x: False)
    return request.param


@pytest.mark.parametrize("name", sorted(PIPELINES))
@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("keyed", [True, False])
def test_with_sizes_equals_the_pipeline_on_each_image_alone(name, train, keyed, path):
    """Keyed: each image as the pipeline on it alone (in eval: as the sized path on it alone;
    per image exactly; batched kernels within their rounding); unkeyed: one draw per sample
    (the random state as after the same draws on a dense batch of that size)."""
    aug = PIPELINES[name]().train(train)
    x, sizes = _batch()
    keys = KEYS if keyed else None
    torch.manual_seed(1)
    out, out_sizes = aug.with_sizes(x, sizes, keys)
    rng = torch.get_rng_state()
    assert out_sizes.tolist() == [list(out.shape[2:])] * N
    if not keyed:
        torch.manual_seed(1)
        aug.with_sizes(x, torch.tensor([[70, 90]] * N), None)
        assert torch.equal(torch.get_rng_state(), rng)
        return
    for i, (h, w) in enumerate(SIZES):
        img = x[i:i + 1, :, :h, :w].contiguous()
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(S, "eager_cpu", lambda t: True)  # the reference: plain forward
            if train:
                alone = aug(img, KEYS[i:i + 1])
            else:  # eval: the size-fixing step still crops (RandomCrop: the centre window)
                alone = aug.with_sizes(img, sizes[i:i + 1], KEYS[i:i + 1])[0]
        diff = (out[i:i + 1].int() - alone.int()).abs()
        if path == "per_image":
            assert torch.equal(out[i:i + 1], alone), (name, i)
        else:
            assert (diff > 0).double().mean().item() < 1e-3 or diff.max().item() <= 1, (name, i)


@pytest.mark.parametrize("module", [
    RandomHorizontalFlip(0.5), RandomVerticalFlip(0.5), RandomRotation(40),
    RandomAffine(20, translate=(0.2, 0.1), scale=(0.7, 1.3), shear=8),
    RandomPerspective(0.6, p=0.8), RandomResizedCrop(24),
    RandomCrop(36, padding=2, pad_if_needed=True, padding_mode="edge"), CenterCrop(30),
    Pad([1, 2, 3, 4], padding_mode="symmetric"), Resize((21, 17)),
], ids=lambda m: type(m).__name__)
def test_each_image_as_the_module_on_it_alone(module):
    """Per image (keyed): exactly what the fixed-size module does to that image alone."""
    x, sizes = _batch(seed=2)
    out, out_sizes = module.with_sizes(x, sizes, KEYS)
    for i, (h, w) in enumerate(SIZES):
        alone = module(x[i:i + 1, :, :h, :w].contiguous(), KEYS[i:i + 1])
        oh, ow = out_sizes[i].tolist()
        assert [oh, ow] == list(alone.shape[2:])
        assert torch.equal(out[i:i + 1, :, :oh, :ow], alone), i


def test_padding_is_never_read():
    x, sizes = _batch(seed=3)
    y = x.clone()
    for i, (h, w) in enumerate(SIZES):
        y[i, :, h:, :] = 255 - y[i, :, h:, :]
        y[i, :, :, w:] = 17
    for name in sorted(PIPELINES):
        aug = PIPELINES[name]()
        assert torch.equal(aug.with_sizes(x, sizes, KEYS)[0], aug.with_sizes(y, sizes, KEYS)[0])


def _objects(seed=4):
    """A ragged batch of images whose pixels are their mask's labels, with each object's box."""
    g = torch.Generator().manual_seed(seed)
    masks = torch.zeros(N, 70, 90, dtype=torch.int64)
    boxes = torch.zeros(N, 2, 4)
    for i, (h, w) in enumerate(SIZES):
        for j in range(2):
            bh = int(torch.randint(3, max(4, h // 2), (1,), generator=g))
            bw = int(torch.randint(3, max(4, w // 2), (1,), generator=g))
            top = int(torch.randint(0, h - bh + 1, (1,), generator=g))
            left = int(torch.randint(0, w - bw + 1, (1,), generator=g))
            masks[i, top:top + bh, left:left + bw] = j + 1
            boxes[i, j] = torch.tensor([left, top, left + bw, top + bh], dtype=torch.float32)
    masks[:, :, :] = torch.where(torch.arange(70).view(1, -1, 1) < torch.tensor(SIZES)[:, :1]
                                 .view(-1, 1, 1), masks, 99)  # padding: never read
    images = masks.to(torch.uint8).unsqueeze(1).expand(N, 3, 70, 90).contiguous()
    return images, masks, boxes, torch.tensor(SIZES)


@pytest.mark.parametrize("train", [True, False])
def test_rotation_then_rrc_moves_masks_and_boxes_on_a_ragged_batch(train, path):
    """The issue's acceptance case: masks registered with the image (an image made of the
    mask's labels, warped with nearest, equals the warped mask), and every valid box encloses
    its object's pixels."""
    images, masks, boxes, sizes = _objects()
    aug = Augment(RandomRotation(30), RandomResizedCrop(48, interpolation="nearest",
                                                        antialias=False)).train(train)
    torch.manual_seed(5)
    out, t = aug.with_targets(images, {"masks": masks, "boxes": boxes, "sizes": sizes}, KEYS)
    assert out.shape == (N, 3, 48, 48) and t["masks"].shape == (N, 48, 48)
    assert "sizes" not in t  # dense after the size-fixing step
    assert torch.equal(out[:, 0].to(torch.int64), t["masks"])
    assert int(t["box_valid"].sum()) > 0
    # nearest resampling may reach an input pixel further: that pixel, zoomed by each
    # sample's crop box (the module's own draw from the same substream)
    _, _, bh, bw = aug[1].make_params(images, substream(KEYS, 1), sizes)
    checked = 0
    for i in range(N):
        zy, zx = 48 / float(bh[i]), 48 / float(bw[i])
        for j in range(2):
            ys, xs = torch.nonzero(t["masks"][i] == j + 1, as_tuple=True)
            if not bool(t["box_valid"][i, j]) or ys.numel() == 0:
                continue
            x1, y1, x2, y2 = t["boxes"][i, j].tolist()
            # pixel centres: the nearest sample of an object pixel lies within it
            assert xs.min() + 0.5 >= x1 - zx and xs.max() + 0.5 <= x2 + zx, (i, j)
            assert ys.min() + 0.5 >= y1 - zy and ys.max() + 0.5 <= y2 + zy, (i, j)
            checked += 1
    assert checked >= N // 2


@pytest.mark.parametrize("module", [
    RandomHorizontalFlip(1.0, keypoint_flip_indices=[1, 0]), RandomVerticalFlip(1.0),
    RandomRotation(35), RandomAffine(15, translate=(0.1, 0.1), scale=(0.8, 1.1)),
    RandomPerspective(0.5, p=1.0), RandomResizedCrop(24), CenterCrop(30),
    RandomCrop(36, padding=2, pad_if_needed=True), Pad([2, 1, 0, 3]), Resize((21, 17)),
], ids=lambda m: type(m).__name__)
def test_targets_of_each_image_as_the_module_on_it_alone(module):
    """Boxes and keypoints in each image's own pixels move as the fixed-size module moves
    them on that image alone (float64 maps built two ways: within 1e-3 px); masks exactly."""
    images, masks, boxes, sizes = _objects(seed=7)
    kps = torch.tensor([[3.0, 4.0], [11.5, 9.0]]).expand(N, 2, 2).contiguous()
    out, t = module.with_targets(images, {"masks": masks, "boxes": boxes, "keypoints": kps,
                                          "sizes": sizes}, KEYS)
    for i, (h, w) in enumerate(SIZES):
        alone, ta = module.with_targets(
            images[i:i + 1, :, :h, :w].contiguous(),
            {"masks": masks[i:i + 1, :h, :w].contiguous(), "boxes": boxes[i:i + 1],
             "keypoints": kps[i:i + 1]}, KEYS[i:i + 1])
        oh, ow = S.sizes_of(out, t)[i].tolist()
        assert torch.equal(t["masks"][i, :oh, :ow], ta["masks"][0]), i
        assert torch.equal(t["box_valid"][i], ta["box_valid"][0]), i
        torch.testing.assert_close(t["boxes"][i], ta["boxes"][0], atol=1e-3, rtol=0)
        assert torch.equal(t["keypoint_valid"][i], ta["keypoint_valid"][0]), i
        torch.testing.assert_close(t["keypoints"][i], ta["keypoints"][0], atol=1e-3, rtol=0)


@pytest.mark.parametrize("make", [
    PIPELINES["flip_resize_center"], PIPELINES["resize_max_random"],
    lambda: Augment(Resize(20), RandomCrop(16, pad_if_needed=True))],
    ids=["flip_resize_center", "resize_max_random", "resize_random"])
@pytest.mark.parametrize("train", [True, False])
def test_resize_crop_pair_moves_each_images_targets_as_alone_bit_for_bit(make, train):
    """The pair table's ``Resize(int)`` + crop: each image's boxes and keypoints (fractional,
    so rounding shows) bit for bit those of the image alone, its own size given; the map is
    centred on each image, not on the batch's canvas."""
    aug = make().train(train)
    x, sizes = _batch(seed=11)
    g = torch.Generator().manual_seed(11)
    wh = sizes.flip(1).view(N, 1, 2).to(torch.float32)
    corners = (torch.rand(N, 64, 2, 2, generator=g) * wh.unsqueeze(2)).sort(dim=2).values
    boxes = corners.reshape(N, 64, 4)  # (min x, min y, max x, max y)
    kps = torch.rand(N, 64, 2, generator=g) * wh
    targets_as_alone(aug, x, boxes, kps, sizes, KEYS)


def targets_as_alone(module, x, boxes, kps, sizes, keys):
    """``module.with_targets`` on the ragged batch ``x`` (``sizes``): some boxes and keypoints
    stay valid, and each image's boxes, keypoints and flags are bit for bit those of the image
    alone, cut to its own size and given it."""
    _, t = module.with_targets(x, {"boxes": boxes, "keypoints": kps, "sizes": sizes}, keys)
    assert bool(t["box_valid"].any()) and bool(t["keypoint_valid"].any())
    for i, (h, w) in enumerate(sizes.tolist()):
        _, ta = module.with_targets(x[i:i + 1, :, :h, :w].contiguous(),
                                    {"boxes": boxes[i:i + 1], "keypoints": kps[i:i + 1],
                                     "sizes": sizes[i:i + 1]}, keys[i:i + 1])
        for key in ("boxes", "box_valid", "keypoints", "keypoint_valid"):
            assert torch.equal(t[key][i], ta[key][0]), (i, key)


def test_dense_sizes_equal_forward_keyed():
    """Every image at the batch's size: the sized path equals forward (keyed draws)."""
    x, _ = _batch(seed=8)
    full = torch.tensor([[70, 90]] * N)
    for name in sorted(PIPELINES):
        aug = PIPELINES[name]()
        assert torch.equal(aug.with_sizes(x, full, KEYS)[0], aug(x, KEYS)), name


def test_containers_and_photometric_steps_pass_sizes_through():
    x, sizes = _batch(seed=9)
    inner = [RandomRotation(30), RandomHorizontalFlip()]
    aug = Augment(RandomApply(inner, p=0.5), RandomInvert(),
                  RandomChoice([RandomVerticalFlip(1.0), RandomAffine(10)]),
                  RandomResizedCrop(32), Normalize([0.5], [0.2]))
    static = Augment(RandomApply(inner, p=0.5, group_by_branch=False), RandomInvert(),
                     RandomChoice([RandomVerticalFlip(1.0), RandomAffine(10)],
                                  group_by_branch=False),
                     RandomResizedCrop(32), Normalize([0.5], [0.2]))
    static.load_state_dict(aug.state_dict())
    out, s = aug.with_sizes(x, sizes, KEYS)
    assert out.shape == (N, 3, 32, 32) and s.tolist() == [[32, 32]] * N
    # keyed: the grouped and static container paths agree (sizes travel with their samples)
    assert torch.equal(static.with_sizes(x, sizes, KEYS)[0], out)
    # a chosen sample equals its transform alone on the image (the container's own keys)
    apply = RandomApply([RandomVerticalFlip(1.0)], p=0.5)
    y, s2 = apply.with_sizes(x, sizes, KEYS)
    assert torch.equal(s2, sizes)
    chosen = apply.make_params(x, KEYS)
    for i, (h, w) in enumerate(SIZES):
        ref = x[i, :, :h, :w].flip(-2) if bool(chosen[i]) else x[i, :, :h, :w]
        assert torch.equal(y[i, :, :h, :w], ref)


def test_scripted_with_sizes_equals_eager_batched(monkeypatch):
    x, sizes = _batch(seed=10)
    images, masks, boxes, _ = _objects()
    # rot_resize: a rotation about a given center, whose matrix with sizes TorchScript must
    # build as eager does
    for name in ["flip_rrc", "vflip_rot_rrc", "persp_crop", "affine_center", "rot_resize"]:
        aug = PIPELINES[name]()
        scripted = torch.jit.script(aug)  # scripted: the batched kernels
        out, s = scripted.with_sizes(x, sizes, KEYS)
        a = scripted.with_targets(images, {"masks": masks, "boxes": boxes, "sizes": sizes}, KEYS)
        with monkeypatch.context() as m:
            m.setattr(S, "eager_cpu", lambda x: False)
            ref, rs = aug.with_sizes(x, sizes, KEYS)
            b = aug.with_targets(images, {"masks": masks, "boxes": boxes, "sizes": sizes}, KEYS)
        assert torch.equal(out, ref) and torch.equal(s, rs), name
        assert torch.equal(a[0], b[0])
        for k in b[1]:
            assert torch.equal(a[1][k], b[1][k]), (name, k)


@pytest.mark.parametrize("name", ["flip_rot_rrc", "resize_max_random"])
def test_compiled_with_sizes_equals_eager_batched(monkeypatch, name):
    monkeypatch.setattr(S, "eager_cpu", lambda x: False)
    x, sizes = _batch(seed=11)
    aug = PIPELINES[name]() if name in PIPELINES else Augment(
        RandomHorizontalFlip(), RandomRotation(20), RandomResizedCrop(32, antialias=False))
    compiled = torch.compile(aug.with_sizes, fullgraph=True, backend="eager")
    out, s = compiled(x, sizes, KEYS)
    ref, rs = aug.with_sizes(x, sizes, KEYS)
    assert torch.equal(out, ref) and torch.equal(s, rs)


def test_gradients_flow_through_the_sized_path():
    x, sizes = _batch(seed=12, dtype=torch.float32)
    x = (x / 255).requires_grad_(True)
    aug = Augment(RandomRotation(20, interpolation="bilinear"), RandomResizedCrop(16))
    out, _ = aug.with_sizes(x, sizes, KEYS)
    out.sum().backward()
    g = x.grad
    for i, (h, w) in enumerate(SIZES):
        assert float(g[i, :, h:].abs().sum()) == 0 and float(g[i, :, :, w:].abs().sum()) == 0
    assert float(g.abs().sum()) > 0


@pytest.mark.parametrize("module, words", [
    (Resize(16), "needs size=(h, w)"),
    (RandomCrop(16), "needs pad_if_needed=True"),
    (ColorJitter(contrast=0.5), "cannot run on one"),  # the contrast mean reads every pixel
    (RandAugment(), "does not take sizes"),
    (TimmRandAugment(), "does not take sizes"),
    (Augment(RandomHorizontalFlip(), v2.Normalize([0.5], [0.2])), "would read the padding"),
    (RandomApply([ColorJitter(0.2)]), "cannot run on one"),
], ids=lambda v: type(v).__name__ if not isinstance(v, str) else "")
def test_what_cannot_run_on_a_ragged_batch_says_why(module, words):
    x, sizes = _batch()
    with pytest.raises(ValueError, match=re.escape(words)):
        module.with_sizes(x, sizes)


@pytest.mark.parametrize("train", [True, False])
def test_timm_random_resized_crop_takes_a_ragged_batch_as_each_image_alone(train):
    """Each sample's interpolation and box are drawn from its own extent: with keys, what the
    module gives that image on its own (eval: the first interpolation's eval box)."""
    x, sizes = _batch()
    m = TimmRandomResizedCrop(16, interpolations=("bilinear", "bicubic", "nearest"))
    m.train(train)
    out, s = m.with_sizes(x, sizes, KEYS)
    assert out.shape[-2:] == (16, 16) and torch.equal(s, torch.full_like(sizes, 16))
    for i, (h, w) in enumerate(sizes.tolist()):
        alone = m(x[i:i + 1, :, :h, :w].contiguous(), KEYS[i:i + 1])
        assert torch.equal(out[i:i + 1], alone), i


def test_pointwise_photometric_steps_take_sizes():
    x, sizes = _batch()
    aug = Augment(RandomInvert(1.0), ToDtype(torch.float32, scale=True), Normalize([0.5], [0.2]))
    out, s = aug.with_sizes(x, sizes, KEYS)
    assert torch.equal(out, aug(x, KEYS)) and torch.equal(s, sizes)


def test_bad_sizes_are_value_errors_naming_sizes():
    x, sizes = _batch()
    flip = RandomHorizontalFlip()
    for bad in (sizes.to(torch.int32), sizes[:, :1], sizes[:3]):
        with pytest.raises(ValueError, match="sizes"):
            flip.with_sizes(x, bad)
    with pytest.raises(ValueError, match=r"within 1\.\.\(H, W\)"):
        flip.with_sizes(x, sizes + 1)


def test_empty_batch():
    x = torch.zeros(0, 3, 20, 30, dtype=torch.uint8)
    sizes = torch.zeros(0, 2, dtype=torch.int64)
    for name in sorted(PIPELINES):
        out, s = PIPELINES[name]().with_sizes(x, sizes)
        assert out.shape[0] == 0 and s.shape == (0, 2)


def test_loader_crop_with_a_warp_moves_masks_and_boxes_of_a_ragged_cache():
    """The issue's acceptance case through DeviceLoader: on a ragged cache with masks and
    boxes, crop=Augment(RandomRotation(30), RandomResizedCrop(...)) runs; masks stay registered
    with their images, and every valid box encloses its object's pixels."""
    from batchaug.data import DeviceCache, DeviceLoader
    from batchaug.data.ragged import RaggedImages
    images, masks, boxes, sizes = _objects(seed=13)
    imgs = RaggedImages.from_list([images[i, :, :h, :w].contiguous()
                                    for i, (h, w) in enumerate(SIZES)])
    mlist = RaggedImages.from_list([masks[i:i + 1, :h, :w].to(torch.uint8).contiguous()
                                     for i, (h, w) in enumerate(SIZES)])
    cache = DeviceCache(imgs, None, targets={"masks": mlist, "boxes": boxes})
    crop = Augment(RandomRotation(30), RandomResizedCrop(40, scale=(0.5, 1.0),
                                                         interpolation="nearest",
                                                         antialias=False))
    loader = DeviceLoader(cache, 3, crop=crop, seed=4, shuffle=False, return_keys=True)
    checked = 0
    for x, t, k in loader:
        assert x.shape[1:] == (3, 40, 40) and t["masks"].shape[1:] == (40, 40)
        assert torch.equal(x[:, 0], t["masks"].to(x.dtype))
        # the loader's crop is the Augment's with_targets on the ragged batch, bit for bit
        idx = [int(v) for v in (k & 0xFFFFFFFF)]
        sub = torch.tensor([SIZES[i] for i in idx])
        canvas = torch.zeros(len(idx), 3, int(sub[:, 0].max()), int(sub[:, 1].max()),
                             dtype=torch.uint8)
        mcanvas = torch.zeros(len(idx), canvas.shape[2], canvas.shape[3], dtype=torch.uint8)
        for j, i in enumerate(idx):
            h, w = SIZES[i]
            canvas[j, :, :h, :w] = images[i, :, :h, :w]
            mcanvas[j, :h, :w] = masks[i, :h, :w].to(torch.uint8)
        ref, rt = crop.with_targets(canvas, {"masks": mcanvas, "boxes": boxes[idx],
                                             "sizes": sub}, k)
        assert torch.equal(ref, x) and torch.equal(rt["boxes"], t["boxes"])
        assert torch.equal(rt["masks"], t["masks"])
        for j in range(len(idx)):
            for o in range(2):
                ys, xs = torch.nonzero(t["masks"][j] == o + 1, as_tuple=True)
                if bool(t["box_valid"][j, o]) and ys.numel() > 0:
                    x1, y1, x2, y2 = t["boxes"][j, o].tolist()
                    # within a (zoomed) input pixel: scale >= 0.5 of images >= 12 px
                    assert xs.min() + 0.5 >= x1 - 4 and xs.max() + 0.5 <= x2 + 4
                    assert ys.min() + 0.5 >= y1 - 4 and ys.max() + 0.5 <= y2 + 4
                    checked += 1
    assert checked >= N // 2


@pytest.mark.parametrize("make", [
    lambda: Augment(RandomHorizontalFlip(), RandomVerticalFlip(), RandomResizedCrop(32)),
    lambda: Augment(RandomRotation(20), RandomAffine(10, translate=(0.1, 0.1), scale=(0.9, 1.1),
                                                     shear=3), CenterCrop(24)),
    lambda: Augment(Pad(2), RandomCrop(30, pad_if_needed=True, padding=2), Resize((20, 22))),
], ids=["flips_rrc", "warps_center", "pad_crop_resize"])
def test_no_host_traffic_on_cuda(make):
    """On an accelerator the sized path queues device work only (no sync, no host copy).
    (RandomPerspective's lstsq has no fake-tensor kernel: not probed here.)"""
    from tests.contract.fake_cuda import HostTraffic, fake_cuda
    with fake_cuda():
        m = make().to("cuda")
        x = torch.zeros(4, 3, 40, 50, dtype=torch.uint8, device="cuda")
        sizes = torch.zeros(4, 2, dtype=torch.int64, device="cuda") + 30
        keys = torch.arange(4, device="cuda")
        with HostTraffic() as traffic:
            m.with_sizes(x, sizes, keys)
    assert not traffic.ops, traffic.report()


@pytest.mark.parametrize("make", [
    lambda: Augment(Resize(20), RandomCrop(16, pad_if_needed=True)),
    lambda: Augment(Resize(20), CenterCrop(16)),
    lambda: Augment(RandomRotation(20, center=[3, 5])),
    lambda: Augment(RandomAffine(10, translate=(0.1, 0.1), center=[2, 2])),
    lambda: Augment(RandomResizedCrop(16)),
], ids=["resize_crop_pair", "resize_center_pair", "rotation_center", "affine_center", "rrc"])
@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
def test_targets_no_host_traffic_on_cuda(make, train):
    """Masks, boxes and keypoints of a ragged batch, each moved in its own image's frame (the
    Resize(int) + crop pair, warps about a given center, a resized box's masks): device work
    only on an accelerator."""
    from tests.contract.fake_cuda import HostTraffic, fake_cuda
    with fake_cuda():
        m = make().to("cuda").train(train)
        x = torch.zeros(4, 3, 40, 50, dtype=torch.uint8, device="cuda")
        targets = {"sizes": torch.zeros(4, 2, dtype=torch.int64, device="cuda") + 30,
                   "masks": torch.zeros(4, 40, 50, dtype=torch.int64, device="cuda"),
                   "boxes": torch.zeros(4, 2, 4, device="cuda"),
                   "keypoints": torch.zeros(4, 3, 2, device="cuda")}
        with HostTraffic() as traffic:
            m.with_targets(x, targets, torch.arange(4, device="cuda"))
    assert not traffic.ops, traffic.report()


def test_exported_with_sizes_has_a_dynamic_batch(monkeypatch):
    class Crop(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.aug = Augment(RandomHorizontalFlip(), RandomRotation(20),
                               RandomResizedCrop(32, antialias=False))

        def forward(self, x, sizes, keys):
            return self.aug.with_sizes(x, sizes, keys)

    m = Crop()
    n = torch.export.Dim("n", min=2, max=64)
    x, sizes = _batch(seed=15)
    ep = torch.export.export(m, (x[:4], sizes[:4], KEYS[:4]),
                             dynamic_shapes=({0: n}, {0: n}, {0: n}))
    out, s = ep.module()(x, sizes, KEYS)  # another batch size
    monkeypatch.setattr(S, "eager_cpu", lambda x: False)
    ref, rs = m(x, sizes, KEYS)
    assert torch.equal(out, ref) and torch.equal(s, rs)


class RandomRotate180(GeometricTransform):
    """A user's geometric transform with a sized path: turn chosen images by 180 degrees
    within their own extent (both flips)."""

    takes_sizes = True

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        self.p = p

    axis_aligned = True

    def make_params(self, x, keys=None, sizes=None):
        return batchaug._random.bernoulli(x, self.p, keys=keys, draw=0)

    def apply_image(self, x, params, sizes=None):
        if sizes is None:
            return torch.where(params.view(-1, 1, 1, 1), x.flip(-2, -1), x)
        return S.flip(S.flip(x, sizes, params, True), sizes, params, False)

    def apply_masks(self, m, params, sizes=None):
        return self.apply_image(m, params, sizes)

    def target_matrix(self, params, in_size, out_size, sizes=None):
        edge = torch.bmm(S.flip_edge(params, sizes, True), S.flip_edge(params, sizes, False))
        return S.edge_to_centred(edge, in_size, out_size)


@pytest.mark.parametrize("module", [
    RandomHorizontalFlip(), RandomRotation(20), Pad([1, 2, 3, 4]), Pad([0, 5, 2, 0]),
    CenterCrop((9, 14)), RandomCrop((12, 7), padding=[2, 0, 1, 3]),
    RandomCrop(40, pad_if_needed=True), RandomResizedCrop((11, 13)), Resize((17, 6)),
    Resize(9), Resize(9, max_size=12), batchaug.TimmRandomResizedCrop((10, 12))],
    ids=lambda m: repr(m).split("(")[0])
def test_output_size_is_the_size_the_step_returns(module):
    """``output_size(h, w)``, what the loader's crop check sizes its batches by before any
    draw, is the shape the step gives a dense h x w batch in train() (in eval() RandomCrop is
    the identity on a dense batch: see GeometricTransform.output_size)."""
    module.train()
    for h, w in ((20, 31), (33, 18)):
        y = module(torch.zeros(2, 3, h, w, dtype=torch.uint8))
        assert list(module.output_size(h, w)) == list(y.shape[-2:]), (h, w)


def test_pad_before_the_size_fixing_step_in_the_loaders_crop():
    """Pad has a ragged path (each image padded on its own extent), so the crop check takes it
    before the size-fixing step, as it takes the warps: the loader's batches equal the
    Augment's with_targets on the padded batch, and each image equals the pipeline on it
    alone."""
    from batchaug.data import DeviceCache, DeviceLoader
    from batchaug.data.ragged import RaggedImages
    images, masks, boxes, sizes = _objects(seed=21)
    imgs = RaggedImages.from_list([images[i, :, :h, :w].contiguous()
                                    for i, (h, w) in enumerate(SIZES)])
    mlist = RaggedImages.from_list([masks[i:i + 1, :h, :w].to(torch.uint8).contiguous()
                                     for i, (h, w) in enumerate(SIZES)])
    cache = DeviceCache(imgs, None, targets={"masks": mlist, "boxes": boxes})
    crop = Augment(Pad([2, 1, 0, 3], padding_mode="reflect"),
                   RandomCrop(30, pad_if_needed=True), RandomHorizontalFlip())
    assert check_crop(crop)[1] == (30, 30)
    seen = 0
    for x, t, k in DeviceLoader(cache, 4, crop=crop, seed=2, shuffle=False, return_keys=True):
        idx = [int(v) for v in (k & 0xFFFFFFFF)]
        for j, i in enumerate(idx):
            h, w = SIZES[i]
            alone, at = crop.with_targets(images[i:i + 1, :, :h, :w].contiguous(),
                                          {"masks": masks[i:i + 1, :h, :w].to(torch.uint8),
                                           "boxes": boxes[i:i + 1]}, k[j:j + 1])
            assert torch.equal(x[j:j + 1], alone), i
            assert torch.equal(t["masks"][j:j + 1], at["masks"]), i
            torch.testing.assert_close(t["boxes"][j:j + 1], at["boxes"], atol=1e-4, rtol=0)
            seen += 1
    assert seen == N


def test_a_users_geometric_transform_runs_in_the_loaders_crop():
    from batchaug.data import DeviceCache, DeviceLoader
    from batchaug.data.ragged import RaggedImages
    images, masks, boxes, sizes = _objects(seed=16)
    imgs = RaggedImages.from_list([images[i, :, :h, :w].contiguous()
                                    for i, (h, w) in enumerate(SIZES)])
    cache = DeviceCache(imgs, None, targets={"boxes": boxes})
    crop = Augment(RandomRotate180(1.0), CenterCrop(16))
    x, t = next(iter(DeviceLoader(cache, N, crop=crop, shuffle=False)))
    for i, (h, w) in enumerate(SIZES):
        turned = images[i:i + 1, :, :h, :w].flip(-2, -1)
        assert torch.equal(x[i:i + 1], CenterCrop(16)(turned.contiguous()))
        b = boxes[i]
        ref = torch.stack((w - b[:, 2], h - b[:, 3], w - b[:, 0], h - b[:, 1]), dim=1)
        ref, ok = CenterCrop(16).with_targets(turned, {"boxes": ref[None]})[1].values()
        assert torch.equal(t["box_valid"][i], ok[0])
        torch.testing.assert_close(t["boxes"][i], ref[0], atol=1e-4, rtol=0)
    plain = type("Plain", (GeometricTransform,), {
        "make_params": RandomRotate180.make_params, "apply_image": RandomRotate180.apply_image,
        "p": 1.0})
    with pytest.raises(ValueError, match="does not run on images of different sizes"):
        check_crop(Augment(plain(), CenterCrop(16)))


class TopLeftCrop(GeometricTransform):
    """A user's size-fixing transform: the top-left ``size`` window of each image's own
    extent, zero where the image is smaller."""

    random = False
    takes_keys = False
    takes_sizes = True

    def __init__(self, size) -> None:
        super().__init__()
        self.size = (int(size[0]), int(size[1]))

    axis_aligned = True

    def make_params(self, x, keys=None, sizes=None):
        return torch.zeros(x.shape[0], dtype=torch.int64, device=x.device)

    def apply_image(self, x, params, sizes=None):
        if sizes is None:
            sizes = torch.tensor([list(x.shape[2:])] * x.shape[0])
        return S.window(x, sizes, params, params, self.size[0], self.size[1], [0.0])

    def apply_masks(self, m, params, sizes=None):
        return S.window(m, sizes, params, params, self.size[0], self.size[1],
                        [float(self.mask_fill)])

    def fixes_size(self) -> bool:
        return True

    def sizes_after(self, out, sizes):
        return torch.tensor([self.size], dtype=sizes.dtype, device=sizes.device).expand_as(sizes)

    def target_matrix(self, params, in_size, out_size, sizes=None):
        h, w = torch.full_like(params, self.size[0]), torch.full_like(params, self.size[1])
        return batchaug.functional.resized_crop_matrix(params, params, h, w, in_size,
                                                       out_size)


def test_a_users_size_fixing_transform_ends_the_loaders_crop():
    """A user's GeometricTransform whose fixes_size() is True may be the crop's final step when
    its output size is an attribute: on a ragged cache every batch (images and masks) equals
    the transform applied to each image on its own."""
    from batchaug.data import DeviceCache, DeviceLoader
    from batchaug.data.ragged import RaggedImages
    images, masks, boxes, sizes = _objects(seed=17)
    imgs = RaggedImages.from_list([images[i, :, :h, :w].contiguous()
                                    for i, (h, w) in enumerate(SIZES)])
    mlist = RaggedImages.from_list([masks[i:i + 1, :h, :w].to(torch.uint8).contiguous()
                                     for i, (h, w) in enumerate(SIZES)])
    cache = DeviceCache(imgs, None, targets={"masks": mlist})
    crop, size = check_crop(Augment(RandomHorizontalFlip(0.0), TopLeftCrop((36, 30))))
    assert size == (36, 30)
    start = 0
    for x, t in DeviceLoader(cache, 4, crop=crop, shuffle=False):
        assert x.shape[1:] == (3, 36, 30) and t["masks"].shape[1:] == (36, 30)
        for j in range(x.shape[0]):
            h, w = SIZES[start + j]
            ref = torch.zeros(3, 36, 30, dtype=torch.uint8)
            ref[:, :min(h, 36), :min(w, 30)] = images[start + j, :, :min(h, 36), :min(w, 30)]
            assert torch.equal(x[j], ref)
            assert torch.equal(t["masks"][j], ref[0])
        start += x.shape[0]
    assert start == N
    # the size as height and width works as well; a step whose size is unknown is refused
    hw = TopLeftCrop((20, 24))
    del hw.size
    hw.height, hw.width = 20, 24
    assert check_crop(hw)[1] == (20, 24)
    assert check_crop(Augment(TopLeftCrop((40, 40)), TopLeftCrop((8, 12))))[1] == (8, 12)
    hidden = TopLeftCrop((20, 24))
    hidden.size = None
    with pytest.raises(ValueError, match=r"^crop: step 0: TopLeftCrop fixes the output "
                                         r"size.*size = \(height, width\)"):
        check_crop(hidden)
    with pytest.raises(ValueError, match=r"^crop: step 1: TopLeftCrop fixes the output size"):
        check_crop(Augment(CenterCrop(16), hidden))
    # or it says its size itself (no attribute read)

    class SaysItsSize(TopLeftCrop):
        def output_size(self, height: int, width: int):
            return [18, 26]

    said = SaysItsSize((18, 26))
    said.size = None
    assert check_crop(Augment(RandomHorizontalFlip(), said, Pad(1)))[1] == (20, 28)


def test_with_sizes_given_a_list_names_the_fix():
    # issue 35 item 11: a Python list of sizes used to fail with "'list' has no attribute 'dim'"
    x = torch.zeros(2, 3, 10, 10, dtype=torch.uint8)
    for aug in (RandomResizedCrop(8), Augment(RandomResizedCrop(8))):
        with pytest.raises(TypeError, match=r"sizes must be an \(N, 2\) int64 tensor.*"
                                            r"torch.tensor\(sizes\)"):
            aug.with_sizes(x, [[10, 10], [8, 8]])


@pytest.mark.parametrize("antialias", [False, True])
@pytest.mark.parametrize("interpolation", ["bilinear", "bicubic", "nearest"])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_resized_boxes_on_a_ragged_batch_are_torchvisions_of_each_image_alone(
        antialias, interpolation, dtype):
    """Issue 35 item 2: Resize((h, w)) and RandomResizedCrop on a ragged batch give, per
    image, torchvision's resize of its unpadded pixels (whatever antialias, whatever the
    padding holds)."""
    from torchvision.transforms.v2 import functional as TF

    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (N, 3, 70, 90), generator=g, dtype=torch.uint8)
    x = x if dtype == torch.uint8 else x.to(dtype) / 255
    sizes = torch.tensor(SIZES)
    other = x.clone()
    for i, (h, w) in enumerate(SIZES):  # the same images, other padding
        keep = other[i, :, :h, :w].clone()
        other[i] = 1 if dtype != torch.uint8 else 255
        other[i, :, :h, :w] = keep
    mode = getattr(TF.InterpolationMode, interpolation.upper())
    for t in (Resize((24, 30), interpolation, antialias=antialias),
              RandomResizedCrop((24, 30), interpolation=interpolation, antialias=antialias)):
        y, out_sizes = t.with_sizes(x, sizes, KEYS)
        assert torch.equal(y, t.with_sizes(other, sizes, KEYS)[0])
        assert out_sizes.tolist() == [[24, 30]] * N
        if isinstance(t, Resize):
            boxes = [(0, 0, h, w) for h, w in SIZES]
        else:
            boxes = torch.stack(t.make_params(x, KEYS, sizes), 1).tolist()
        for i, ((h, w), (bt, bl, bh, bw)) in enumerate(zip(SIZES, boxes)):
            want = TF.resized_crop(x[i, :, :h, :w], bt, bl, bh, bw, [24, 30], mode,
                                   antialias=antialias)
            assert torch.equal(y[i], want), (type(t).__name__, i)


@pytest.mark.parametrize("mode", ["reflect", "edge", "symmetric"])
def test_resize_int_then_random_crop_keeps_its_padding_mode(mode):
    """Resize(int) + RandomCrop(padding_mode=...) on a ragged batch (one resized window per
    image): each image as the pair on it alone, padded by that mode."""
    x, sizes = _batch(seed=9)
    aug = Augment(Resize(20), RandomCrop(28, padding=3, pad_if_needed=True, padding_mode=mode))
    out, _ = aug.with_sizes(x, sizes, KEYS)
    for i, (h, w) in enumerate(SIZES):
        alone = aug(x[i:i + 1, :, :h, :w].contiguous(), KEYS[i:i + 1])
        assert torch.equal(out[i:i + 1], alone), i


def _edge_targets():
    """Keypoints and boxes on each image's own edges and corners (x = 0, x = w, y = h, the
    centre lines): where float rounding alone decides validity."""
    kps, boxes = [], []
    for h, w in SIZES:
        kps.append(torch.tensor([[w, h / 2], [w / 2, h], [w, h], [0.0, 0.0], [w / 2, 0.0],
                                 [0.0, h], [w, 0.0], [w - 0.5, h - 0.5], [w / 2, h / 2]]))
        boxes.append(torch.tensor([[w - 1.0, 0.0, w, h], [0.0, h - 1.0, w, h],
                                   [w - 2.0, h - 2.0, w, h], [0.0, 0.0, 1.0, 1.0],
                                   [0.0, 0.0, w, h]]))
    return torch.stack(kps), torch.stack(boxes)


@pytest.mark.parametrize("module", [
    RandomRotation((90.0, 90.0)), RandomRotation((180.0, 180.0)), RandomRotation((270.0, 270.0)),
    RandomRotation((-90.0, -90.0)), RandomRotation((45.0, 45.0)), RandomRotation(180),
    RandomAffine((180.0, 180.0)), RandomAffine((360.0, 360.0)),
    RandomAffine(30, translate=(0.2, 0.2), scale=(0.7, 1.3), shear=(5, 10, -3, 4)),
    RandomPerspective(0.4, p=1.0), RandomHorizontalFlip(1.0), RandomVerticalFlip(1.0),
    Pad([1, 2, 3, 4]), RandomCrop(40, padding=3, pad_if_needed=True), CenterCrop((30, 25)),
    RandomResizedCrop((24, 17)), Resize((33, 17))], ids=repr)
def test_targets_on_the_edges_of_each_image_as_the_image_alone(module, path):
    """Issue 37: a keypoint on its image's right or bottom edge stayed valid after a ragged
    rotation where the same image alone marks it invalid (and the other way round): the
    ragged path moved targets centred on the canvas, so other float rounding decided at the
    edges. Keypoints and boxes, their positions and flags, bit for bit as each image alone."""
    images, _, _, sizes = _objects(seed=8)
    kps, boxes = _edge_targets()
    _, t = module.with_targets(images, {"keypoints": kps, "boxes": boxes, "sizes": sizes}, KEYS)
    for i, (h, w) in enumerate(SIZES):
        _, alone = module.with_targets(images[i:i + 1, :, :h, :w].contiguous(),
                                       {"keypoints": kps[i:i + 1], "boxes": boxes[i:i + 1]},
                                       KEYS[i:i + 1])
        for key in ("keypoint_valid", "keypoints", "box_valid", "boxes"):
            assert torch.equal(t[key][i], alone[key][0]), (key, i)
