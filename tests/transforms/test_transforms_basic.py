"""What every transform shares: argument errors at construction, input errors at call time
(NHWC shapes, channel counts), and reprs that read like the constructor call. A transform's own
behaviour is in its class (test_geometry.py, test_warps.py, test_color.py, test_misc.py, ...)."""
import pytest
import torch

import batchaug.transforms as T


BAD_ARGS = [
    (lambda: T.RandomHorizontalFlip(p=1.5), ValueError, r"p must be in \[0, 1\]"),
    (lambda: T.RandomVerticalFlip(p=-0.1), ValueError, r"p must be in \[0, 1\]"),
    (lambda: T.RandomHorizontalFlip(p="a"), TypeError, r"p must be a number in \[0, 1\]"),
    (lambda: T.RandomCrop(0), ValueError, r"size must be positive"),
    (lambda: T.RandomCrop((32, -1)), ValueError, r"size must be positive"),
    (lambda: T.RandomCrop(32, padding=-1), ValueError, r"padding must be non-negative"),
    (lambda: T.RandomCrop(32, padding=[1, 2, 3]), ValueError,
         r"padding must have 1, 2 or 4 elements \(left, top, right,"),
    (lambda: T.RandomCrop(32, padding=1.5), TypeError,
         r"padding must be an int or a sequence of 1, 2 or 4 ints"),
    (lambda: T.RandomCrop(32, padding_mode="wrap"), ValueError,
         r"padding_mode must be one of \['constant', 'edge',"),
    (lambda: T.RandomCrop(32, fill="x"), TypeError,
         r"fill must be a number or a non-empty sequence of numbers"),
    (lambda: T.RandomCrop(32, pad_if_needed=1), TypeError, r"pad_if_needed must be a bool"),
    (lambda: T.Pad(None), TypeError, r"padding must be an int or a sequence of 1, 2 or 4 ints"),
    (lambda: T.Pad([1, 2, 3]), ValueError, r"padding must have 1, 2 or 4 elements"),
    (lambda: T.Pad(-1), ValueError, r"padding must be non-negative"),
    (lambda: T.Pad(2, padding_mode="wrap"), ValueError, r"padding_mode must be one of"),
    (lambda: T.CenterCrop(0), ValueError, r"size must be positive"),
    (lambda: T.CenterCrop("big"), TypeError,
         r"size must be an int or a sequence of 1 or 2 ints"),
    (lambda: T.Normalize([0.5, 0.5], [0.2]), ValueError,
         r"mean and std must have the same length"),
    (lambda: T.Normalize([0.5], [0.0]), ValueError,
         r"std must not contain zeros \(division by zero in float32\)"),
    (lambda: T.Normalize([], []), TypeError,
         r"mean must be a non-empty sequence of numbers"),
    (lambda: T.Normalize([0.5], [0.2], dtype=torch.uint8), ValueError,
         r"dtype must be a floating dtype \[torch\.float16,"),
    (lambda: T.Normalize([0.5], [0.2], dtype="float"), TypeError,
         r"dtype must be a torch\.dtype"),
    (lambda: T.ToDtype(torch.int64), ValueError,
         r"dtype must be torch\.uint8 or a floating dtype"),
    (lambda: T.ToDtype(torch.float32, scale="yes"), TypeError, r"scale must be a bool"),
    # non-finite and absurd values (issue 7 item 8)
    (lambda: T.RandomHorizontalFlip(p=float("nan")), ValueError, r"p must be in \[0, 1\]"),
    (lambda: T.RandomHorizontalFlip(p=10**400), ValueError, r"p must be finite"),
    (lambda: T.RandomVerticalFlip(p=True), TypeError, r"p must be a number in \[0, 1\]"),
    (lambda: T.RandomCrop(32, fill=float("nan")), ValueError, r"fill must be finite"),
    (lambda: T.RandomCrop(32, fill=[0, float("-inf"), 0]), ValueError, r"fill must be finite"),
    (lambda: T.RandomCrop(32, fill=[]), TypeError,
         r"fill must be a number or a non-empty sequence of numbers"),
    (lambda: T.RandomCrop(32, padding=10**9), ValueError,
         r"padding must be at most 65536 pixels"),
    (lambda: T.RandomCrop(10**9), ValueError,
         r"size must be at most 65536 pixels per side"),
    (lambda: T.CenterCrop((8, 10**9)), ValueError,
         r"size must be at most 65536 pixels per side"),
    (lambda: T.Normalize([float("nan")], [0.2]), ValueError,
         r"mean must contain finite numbers"),
    (lambda: T.Normalize([0.5], [float("inf")]), ValueError,
         r"std must contain finite numbers"),
    (lambda: T.Normalize([1e300], [1e300]), ValueError,
         r"mean must fit in float32 \(\|value\| <= 3\.403e\+38\)"),
    (lambda: T.Normalize([0.5], [1e-50]), ValueError,
         r"std must not contain zeros \(division by zero in float32\)"),  # 0 in float32
    (lambda: T.Normalize([0.5], [5e-39]), ValueError,
         r"mean/std too large a ratio: \(\|mean\| \+ 1\) / \|std\| ="),  # 3e38: near overflow
    (lambda: T.Normalize([0.5], [1e-5], dtype=torch.float16), ValueError,
         r"mean/std too large a ratio: \(\|mean\| \+ 1\) / \|std\| ="),
    (lambda: T.Normalize([0.5], [True]), TypeError,
         r"std must be a non-empty sequence of numbers"),
]


