"""CUDA's own rules without a GPU: every transform on fake CUDA tensors (tests/contract/fake_cuda.py).

The meta check (test_contract.py ``test_no_host_sync``) cannot see what only CUDA does: a
Python scalar written into a CUDA tensor (``out[i] = v``) is built on the host and copied, a
blocking copy. Here every contract Case (train, eval, keyed; uint8 and float32), with_targets of
every geometric Case, the label mixers, ``Augment`` and ``AugmentedModel`` run on FakeTensorMode
tensors on ``"cuda"``: no host<->device op and no data-dependent output inside the call, each
failure naming the library line. Modules are built on the CPU (construction may read values)
and moved with ``.to("cuda")`` inside the fake mode, as a training script moves them.
"""
from typing import Callable, List, Optional, Tuple

import pytest
import torch
from torch import Tensor, nn

from tests.contract import (
    CASES,
    DTYPES,
    Case,
    expected_dtype,
    expected_shape,
    make_targets,
    target_case_is_geometric,
    target_module,
)
from tests.contract.fake_cuda import fake_cuda, no_host_traffic

N = 6


def _keys(n: int = N) -> Tensor:
    from batchaug import _random

    return _random.sample_keys(0, 0, torch.arange(n))  # real CPU keys, moved in the mode


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_no_host_traffic(case: Case, dtype: torch.dtype) -> None:
    """The default forward on fake CUDA: train, eval, and keyed where the case is random."""
    m = case.factory()
    keys = _keys()
    with fake_cuda():
        m = m.to("cuda")
        x = torch.zeros(N, case.channels, *case.in_size, dtype=dtype, device="cuda")
        k = keys.to("cuda")
        runs: List[Tuple[bool, Optional[Tensor]]] = [(True, None), (False, None)]
        if case.random:
            runs.append((True, k))
        for train, kk in runs:
            m.train(train)
            what = f"{case.id} ({dtype}, train={train}{', keyed' if kk is not None else ''})"
            with no_host_traffic(what):
                y = m(x) if kk is None else m(x, kk)
            assert y.device.type == "cuda", what
            if train or not case.random:
                assert tuple(y.shape) == expected_shape(case, N), what
                assert y.dtype == expected_dtype(case, dtype), what


GEOMETRIC_CASES = [c for c in CASES if target_case_is_geometric(c)]


@pytest.mark.parametrize("case", GEOMETRIC_CASES, ids=lambda c: c.id)
def test_targets_no_host_traffic(case: Case) -> None:
    """with_targets (masks, boxes, keypoints, labels) on fake CUDA: uint8 and float32 images,
    train and eval, with and without keys where the module takes them."""
    m = target_module(case)
    targets = make_targets(case.in_size, N)
    keys = _keys()
    with fake_cuda():
        m = m.to("cuda")
        t = {name: v.to("cuda") for name, v in targets.items()}
        key_runs = [None, keys.to("cuda")] if getattr(m, "takes_keys", False) else [None]
        for dtype in (torch.uint8, torch.float32):
            x = torch.zeros(N, case.channels, *case.in_size, dtype=dtype, device="cuda")
            for train in (True, False):
                m.train(train)
                for kk in key_runs:
                    what = (f"{case.id} with_targets ({dtype}, train={train}"
                            f"{', keyed' if kk is not None else ''})")
                    with no_host_traffic(what):
                        y, out = (m.with_targets(x, dict(t)) if kk is None
                                  else m.with_targets(x, dict(t), kk))
                    assert y.device.type == "cuda" and out["boxes"].device.type == "cuda", what
                    assert out["masks"].shape[-2:] == y.shape[-2:], what


def _mixers() -> List[Tuple[str, Callable[[], nn.Module]]]:
    import batchaug as B

    k = 10
    return [
        ("MixUp", lambda: B.MixUp(k, alpha=0.4)),
        ("MixUp-p-smooth-batch", lambda: B.MixUp(k, p=0.7, per_sample=False,
                                                 label_smoothing=0.1)),
        ("CutMix", lambda: B.CutMix(k)),
        ("CutMix-batch", lambda: B.CutMix(k, per_sample=False)),
        ("MixUpOrCutMix", lambda: B.MixUpOrCutMix(k, label_smoothing=0.1)),
        ("MixUpOrCutMix-p-batch", lambda: B.MixUpOrCutMix(k, 0.2, 1.0, switch_prob=0.3, p=0.8,
                                                         per_sample=False)),
        ("TimmMixup", lambda: B.TimmMixup(num_classes=k)),
        ("TimmMixup-elem", lambda: B.TimmMixup(num_classes=k, mode="elem", cutmix_alpha=1.0)),
        ("TimmMixup-pair", lambda: B.TimmMixup(num_classes=k, mode="pair", cutmix_alpha=1.0)),
        ("TimmMixup-minmax", lambda: B.TimmMixup(num_classes=k, cutmix_alpha=1.0,
                                                 cutmix_minmax=(0.2, 0.8))),
    ]


