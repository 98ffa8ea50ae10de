"""batchaug's timm equivalents against timm itself: each op with pinned arguments against
timm's PIL op, timm's level rules, op sets and policy tables, the laws of the random draws
(op choice, magnitude noise, erasing boxes, Mixup's lambdas and boxes) by statistical tests,
Mixup and RandomErasing with timm's own draws replayed, and from_timm's conversions/errors.

The module-level tests are the ops every timm policy shares, from_timm and the statistics
helpers; each timm transform's own tests are its class at the end (TestTimmRandAugment,
TestTimmAugMix, TestTimmRandomErasing, TestTimmMixup, TestTimmRandomResizedCrop). Their tests
that need no timm (targets, ragged batches) are in tests/transforms/ (test_policy_targets.py,
test_sizes.py), which run where timm is not installed."""
import math
import random
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import batchaug
from batchaug import transforms as T
from batchaug.functional import _auto_augment as FA
from batchaug.transforms import _timm as TT
from batchaug.transforms import _timm_mix as TM

timm = pytest.importorskip("timm")  # a test extra: installed by `make test`
from PIL import Image  # noqa: E402
from timm.data import Mixup, create_transform  # noqa: E402
from timm.data import auto_augment as A  # noqa: E402
from timm.data import mixup as TMX  # noqa: E402
from timm.data import random_erasing as TRE  # noqa: E402

from batchaug import DeviceCache, DeviceLoader  # noqa: E402
from tests.data.loader_crop import LoaderCrop  # noqa: E402

FILL = (124, 116, 104)


def _image(h: int = 80, w: int = 96, seed: int = 0) -> np.ndarray:
    """A smooth image with noise (edges and flat areas: every rounding path)."""
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 256, (8, 8, 3)).astype(np.uint8)
    img = np.asarray(Image.fromarray(base).resize((w, h), Image.BICUBIC)).astype(int)
    return np.clip(img + rng.integers(-20, 21, img.shape), 0, 255).astype(np.uint8)


def _to_batch(img: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.array(img)).permute(2, 0, 1).unsqueeze(0).contiguous()


def _ours(x, name, arg, interpolation):
    op = FA.TIMM_NAMES[name][0]
    return FA.apply_ops(x, torch.tensor([op]), torch.tensor([float(arg)], dtype=torch.float64),
                        interpolation, [float(f) for f in FILL], FA.families([op], FA.TIMM),
                        True, FA.TIMM)


def _timm_op(pil, name, arg, resample):
    if name == "TranslateXRel":  # timm's Rel ops take a fraction; pass pixels to the abs op
        return A.translate_x_abs(pil, arg, fillcolor=FILL, resample=resample)
    if name == "TranslateYRel":
        return A.translate_y_abs(pil, arg, fillcolor=FILL, resample=resample)
    if name in ("AutoContrast", "Equalize", "Invert"):
        return A.NAME_TO_OP[name](pil)
    return A.NAME_TO_OP[name](pil, arg, fillcolor=FILL, resample=resample)


# (op, argument, max uint8 difference allowed, share of pixels allowed to differ at all)
COLOUR_OPS = [
    ("Brightness", 1.7, 0, 0.0), ("Brightness", 0.3, 0, 0.0), ("Sharpness", 1.9, 0, 0.0),
    ("Sharpness", 0.2, 0, 0.0), ("Posterize", 3, 0, 0.0), ("Posterize", 1, 0, 0.0),
    ("Solarize", 100, 0, 0.0), ("Solarize", 256, 0, 0.0), ("SolarizeAdd", 77, 0, 0.0),
    ("AutoContrast", 0, 0, 0.0), ("Equalize", 0, 0, 0.0), ("Invert", 0, 0, 0.0),
    # PIL's Color/Contrast round their grey differently (integer L, int(mean + 0.5))
    ("Color", 0.4, 1, 1.0), ("Color", 1.8, 1, 1.0), ("Contrast", 1.6, 1, 1.0),
    ("Contrast", 0.3, 1, 1.0),
]
GEOMETRY = [("ShearX", 0.27), ("ShearY", -0.21), ("TranslateXRel", 28.8),
            ("TranslateYRel", -16.8), ("Rotate", 27.0), ("Rotate", -13.0)]


@pytest.mark.parametrize("name,arg,tol,share", COLOUR_OPS)
def test_colour_ops_match_timm(name, arg, tol, share):
    img = _image()
    ref = _to_batch(np.asarray(_timm_op(Image.fromarray(img), name, arg, Image.BILINEAR)))
    d = (_ours(_to_batch(img), name, arg, "bilinear").int() - ref.int()).abs()
    assert d.max().item() <= tol, (name, arg, d.max().item())
    assert (d > 0).float().mean().item() <= share


@pytest.mark.parametrize("name,arg", GEOMETRY)
def test_geometry_matches_timm(name, arg):
    """nearest: exact (arguments without rounding ties); bilinear: within 1 level away from the
    border (PIL does not blend the fill into edge pixels; torchvision does)."""
    img = _image()
    pil = Image.fromarray(img)
    x = _to_batch(img)
    ref = _to_batch(np.asarray(_timm_op(pil, name, arg, Image.NEAREST)))
    d = (_ours(x, name, arg, "nearest").int() - ref.int()).abs()
    assert (d > 0).float().mean().item() <= 0.001, (name, (d > 0).float().mean().item())
    ref = _to_batch(np.asarray(_timm_op(pil, name, arg, Image.BILINEAR)))
    d = (_ours(x, name, arg, "bilinear").int() - ref.int()).abs()
    ones = torch.full_like(x, 255)
    inside = (_ours(ones, name, arg, "bilinear") == 255).all(1, keepdim=True).float()
    inside = -torch.nn.functional.max_pool2d(-inside, 3, 1, 1) > 0.5  # 1 px from the border
    assert inside.float().mean() > 0.5
    assert d[inside.expand_as(d)].max().item() <= 1, name
    assert d.float().mean().item() < 1.5, name


def test_level_to_arg_matches_timm(monkeypatch):
    hp = {"translate_const": 100, "translate_pct": 0.3}
    levels = torch.tensor([0.0, 0.3, 1.0, 2.5, 4.4, 5.0, 6.25, 7.77, 9.0, 9.99, 10.0, 13.0],
                          dtype=torch.float64)
    h, w = 40, 56
    for negate in (False, True):
        monkeypatch.setattr(A, "_randomly_negate", (lambda v: -v) if negate else (lambda v: v))
        for name, (_, rule) in FA.TIMM_NAMES.items():
            ours = FA.level_to_arg(torch.full_like(levels, rule, dtype=torch.int64), levels,
                                   torch.full(levels.shape, negate), 100.0, 0.3, h, w)
            fn = A.LEVEL_TO_ARG[name]
            for lv, got in zip(levels.tolist(), ours.tolist()):
                want = 0.0 if fn is None else fn(lv, hp)[0]
                if name == "TranslateXRel":
                    want *= w
                elif name == "TranslateYRel":
                    want *= h
                assert got == pytest.approx(want, abs=1e-12), (name, lv, negate)


