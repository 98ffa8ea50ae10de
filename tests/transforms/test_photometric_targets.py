"""``with_targets`` of the photometric transforms (colour ops, blur, erasing, Normalize,
ToDtype): the images equal ``forward``'s with the same seed or keys, the targets come back
unchanged (valid flags filled in), scripted == eager, an unknown key is a ValueError, and
``torch.export`` with a dynamic batch runs it at batch 1, 7 and 64."""
import inspect

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn
from torch.export import Dim, export

import batchaug._random as R
from batchaug.transforms import _base, _color, _misc
import batchaug.transforms as T

H, W, M, K = 12, 10, 3, 4

CASES = {
    "ColorJitter": lambda: T.ColorJitter(0.4, 0.4, 0.4, 0.1),
    "Grayscale": lambda: T.Grayscale(3),
    "RandomGrayscale": lambda: T.RandomGrayscale(0.5),
    "RandomInvert": lambda: T.RandomInvert(0.5),
    "RandomPosterize": lambda: T.RandomPosterize(3, p=0.5),
    "RandomSolarize": lambda: T.RandomSolarize(128, p=0.5),
    "RandomAdjustSharpness": lambda: T.RandomAdjustSharpness(3.0, p=0.5),
    "RandomAutocontrast": lambda: T.RandomAutocontrast(0.5),
    "RandomEqualize": lambda: T.RandomEqualize(0.5),
    "GaussianBlur": lambda: T.GaussianBlur(5, sigma=(0.1, 2.0)),
    "RandomErasing": lambda: T.RandomErasing(0.7, value="random"),
    "Normalize": lambda: T.Normalize([0.5, 0.4, 0.3], [0.2, 0.25, 0.3]),
    "ToDtype": lambda: T.ToDtype(torch.float32, scale=True),
}


def test_every_photometric_transform_is_covered():
    public = {name for mod in (_color, _misc) for name, cls in vars(mod).items()
              if inspect.isclass(cls) and issubclass(cls, _base.Transform)
              and not name.startswith("_") and cls.__module__ == mod.__name__}
    assert public == set(CASES)


def _images(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, 3, H, W), generator=g, dtype=torch.uint8)


def _targets(n: int, seed: int):
    g = torch.Generator().manual_seed(seed + 1)
    xy = torch.rand(n, M, 2, 2, generator=g) * torch.tensor([W, H], dtype=torch.float32)
    return {
        "masks": torch.randint(0, 5, (n, 2, H, W), generator=g, dtype=torch.uint8),
        "boxes": torch.cat((xy.amin(dim=2), xy.amax(dim=2)), dim=2),
        "box_valid": torch.rand(n, M, generator=g) < 0.7,
        "keypoints": torch.rand(n, K, 2, generator=g) * torch.tensor([W - 1.0, H - 1.0]),
        "labels": torch.randint(0, 10, (n,), generator=g),
        "box_labels": torch.randint(0, 10, (n, M), generator=g),
    }


def _check_unchanged(got, given_):
    assert set(got) == set(given_) | {"keypoint_valid"}
    for key, t in given_.items():
        assert got[key].dtype == t.dtype and torch.equal(got[key], t), key
    assert got["keypoint_valid"].dtype == torch.bool
    assert bool(got["keypoint_valid"].all())


@pytest.mark.parametrize("name", sorted(CASES))
@given(n=st.integers(0, 5), seed=st.integers(0, 2**16), train=st.booleans())
def test_with_targets_images_equal_forward_targets_unchanged(name, n, seed, train):
    m = CASES[name]().train(train)
    x = _images(n, seed)
    targets = _targets(n, seed)
    before = {k: v.clone() for k, v in targets.items()}
    torch.manual_seed(seed)
    y = m(x)
    after_forward = torch.rand(2)
    torch.manual_seed(seed)
    y2, got = m.with_targets(x, targets)
    assert torch.equal(torch.rand(2), after_forward)  # the same draws, no more
    assert y2.dtype == y.dtype and torch.equal(y2, y)
    _check_unchanged(got, before)
    for k, v in targets.items():  # the caller's dict and tensors are not touched
        assert torch.equal(v, before[k])
    if m.takes_keys:
        keys = R.sample_keys(seed, 1, torch.arange(n))
        torch.manual_seed(seed + 1)  # keyed draws do not read the global generator
        y3, got = m.with_targets(x, targets, keys)
        assert torch.equal(y3, m(x, keys))
        _check_unchanged(got, before)


@pytest.mark.parametrize("name", sorted(CASES))
def test_scripted_with_targets_equals_eager(name):
    m = CASES[name]().train()
    scripted = torch.jit.script(m)
    for n in (0, 1, 7):
        x, targets = _images(n, n), _targets(n, n)
        keys = R.sample_keys(3, 0, torch.arange(n)) if m.takes_keys else None
        torch.manual_seed(n)
        y, got = m.with_targets(x, targets, keys)
        torch.manual_seed(n)
        ys, gots = scripted.with_targets(x, targets, keys)
        assert torch.equal(ys, y)
        assert set(gots) == set(got)
        for key in got:
            assert torch.equal(gots[key], got[key]), key
        _check_unchanged(gots, targets)


@pytest.mark.parametrize("name", sorted(CASES))
def test_unknown_target_key_is_a_value_error(name):
    m = CASES[name]().train()
    x = _images(2, 0)
    for bad in ({"mask": torch.zeros(2, H, W, dtype=torch.uint8)},
                {"boxes": torch.zeros(2, M, 4), "scores": torch.zeros(2, M)}):
        with pytest.raises(ValueError, match="unknown key.*allowed keys are"):
            m.with_targets(x, bad)
    # scripted: TorchScript raises its own error type with the same message
    with pytest.raises(Exception, match="unknown key"):
        torch.jit.script(m).with_targets(x, {"mask": torch.zeros(2, H, W, dtype=torch.uint8)})


class _WithTargets(nn.Module):
    def __init__(self, t: nn.Module) -> None:
        super().__init__()
        self.t = t

    def forward(self, x, masks, boxes, keypoints, labels, keys):
        targets = {"masks": masks, "boxes": boxes, "keypoints": keypoints, "labels": labels}
        y, out = self.t.with_targets(x, targets, keys if self.t.takes_keys else None)
        return (y, out["masks"], out["boxes"], out["box_valid"], out["keypoints"],
                out["keypoint_valid"], out["labels"])


def _export_inputs(n: int):
    t = _targets(n, n)
    return (_images(n, n), t["masks"], t["boxes"], t["keypoints"], t["labels"],
            R.sample_keys(5, 0, torch.arange(n)))


# one per kind of make_params: a random tuple with a per-sample order, one coin, boxes and
# noise, a deterministic transform with tensor params, one with an int
@pytest.mark.parametrize("name", ["ColorJitter", "RandomInvert", "RandomErasing", "Normalize",
                                  "Grayscale"])
def test_export_with_targets_dynamic_batch(name):
    eager = _WithTargets(CASES[name]().train())
    batch = Dim("batch")
    shapes = tuple({0: batch} for _ in range(6))
    run = export(eager, _export_inputs(8), dynamic_shapes=shapes).module()
    for n in (1, 7, 64):
        inputs = _export_inputs(n)
        got, ref = run(*inputs), eager(*inputs)
        for a, b in zip(got, ref):
            assert a.dtype == b.dtype and torch.equal(a, b)
        assert torch.equal(got[1], inputs[1]) and torch.equal(got[2], inputs[2])
