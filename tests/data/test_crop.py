"""The loader's crop on padded ragged batches: an ``Augment`` run with the images' sizes
(``with_sizes``; checked by ``batchaug.data.crop.check_crop``).

References are torchvision's functional ops applied to each stored image alone (its own
``h_i x w_i`` pixels) and ``RandomResizedCrop.get_params`` on the same sizes. Both
implementations run: the CPU per-image path (``functional._sized.eager_cpu`` true: the fixed-size
kernels on each image's view) and the batched ragged kernels (forced here by patching it).
Tolerances: windows, flips and the resized crop's CPU path are exact; nearest warps exact
(sampling points on a pixel edge may round the other way after reassociated float ops: none
seen in these draws); the batched resize + window (bilinear) within 1 uint8 step of torch's
fixed-point uint8 kernel (as ``Resize`` on GPU).
"""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as TF

import batchaug.functional._sized as S
import batchaug._fusion as fusion
from batchaug import (Augment, CenterCrop, ColorJitter, Normalize, RandomAffine, RandomApply,
                      RandomCrop, RandomHorizontalFlip, RandomPerspective, RandomResizedCrop,
                      RandomRotation, RandomVerticalFlip, Resize)
from batchaug.data.crop import check_crop
from tests.conftest import DEVICES

PATHS = ["per_image", "batched"]


@pytest.fixture(params=PATHS)
def path(request, monkeypatch):
    if request.param == "batched":
        monkeypatch.setattr(S, "eager_cpu", lambda x: False)
    return request.param


def make_crop(crop):
    """The loader's crop (an ``Augment``) as a function of ``(images, sizes, keys=None)``."""
    aug = check_crop(crop)[0]
    return lambda x, sizes, keys=None: aug.with_sizes(x, sizes, keys)[0]


def _ragged(sizes, c=3, seed=0, pad_value=None):
    """A padded batch of random images of ``sizes`` and the images themselves."""
    g = torch.Generator().manual_seed(seed)
    hm = max(h for h, _ in sizes)
    wm = max(w for _, w in sizes)
    canvas = torch.randint(0, 256, (len(sizes), c, hm, wm), generator=g, dtype=torch.uint8)
    if pad_value is not None:
        canvas.fill_(pad_value)
    images = []
    for i, (h, w) in enumerate(sizes):
        img = torch.randint(0, 256, (c, h, w), generator=g, dtype=torch.uint8)
        canvas[i, :, :h, :w] = img
        images.append(img)
    return canvas, torch.tensor(sizes, dtype=torch.int64), images


SIZES = [(64, 96), (97, 70), (40, 40), (130, 65), (23, 51)]


def test_center_crop_equals_torchvision(path):
    x, sizes, images = _ragged(SIZES)
    out = make_crop(CenterCrop((48, 57)))(x, sizes)
    for i, img in enumerate(images):
        assert torch.equal(out[i], TF.center_crop(img, [48, 57])), i


def test_rrc_fallback_equals_torchvision(path):
    """scale > 1 never fits: every box is torchvision's fallback (whole image narrowed to
    ``ratio``, centred); narrow, wide and in-range images."""
    sizes = [(30, 90), (90, 30), (60, 70), (41, 97)]
    x, s, images = _ragged(sizes)
    rrc = RandomResizedCrop(32, scale=(2.0, 2.0))
    out = make_crop(rrc)(x, s)
    for i, img in enumerate(images):
        box = v2.RandomResizedCrop.get_params(img, [2.0, 2.0], [3 / 4, 4 / 3])
        assert torch.equal(out[i], TF.resized_crop(img, *box, [32, 32], antialias=True)), i


