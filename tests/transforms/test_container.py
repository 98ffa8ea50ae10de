"""RandomApply / RandomChoice / RandomOrder: per-sample choices, the grouped (eager) and static
(compile/export) paths, and their errors. The contract (tests/contract/) covers scripting,
export, gradients and the rest with deterministic-in-effect inner transforms."""
from __future__ import annotations

import math

import pytest
import torch
import torchvision.transforms.v2 as V2
import torchvision.transforms.v2.functional as TF
from hypothesis import given, settings
from hypothesis import strategies as st

import batchaug.transforms as T


def _batch(n: int, dtype: torch.dtype = torch.uint8, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (n, 3, 10, 12), generator=g, dtype=torch.uint8)
    return x if dtype == torch.uint8 else x.to(dtype) / 255


def test_random_choice_branch_frequencies():
    m = T.RandomChoice([T.RandomInvert(), T.Grayscale(3), T.RandomHorizontalFlip(),
                        T.RandomVerticalFlip()], p=[2, 1, 0, 1])
    n = 8000
    torch.manual_seed(0)
    counts = torch.bincount(m.make_params(torch.zeros(n, 1, 1, 1)), minlength=4)
    for k, p in enumerate([0.5, 0.25, 0.0, 0.25]):
        sd = math.sqrt(n * p * (1 - p))
        assert abs(counts[k].item() - n * p) <= 5 * sd, (k, counts)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
@pytest.mark.parametrize("channels_last", [False, True])
def test_grouped_equals_static_for_deterministic_branches(dtype, channels_last):
    x = _batch(40, dtype)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    inner = [T.RandomInvert(1.0), T.Grayscale(3), T.RandomPosterize(2, p=1.0)]
    for make in (lambda g: T.RandomApply(inner[:2], p=0.5, group_by_branch=g),
                 lambda g: T.RandomChoice(inner, group_by_branch=g),
                 lambda g: T.RandomOrder(inner, group_by_branch=g)):
        torch.manual_seed(5)
        grouped = make(True)(x)
        torch.manual_seed(5)
        static = make(False)(x)
        assert torch.equal(grouped, static), type(make(True)).__name__


def test_random_apply_leaves_unchosen_samples_untouched():
    m = T.RandomApply([T.ColorJitter(0.8, 0.8, 0.8, 0.3)], p=0.4)
    x = _batch(300)
    for group in (True, False):
        m.group = group
        torch.manual_seed(2)
        y = m(x)
        torch.manual_seed(2)
        mask = m.make_params(x)
        assert torch.equal(y[~mask], x[~mask])
        changed = (y[mask] != x[mask]).flatten(1).any(1)
        assert changed.float().mean() > 0.9


def test_random_order_applies_each_sample_in_its_order():
    inner = [T.RandomInvert(1.0), T.RandomPosterize(1, p=1.0)]  # these do not commute
    m = T.RandomOrder(inner)
    x = _batch(64)
    torch.manual_seed(3)
    y = m(x)
    torch.manual_seed(3)
    order = m.make_params(x)
    fns = [TF.invert, lambda t: TF.posterize(t, 1)]
    for i in range(64):
        ref = x[i]
        for j in order[i].tolist():
            ref = fns[j](ref)
        assert torch.equal(y[i], ref), i
    assert order[:, 0].float().mean().item() == pytest.approx(0.5, abs=0.25)


def test_random_choice_branches_may_change_size_together():
    m = T.RandomChoice([T.RandomResizedCrop(6, eval_crop_pct=None), T.CenterCrop(6)])
    for group in (True, False):
        m.group = group
        assert m(_batch(9)).shape == (9, 3, 6, 6)


def test_shape_or_dtype_changes_are_refused():
    with pytest.raises(ValueError, match="RandomApply: the transforms must keep"):
        T.RandomApply([T.CenterCrop(4)], p=1.0)(_batch(4))
    with pytest.raises(ValueError, match="RandomChoice: the transforms must keep"):
        T.RandomChoice([T.CenterCrop(4), T.CenterCrop(5)], group_by_branch=False)(_batch(4))
    with pytest.raises(ValueError, match="RandomOrder: the transforms must keep"):
        T.RandomOrder([T.RandomInvert(), T.ToDtype(torch.float32)])(_batch(4))