def test_op_sets_and_policies_are_timms():
    assert TT.RAND_OPS == A._RAND_TRANSFORMS
    assert TT.RAND_INCREASING_OPS == A._RAND_INCREASING_TRANSFORMS
    assert TT.AUGMIX_OPS == A._AUGMIX_TRANSFORMS
    assert TT.RAND_WEIGHTS == A._RAND_WEIGHTED_0
    for name, ours in TT.POLICIES.items():
        theirs = [[(op.name, op.prob, op.magnitude) for op in sub]
                  for sub in A.auto_augment_policy(name, dict(A._HPARAMS_DEFAULT))]
        assert [list(sub) for sub in ours] == theirs, name


# ----------------------------------------------------------------------------- statistics

def _ks(a, b) -> float:
    """Two-sample Kolmogorov-Smirnov statistic."""
    a, b = np.sort(np.asarray(a, float)), np.sort(np.asarray(b, float))
    grid = np.concatenate([a, b])
    return float(np.abs(np.searchsorted(a, grid, "right") / len(a)
                        - np.searchsorted(b, grid, "right") / len(b)).max())


def _ks_ok(a, b, alpha_c: float = 1.95) -> bool:
    """D below the 0.1 % critical value c(alpha) sqrt((n + m) / (n m))."""
    n, m = len(a), len(b)
    return _ks(a, b) < alpha_c * math.sqrt((n + m) / (n * m))


def _ks_detects_a_shift():
    rng = np.random.default_rng(0)
    return not _ks_ok(rng.normal(0, 1, 3000), rng.normal(0.15, 1, 3000))


def test_ks_helper_has_power():
    assert _ks_detects_a_shift()


def _freq_ok(count: int, n: int, p: float, z: float = 5.0) -> bool:
    return abs(count - n * p) <= z * math.sqrt(n * p * (1 - p)) + 1


def _timm_args(name: str, magnitude: float, mstd: float, n: int):
    """The arguments timm's AugmentOp passes to its PIL op, recorded over n calls."""
    random.seed(0)
    seen = []
    op = A.AugmentOp(name, prob=1.0, magnitude=magnitude,
                     hparams={"magnitude_std": mstd, "img_mean": FILL})
    inner = op.level_fn
    op.level_fn = lambda level, hp: seen.append(inner(level, hp)[0]) or inner(level, hp)
    pil = Image.new("RGB", (4, 4))
    for _ in range(n):
        op(pil)
    return np.array(seen)


def _timm_erased_boxes(n, h, w, **kw):
    """Boxes timm's RandomErasing erases on n single images (one box each)."""
    random.seed(3)
    torch.manual_seed(3)
    er = TRE.RandomErasing(probability=1.0, device="cpu", **kw)
    out = []
    for _ in range(n):
        img = torch.ones(1, h, w)
        er(img)
        zero = (img[0] == 0).nonzero()
        if len(zero) == 0:
            out.append((0, 0, 0, 0))
            continue
        top, left = zero.min(0).values.tolist()
        bottom, right = zero.max(0).values.tolist()
        out.append((top, left, bottom - top + 1, right - left + 1))
    return np.array(out)


# ----------------------------------------------------------------------------- pinned draws

class _Recorder:
    """timm's random module, recording randint calls (erasing box positions)."""

    def __init__(self, seed):
        self.r = random.Random(seed)
        self.calls = []

    def random(self):
        return self.r.random()

    def uniform(self, a, b):
        return self.r.uniform(a, b)

    def randint(self, a, b):
        v = self.r.randint(a, b)
        self.calls.append((a, b, v))
        return v


def _replay_mixup(monkeypatch, mix: Mixup, x, labels):
    """timm's output and its draws (lam, use_cutmix, boxes in call order)."""
    rec = {"boxes": []}
    real_bbox = TMX.cutmix_bbox_and_lam

    def bbox(*args, **kwargs):
        out = real_bbox(*args, **kwargs)
        rec["boxes"].append(out)
        return out

    monkeypatch.setattr(TMX, "cutmix_bbox_and_lam", bbox)
    for meth in ("_params_per_elem", "_params_per_batch"):
        real = getattr(mix, meth)

        def wrapped(*a, _real=real, _m=meth):
            out = _real(*a)
            rec[_m] = (np.array(out[0], copy=True), np.array(out[1], copy=True))
            return out

        monkeypatch.setattr(mix, meth, wrapped)
    y, t = mix(x.clone(), labels)
    return y, t, rec


# ----------------------------------------------------------------------------- from_timm

def _convert(t):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mig = batchaug.from_timm(t)
    return mig, [str(w.message) for w in caught]


def test_from_timm_rand_augment_pipeline():
    t = create_transform(64, is_training=True, auto_augment="rand-m9-mstd0.5-inc1",
                         re_prob=0.25, re_mode="pixel", re_count=2, interpolation="bicubic")
    mig, notes = _convert(t)
    aug = mig.augment
    names = [type(m).__name__ for m in aug]
    assert names == ["RandomHorizontalFlip", "TimmRandAugment", "Normalize",
                     "TimmRandomErasing"]
    ra, er = aug[1], aug[3]
    assert (ra.magnitude, ra.magnitude_std, ra.prob, ra.num_layers) == (9.0, 0.5, 0.5, 2)
    assert ra.names == TT.RAND_INCREASING_OPS and ra.fill == [124.0, 116.0, 104.0]
    assert ra.translate_pct == 0.45 and ra.interpolation == "bilinear"
    assert (er.probability, er.mode, er.max_count) == (0.25, "pixel", 2)
    assert any("bicubic" in n for n in notes)
    y = aug(torch.randint(0, 256, (4, 3, 64, 64), dtype=torch.uint8))
    assert y.shape == (4, 3, 64, 64) and y.dtype == torch.float32


def test_from_timm_random_interpolation_and_policies():
    mig, notes = _convert(create_transform(32, is_training=True, auto_augment="augmix-m5-w4-d2",
                                           interpolation="random"))
    aug = mig.augment
    # the per-sample interpolation crop is the loader's crop stage
    assert [type(m).__name__ for m in mig.crop] == ["TimmRandomResizedCrop"]
    crop = mig.crop[0]
    assert crop.interpolations == ["bilinear", "bicubic"]
    torch.manual_seed(0)
    branch = crop.make_params(torch.zeros(4000, 3, 8, 8))
    assert _freq_ok(int((branch == 1).sum()), 4000, 0.5)
    mixer = aug[1]
    assert isinstance(mixer, T.TimmAugMix)
    assert (mixer.magnitude, mixer.width, mixer.depth, mixer.magnitude_std) == (5, 4, 2, math.inf)
    assert mixer.translate_pct == 0.3
    for policy in ("original", "originalr", "v0", "v0r"):
        mig, _ = _convert(create_transform(32, is_training=True, auto_augment=policy,
                                           interpolation="bilinear"))
        assert isinstance(mig.augment[1], T.TimmAutoAugment) and mig.augment[1].policy == policy
    # one interpolation: the plain crop, in the loader
    assert [type(m).__name__ for m in mig.crop] == ["RandomResizedCrop"]