@pytest.mark.parametrize("interpolation", ["nearest", "bilinear"])
def test_rotation_then_center_crop_equals_torchvision(path, interpolation):
    """RandomRotation's default (nearest) exactly on the per-image path; bilinear within 1 step,
    as RandomRotation itself against torchvision."""
    x, sizes, images = _ragged(SIZES)
    crop = Augment(RandomRotation((30, 30), interpolation=interpolation, fill=[10, 20, 30]),
                   CenterCrop(44))
    out = make_crop(crop)(x, sizes)
    mode = TF.InterpolationMode(interpolation)
    for i, img in enumerate(images):
        ref = TF.center_crop(TF.rotate(img, 30.0, interpolation=mode, fill=[10, 20, 30]), [44, 44])
        diff = (out[i].int() - ref.int()).abs()
        if interpolation == "nearest" and path == "per_image":
            assert torch.equal(out[i], ref), (i, diff.max())
        elif interpolation == "nearest":
            # a pinned 30 degrees puts sampling points exactly on pixel edges (sin 30 = 1/2,
            # along the centre lines of odd sides): the batched grid's last bit breaks those
            # ties either way (measured: 16 of 1,936 pixels of the 23x51 image, none elsewhere)
            assert (diff > 0).double().mean().item() < 0.01, i
        else:  # float32 blends rounded to uint8: a different last bit flips a rounding
            assert diff.max().item() <= 1 and diff.double().mean().item() < 0.01, i


def test_affine_and_perspective_pinned_equal_torchvision(path):
    x, sizes, images = _ragged(SIZES)
    crop = Augment(RandomAffine((10, 10), scale=(0.8, 0.8), shear=(5, 5), center=(20, 15)),
                   RandomPerspective(0.0, p=1.0), CenterCrop(40))
    out = make_crop(crop)(x, sizes)
    for i, img in enumerate(images):
        ref = TF.affine(img, 10.0, [0, 0], 0.8, [5.0, 0.0], center=[20, 15])
        assert torch.equal(out[i], TF.center_crop(ref, [40, 40])), i


def test_flip_resize_center_crop_equals_torchvision(path):
    x, sizes, images = _ragged(SIZES)
    crop = Augment(RandomHorizontalFlip(1.0), RandomVerticalFlip(1.0), Resize(45), CenterCrop(40))
    out = make_crop(crop)(x, sizes)
    for i, img in enumerate(images):
        ref = TF.center_crop(TF.resize(TF.vflip(TF.hflip(img)), 45, antialias=True), [40, 40])
        diff = (out[i].int() - ref.int()).abs().max().item()
        assert diff == 0 if path == "per_image" else diff <= 1, (i, diff)


def test_resize_max_size_then_random_crop_padding_modes(path):
    """Resize(int, max_size) sizes per image as torchvision; RandomCrop's pad_if_needed window
    (edge mode shows the padding rule) equals torchvision's crop of its padded image."""
    x, sizes, images = _ragged(SIZES)
    crop = Augment(Resize(30, max_size=50), RandomCrop(48, pad_if_needed=True, fill=7))
    stage = make_crop(check_crop(crop)[0].eval())  # eval: the centre window, no draw
    out = stage(x, sizes)
    for i, img in enumerate(images):
        r = TF.resize(img, 30, max_size=50, antialias=True)
        h, w = r.shape[-2:]
        ph, pw = max(0, 48 - h), max(0, 48 - w)
        padded = TF.pad(r, [pw, ph, pw, ph], fill=7)
        ref = TF.center_crop(padded, [48, 48])
        diff = (out[i].int() - ref.int()).abs().max().item()
        assert diff == 0 if path == "per_image" else diff <= 1, (i, diff)
    if path == "per_image":
        edge = make_crop(RandomCrop(80, pad_if_needed=True, padding_mode="edge").eval())
        out = edge(x, sizes)
        for i, img in enumerate(images):
            h, w = img.shape[-2:]
            ph, pw = max(0, 80 - h), max(0, 80 - w)
            ref = TF.center_crop(TF.pad(img, [pw, ph, pw, ph], padding_mode="edge"), [80, 80])
            assert torch.equal(out[i], ref), i


def _ks(a: torch.Tensor, b: torch.Tensor) -> float:
    """Two-sample Kolmogorov-Smirnov statistic."""
    both = torch.cat([a, b]).sort().values
    fa = torch.searchsorted(a.sort().values, both, right=True).double() / a.numel()
    fb = torch.searchsorted(b.sort().values, both, right=True).double() / b.numel()
    return (fa - fb).abs().max().item()