@pytest.mark.parametrize("make,exc,word", BAD_ARGS, ids=[str(i) for i in range(len(BAD_ARGS))])
def test_bad_arguments_raise_at_construction(make, exc, word):
    with pytest.raises(exc, match=word):
        make()


ALL = [
    lambda: T.RandomHorizontalFlip(), lambda: T.RandomVerticalFlip(),
    lambda: T.RandomCrop(4, padding=1), lambda: T.CenterCrop(4), lambda: T.Pad(2),
    lambda: T.Normalize([0.5], [0.5]), lambda: T.ToDtype(torch.float32, scale=True),
]


@pytest.mark.parametrize("make", ALL, ids=range(len(ALL)))
def test_call_time_errors(make):
    m = make()
    with pytest.raises(ValueError, match="N, C, H, W"):
        m(torch.zeros(3, 8, 8))
    for dtype in (torch.int64, torch.bool, torch.int32):
        with pytest.raises(TypeError, match="uint8 or floating"):
            m(torch.zeros(2, 3, 8, 8, dtype=dtype))
    name = type(m).__name__
    for shape in ((2, 3, 0, 8), (2, 3, 8, 0), (0, 3, 0, 0), (2, 0, 8, 8)):  # empty images
        for train in (True, False):
            with pytest.raises(ValueError, match=f"{name}: images must have C, H and W > 0"):
                m.train(train)(torch.zeros(shape, dtype=torch.uint8))


ALL_NAMED = ALL + [lambda: T.RandomRotation(10), lambda: T.RandomResizedCrop(8),
                   lambda: T.Resize(8)]


@pytest.mark.parametrize("make", ALL_NAMED, ids=range(len(ALL_NAMED)))
def test_channels_last_shape_nhwc_is_rejected_with_the_fix(make):
    """An (N, H, W, C) batch must not be read as (N, C, H, W): a flip would swap RGB to BGR."""
    m = make()
    for shape in ((4, 32, 32, 3), (2, 224, 200, 1), (2, 9, 7, 4)):
        for train in (True, False):
            with pytest.raises(ValueError, match=rf"{type(m).__name__}: .*\(N, H, W, C\).*"
                               r"x\.permute\(0, 3, 1, 2\)"):
                m.train(train)(torch.zeros(shape, dtype=torch.uint8))