def test_library_random_transforms_are_refused():
    with pytest.raises(TypeError, match=r"RandomApply: transforms\[0\] is torchvision.*"
                                        r"batchaug.ColorJitter"):
        T.RandomApply([V2.ColorJitter(0.4)])
    with pytest.raises(TypeError, match=r"RandomChoice takes nn.Module transforms, transforms\[0\] is function"):
        T.RandomChoice([lambda t: t])
    with pytest.raises(ValueError, match="p must have one weight per transform"):
        T.RandomChoice([T.RandomInvert(), T.Grayscale(3)], p=[1.0])
    # weights each finite but summing past the float range: a ValueError, not fsum's overflow
    with pytest.raises(ValueError, match="p must have a positive, finite sum"):
        T.RandomChoice([T.RandomInvert(), T.Grayscale(3)], p=[1e308, 1e308])
    with pytest.raises(ValueError, match="transforms must not be empty"):
        T.RandomOrder([])


def test_random_inner_transforms_script_and_export():
    """Scripted output equals eager's exactly (same seed, and keyed draws); the exported
    program (dynamic batch, batch 1/7/64) equals the eager static path (``group_by_branch=
    False``, the path export traces) under the same seed. (Exporting the keyed draws too costs
    ~10x the time: their equality is covered for the mixers and policies.)"""
    from torch.export import Dim, export

    from batchaug._random import sample_keys

    def make(group: bool = True):
        return T.RandomApply([T.ColorJitter(0.4, 0.4, 0.4, 0.1), T.RandomGrayscale(0.5)], p=0.8,
                             group_by_branch=group)

    m = make()
    x = _batch(5)
    s = torch.jit.script(m)
    torch.manual_seed(3)
    eager = m(x)
    torch.manual_seed(3)
    assert torch.equal(s(x), eager)
    assert not torch.equal(eager, x)  # something was applied
    keys = sample_keys(0, 0, torch.arange(5))
    assert torch.equal(s(x, keys), m(x, keys))
    ep = export(m, (x,), dynamic_shapes=({0: Dim("batch")},))
    static = make(False)
    for n in (1, 7, 64):
        xb = _batch(n, seed=n)
        torch.manual_seed(n)
        out = ep.module()(xb)
        torch.manual_seed(n)
        assert out.shape == (n, 3, 10, 12) and torch.equal(out, static(xb)), n


@settings(max_examples=80)  # small tensors: cheap; the ci profile's 20 cover little
@given(n=st.integers(0, 20), p=st.floats(0, 1), weights=st.lists(st.floats(0.1, 5), min_size=3,
                                                                 max_size=3),
       seed=st.integers(0, 2**16), dtype=st.sampled_from([torch.uint8, torch.float32]))
def test_paths_agree_for_any_batch_and_probabilities(n, p, weights, seed, dtype):
    """Property: with deterministic-in-effect branches, grouped == static for any batch size
    (0 and 1 included), p and branch weights; unchosen samples are untouched."""
    x = _batch(n, dtype, seed=seed)
    inner = [T.RandomInvert(1.0), T.Grayscale(3), T.RandomHorizontalFlip(1.0)]
    for make in (lambda g: T.RandomApply(inner[:2], p=p, group_by_branch=g),
                 lambda g: T.RandomChoice(inner, p=weights, group_by_branch=g),
                 lambda g: T.RandomOrder(inner, group_by_branch=g)):
        torch.manual_seed(seed)
        grouped = make(True)(x)
        torch.manual_seed(seed)
        static = make(False)(x)
        assert grouped.shape == x.shape and torch.equal(grouped, static)
    m = T.RandomApply(inner[:1], p=p)
    torch.manual_seed(seed)
    y = m(x)
    torch.manual_seed(seed)
    mask = m.make_params(x)
    assert torch.equal(y[~mask], x[~mask])


def test_augment_lists_its_steps_and_still_scripts():
    from batchaug import Augment, Normalize, RandomHorizontalFlip

    flip, norm = RandomHorizontalFlip(), Normalize([0.5], [0.5])
    aug = Augment(flip, norm)
    assert aug.transforms == [flip, norm]
    assert aug[0] is flip and len(aug) == 2 and list(aug) == [flip, norm]
    x = torch.randint(0, 256, (2, 3, 8, 8), dtype=torch.uint8)
    scripted = torch.jit.script(aug.eval())
    assert torch.equal(scripted(x), aug(x))