def test_rrc_boxes_match_torchvision_distribution_on_ragged_sizes():
    g = torch.Generator().manual_seed(1)
    n = 3000
    sizes = torch.stack((torch.randint(20, 500, (n,), generator=g),
                         torch.randint(20, 500, (n,), generator=g)), dim=1)
    t = RandomResizedCrop(224)
    torch.manual_seed(2)
    top, left, h, w = t.make_params(torch.empty(n, 1, 1, 1), None, sizes)
    assert bool((top >= 0).all() and (left >= 0).all() and (h >= 1).all() and (w >= 1).all())
    assert bool((top + h <= sizes[:, 0]).all() and (left + w <= sizes[:, 1]).all())
    ref = []
    for hh, ww in sizes.tolist():
        ref.append(v2.RandomResizedCrop.get_params(torch.empty(1, 1, 1).expand(1, hh, ww),
                                                   [0.08, 1.0], [3 / 4, 4 / 3]))
    ref = torch.tensor(ref, dtype=torch.float64)
    area = sizes.prod(1).double()
    ours_frac = (h * w).double() / area
    ref_frac = ref[:, 2] * ref[:, 3] / area
    ours_aspect = torch.log(w.double() / h.double())
    ref_aspect = torch.log(ref[:, 3] / ref[:, 2])
    crit = 1.949 * math.sqrt(2.0 / n)  # alpha = 0.001
    assert _ks(ours_frac, ref_frac) < crit
    assert _ks(ours_aspect, ref_aspect) < crit
    # the fallback share (both: boxes spanning a full side at ratio's edge) is close too
    ours_full = ((h == sizes[:, 0]) | (w == sizes[:, 1])).double().mean()
    ref_full = ((ref[:, 2] == sizes[:, 0]) | (ref[:, 3] == sizes[:, 1])).double().mean()
    assert abs(ours_full - ref_full) < 0.03


@settings(deadline=None, max_examples=15)
@given(hw=st.lists(st.tuples(st.integers(4, 60), st.integers(4, 60)), min_size=1, max_size=5),
       kind=st.sampled_from(["rrc", "rot", "affine", "persp", "center", "resize", "random"]),
       batched=st.booleans(), seed=st.integers(0, 2**16))
def test_padding_is_never_read(hw, kind, batched, seed):
    """Constant images (value 90) in a canvas padded with 255: every output pixel is 90 (a
    warp's or a pad's fill is 90 too), on both paths. (Nearest warps: torchvision's bilinear
    fill rule blends the fill with an attenuated border, so a constant image is not constant
    there; the per-image comparisons above cover bilinear.)"""
    with pytest.MonkeyPatch.context() as mp:
        if batched:
            mp.setattr(S, "eager_cpu", lambda x: False)
        _check_padding_unread(hw, kind, seed)


def _check_padding_unread(hw, kind, seed):
    x, sizes, _ = _ragged(hw, pad_value=255)
    for i, (h, w) in enumerate(hw):
        x[i, :, :h, :w] = 90
    crop = {
        "rrc": Augment(RandomHorizontalFlip(), RandomResizedCrop(17)),
        "rot": Augment(RandomRotation(180, fill=90), CenterCrop(3)),
        "affine": Augment(RandomAffine(40, translate=(0.3, 0.3), scale=(0.5, 2), shear=20,
                                       fill=90), RandomResizedCrop(8, antialias=False)),
        "persp": Augment(RandomPerspective(0.9, p=1.0, interpolation="nearest", fill=90),
                         Resize((9, 13))),
        "center": CenterCrop(3),  # (within every image: a larger one pads with zeros)
        "resize": Augment(RandomVerticalFlip(), Resize(70), CenterCrop(30)),
        "random": RandomCrop(41, pad_if_needed=True, padding=3, fill=90),
    }[kind]
    torch.manual_seed(seed)
    out = make_crop(crop)(x, sizes)
    assert out.dtype == torch.uint8 and out.shape[:2] == x.shape[:2]
    assert bool((out == 90).all()), out.unique()


TRAIN = Augment(RandomHorizontalFlip(), RandomRotation(30), RandomAffine(5, translate=(0.1, 0.1)),
                RandomPerspective(0.3), RandomResizedCrop(24))