@pytest.mark.parametrize("shape", [
    (2, 3, 8, 3), (2, 1, 8, 4), (2, 4, 5, 1), (2, 3, 3, 3), (2, 2, 4, 3), (2, 8, 4, 4),
    (2, 5, 16, 16), (0, 3, 8, 3),
])
def test_small_nchw_images_are_not_mistaken_for_nhwc(shape):
    x = torch.randint(0, 256, shape, dtype=torch.uint8)
    y = T.RandomHorizontalFlip(1.0)(x)
    assert torch.equal(y, x.flip(-1))


def test_channel_count_mismatch():
    with pytest.raises(ValueError, match="3 values but the input has 1 channels"):
        T.Normalize([0.5] * 3, [0.2] * 3)(torch.zeros(2, 1, 4, 4))
    with pytest.raises(ValueError, match="RandomCrop: fill has 2 values"):
        T.RandomCrop(4, padding=1, fill=[1, 2])(torch.zeros(2, 3, 4, 4))


def test_repr_shows_arguments():
    r = repr(T.RandomCrop(32, padding=4, padding_mode="reflect"))
    assert "size=(32, 32)" in r and "padding=[4, 4, 4, 4]" in r and "'reflect'" in r
    assert "p=0.3" in repr(T.RandomHorizontalFlip(0.3))
    assert "mean=[0.5]" in repr(T.Normalize([0.5], [0.25]))
    assert "scale=True" in repr(T.ToDtype(torch.float16, scale=True))


def test_generic_repr_reads_like_the_constructor_call():
    # the base's extra_repr: __init__'s arguments as stored, in the signature's order
    assert repr(T.RandomPosterize(3, p=0.2)) == "RandomPosterize(bits=3, p=0.2)"
    assert repr(T.Grayscale(3)) == "Grayscale(num_output_channels=3)"
    assert repr(T.ToDtype(torch.float16, True)) == "ToDtype(dtype=torch.float16, scale=True)"
    assert repr(T.Pad(2)) == "Pad(padding=[2, 2, 2, 2], fill=[0.0], padding_mode='constant')"
    assert repr(T.Pad(2, mask_fill=3)).endswith(", mask_fill=3)")  # shown only when set
    r = repr(T.RandomApply([T.RandomInvert()], p=0.25, group_by_branch=False))
    assert r.startswith("RandomApply(\n  p=0.25, group_by_branch=False\n")  # stored as .group

    class Shift(T.Transform):  # a user's transform gets the same for free
        def __init__(self, pixels: int, p: float = 0.5, name: str = "s") -> None:
            super().__init__()
            self.pixels, self.p, self.name = pixels, p, name
            self.table = torch.zeros(3)  # not a plain value: left out

    assert repr(Shift(4)) == "Shift(pixels=4, p=0.5, name='s')"


@pytest.mark.parametrize("text", [
    "RandomRotation((-10, 20), interpolation='bilinear', fill=[1, 2, 3], mask_fill=255)",
    "RandomAffine(5, translate=(0.1, 0.2), scale=(0.9, 1.1), shear=5, fill=7)",
    "RandomPerspective(0.3, p=0.7, fill=[1, 2, 3])",
    "RandAugment(num_ops=3, magnitude=5, fill=4)", "AutoAugment('svhn')",
    "TrivialAugmentWide(num_magnitude_bins=21, mask_fill=1)",
    "AugMix(severity=2, chain_depth=2, all_ops=False)",
    "TimmRandAugment(magnitude=5, ops=['Rotate', 'Invert'], fill=[1, 2, 3])",
    "TimmAutoAugment('v0r', magnitude_std=0.5)", "TimmAugMix(width=2, depth=2)",
    "TimmRandomErasing(0.25, max_area=0.5, mode='pixel', max_count=3)",
])
def test_repr_builds_the_same_module(text):
    """The generic repr is a constructor call: evaluated, it gives a module of the same repr."""
    import batchaug
    names = dict(vars(batchaug), inf=float("inf"))  # TimmAugMix's magnitude_std=inf
    m = eval(text, names)
    assert repr(eval(repr(m), names)) == repr(m)