@pytest.mark.parametrize("name, make", _mixers(), ids=[n for n, _ in _mixers()])
def test_mixers_no_host_traffic(name: str, make: Callable[[], nn.Module]) -> None:
    """The label mixers on fake CUDA images and labels: uint8 and float32, keyed where they
    take keys."""
    m = make()
    keys = _keys()
    labels = torch.arange(N) % 10
    with fake_cuda():
        m = m.to("cuda")
        y = labels.to("cuda")
        key_runs = [None, keys.to("cuda")] if getattr(m, "takes_keys", False) else [None]
        for dtype in (torch.uint8, torch.float32):
            x = torch.zeros(N, 3, 12, 16, dtype=dtype, device="cuda")
            for kk in key_runs:
                what = f"{name} ({dtype}{', keyed' if kk is not None else ''})"
                with no_host_traffic(what):
                    out, t = m(x, y) if kk is None else m(x, y, kk)
                assert out.device.type == t.device.type == "cuda", what
                assert out.shape == x.shape and out.dtype == dtype and t.shape == (N, 10), what


def _recipes() -> List[Tuple[str, Callable[[], nn.Module]]]:
    import batchaug as B

    mean, std = [0.49, 0.48, 0.45], [0.25, 0.24, 0.26]
    return [
        ("cifar", lambda: B.Augment(
            B.RandomCrop(32, padding=4, padding_mode="reflect"), B.RandomHorizontalFlip(),
            B.Normalize(mean, std))),
        ("imagenet", lambda: B.Augment(
            B.RandomResizedCrop(24), B.RandomHorizontalFlip(),
            B.ColorJitter(0.4, 0.4, 0.4, 0.1), B.Normalize(mean, std),
            B.RandomErasing(0.25, value="random"))),
        ("policy", lambda: B.Augment(
            B.RandomResizedCrop(24), B.RandomHorizontalFlip(), B.TrivialAugmentWide(),
            B.ToDtype(torch.float32, scale=True), B.Normalize(mean, std))),
        ("warps", lambda: B.Augment(
            B.RandomPerspective(), B.RandomAffine(20, translate=(0.1, 0.1), shear=5),
            B.RandomRotation(15, interpolation="bilinear", fill=[1, 2, 3]), B.Resize(28),
            B.CenterCrop(24), B.ToDtype(torch.float32, scale=True))),
    ]


def _small_cnn() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 10))


@pytest.mark.parametrize("wrap", [False, True], ids=["Augment", "AugmentedModel"])
@pytest.mark.parametrize("name, make", _recipes(), ids=[n for n, _ in _recipes()])
def test_augment_no_host_traffic(name: str, make: Callable[[], nn.Module], wrap: bool) -> None:
    """Typical pipelines as an ``Augment`` and inside an ``AugmentedModel`` (uint8 in, the
    model's float32 logits out): train, keyed and eval on fake CUDA."""
    from batchaug import AugmentedModel

    aug = make()
    m: nn.Module = AugmentedModel(aug, _small_cnn()) if wrap else aug
    keys = _keys()
    with fake_cuda():
        m = m.to("cuda")
        x = torch.zeros(N, 3, 32, 32, dtype=torch.uint8, device="cuda")
        for train, kk in ((True, None), (True, keys.to("cuda")), (False, None)):
            m.train(train)
            what = f"{name} {'AugmentedModel' if wrap else 'Augment'} (train={train}" \
                   f"{', keyed' if kk is not None else ''})"
            with no_host_traffic(what):
                y = m(x) if kk is None else m(x, kk)
            assert y.device.type == "cuda" and y.shape[0] == N, what


def _default_modules() -> List[Tuple[str, Callable[[], nn.Module]]]:
    from tests.contract.test_contract import _defaults

    return _defaults()


@pytest.mark.parametrize("name, make", _default_modules(),
                         ids=[n for n, _ in _default_modules()])
def test_default_arguments_no_host_traffic(name: str, make: Callable[[], nn.Module]) -> None:
    """Every exported transform with its default arguments (the paths the Cases leave out:
    RandomResizedCrop's eval crop, random erasing values, fills, default policies) on fake
    CUDA: train and eval, keyed where it takes keys, uint8 and float32."""
    m = make()
    keys = _keys()
    with fake_cuda():
        m = m.to("cuda")
        k = keys.to("cuda")
        for dtype in (torch.uint8, torch.float32):
            x = torch.zeros(N, 3, 24, 28, dtype=dtype, device="cuda")
            for train in (True, False):
                m.train(train)
                for kk in ((None, k) if getattr(m, "takes_keys", False) else (None,)):
                    what = f"{name} ({dtype}, train={train}{', keyed' if kk is not None else ''})"
                    with no_host_traffic(what):
                        y = m(x) if kk is None else m(x, kk)
                    assert y.device.type == "cuda" and y.shape[0] == N, what