def test_from_timm_random_interpolation_crops_once_in_the_loader():
    """interpolation="random" (timm's default): the per-sample-interpolation crop is the
    loader's crop stage, the augment crops no more, no hint proposes another crop; crop stage +
    augment on photos of three sizes give crops of timm's mean area (one crop: ~0.44 for
    scale=(0.08, 1)), not the ~0.19 of two crops in a row."""
    from timm.data.transforms import RandomResizedCropAndInterpolation

    mig, notes = _convert(create_transform(32, is_training=True, interpolation="random",
                                           color_jitter=None))
    assert [type(m).__name__ for m in mig.crop] == ["TimmRandomResizedCrop"]
    assert mig.crop[0].interpolations == ["bilinear", "bicubic"]
    assert [type(m).__name__ for m in mig.augment] == ["RandomHorizontalFlip", "Normalize"]
    assert not any("CenterCrop" in n or "crop=" in n or "in its place" in n for n in notes), notes
    assert "(none: stored size)" not in str(mig)
    # images whose channels 0 and 1 hold each pixel's x and y: a crop's extent is readable
    sizes = [(96, 128), (128, 96), (112, 112)]
    data = []
    for k in range(300):
        h, w = sizes[k % 3]
        img = torch.zeros(3, h, w, dtype=torch.uint8)
        img[0] = torch.arange(w, dtype=torch.uint8).view(1, w)
        img[1] = torch.arange(h, dtype=torch.uint8).view(h, 1)
        data.append((img, 0))
    cache = DeviceCache.from_dataset(data, pre_transform=mig.pre_transform, device="cpu",
                                     progress=False)
    assert cache.ragged
    loader = DeviceLoader(cache, batch_size=100, shuffle=False, seed=0, crop=mig.crop)
    mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    areas = []
    for epoch in range(3):
        loader.set_epoch(epoch)
        for x, _ in loader:
            v = (mig.augment(x) * std + mean) * 255  # Normalize undone: coordinates again
            # output pixel j samples x = left + (j + 0.5) w / 32 - 0.5: the extent spans 31/32 w
            extent = ((v.amax(dim=(2, 3)) - v.amin(dim=(2, 3))) * 32 / 31)[:, :2]
            areas.append(extent.prod(dim=1))
    frac = torch.cat(areas) / torch.tensor([h * w for h, w in sizes] * 300, dtype=torch.float32)
    random.seed(3)
    theirs = [h * w / (ih * iw) for ih, iw in sizes * 1000
              for _, _, h, w in [RandomResizedCropAndInterpolation.get_params(
                  Image.new("RGB", (iw, ih)), (0.08, 1.0), (3 / 4, 4 / 3))]]
    # measured 0.43 (the readout loses ~0.02 to antialiasing at the box edges) against timm's
    # 0.45; cropping twice (the crop in the loader and again in the augment) gave 0.19
    assert abs(float(frac.mean()) - float(np.mean(theirs))) < 0.05, (
        float(frac.mean()), float(np.mean(theirs)))


def test_timm_augment_matches_from_timm():
    for config in ("rand-m9-mstd0.5-inc1", "rand-m7-n3-p0.3-mmax15", "augmix-m5-w4-d2",
                   "original-mstd0.5", "v0", "rand-m9-tweights"):
        mig, _ = _convert(create_transform(64, is_training=True, auto_augment=config,
                                           interpolation="bilinear"))
        assert repr(batchaug.timm_augment(config, img_size=64)) == repr(mig.augment[1]), config


def test_from_timm_mixup():
    mix = batchaug.from_timm(Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, cutmix_minmax=(0.3, 0.7),
                                   prob=0.6, switch_prob=0.4, mode="pair",
                                   label_smoothing=0.2, num_classes=7))
    assert isinstance(mix, T.TimmMixup)
    assert (mix.mixup_alpha, mix.cutmix_alpha, mix.cutmix_minmax, mix.prob, mix.switch_prob,
            mix.mode, mix.label_smoothing, mix.num_classes) == (0.8, 1.0, [0.3, 0.7], 0.6, 0.4,
                                                                "pair", 0.2, 7)
    x, t = mix(torch.rand(6, 3, 16, 16), torch.arange(6))
    assert t.shape == (6, 7) and torch.allclose(t.sum(1), torch.ones(6))
    with pytest.raises(ValueError, match="multi_label"):
        batchaug.from_timm(Mixup(num_classes=5, multi_label=True))


def test_from_timm_lists_everything_it_cannot_convert():
    from timm.data.transforms import ResizeKeepRatio, TrimBorder

    t = create_transform(32, is_training=True, auto_augment="augmix-m3-b1")
    bad = [ResizeKeepRatio(32), TrimBorder(2)] + list(t.transforms) + [lambda im: im]
    with pytest.raises(ValueError) as info:
        batchaug.from_timm(bad)
    msg = str(info.value)
    for word in ("ResizeKeepRatio", "TrimBorder", "blended", "function"):
        assert word in msg, word
    for config, word in (("rand-m9-tfoo", "tfoo"), ("augmix-x3", "x3"), ("v9", "v9"),
                         ("rand-m9-t3a", "PIL blur")):
        with pytest.raises(ValueError, match=word):
            batchaug.timm_augment(config)


def test_from_timm_refuses_a_non_transform_with_a_type_error():
    for bad in (object(), 3, None):
        with pytest.raises(TypeError, match="obj must be a timm transform"):
            batchaug.from_timm(bad)


def test_from_timm_printed_table_fits_100_columns():
    """timm's RandAugment training transform with the random-interpolation crop: every line of
    print(migration) within 100 characters; the crop shows its arguments, not its internals."""
    mig, _ = _convert(create_transform(224, is_training=True, auto_augment="rand-m9-mstd0.5-inc1",
                                       re_prob=0.25, interpolation="random"))
    text = str(mig)
    assert max(len(line) for line in text.splitlines()) <= 100, text
    crop = "".join("".join(line.split(" | ")[1].split()) for line in text.splitlines()[2:])
    assert crop == ("TimmRandomResizedCrop(size=(224,224),scale=(0.08,1.0),ratio=(0.75,1.333),"
                    "interpolations=['bilinear','bicubic'],eval_crop_pct=0.875)")
    with pytest.raises(ValueError, match=r"migration\.crop"):
        pre, aug = mig


def test_from_timm_eval_pipeline():
    mig, _ = _convert(create_transform(64, crop_pct=0.875))
    pre, aug = mig
    assert mig.crop is None  # Resize + CenterCrop fix the size in the pre_transform
    assert [type(s).__name__ for s in pre.steps] == ["Resize", "CenterCrop"]
    assert [type(m).__name__ for m in aug] == ["Normalize"]
    img = Image.fromarray(_image(90, 100))
    x = pre(img).unsqueeze(0)
    want = create_transform(64, crop_pct=0.875)(img)
    torch.testing.assert_close(aug(x)[0], want, atol=1e-5, rtol=0)