def test_keyed_crop_depends_only_on_the_key(path):
    """The same image with the same key in two batches (other companions, other canvas size,
    other position) gives the same crop."""
    x, sizes, images = _ragged([(50, 70), (64, 64), (31, 90)], seed=3)
    y, sizes_y, _ = _ragged([(80, 40), (50, 70)], seed=4)
    y[1, :, :50, :70] = images[0]
    stage = make_crop(TRAIN)
    keys = torch.tensor([11, 12, 13])
    a = stage(x, sizes, keys)
    b = stage(y, sizes_y, torch.tensor([99, 11]))
    assert torch.equal(a[0], b[1])
    assert not torch.equal(a[0], stage(x, sizes, torch.tensor([14, 12, 13]))[0])


@pytest.mark.parametrize("crop", [
    TRAIN,
    Augment(RandomVerticalFlip(), RandomCrop(20, padding=[1, 2, 3, 4], pad_if_needed=True)),
    Augment(RandomPerspective(0.5, p=1.0, interpolation="nearest"), CenterCrop(20),
            RandomHorizontalFlip()),
])
def test_same_size_batch_equals_the_augment(crop):
    """On a batch whose images fill the canvas, the stage is the Augment of its steps (the same
    draws from the same keys, the same kernels)."""
    x = torch.randint(0, 256, (6, 3, 40, 52), dtype=torch.uint8)
    sizes = torch.tensor([[40, 52]] * 6)
    keys = torch.arange(100, 106)
    assert torch.equal(make_crop(crop)(x, sizes, keys), crop(x, keys))


@pytest.mark.parametrize("crop", [
    Augment(RandomHorizontalFlip(), RandomRotation(30), RandomResizedCrop(24)),
    Augment(RandomAffine(10, translate=(0.1, 0.1)), RandomResizedCrop((20, 24))),
    Augment(RandomVerticalFlip(), Resize(30), RandomCrop(28, pad_if_needed=True)),
    Augment(Resize(24, max_size=40), CenterCrop(22)),
    RandomResizedCrop(16),
], ids=["flip_rot_rrc", "affine_rrc", "flip_resize_random", "resize_max_center", "rrc"])
@pytest.mark.parametrize("targets", ["labels", "masks", "boxes"])
def test_loader_keyed_crop_on_a_fixed_cache_equals_the_augment_on_the_gathered_batch(
        crop, targets):
    """On a fixed-size cache the loader's crop with keys is the same Augment applied to the
    gathered batch with the same keys, bit for bit (images, and masks and boxes through its
    with_targets), whatever kernels run inside."""
    from batchaug.data import DeviceCache, DeviceLoader

    g = torch.Generator().manual_seed(9)
    images = torch.randint(0, 256, (10, 3, 40, 52), generator=g, dtype=torch.uint8)
    masks = torch.randint(0, 5, (10, 40, 52), generator=g, dtype=torch.uint8)
    boxes = torch.tensor([[[2.0, 3.0, 30.0, 25.0], [10.0, 0.0, 52.0, 40.0]]]).repeat(10, 1, 1)
    extra = {"masks": masks} if targets == "masks" else (
        {"boxes": boxes} if targets == "boxes" else {})
    cache = DeviceCache.from_tensors(images, torch.arange(10), device="cpu", **extra)
    loader = DeviceLoader(cache, 4, crop=crop, shuffle=False, return_keys=True, seed=3)
    aug = crop if isinstance(crop, Augment) else Augment(crop)
    assert loader.crop is crop or loader.crop[0] is crop
    start = 0
    for x, y, k in loader:
        idx = torch.arange(start, start + x.shape[0])
        start += x.shape[0]
        if targets == "labels":
            assert torch.equal(x, aug(images[idx], k))
            continue
        t = {key: v[idx] for key, v in extra.items()}
        ref, rt = aug.with_targets(images[idx], t, k)
        assert torch.equal(x, ref)
        for key in rt:
            assert torch.equal(y[key], rt[key]), key
    assert start == 10


def test_resize_longer_side_then_crop_equals_torchvision(path):
    """Resize(None, max_size) (the longer side) then CenterCrop on a ragged batch, as
    torchvision on each image."""
    x, sizes, images = _ragged(SIZES)
    out = make_crop(Augment(Resize(None, max_size=60), CenterCrop((40, 44))))(x, sizes)
    for i, img in enumerate(images):
        ref = TF.center_crop(TF.resize(img, None, max_size=60, antialias=True), [40, 44])
        diff = (out[i].int() - ref.int()).abs().max().item()
        assert diff == 0 if path == "per_image" else diff <= 1, (i, diff)


