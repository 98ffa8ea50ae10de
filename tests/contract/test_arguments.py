"""Argument fuzzing: every argument of every transform, from one table (``FUZZ``).

The property, for any value of any argument (nan, +-inf, huge and tiny floats, ints beyond
float range, bools, strings, None, complex, empty and wrong-length sequences):

* either construction raises ``ValueError``/``TypeError`` whose message names the argument,
* or the module runs on a small uint8 and float32 batch, in train and eval, and gives a finite
  output of the expected shape and dtype. A ``ValueError`` at call time is also accepted when
  its message starts with the transform's name: some conditions depend on the input (a crop
  larger than the padded image, a fill that the input dtype cannot hold, a channel count).

Any other exception (OverflowError, ZeroDivisionError, RuntimeError, a message that does not
say which argument) or a nan/inf output fails. A new transform gets all of this from one line in
``FUZZ``: its required arguments and, per argument, a strategy of plausible values (the wild
values are added to every argument automatically).

Wild integers are only ever tiny or beyond the library's bounds (``MAX_SIZE`` and co.): a size
or padding of, say, 30000 is valid and would allocate gigabytes on the test batch, which says
nothing about argument checking.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Tuple

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

import batchaug.functional as BF
import batchaug.transforms as T

N, C, H, W = 2, 3, 12, 16

# ----------------------------------------------------------------------------- wild values

_SPECIAL_NUMBERS = [
    math.nan, math.inf, -math.inf, 1e308, -1e308, 3.5e38, -3.5e38, 1e39, 5e-324, 1e-45, 1e-39,
    -0.0, 0, -1, 2**16 + 1, 2**31, 2**63, 10**30, 10**400, -10**400,
]
WILD_NUMBERS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(_SPECIAL_NUMBERS),
    st.integers(-5, 5),
)
WILD_OTHER = st.sampled_from(
    [True, False, None, "1", "nearest", "", 1j, b"x", {}, torch.tensor(0.5),
     torch.float32, torch.int64, torch.bool, torch.complex64]
)
WILD = st.one_of(
    WILD_NUMBERS,
    WILD_OTHER,
    st.lists(st.one_of(WILD_NUMBERS, WILD_OTHER), max_size=5),
    st.tuples(WILD_NUMBERS, WILD_NUMBERS),
)

# ----------------------------------------------------------------------------- plausible values

P = st.floats(0, 1)
SIZE = st.one_of(st.integers(1, 20), st.tuples(st.integers(1, 20), st.integers(1, 20)),
                 st.lists(st.integers(1, 20), min_size=1, max_size=2))
PADDING = st.one_of(st.none(), st.integers(0, 4), *(
    st.lists(st.integers(0, 4), min_size=k, max_size=k) for k in (1, 2, 4)))
FILL = st.one_of(st.integers(0, 255), st.floats(0, 255), st.lists(st.floats(0, 255), min_size=3,
                                                                  max_size=3))
# one value (any channel count; mean and std lengths must agree, so no 3-lists here)
STAT = st.one_of(st.floats(-2, 2), st.lists(st.floats(-2, 2), min_size=1, max_size=1))
STD = st.one_of(st.floats(0.05, 2), st.lists(st.floats(0.05, 2), min_size=1, max_size=1))
FLOAT_DTYPE = st.sampled_from([torch.float16, torch.bfloat16, torch.float32, torch.float64])
TO_DTYPE = st.sampled_from([torch.uint8, torch.float16, torch.bfloat16, torch.float32,
                            torch.float64])
INTERP = st.sampled_from(["nearest", "bilinear"])
RESIZE_INTERP = st.sampled_from(["nearest", "bilinear", "bicubic"])
BOOL = st.booleans()


def _sorted_pair(lo: float, hi: float, **kw: Any) -> st.SearchStrategy:
    pair = st.tuples(st.floats(lo, hi, **kw), st.floats(lo, hi, **kw))
    return pair.map(lambda t: tuple(sorted(t)))


# ----------------------------------------------------------------------------- the table

def _same_hw(m: nn.Module, train: bool, h: int, w: int) -> Tuple[int, int]:
    return h, w


def _crop_hw(m: nn.Module, train: bool, h: int, w: int) -> Tuple[int, int]:
    return (m.height, m.width) if train else (h, w)


def _rrc_hw(m: nn.Module, train: bool, h: int, w: int) -> Tuple[int, int]:
    if not train and m.eval_crop_pct is None:
        return h, w
    return m.size[0], m.size[1]


def _resize_hw(m: nn.Module, train: bool, h: int, w: int) -> Tuple[int, int]:
    oh, ow = BF.resized_output_size(h, w, m.size, m.max_size)
    return oh, ow


def _normalize_dtype(m: nn.Module, in_dtype: torch.dtype) -> torch.dtype:
    out = getattr(m, "out_dtype", None)
    return out() if callable(out) else m.dtype


@dataclass(frozen=True)
class Fuzz:
    """One transform under argument fuzzing.

    build:     the class (called with keyword arguments)
    required:  valid values for the arguments without defaults
    args:      argument name -> strategy of plausible (valid) values; each gets WILD values
    out_hw:    (module, training, H, W) -> output (H, W); default: the input's
    out_dtype: (module, input dtype) -> output dtype; default: the input's
    out_c:     (module, training, C) -> output channel count; default: the input's
    """

    build: Callable[..., nn.Module]
    required: Dict[str, Any]
    args: Dict[str, st.SearchStrategy]
    out_hw: Callable[[nn.Module, bool, int, int], Tuple[int, int]] = _same_hw
    out_dtype: Callable[[nn.Module, torch.dtype], torch.dtype] = field(
        default=lambda m, dtype: dtype
    )
    out_c: Callable[[nn.Module, bool, int], int] = field(default=lambda m, train, c: c)
    # how to call it: (module, batch) -> images (the label mixers take labels too)
    call: Callable[[nn.Module, torch.Tensor], torch.Tensor] = field(default=lambda m, x: m(x))

    @property
    def id(self) -> str:
        return self.build.__name__


def _mix_images(m: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """A label mixer on ``x`` with class labels; checks its targets, returns its images."""
    labels = torch.arange(x.shape[0]) % m.num_classes
    images, targets = m(x, labels)
    assert targets.shape == (x.shape[0], m.num_classes) and torch.isfinite(targets).all()
    assert torch.allclose(targets.sum(1), torch.ones(x.shape[0]), atol=1e-5), targets
    return images


FUZZ = [
    Fuzz(T.RandomHorizontalFlip, {}, {"p": P}),
    Fuzz(T.RandomVerticalFlip, {}, {"p": P}),
    Fuzz(T.RandomCrop, {"size": 8}, {
        "size": SIZE, "padding": PADDING, "pad_if_needed": BOOL, "fill": FILL,
        "padding_mode": st.sampled_from(["constant", "edge", "reflect", "symmetric"]),
    }, out_hw=_crop_hw),
    Fuzz(T.CenterCrop, {"size": 8}, {"size": SIZE},
         out_hw=lambda m, train, h, w: (m.height, m.width)),
    Fuzz(T.Pad, {"padding": 2}, {
        "padding": PADDING.filter(lambda p: p is not None), "fill": FILL,
        "padding_mode": st.sampled_from(["constant", "edge", "reflect", "symmetric"]),
    }, out_hw=lambda m, train, h, w: (h + m.padding[1] + m.padding[3],
                                      w + m.padding[0] + m.padding[2])),
    Fuzz(T.Normalize, {"mean": [0.5], "std": [0.25]},
         {"mean": STAT, "std": STD, "dtype": st.one_of(st.none(), FLOAT_DTYPE)},
         out_dtype=_normalize_dtype),
    Fuzz(T.ToDtype, {"dtype": torch.float32}, {"dtype": TO_DTYPE, "scale": BOOL},
         out_dtype=lambda m, dtype: m.dtype),
    Fuzz(T.RandomRotation, {"degrees": 30}, {
        "degrees": st.one_of(st.floats(0, 720), _sorted_pair(-720, 720)),
        "interpolation": INTERP,
        "center": st.one_of(st.none(), st.tuples(st.floats(-20, 40), st.floats(-20, 40))),
        "fill": FILL, "expand": st.just(False),
    }),
    Fuzz(T.RandomAffine, {"degrees": 30}, {
        "degrees": st.one_of(st.floats(0, 720), _sorted_pair(-720, 720)),
        "translate": st.one_of(st.none(), st.tuples(st.floats(0, 1), st.floats(0, 1))),
        "scale": st.one_of(st.none(), _sorted_pair(0.01, 100.0)),
        "shear": st.one_of(st.none(), st.floats(0, 89), _sorted_pair(-89, 89),
                           st.tuples(_sorted_pair(-89, 89), _sorted_pair(-89, 89)).map(
                               lambda t: list(t[0] + t[1]))),
        "interpolation": INTERP,
        "center": st.one_of(st.none(), st.tuples(st.floats(-20, 40), st.floats(-20, 40))),
        "fill": FILL,
    }),
    Fuzz(T.RandomPerspective, {}, {
        "distortion_scale": st.floats(0, 1), "p": P, "interpolation": INTERP, "fill": FILL,
    }),
    Fuzz(T.RandomResizedCrop, {"size": 8}, {
        "size": SIZE, "scale": _sorted_pair(0.01, 2.0), "ratio": _sorted_pair(0.1, 10.0),
        "interpolation": RESIZE_INTERP, "antialias": BOOL,
        "eval_crop_pct": st.one_of(st.none(), st.floats(0.01, 1.0)),
    }, out_hw=_rrc_hw),
    Fuzz(T.Resize, {"size": 8}, {"size": SIZE, "interpolation": RESIZE_INTERP, "antialias": BOOL},
         out_hw=_resize_hw),
    # max_size: only with one int (or None) for size, and above it
    Fuzz(T.Resize, {"size": 8, "max_size": 30}, {
        "size": st.one_of(st.none(), st.integers(1, 20)), "max_size": st.integers(21, 40),
        "interpolation": RESIZE_INTERP, "antialias": BOOL}, out_hw=_resize_hw),
    # --- colour, blur, erasing, containers (issue 9) ---
    Fuzz(T.ColorJitter, {}, {
        "brightness": st.one_of(st.floats(0, 3), _sorted_pair(0, 3)),
        "contrast": st.one_of(st.floats(0, 3), _sorted_pair(0, 3)),
        "saturation": st.one_of(st.floats(0, 3), _sorted_pair(0, 3)),
        "hue": st.one_of(st.floats(0, 0.5), _sorted_pair(-0.5, 0.5)),
    }),
    Fuzz(T.Grayscale, {}, {"num_output_channels": st.sampled_from([1, 3])},
         out_c=lambda m, train, c: m.num_output_channels),
    Fuzz(T.RandomGrayscale, {}, {"p": P}),
    Fuzz(T.RandomInvert, {}, {"p": P}),
    Fuzz(T.RandomPosterize, {"bits": 4}, {"bits": st.integers(0, 8), "p": P}),
    Fuzz(T.RandomSolarize, {"threshold": 0.5}, {"threshold": st.floats(0, 255), "p": P}),
    Fuzz(T.RandomAdjustSharpness, {"sharpness_factor": 2.0},
         {"sharpness_factor": st.floats(0, 10), "p": P}),
    Fuzz(T.RandomAutocontrast, {}, {"p": P}),
    Fuzz(T.RandomEqualize, {}, {"p": P}),
    Fuzz(T.GaussianBlur, {"kernel_size": 3}, {
        "kernel_size": st.one_of(st.sampled_from([1, 3, 5, 9]),
                                 st.tuples(st.sampled_from([1, 3, 7]), st.sampled_from([1, 5]))),
        "sigma": st.one_of(st.floats(0.01, 10), _sorted_pair(0.01, 10)),
    }),
    Fuzz(T.RandomErasing, {}, {
        "p": P, "scale": _sorted_pair(0, 1), "ratio": _sorted_pair(0.1, 10),
        "value": st.one_of(FILL, st.just("random")),
    }),
    # --- automatic augmentation policies (issue 10) ---
    Fuzz(T.TrivialAugmentWide, {}, {
        "num_magnitude_bins": st.integers(2, 64), "interpolation": INTERP,
        "fill": st.one_of(st.none(), FILL), "group_by_branch": BOOL,
    }),
    Fuzz(T.RandAugment, {}, {
        "num_ops": st.integers(0, 3), "magnitude": st.integers(0, 9),
        "num_magnitude_bins": st.integers(10, 40), "interpolation": INTERP,
        "fill": st.one_of(st.none(), FILL), "group_by_branch": BOOL,
    }),
    Fuzz(T.AutoAugment, {}, {
        "policy": st.sampled_from(["imagenet", "cifar10", "svhn"]), "interpolation": INTERP,
        "fill": st.one_of(st.none(), FILL), "group_by_branch": BOOL,
    }),
    Fuzz(T.AugMix, {}, {
        "severity": st.integers(1, 10), "mixture_width": st.integers(1, 4),
        "chain_depth": st.integers(-2, 3), "alpha": st.floats(0.01, 10),
        "all_ops": BOOL, "interpolation": INTERP, "fill": st.one_of(st.none(), FILL),
        "group_by_branch": BOOL,
    }),
    # --- label mixers (issue 10): (images, labels) -> (images, targets) ---
    Fuzz(T.MixUp, {"num_classes": 10}, {
        "num_classes": st.integers(1, 1000), "alpha": st.floats(0.05, 1e4), "p": P,
        "per_sample": BOOL, "label_smoothing": st.floats(0, 1)}, call=_mix_images),
    Fuzz(T.CutMix, {"num_classes": 10}, {
        "num_classes": st.integers(1, 1000), "alpha": st.floats(0.05, 1e4), "p": P,
        "per_sample": BOOL, "label_smoothing": st.floats(0, 1)}, call=_mix_images),
    Fuzz(T.MixUpOrCutMix, {"num_classes": 10}, {
        "num_classes": st.integers(1, 1000), "mixup_alpha": st.floats(0.05, 1e4),
        "cutmix_alpha": st.floats(0.05, 1e4), "switch_prob": P, "p": P, "per_sample": BOOL,
        "label_smoothing": st.floats(0, 1)}, call=_mix_images),
    # --- timm's semantics (from_timm) ---
    Fuzz(T.TimmRandAugment, {}, {
        "magnitude": st.floats(0, 30), "num_layers": st.integers(0, 3), "prob": P,
        "magnitude_std": st.one_of(st.floats(0, 5), st.just(math.inf)),
        "magnitude_max": st.one_of(st.none(), st.floats(0, 20)),
        "ops": st.sampled_from([list(T._timm.RAND_OPS), ["Rotate", "SolarizeAdd"]]),
        "translate_const": st.floats(0, 300), "translate_pct": st.floats(0, 1),
        "interpolation": INTERP, "fill": FILL, "group_by_branch": BOOL,
    }),
    Fuzz(T.TimmRandAugment, {"ops": ["Rotate", "Invert", "Equalize"], "num_layers": 2}, {
        "choice_weights": st.lists(st.floats(0.5, 10), min_size=3, max_size=3)}),
    Fuzz(T.TimmAutoAugment, {}, {
        "policy": st.sampled_from(["v0", "v0r", "original", "originalr"]),
        "magnitude_std": st.floats(0, 5), "magnitude_max": st.one_of(st.none(), st.floats(0, 20)),
        "translate_const": st.floats(0, 300), "translate_pct": st.floats(0, 1),
        "interpolation": INTERP, "fill": FILL, "group_by_branch": BOOL,
    }),
    Fuzz(T.TimmAugMix, {}, {
        "magnitude": st.floats(0, 10), "width": st.integers(1, 3), "depth": st.integers(-2, 3),
        "alpha": st.floats(0.01, 10), "magnitude_std": st.one_of(st.floats(0, 5),
                                                                 st.just(math.inf)),
        "translate_pct": st.floats(0, 1), "interpolation": INTERP, "fill": FILL,
        "group_by_branch": BOOL,
    }),
    Fuzz(T.TimmRandomErasing, {}, {
        "probability": P, "min_area": st.floats(0, 0.1), "max_area": st.floats(0.1, 1),
        "min_aspect": st.floats(0.1, 1), "max_aspect": st.one_of(st.none(), st.floats(1, 10)),
        "mode": st.sampled_from(["const", "rand", "pixel", "PIXEL"]),
        "min_count": st.integers(1, 2), "max_count": st.one_of(st.none(), st.integers(2, 4)),
    }),
    Fuzz(T.TimmRandomResizedCrop, {"size": 8}, {
        "size": SIZE, "scale": _sorted_pair(0.01, 2.0), "ratio": _sorted_pair(0.1, 10.0),
        "interpolations": st.sampled_from([["bilinear", "bicubic"], ["nearest"]]),
        "eval_crop_pct": st.one_of(st.none(), st.floats(0.01, 1.0)),
    }, out_hw=lambda m, train, h, w: _rrc_hw(m.first, train, h, w)),
    Fuzz(T.TimmMixup, {"num_classes": 10}, {
        "mixup_alpha": st.floats(0.05, 100), "cutmix_alpha": st.floats(0.05, 100),
        "cutmix_minmax": st.one_of(st.none(), _sorted_pair(0.0, 1.0)), "prob": P,
        "switch_prob": P, "mode": st.sampled_from(["batch", "pair", "elem"]),
        "correct_lam": BOOL, "label_smoothing": st.floats(0, 1),
        "num_classes": st.integers(1, 1000)}, call=_mix_images),
    Fuzz(T.RandomApply, {"transforms": [T.RandomInvert()]}, {
        "transforms": st.sampled_from([[T.RandomInvert()], T.ColorJitter(0.4),
                                       [T.RandomHorizontalFlip(), T.RandomGrayscale(0.5)]]),
        "p": P, "group_by_branch": BOOL,
    }),
    Fuzz(T.RandomChoice, {"transforms": [T.RandomInvert(), T.RandomVerticalFlip()]}, {
        "p": st.one_of(st.none(), st.lists(st.floats(0.01, 10), min_size=2, max_size=2)),
        "group_by_branch": BOOL,
    }),
    Fuzz(T.RandomOrder, {"transforms": [T.RandomInvert(), T.RandomHorizontalFlip()]}, {
        "transforms": st.sampled_from([[T.RandomInvert()], [T.ColorJitter(0.4), T.RandomInvert()]]),
        "group_by_branch": BOOL,
    }),
]


# ----------------------------------------------------------------------------- the property

def _batch(dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (N, C, H, W), generator=g, dtype=torch.uint8)
    return x if dtype == torch.uint8 else x.to(dtype) / 255


def check_arguments(case: Fuzz, kwargs: Dict[str, Any], fuzzed: str) -> None:
    """The property above for one set of keyword arguments; ``fuzzed`` is the wild one."""
    name = case.id
    try:
        m = case.build(**kwargs)
    except (ValueError, TypeError) as e:
        assert fuzzed in str(e), f"{name}({kwargs!r}): error does not name {fuzzed!r}: {e}"
        return
    for dtype in (torch.uint8, torch.float32):
        x = _batch(dtype)
        for train in (True, False):
            m.train(train)
            try:
                y = case.call(m, x)
            except ValueError as e:
                assert str(e).startswith(f"{name}:"), \
                    f"{name}({kwargs!r}) on {dtype}: call-time error does not name it: {e}"
                continue
            what = f"{name}({kwargs!r}) on {dtype}, train={train}"
            assert tuple(y.shape) == (N, case.out_c(m, train, C)) + tuple(
                case.out_hw(m, train, H, W)), \
                f"{what}: shape {tuple(y.shape)}"
            assert y.dtype == case.out_dtype(m, dtype), f"{what}: dtype {y.dtype}"
            if y.is_floating_point():
                assert torch.isfinite(y).all(), f"{what}: non-finite output"
            assert torch.equal(x, _batch(dtype)), f"{what}: input modified"


@pytest.mark.parametrize("case", FUZZ, ids=lambda c: c.id)
@given(data=st.data())
def test_argument_fuzzing(case, data):
    fuzzed = data.draw(st.sampled_from(sorted(case.args)), label="fuzzed argument")
    kwargs = dict(case.required)
    for arg, plausible in case.args.items():
        if arg == fuzzed:
            kwargs[arg] = data.draw(st.one_of(WILD, plausible), label=arg)
        elif data.draw(st.booleans(), label=f"set {arg}"):
            kwargs[arg] = data.draw(plausible, label=arg)
    check_arguments(case, kwargs, fuzzed)


@pytest.mark.parametrize("case", FUZZ, ids=lambda c: c.id)
@pytest.mark.parametrize("value", _SPECIAL_NUMBERS + [True, None, "1", [], (), [math.nan]],
                         ids=repr)
def test_every_argument_against_every_special_value(case, value):
    """The deterministic core of the fuzzing: each special value in each argument."""
    for arg in case.args:
        check_arguments(case, {**case.required, arg: value}, arg)


def test_every_transform_is_fuzzed():
    """A new transform in batchaug.transforms must get a line in FUZZ."""
    fuzzed = {c.id for c in FUZZ}
    exported = {n for n in T.__all__ if isinstance(getattr(T, n), type)
                and issubclass(getattr(T, n), nn.Module)}
    assert exported <= fuzzed, f"not fuzzed: {sorted(exported - fuzzed)}"


def test_randaugment_magnitude_bound_names_num_magnitude_bins():
    # the default magnitude 9 is out of range for 2 bins: the error must say which argument sets the bound
    with pytest.raises(ValueError, match=r"magnitude must be in \[0, num_magnitude_bins - 1 = 1\], got 9"):
        T.RandAugment(num_magnitude_bins=2)