def _photos(n: int = 4):
    """PIL photos of different sizes and aspects, with labels."""
    sizes = [(90, 120), (130, 70), (75, 75), (110, 96)]
    return [(Image.fromarray(_image(*sizes[i % 4], seed=i)), i % 3) for i in range(n)]


def test_from_timm_train_crop_goes_to_the_loader():
    """The RandAugment training transform: the pre_transform only converts (photos keep their
    sizes), RandomResizedCropAndInterpolation(bicubic) is the loader's crop, the rest the
    augment; no note that a crop is missing; the table shows the crop column."""
    t = create_transform(224, is_training=True, auto_augment="rand-m9-mstd0.5-inc1",
                         re_prob=0.25, interpolation="bicubic")
    mig, notes = _convert(t)
    pre, aug = mig.pre_transform, mig.augment
    assert pre.steps == []
    assert [type(m).__name__ for m in mig.crop] == ["RandomResizedCrop"]
    rrc = mig.crop[0]
    assert (list(rrc.size), rrc.interpolation) == ([224, 224], "bicubic")
    assert [type(m).__name__ for m in aug] == ["RandomHorizontalFlip", "TimmRandAugment",
                                               "Normalize", "TimmRandomErasing"]
    assert not any("crop=" in n or "kept in the augment" in n for n in notes), notes
    assert LoaderCrop(mig.crop).output_size == (224, 224)
    lines = str(mig).splitlines()
    assert [h.strip().split(" (")[0] for h in lines[0].split("|")] == [
        "pre_transform", "crop", "augment"]
    assert lines[2].split("|")[1].strip().startswith("RandomResizedCrop(")
    assert lines[2].split("|")[2].strip().startswith("RandomHorizontalFlip(")
    img = _photos(1)[0][0]
    assert tuple(pre(img).shape) == (3, 90, 120)  # the photo's own size


def test_from_timm_crop_and_augment_run_through_the_loader():
    """crop + augment on a ragged cache of photos of different sizes: 64x64 float batches,
    every sample once per epoch; in eval() the loader's crop takes each photo's eval box."""
    t = create_transform(64, is_training=True, auto_augment="rand-m9-mstd0.5-inc1",
                         re_prob=0.25, interpolation="bicubic")
    mig, _ = _convert(t)
    pre, aug = mig.pre_transform, mig.augment
    data = _photos(5)
    cache = DeviceCache.from_dataset(data, pre_transform=pre, device="cpu", progress=False)
    assert cache.ragged
    assert cache.sizes.tolist() == [[h, w] for h, w in ((90, 120), (130, 70), (75, 75),
                                                        (110, 96), (90, 120))]

    first = [(aug(x), y) for x, y in DeviceLoader(cache, batch_size=2, seed=1, crop=mig.crop)]
    assert [tuple(x.shape) for x, _ in first] == [(2, 3, 64, 64), (2, 3, 64, 64), (1, 3, 64, 64)]
    assert all(x.dtype == torch.float32 for x, _ in first)
    assert sorted(torch.cat([y for _, y in first]).tolist()) == sorted(y for _, y in data)
    loader = DeviceLoader(cache, batch_size=5, shuffle=False, crop=mig.crop)
    x, y = next(iter(loader))
    assert x.dtype == torch.uint8 and x.shape == (5, 3, 64, 64)
    # the crop drew from each photo's own extent: the eval box of a photo is its centre crop
    loader.crop.eval()
    x_eval, _ = next(iter(loader))
    for i in (0, 1):
        img = cache.image(i)
        ref = batchaug.RandomResizedCrop(64, interpolation="bicubic").eval()(img[None])[0]
        assert torch.equal(x_eval[i], ref)


# ----------------------------------------------------------------------------- modules

def test_policies_identity_in_eval_and_keys_reproduce():
    x = torch.randint(0, 256, (6, 3, 20, 24), dtype=torch.uint8)
    keys = batchaug.sample_keys(0, 1, torch.arange(6))
    for m in (T.TimmRandAugment(9, magnitude_std=0.5), T.TimmAutoAugment("v0"),
              T.TimmAugMix(5, 2, -1), T.TimmRandomErasing(1.0, mode="rand", max_count=2)):
        assert torch.equal(m.eval()(x), x)
        m.train()
        a = m(x, keys)
        assert torch.equal(a[[3, 1]], m(x[[3, 1]], keys[[3, 1]]))


def test_docs_timm_example_runs():
    """The migration page's timm section: its code block runs (at 64 px) and does what it says."""
    import pathlib

    text = (pathlib.Path(__file__).parents[2] / "docs" / "migrating.md").read_text()
    section = text.split("## From timm", 1)[1]
    code = section.split("```python", 1)[1].split("```", 1)[0].replace("224", "64")
    scope = {"photos": _photos(4)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(code, "docs/migrating.md", "exec"), scope)
    assert scope["pre"].steps == [] and scope["cache"].ragged
    assert scope["pre"] is scope["migration"].pre_transform
    assert [type(m).__name__ for m in scope["migration"].crop] == ["RandomResizedCrop"]
    assert [type(m).__name__ for m in scope["augment"]] == [
        "RandomHorizontalFlip", "TimmRandAugment", "Normalize", "TimmRandomErasing"]
    assert scope["x"].shape == (4, 3, 64, 64) and scope["targets"].shape == (4, 1000)


# ------------------------------------------------- conversions and boundaries (issue 28 item 9)
def _timm_ops(t):
    """timm's policy object in a create_transform pipeline and its AugmentOps."""
    for step in t.transforms:
        if isinstance(step, A.RandAugment):
            return step, list(step.ops)
        if isinstance(step, A.AutoAugment):
            return step, [op for sub in step.policy for op in sub]
        if isinstance(step, A.AugMixAugment):
            return step, list(step.ops)
    raise AssertionError("no timm policy in the pipeline")


@pytest.mark.parametrize("config", ["rand-m9-mstd0.5-inc1", "rand-m14-mmax20-mstd0.7-n3-p0.3",
                                    "augmix-m5-w4-d2", "augmix-m3-mstd0.5", "original-mstd0.5",
                                    "v0r"])