@pytest.mark.parametrize("warp", [
    RandomRotation(30),
    RandomRotation(180, interpolation="bilinear", fill=[9, 99, 199], center=(10, 30)),
    RandomAffine(20, translate=(0.2, 0.1), scale=(0.7, 1.3), shear=(-10, 10, -5, 5),
                 interpolation="bilinear", fill=50),
])
@pytest.mark.parametrize("train", [True, False])
def test_warp_on_the_box_only_equals_warp_then_crop(warp, train):
    """The per-image path warps only RandomResizedCrop's box (the pair table's warp +
    crop rule): the same pixels and draws as warping the whole image first (and, on
    a same-size batch, as the Augment), with and without keys."""
    crop = Augment(RandomHorizontalFlip(), warp, RandomResizedCrop((24, 30))).train(train)
    x, sizes, _ = _ragged(SIZES, seed=8)
    masks = torch.randint(0, 9, (x.shape[0],) + x.shape[2:], dtype=torch.uint8)
    calls = []
    pair = fusion.sized_pair

    def spy(*a):
        rule = pair(*a)
        calls.extend([rule] if rule is not None else [])
        return rule

    for keys in (torch.arange(len(SIZES)), None):
        for t in ({"sizes": sizes}, {"sizes": sizes, "masks": masks}):
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(fusion, "sized_pair", spy)
                torch.manual_seed(3)
                a, ta = crop.with_targets(x, t, keys)
                rng = torch.get_rng_state()
            assert len(calls) == (1 if train else 0)  # the fused kernel ran (training)
            assert all(r.window for r in calls)
            calls.clear()
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(fusion, "sized_pair", lambda *a: None)
                torch.manual_seed(3)
                b, tb = crop.with_targets(x, t, keys)
            assert torch.equal(a, b) and torch.equal(torch.get_rng_state(), rng)
            assert set(ta) == set(tb) == set(t) - {"sizes"}
            for k in ta:
                assert torch.equal(ta[k], tb[k]), k
    same = torch.randint(0, 256, (4, 3, 50, 60), dtype=torch.uint8)
    keys = torch.arange(4)
    want = crop(same, keys)
    assert torch.equal(make_crop(crop)(same, torch.tensor([[50, 60]] * 4), keys), want)


def test_batched_path_agrees_with_per_image_path(monkeypatch):
    x, sizes, _ = _ragged(SIZES, seed=5)
    stage = make_crop(Augment(RandomRotation(25), RandomAffine(0, shear=10),
                                    RandomPerspective(0.4, p=1.0, interpolation="nearest"),
                                    RandomResizedCrop(32)))
    keys = torch.arange(len(SIZES))
    a = stage(x, sizes, keys)
    monkeypatch.setattr(S, "eager_cpu", lambda x: False)
    b = stage(x, sizes, keys)
    assert (a != b).double().mean().item() < 1e-3


def test_steps_after_the_size_fixing_one_run_on_the_fixed_batch():
    x, sizes, images = _ragged(SIZES)
    crop = Augment(CenterCrop(30), RandomHorizontalFlip(1.0), Resize(20), CenterCrop((12, 16)))
    assert check_crop(crop)[1] == (12, 16)
    stage = make_crop(crop)
    out = stage(x, sizes)
    for i, img in enumerate(images):
        ref = TF.center_crop(TF.resize(TF.hflip(TF.center_crop(img, [30, 30])), 20), [12, 16])
        assert torch.equal(out[i], ref), i
    with pytest.raises(ValueError, match=r"crop: step 1: RandomCrop: crop size"):
        check_crop(Augment(CenterCrop(30), RandomCrop(40)))