@pytest.mark.parametrize("img_size, mean", [(64, (0.485, 0.456, 0.406)), (70, (0.5, 0.2, 1.0))])
def test_from_timm_and_timm_augment_take_timms_hparams(config, img_size, mean):
    """Every hparam timm's ops use, read from timm's own AugmentOps (not from a repr):
    translate_const (int(0.45 * img_size): 28 and 31, where rounding gives 29 and 32),
    magnitude_max (10 unless mmax), magnitude_std (inf for AugMix), translate_pct and the
    fill (img_mean); the same from from_timm and from timm_augment."""
    t = create_transform(img_size, is_training=True, auto_augment=config, mean=mean,
                         interpolation="bilinear")
    policy, ops = _timm_ops(t)
    hp = ops[0].hparams
    assert all(op.hparams == hp for op in ops)
    mig, _ = _convert(t)
    converted = next(m for m in mig.augment if isinstance(m, TT._TimmOps))
    direct = batchaug.timm_augment(config, img_size=img_size, mean=mean)
    for aug in (converted, direct):
        assert type(aug).__name__ == {A.RandAugment: "TimmRandAugment",
                                      A.AutoAugment: "TimmAutoAugment",
                                      A.AugMixAugment: "TimmAugMix"}[type(policy)]
        assert aug.magnitude_std == (math.inf if ops[0].magnitude_std > 100
                                     else ops[0].magnitude_std)
        assert aug.magnitude_max == (ops[0].magnitude_max or 10.0)
        assert aug.translate_pct == hp.get("translate_pct", 0.45)
        assert aug.fill == [float(v) for v in hp["img_mean"]]
        if not isinstance(policy, A.AugMixAugment):  # AugMix has no absolute translation
            assert aug.translate_const == hp["translate_const"] == int(img_size * 0.45)
        if isinstance(policy, A.RandAugment):
            assert (aug.magnitude, aug.prob, aug.num_layers) == (
                ops[0].magnitude, ops[0].prob, policy.num_layers)
            assert aug.names == [op.name for op in ops]
        if isinstance(policy, A.AugMixAugment):
            assert (aug.magnitude, aug.width, aug.depth, aug.alpha) == (
                ops[0].magnitude, policy.width, policy.depth, policy.alpha)


def _timm_levels(name, magnitude, hparams, n):
    """The arguments timm's AugmentOp passes to its op (sign removed), over n calls."""
    random.seed(0)
    op = A.AugmentOp(name, prob=1.0, magnitude=magnitude, hparams=dict(hparams))
    seen, inner = [], op.level_fn
    op.level_fn = lambda level, hp: seen.append(abs(inner(level, hp)[0])) or inner(level, hp)
    pil = Image.new("RGB", (4, 4))
    for _ in range(n):
        op(pil)
    return np.array(seen)


# --------------------------------------------------------------------- one class per transform

class TestTimmRandAugment:
    """TimmRandAugment: op choice and prob, weighted choice, magnitude noise, magnitude_max and
    translate_const, keyed noise, argument errors."""

    def test_rand_augment_op_choice_and_prob(self):
        torch.manual_seed(0)
        aug = T.TimmRandAugment(magnitude=9, prob=0.5)
        x = torch.zeros(20000, 3, 4, 4, dtype=torch.uint8)
        op, _ = aug.make_params(x)
        for layer in range(2):
            ids = op[:, layer]
            assert _freq_ok(int((ids == 0).sum()), len(ids), 0.5)
            for name in TT.RAND_OPS:
                k = FA.TIMM_NAMES[name][0]
                assert _freq_ok(int((ids == k).sum()), len(ids), 0.5 / 15), name

    def test_weighted_choice_matches_timm_without_replacement(self):
        names, weights = list(TT.RAND_WEIGHTS), list(TT.RAND_WEIGHTS.values())
        torch.manual_seed(1)
        aug = T.TimmRandAugment(magnitude=9, prob=1.0, ops=names, choice_weights=weights)
        op, _ = aug.make_params(torch.zeros(20000, 3, 4, 4, dtype=torch.uint8))
        rows = {FA.TIMM_NAMES[n][0]: n for n in names}
        assert bool((op[:, 0] != op[:, 1]).all())  # without replacement
        np.random.seed(0)
        p = np.array(weights) / sum(weights)
        theirs = np.array([np.random.choice(len(names), 2, replace=False, p=p)
                           for _ in range(20000)])
        for layer in range(2):
            for k, name in rows.items():
                j = names.index(name)
                ours_share = float((op[:, layer] == k).float().mean())
                their_share = float((theirs[:, layer] == j).mean())
                se = math.sqrt(2 * max(their_share, 1e-4) * (1 - their_share) / 20000)
                assert abs(ours_share - their_share) < 5 * se + 1e-3, (layer, name)

    @pytest.mark.parametrize("mstd", [0.5, math.inf])
    def test_magnitude_noise_matches_timm(self, mstd):
        """Rotate's argument (3 degrees per level, random sign) under mstd noise, clipped at 10."""
        torch.manual_seed(2)
        aug = T.TimmRandAugment(magnitude=9, prob=1.0, num_layers=1, ops=["Rotate"],
                                magnitude_std=mstd)
        _, arg = aug.make_params(torch.zeros(4000, 3, 4, 4, dtype=torch.uint8))
        ours = arg[:, 0].numpy()
        theirs = _timm_args("Rotate", 9, mstd, 4000)
        assert _ks_ok(np.abs(ours), np.abs(theirs))
        assert _ks_ok(ours, theirs)  # the sign too
        assert np.abs(ours).max() <= 30.0 + 1e-9
        # and a wrong magnitude is detected
        wrong = T.TimmRandAugment(magnitude=8, prob=1.0, num_layers=1, ops=["Rotate"],
                                  magnitude_std=mstd).make_params(torch.zeros(4000, 3, 4, 4))[1]
        assert not _ks_ok(np.abs(wrong[:, 0].numpy()), np.abs(theirs))

    @pytest.mark.parametrize("name, magnitude, hparams, ours", [
        # magnitude_max above 10: levels above 10 reach the op (clipped at mmax)
        ("Rotate", 14, {"magnitude_max": 20}, dict(magnitude_max=20.0)),
        ("Rotate", 14, {"magnitude_max": 15, "magnitude_std": 0.8},
         dict(magnitude_max=15.0, magnitude_std=0.8)),
        # translate_const: the pixels of an absolute translation
        ("TranslateX", 9, {"translate_const": 100}, dict(translate_const=100.0)),
        ("TranslateY", 6, {"translate_const": 31, "magnitude_std": 0.5},
         dict(translate_const=31.0, magnitude_std=0.5)),
    ])
    def test_magnitude_max_and_translate_const_reach_the_ops_as_in_timm(
            self, name, magnitude, hparams, ours):
        aug = T.TimmRandAugment(magnitude=magnitude, prob=1.0, num_layers=1, ops=[name], **ours)
        torch.manual_seed(3)
        _, arg = aug.make_params(torch.zeros(3000, 3, 40, 40, dtype=torch.uint8))
        got = arg[:, 0].abs().numpy()
        theirs = _timm_levels(name, magnitude, {**hparams, "img_mean": FILL}, 3000)
        if "magnitude_std" in hparams:
            assert _ks_ok(got, theirs)
            if name == "Rotate":  # 14 + noise reaches the clip at mmax = 15: 45 degrees
                assert got.max() == pytest.approx(theirs.max()) == pytest.approx(45.0)
        else:
            assert set(np.round(got, 9)) == set(np.round(theirs, 9)) and len(set(theirs)) == 1

    @pytest.mark.parametrize("mstd", [0.5, math.inf])
    def test_keyed_magnitude_noise_values_are_pinned(self, mstd):
        """Keyed, the noisy level of sample i is a pure function of its key: timm's
        ``gauss(m, mstd)`` as Box-Muller on the open uniforms of draws 2 and 3 (cosine variate),
        or ``uniform(0, m)`` from draw 2 for mstd=inf, clipped to [0, magnitude_max], times 3
        degrees per level for Rotate, negated where draw 4's word is below 2**31."""
        from batchaug import _random as R

        keys = R.sample_keys(9, 2, torch.arange(64))
        aug = T.TimmRandAugment(magnitude=9, prob=1.0, num_layers=1, ops=["Rotate"],
                                magnitude_std=mstd)
        _, arg = aug.make_params(torch.zeros(64, 3, 8, 8), keys)
        w2, w3, w4 = (R._words(keys, d, 1)[:, 0].tolist() for d in (2, 3, 4))
        for got, a, b, s in zip(arg[:, 0].tolist(), w2, w3, w4):
            u1, u2 = (a + 0.5) / 2**32, (b + 0.5) / 2**32
            if mstd == math.inf:
                level = u1 * 9
            else:
                level = 9 + mstd * math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)
            want = min(max(level, 0.0), 10.0) * 3.0 * (-1.0 if s < 2**31 else 1.0)
            assert got == pytest.approx(want, rel=1e-12, abs=1e-12)

    @pytest.mark.parametrize("kwargs", [dict(prob=1.5), dict(ops=["Blur"]), dict(num_layers=-1),
                                        dict(choice_weights=[1.0]), dict(interpolation="bicubic"),
                                        dict(fill=(1, 2))])
    def test_rand_augment_bad_arguments(self, kwargs):
        with pytest.raises((ValueError, TypeError)):
            T.TimmRandAugment(**kwargs)


class TestTimmAugMix:
    """TimmAugMix: timm's blend and chain depths."""

    def test_augmix_blend_is_timms_ending(self):
        rng = np.random.default_rng(1)
        img = _image(32, 40)
        chains = [rng.integers(0, 256, img.shape).astype(np.uint8) for _ in range(3)]
        ws = np.float32(rng.dirichlet([1.0] * 3))
        m = np.float32(rng.beta(1.0, 1.0))
        mixed = np.zeros_like(img, dtype=np.float32)
        for mw, c in zip(ws, chains):
            mixed += mw * np.asarray(c, dtype=np.float32)
        np.clip(mixed, 0, 255.0, out=mixed)
        ref = Image.blend(Image.fromarray(img), Image.fromarray(mixed.astype(np.uint8)), m)
        ours_mixed = torch.zeros(1, 3, 32, 40)
        for mw, c in zip(ws, chains):
            ours_mixed = ours_mixed + torch.tensor(mw) * _to_batch(c).float()
        out = FA.augmix_blend(_to_batch(img), ours_mixed, torch.tensor([m]))
        assert torch.equal(out, _to_batch(np.asarray(ref)))

    def test_augmix_chain_depth_is_uniform_in_1_to_3_as_timm(self):
        """depth=-1: each chain's depth uniform in {1, 2, 3} (timm's np.random.randint(1, 4)),
        its first d steps ops and the rest Identity; depth=2: every chain 2 steps."""
        torch.manual_seed(4)
        n = 6000
        _, _, op, _ = T.TimmAugMix(width=3, depth=-1).make_params(torch.zeros(n, 3, 8, 8))
        assert op.shape == (n, 3, 3) and (op[:, :, 0] != 0).all()  # AugMix has no Identity op
        depth = (op != 0).sum(2)
        steps = torch.arange(3).view(1, 1, 3)
        assert torch.equal(op != 0, steps < depth.unsqueeze(2))  # a prefix of each chain
        for d in (1, 2, 3):
            assert _freq_ok(int((depth == d).sum()), depth.numel(), 1 / 3), d
        _, _, op, _ = T.TimmAugMix(width=3, depth=2).make_params(torch.zeros(50, 3, 8, 8))
        assert op.shape == (50, 3, 2) and (op != 0).all()


class TestTimmRandomErasing:
    """TimmRandomErasing: boxes, counts and erased share as timm's, timm's draws replayed,
    argument errors."""

    def test_erasing_boxes_match_timm(self):
        h, w = 40, 56
        theirs = _timm_erased_boxes(3000, h, w)
        torch.manual_seed(4)
        ours = T.TimmRandomErasing(1.0).make_params(torch.zeros(3000, 1, h, w))[:, 0].numpy()
        for k, what in enumerate(("top", "left", "height", "width")):
            assert _ks_ok(ours[:, k], theirs[:, k]), what
        area = ours[:, 2] * ours[:, 3]
        assert _ks_ok(area, theirs[:, 2] * theirs[:, 3])
        # a wrong area range is detected
        wrong = T.TimmRandomErasing(1.0, max_area=0.25).make_params(torch.zeros(3000, 1, h, w))
        assert not _ks_ok(wrong[:, 0, 2] * wrong[:, 0, 3], theirs[:, 2] * theirs[:, 3])

    def test_erasing_count_erased_share_matches_timm(self):
        h, w = 32, 32
        random.seed(5)
        er = TRE.RandomErasing(probability=0.7, max_count=3, device="cpu")
        theirs = []
        for _ in range(3000):
            img = torch.ones(1, h, w)
            er(img)
            theirs.append(float((img == 0).float().mean()))
        torch.manual_seed(5)
        y = T.TimmRandomErasing(0.7, max_count=3)(torch.ones(3000, 1, h, w))
        ours = (y == 0).float().mean(dim=(1, 2, 3)).numpy()
        assert _ks_ok(ours, theirs)

    @pytest.mark.parametrize("mode", ["const", "rand", "pixel"])
    def test_erasing_replays_timm_exactly(self, monkeypatch, mode):
        h, w = 36, 44
        patches = []
        real = TRE._get_pixels

        def get_pixels(per_pixel, rand_color, size, dtype, device):
            p = real(per_pixel, rand_color, size, dtype=dtype, device=device)
            patches.append(p)
            return p

        rec = _Recorder(7)
        monkeypatch.setattr(TRE, "random", rec)
        monkeypatch.setattr(TRE, "_get_pixels", get_pixels)
        torch.manual_seed(7)
        er = TRE.RandomErasing(probability=1.0, mode=mode, min_count=1, max_count=3, device="cpu")
        x = torch.rand(3, h, w)
        ref = er(x.clone())
        boxes = torch.zeros(1, len(patches), 4, dtype=torch.int64)
        per_box = torch.zeros(1, 3, 1, len(patches))
        # box sizes: from the ranges timm drew the positions in (randint(0, H - h))
        pos_calls = [c for c in rec.calls if c[0] == 0]
        for k, p in enumerate(patches):
            top, left = pos_calls[2 * k][2], pos_calls[2 * k + 1][2]
            bh, bw = h - pos_calls[2 * k][1], w - pos_calls[2 * k + 1][1]
            boxes[0, k] = torch.tensor([top, left, bh, bw])
            per_box[0, :, 0, k] = p.reshape(3, -1)[:, 0]
        assert len(patches) >= 1
        if mode == "pixel":
            # overlapping boxes: the later patch wins, as in timm; build it box by box
            out = x.unsqueeze(0)
            for k in range(len(patches)):
                v = torch.zeros(1, 3, h, w)
                top, left, bh, bw = boxes[0, k].tolist()
                v[0, :, top:top + bh, left:left + bw] = patches[k]
                out = TM.erase_boxes(out, boxes[:, k:k + 1], v, False)
        elif mode == "rand":
            out = TM.erase_boxes(x.unsqueeze(0), boxes, per_box, True)
        else:
            out = TM.erase_boxes(x.unsqueeze(0), boxes, torch.zeros(1, 1, 1, 1), False)
        assert torch.equal(out[0], ref)

    @pytest.mark.parametrize("h, w, area", [(36, 44, 0.2), (10, 40, 0.25), (40, 10, 0.25)])
    def test_erasing_box_boundaries_are_timms(self, h, w, area):
        """One box size (a pinned area and aspect 1): the tops and lefts are exactly timm's
        ``randint(0, H - h)`` (last row and column included); a box as tall or as wide as the image
        never fits (timm's ``w < img_w and h < img_h``): nothing is erased."""
        kw = dict(min_area=area, max_area=area, min_aspect=1.0)
        theirs = _timm_erased_boxes(600, h, w, **kw)
        torch.manual_seed(5)
        ours = T.TimmRandomErasing(probability=1.0, **kw).make_params(
            torch.zeros(1500, 3, h, w))[:, 0]
        erased = ours[:, 2] > 0
        if area == 0.2:
            assert erased.all() and (theirs[:, 2] > 0).all()
            for col in range(4):
                assert set(ours[:, col].tolist()) == set(theirs[:, col].tolist()), col
        else:
            assert not erased.any() and (theirs == 0).all()

    @pytest.mark.parametrize("kwargs,word", [(dict(mode="zero"), "mode"),
                                             (dict(max_count=0), "max_count"),
                                             (dict(min_area=0.5, max_area=0.1), "max_area")])
    def test_erasing_bad_arguments(self, kwargs, word):
        with pytest.raises(ValueError, match=word):
            T.TimmRandomErasing(**kwargs)