@pytest.mark.parametrize("device", DEVICES)
def test_batched_kernels_on_device_match_the_per_image_path(device, monkeypatch):
    """The batched ragged kernels (what an accelerator runs; forced on CPU) against the CPU
    per-image path, keyed draws: windows and flips exact, nearest warps but for edge ties,
    resize + window within 1 step."""
    x, sizes, _ = _ragged(SIZES, seed=6)
    keys = torch.arange(len(SIZES))
    crops = [Augment(RandomHorizontalFlip(), RandomVerticalFlip(), CenterCrop((50, 41))),
             Augment(RandomRotation(45), RandomAffine(10, translate=(0.2, 0.1), shear=8),
                     RandomPerspective(0.5, p=1.0, interpolation="nearest"), CenterCrop(30)),
             Augment(RandomHorizontalFlip(), Resize(50), RandomCrop(48, pad_if_needed=True))]
    for crop in crops:
        want = make_crop(crop)(x, sizes, keys)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(S, "eager_cpu", lambda t: False)
            got = make_crop(crop)(x.to(device), sizes.to(device), keys.to(device)).cpu()
        diff = (got.int() - want.int()).abs()
        assert (diff > 0).double().mean().item() < 1e-3 or diff.max().item() <= 1, crop


def test_eval_rrc_uses_each_images_eval_box():
    x, sizes, images = _ragged(SIZES + [(24, 24)])
    t = RandomResizedCrop(24)
    out = make_crop(Augment(RandomRotation(40), t).eval())(x, sizes)
    for i, img in enumerate(images):
        assert torch.equal(out[i], t.eval()(img[None])[0]), i


def test_empty_batch_and_input_unchanged():
    stage = make_crop(TRAIN)
    out = stage(torch.zeros(0, 3, 10, 10, dtype=torch.uint8), torch.zeros(0, 2, dtype=torch.int64))
    assert out.shape == (0, 3, 24, 24)
    x, sizes, _ = _ragged(SIZES)
    before = x.clone()
    stage(x, sizes)
    assert torch.equal(x, before)


@pytest.mark.parametrize("crop, words", [
    (Augment(RandomRotation(10), ColorJitter(0.4)), "move it into the model's Augment"),
    (Augment(RandomResizedCrop(8), Normalize([0.5], [0.5])), "move it into the model's Augment"),
    (Augment(RandomRotation(10)), "must end in a transform that fixes the output size"),
    (Resize(32), "must end in a transform that fixes the output size"),
    (RandomCrop(32), "pad_if_needed=True"),
    (Augment(Resize(32), RandomRotation(3), CenterCrop(8)), "follows Resize(int)"),
    # issue 35: accepted before, then failing when a batch ran
    (Augment(Resize(32), Resize(24), CenterCrop(8)), "must be followed directly by CenterCrop"),
    (Augment(Resize(32), Augment(CenterCrop(8))), "must be in the same Augment"),
    (Augment(Augment(Resize(32)), RandomCrop(8, pad_if_needed=True)), "same Augment"),
    (Augment(RandomApply([RandomRotation(3)]), CenterCrop(8)), "model's Augment"),
    (v2.CenterCrop(8), "batchaug's geometric transforms"),
])
def test_refused_crops_name_crop_and_say_why(crop, words):
    with pytest.raises(ValueError, match="crop") as info:
        check_crop(crop)
    assert words in str(info.value)


def test_bad_inputs_are_value_errors():
    stage = make_crop(CenterCrop(8))
    x = torch.zeros(2, 3, 10, 10, dtype=torch.uint8)
    with pytest.raises(ValueError, match=r"sizes.*batch size 2"):
        stage(x, torch.tensor([[10, 10]]))
    with pytest.raises(ValueError, match=r"sizes.*int64 tensor of shape \(N, 2\)"):
        stage(x, torch.tensor([[10, 10], [10, 10]], dtype=torch.int32))
    with pytest.raises(ValueError, match="within 1"):
        stage(x, torch.tensor([[10, 10], [11, 10]]))
    with pytest.raises(TypeError, match="crop must be"):
        check_crop("CenterCrop")


# ------------------------------------------- boundaries against torchvision (issue 28 item 9)
def _copies(sizes, n, seed=0):
    """``n`` copies of each of a few random images of ``sizes`` in one padded batch, their
    sizes, keys (deterministic draws) and the images."""
    from batchaug._random import sample_keys

    x, s, images = _ragged(sizes, seed=seed)
    x = x.repeat_interleave(n, 0)
    s = s.repeat_interleave(n, 0)
    return x, s, sample_keys(seed, 0, torch.arange(x.shape[0])), images