class TestTimmMixup:
    """TimmMixup: timm's draws replayed, its lambda laws, properties, correct_lam, argument
    errors."""

    @pytest.mark.parametrize("mode", ["batch", "pair", "elem"])
    @pytest.mark.parametrize("minmax", [None, (0.2, 0.8)])
    def test_mixup_replays_timm_exactly(self, monkeypatch, mode, minmax):
        n, h, w = 8, 24, 28
        for seed in range(6):
            np.random.seed(seed)
            mix = Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, cutmix_minmax=minmax, prob=0.8,
                        switch_prob=0.5, mode=mode, label_smoothing=0.1, num_classes=10)
            x = torch.rand(n, 3, h, w, generator=torch.Generator().manual_seed(seed))
            labels = torch.randint(0, 10, (n,), generator=torch.Generator().manual_seed(seed))
            y, t, rec = _replay_mixup(monkeypatch, mix, x, labels)
            boxes = iter(rec["boxes"])
            if mode == "batch":
                lam0, use_cut = rec["_params_per_batch"]
                lam0, use_cut = np.array([float(lam0)]), np.array([bool(use_cut)])
            else:
                lam0, use_cut = rec["_params_per_elem"]
            m = len(lam0)
            lam = torch.tensor(lam0, dtype=torch.float64)
            cut = torch.zeros(m, dtype=torch.bool)
            box = torch.zeros(m, 4, dtype=torch.int64)
            for i in range(m):
                if lam0[i] != 1.0 and use_cut[i]:
                    (yl, yh, xl, xh), lam_c = next(boxes)
                    cut[i] = True
                    box[i] = torch.tensor([int(yl), int(yh), int(xl), int(xh)])
                    lam[i] = float(np.float32(lam_c)) if mode != "batch" else float(lam_c)
            lam_s, cut_s, box_s = TM._spread(lam, cut, box, mode, n)
            assert torch.equal(TM.mix_images(x, lam_s, cut_s, box_s), y), (mode, seed)
            assert torch.equal(TM.mix_targets(labels, lam_s, 10, 0.1), t), (mode, seed)

    def test_mixup_draws_match_timm(self):
        np.random.seed(0)
        mix = Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, prob=0.8, mode="elem", num_classes=10)
        lam_t, cut_t = mix._params_per_elem(8000)
        torch.manual_seed(0)
        ours = T.TimmMixup(0.8, 1.0, prob=0.8, mode="elem", num_classes=10, correct_lam=False)
        lam, cut, _ = ours.make_params(torch.zeros(8000, 3, 8, 8))
        applied = lam_t < 1
        assert _freq_ok(int((lam < 1).sum()), 8000, float(applied.mean()), 6)
        assert _ks_ok(lam[~cut & (lam < 1)].numpy(), lam_t[applied & ~cut_t])
        assert _ks_ok(lam[cut].numpy(), lam_t[applied & cut_t])
        # cutmix_minmax box sides against timm's rand_bbox_minmax
        yl, yu, xl, xu = TMX.rand_bbox_minmax((40, 50), (0.2, 0.8), count=4000)
        mm = T.TimmMixup(0.0, 1.0, cutmix_minmax=(0.2, 0.8), mode="elem", num_classes=10)
        _, cut, box = mm.make_params(torch.zeros(4000, 3, 40, 50))
        assert bool(cut.all())
        assert _ks_ok((box[:, 1] - box[:, 0]).numpy(), yu - yl)
        assert _ks_ok((box[:, 3] - box[:, 2]).numpy(), xu - xl)
        assert _ks_ok(box[:, 0].numpy(), yl)

    @settings(deadline=None, max_examples=25)
    @given(n=st.integers(0, 9), mode=st.sampled_from(["batch", "pair", "elem"]),
           prob=st.sampled_from([0.0, 0.5, 1.0]), minmax=st.booleans(),
           dtype=st.sampled_from([torch.uint8, torch.float32]), seed=st.integers(0, 1000))
    def test_mixup_properties(self, n, mode, prob, minmax, dtype, seed):
        """Shapes, dtype, targets summing to 1, prob=0 the identity with smoothed one-hot targets,
        no in-place change, seeds reproduce, scripted == eager; every pixel comes from the sample
        or its partner N - 1 - i (CutMix) or lies between them (MixUp)."""
        mix = T.TimmMixup(0.8, 1.0, cutmix_minmax=(0.2, 0.8) if minmax else None, prob=prob,
                          mode=mode, label_smoothing=0.1, num_classes=6)
        g = torch.Generator().manual_seed(seed)
        x = torch.randint(0, 256, (n, 3, 10, 12), generator=g, dtype=torch.uint8).to(dtype)
        labels = torch.randint(0, 6, (n,), generator=g)
        before = x.clone()
        torch.manual_seed(seed)
        y, t = mix(x, labels)
        assert torch.equal(x, before) and y.shape == x.shape and y.dtype == dtype
        assert t.shape == (n, 6) and torch.allclose(t.sum(1), torch.ones(n), atol=1e-5)
        torch.manual_seed(seed)
        ys, ts = torch.jit.script(mix)(x, labels)
        assert torch.equal(ys, y) and torch.equal(ts, t)
        if prob == 0.0:
            assert torch.equal(y, x)
            assert torch.equal(t, TM.mix_targets(labels, None, 6, 0.1))
        lo = torch.minimum(x, x.flip(0)).float() - 0.5
        hi = torch.maximum(x, x.flip(0)).float() + 0.5
        assert bool(((y.float() >= lo) & (y.float() <= hi)).all())

    @pytest.mark.parametrize("correct_lam", [True, False])
    def test_from_timm_mixup_keeps_correct_lam_and_it_sets_the_label_weight(self, correct_lam):
        """correct_lam=True: a CutMix label weight is 1 - box area / image area (timm's
        cutmix_bbox_and_lam); False: the drawn lambda, uniform (Beta(1, 1)) whatever the box."""
        mix = batchaug.from_timm(Mixup(mixup_alpha=0.0, cutmix_alpha=1.0, prob=1.0, mode="elem",
                                       correct_lam=correct_lam, num_classes=5))
        assert mix.correct_lam is correct_lam
        h, w = 24, 28
        torch.manual_seed(6)
        lam, cut, box = mix.make_params(torch.zeros(4000, 3, h, w))
        assert bool(cut[lam < 1].all())
        area = ((box[:, 1] - box[:, 0]) * (box[:, 3] - box[:, 2])).double()
        share = (1.0 - area / (h * w)).to(torch.float32).double()
        if correct_lam:
            assert torch.equal(lam[cut], share[cut])
        else:
            assert (lam[cut] != share[cut]).double().mean() > 0.5
            assert _ks_ok(lam.numpy(), np.random.default_rng(0).uniform(size=4000))

    def test_mixup_bad_arguments(self):
        with pytest.raises(ValueError, match="mixup_alpha or cutmix_alpha"):
            T.TimmMixup(0.0, 0.0)
        with pytest.raises(ValueError, match="mode"):
            T.TimmMixup(mode="half")
        with pytest.raises(ValueError, match="labels"):
            T.TimmMixup(num_classes=3)(torch.rand(4, 3, 8, 8), torch.rand(4))
        with pytest.raises(TypeError, match=r"cutmix_minmax must be a sequence \(min, max\)"):
            T.TimmMixup(cutmix_minmax=(0.1,))
        with pytest.raises(ValueError, match=r"cutmix_minmax must be \(min, max\) with min <="):
            T.TimmMixup(cutmix_minmax=(0.8, 0.2))
        with pytest.raises(ValueError, match=r"cutmix_minmax values must be in \[0, 1\]"):
            T.TimmMixup(cutmix_minmax=(0.2, 1.5))


class TestTimmRandomResizedCrop:
    """TimmRandomResizedCrop: the loader's crop stage per image, boxes by timm's law."""

    def test_timm_random_interpolation_crop_stage_is_the_module_per_image(self):
        """TimmRandomResizedCrop as the loader's crop stage: each image of a ragged batch gets, from
        its key, exactly what the module gives that image alone (box, interpolation, pixels); its
        masks the same box (nearest); in eval() the first interpolation's eval box."""
        crop = T.TimmRandomResizedCrop(24)
        stage = LoaderCrop(batchaug.Augment(crop))
        sizes = torch.tensor([[60, 50], [33, 70], [64, 64], [41, 29], [70, 45], [28, 28],
                              [24, 66], [70, 70], [52, 31], [47, 58]])
        canvas = torch.randint(0, 256, (10, 3, 70, 70), dtype=torch.uint8)
        masks = torch.randint(0, 5, (10, 1, 70, 70), dtype=torch.uint8)
        keys = batchaug.sample_keys(0, 1, torch.arange(10))
        out = stage(canvas, sizes, keys)
        x_m, m_out = stage.with_masks(canvas, masks, sizes, keys)
        assert torch.equal(x_m, out)
        branches = set()
        for i, (h, w) in enumerate(sizes.tolist()):
            img = canvas[i:i + 1, :, :h, :w]
            sub = batchaug._random.substream(keys[i:i + 1], 0)  # the stage's step 0
            assert torch.equal(out[i:i + 1], crop(img, sub)), i
            _, targets = crop.with_targets(img, {"masks": masks[i:i + 1, 0, :h, :w]}, sub)
            assert torch.equal(m_out[i, 0], targets["masks"][0]), i
            branches.add(int(crop.make_params(img, sub)))
        assert branches == {0, 1}  # both interpolations ran
        boxes = torch.tensor([[[3.0, 4.0, 20.0, 25.0], [0.0, 0.0, 28.0, 24.0]]]).repeat(10, 1, 1)
        valid = torch.ones(10, 2, dtype=torch.bool)
        x_b, b_out, v_out, _ = stage.with_boxes(canvas, boxes, valid, sizes, keys)
        assert torch.equal(x_b, out)
        for i, (h, w) in enumerate(sizes.tolist()):
            sub = batchaug._random.substream(keys[i:i + 1], 0)
            inside = torch.minimum(boxes[i:i + 1], torch.tensor([w, h, w, h], dtype=torch.float32))
            _, targets = crop.with_targets(canvas[i:i + 1, :, :h, :w], {"boxes": inside}, sub)
            assert torch.equal(v_out[i], targets["box_valid"][0]), i
            assert torch.allclose(b_out[i][v_out[i]], targets["boxes"][0][v_out[i]], atol=1e-4), i
        stage.eval()
        x_eval = stage(canvas, sizes)
        for i, (h, w) in enumerate(sizes.tolist()):
            ref = batchaug.RandomResizedCrop(24, interpolation="bilinear").eval()(
                canvas[i:i + 1, :, :h, :w])
            assert torch.equal(x_eval[i:i + 1], ref), i

    def test_resized_crop_boxes_follow_timms_law(self):
        """The crop from_timm makes draws its boxes as timm's RandomResizedCropAndInterpolation."""
        from timm.data.transforms import RandomResizedCropAndInterpolation

        random.seed(8)
        pil = Image.new("RGB", (60, 44))
        theirs = np.array([RandomResizedCropAndInterpolation.get_params(
            pil, (0.08, 1.0), (3 / 4, 4 / 3)) for _ in range(4000)])  # (i, j, h, w)
        mig, _ = _convert(create_transform(24, is_training=True, interpolation="random"))
        crop = mig.crop[0].first
        torch.manual_seed(8)
        ours = torch.stack(crop.make_params(torch.zeros(4000, 3, 44, 60)), 1).numpy()
        for k, what in enumerate(("top", "left", "height", "width")):
            assert _ks_ok(ours[:, k], theirs[:, k]), what