def _windows(padded, size):
    """Every ``size x size`` window of a ``(C, H, W)`` image, flattened: ``(positions, -1)``
    and the positions ``(top, left)`` in the same order."""
    c = padded.shape[0]
    win = padded.unfold(1, size, 1).unfold(2, size, 1)  # (C, nt, nl, size, size)
    nt, nl = win.shape[1], win.shape[2]
    flat = win.permute(1, 2, 0, 3, 4).reshape(nt * nl, c * size * size)
    pos = [(t, l) for t in range(nt) for l in range(nl)]
    return flat, pos


def _positions(out, padded, size):
    """The window position of ``padded`` each output equals (every output must equal one)."""
    flat, pos = _windows(padded, size)
    hit = (out.flatten(1).unsqueeze(1) == flat.unsqueeze(0)).all(2)  # (n, positions)
    assert hit.any(1).all(), "an output is no window of torchvision's padded image"
    return {pos[j] for j in hit.int().argmax(1).tolist()}


@pytest.mark.parametrize("mode", ["reflect", "symmetric", "edge", "constant"])
@pytest.mark.parametrize("crop, padding", [(12, 3), (18, 2)])
def test_random_crop_padding_modes_are_windows_of_torchvisions_pad(mode, crop, padding):
    """RandomCrop(padding, pad_if_needed, padding_mode) in the crop stage: each output is a
    window of torchvision v2's one ``pad`` (``padding`` plus what ``pad_if_needed`` adds on
    both sides) of the stored image alone, and every window position (first and last
    included) is drawn, as torchvision's ``randint(0, H - h + 1)``."""
    sizes = [(12, 13), (15, 11)]
    n = 600
    x, s, keys, images = _copies(sizes, n)
    t = RandomCrop(crop, padding=padding, pad_if_needed=True, fill=7, padding_mode=mode)
    out = make_crop(t)(x, s, keys)
    for i, img in enumerate(images):
        h, w = img.shape[-2:]
        ph, pw = max(0, crop - h - 2 * padding), max(0, crop - w - 2 * padding)
        pad = [padding + pw, padding + ph, padding + pw, padding + ph]
        padded = TF.pad(img, pad, fill=7, padding_mode=mode)
        got = _positions(out[i * n:(i + 1) * n], padded, crop)
        nt, nl = padded.shape[1] - crop + 1, padded.shape[2] - crop + 1
        assert got == {(a, b) for a in range(nt) for b in range(nl)}, (mode, i)


def test_rrc_box_as_wide_or_tall_as_the_image_fits_as_in_torchvision():
    """scale 0.75, ratio 1 on 4:3 images: a box of the image's full width (or height) fits
    (torchvision's ``w <= width``); the crops drawn are exactly the resized crops of
    torchvision's boxes, every offset reached."""
    sizes = [(64, 48), (48, 64)]
    n = 300
    x, s, keys, images = _copies(sizes, n)
    out = make_crop(RandomResizedCrop(12, scale=(0.75, 0.75), ratio=(1.0, 1.0)))(
        x, s, keys)
    torch.manual_seed(0)
    for i, img in enumerate(images):
        boxes = sorted({tuple(v2.RandomResizedCrop.get_params(img, [0.75, 0.75], [1.0, 1.0]))
                        for _ in range(400)})
        assert len(boxes) == 17
        refs = torch.stack([TF.resized_crop(img, *b, [12, 12], antialias=True) for b in boxes])
        hit = (out[i * n:(i + 1) * n].flatten(1).unsqueeze(1)
               == refs.flatten(1).unsqueeze(0)).all(2)
        assert hit.any(1).all() and hit.any(0).all(), i


def test_rrc_fallback_box_on_odd_margins_equals_torchvision(path):
    """No attempt fits (scale 2): the fallback box, centred with ``(H - h) // 2`` on margins
    of odd size."""
    sizes = [(66, 40), (40, 66), (68, 41), (41, 68)]
    x, s, images = _ragged(sizes)
    out = make_crop(RandomResizedCrop(16, scale=(2.0, 2.0)))(x, s)
    for i, img in enumerate(images):
        box = v2.RandomResizedCrop.get_params(img, [2.0, 2.0], [3 / 4, 4 / 3])
        assert (img.shape[1] - box[2]) % 2 == 1 or (img.shape[2] - box[3]) % 2 == 1
        assert torch.equal(out[i], TF.resized_crop(img, *box, [16, 16], antialias=True)), i
