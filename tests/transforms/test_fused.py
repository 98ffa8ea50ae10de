"""Augment's fused CPU path (batchaug/_fusion.py: RandomRotation then Normalize, Normalize then
RandomErasing): the same draws and bytes as the
modules one after the other, and the module contract on the fused Augment."""
from unittest import mock

import pytest
import torch

import batchaug
from batchaug import _random
from tests.contract import (
    Case,
    check_channels_last,
    check_compiled_gradients,
    check_empty_batch,
    check_export_dynamic_batch,
    check_fast_path_matches_plain,
    check_keyed,
    check_no_inplace,
    check_requires_grad,
    check_script_every_dtype,
    check_script_matches_eager,
    check_seed_reproduces,
    check_shape_dtype_device,
)

MEAN = [0.4914, 0.4822, 0.4465]
STD = [0.2470, 0.2435, 0.2616]
PLAIN = "batchaug._fusion.fusable"  # patched to False: Augment runs its modules one by one


def _normalize_erase_aug():
    return batchaug.Augment(batchaug.RandomHorizontalFlip(), batchaug.Normalize(MEAN, STD),
                            batchaug.RandomErasing(p=0.7, value=[0.5, -1.0, 2.0]))


def _normalize_erase_random_aug():
    return batchaug.Augment(batchaug.Normalize(MEAN, STD),
                            batchaug.RandomErasing(p=0.7, value="random"))


def _rotation_aug():
    return batchaug.Augment(batchaug.RandomRotation(15, interpolation="bilinear"),
                            batchaug.Normalize(MEAN, STD))


def _rotation_fill_aug():
    # nearest with a per-channel fill, and a half-precision Normalize output
    return batchaug.Augment(batchaug.RandomRotation((-30, 40), fill=[10, 20, 30], center=(3, 5)),
                            batchaug.Normalize(MEAN, STD).to(torch.bfloat16))


ROTATION = Case("Augment-rotation", _rotation_aug, random=False, out_dtype=torch.float32,
                plain_path=PLAIN)
ROTATION_FILL = Case("Augment-rotation-fill-bf16", _rotation_fill_aug, random=False,
                     out_dtype=torch.bfloat16, plain_path=PLAIN)
NORMALIZE_ERASE = Case("Augment-normalize-erase", _normalize_erase_aug, random=False,
                       out_dtype=torch.float32, plain_path=PLAIN)
NORMALIZE_ERASE_RANDOM = Case("Augment-normalize-erase-random", _normalize_erase_random_aug,
                              random=False, out_dtype=torch.float32, plain_path=PLAIN)

ALL_DTYPE_CHECKS = [check_shape_dtype_device, check_script_matches_eager, check_empty_batch,
                    check_no_inplace, check_channels_last, check_seed_reproduces]
ONCE = [check_fast_path_matches_plain, check_requires_grad, check_compiled_gradients,
        check_export_dynamic_batch, check_script_every_dtype, check_keyed]

# (case, the checks it runs per dtype)
PER_DTYPE = [(ROTATION_FILL, ALL_DTYPE_CHECKS),
             (NORMALIZE_ERASE, ALL_DTYPE_CHECKS), (NORMALIZE_ERASE_RANDOM, ALL_DTYPE_CHECKS)]


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32], ids=["uint8", "float32"])
@pytest.mark.parametrize("case, check", [(c, k) for c, ks in PER_DTYPE for k in ks],
                         ids=lambda v: v.id if isinstance(v, Case) else
                         v.__name__.replace("check_", ""))
def test_fused_augment_contract(case, check, dtype):
    check(case, dtype, "cpu")


@pytest.mark.parametrize("case", [ROTATION, ROTATION_FILL, NORMALIZE_ERASE, NORMALIZE_ERASE_RANDOM],
                         ids=lambda c: c.id)
@pytest.mark.parametrize("check", ONCE, ids=lambda c: c.__name__.replace("check_", ""))
def test_fused_augment_once(check, case):
    check(case)


def _count_fast(aug, x, keys=None, kernel="erase_"):
    """(output, number of fused-kernel calls) for one eager forward."""
    import batchaug._fusion as module

    real = getattr(module, kernel)
    calls = []

    def spy(*args):
        calls.append(1)
        return real(*args)

    with mock.patch.object(module, kernel, spy):
        y = aug(x, keys)
    return y, len(calls)


@pytest.mark.parametrize("make", [_rotation_aug, _rotation_fill_aug])
def test_rotation_takes_the_fused_kernel_and_equals_the_modules(make):
    aug = make().train()
    x = torch.randint(0, 256, (17, 3, 32, 32), dtype=torch.uint8)
    keys = _random.sample_keys(2, 0, torch.arange(17))
    for k in (None, keys):
        torch.manual_seed(9)
        y, calls = _count_fast(aug, x, k, "rotate_normalize")
        assert calls == 1
        with mock.patch(PLAIN, lambda *a: False):
            torch.manual_seed(9)
            assert torch.equal(aug(x, k), y)
            # and the generator is left where the modules leave it
            after_plain = torch.rand(3)
        torch.manual_seed(9)
        _count_fast(aug, x, k, "rotate_normalize")
        assert torch.equal(torch.rand(3), after_plain)
    for xs in (x.float(), x.contiguous(memory_format=torch.channels_last)):
        assert _count_fast(aug, xs, None, "rotate_normalize")[1] == 0
    assert _count_fast(aug.eval(), x, None, "rotate_normalize")[1] == 0


@pytest.mark.parametrize("make", [_normalize_erase_aug, _normalize_erase_random_aug])
def test_normalize_erase_erases_in_place_and_equals_the_modules(make):
    """Normalize -> RandomErasing erases Normalize's fresh output in place: the modules' bytes
    and draws exactly (global generator and keys, the generator left where the modules leave
    it); float input that autograd records, and eval, run the modules."""
    aug = make().train()
    x = torch.randint(0, 256, (40, 3, 12, 10), dtype=torch.uint8)
    keys = _random.sample_keys(4, 2, torch.arange(40))
    for xs in (x, x.float()):
        for k in (None, keys):
            torch.manual_seed(6)
            y, calls = _count_fast(aug, xs, k, "erase_")
            assert calls == 1
            after = torch.rand(3)
            with mock.patch(PLAIN, lambda *a: False):
                torch.manual_seed(6)
                y_plain, calls = _count_fast(aug, xs, k, "erase_")
                assert torch.equal(torch.rand(3), after)
            assert calls == 0 and torch.equal(y, y_plain)
            torch.manual_seed(6)
            unerased = batchaug.Augment(*list(aug)[:-1])(xs, k)
            assert (y != unerased).any()  # boxes were erased
    xg = x.float().requires_grad_(True)
    y, calls = _count_fast(aug, xg, None, "erase_")
    assert calls == 0 and y.requires_grad
    y.sum().backward()
    assert xg.grad is not None
    assert _count_fast(aug.eval(), x, None, "erase_")[1] == 0


def test_keyed_fused_output_is_per_sample():
    """Keyed, a sample's fused output depends on its key only: the batch equals its samples
    augmented alone (each through the fused path too) and in reverse order."""
    aug = _normalize_erase_aug().train()
    x = torch.randint(0, 256, (9, 3, 32, 32), dtype=torch.uint8)
    keys = _random.sample_keys(0, 4, torch.arange(9))
    y, calls = _count_fast(aug, x, keys)
    assert calls == 1
    alone = torch.cat([aug(x[i:i + 1], keys[i:i + 1]) for i in range(9)])
    assert torch.equal(y, alone)
    rev = torch.arange(8, -1, -1)
    assert torch.equal(aug(x[rev], keys[rev]), y[rev])


@pytest.mark.parametrize("make", [
    lambda: batchaug.Augment(batchaug.RandomErasing(0.7), batchaug.Normalize(MEAN, STD)),
    lambda: batchaug.Augment(batchaug.Normalize(MEAN, STD), batchaug.RandomHorizontalFlip(),
                             batchaug.RandomErasing(0.7)),
], ids=["erase-then-normalize", "not-adjacent"])
def test_unserved_runs_use_the_modules(make):
    aug = make()
    x = torch.randint(0, 256, (5, 3, 32, 32), dtype=torch.uint8)
    torch.manual_seed(2)
    y, calls = _count_fast(aug, x)
    assert calls == 0
    with mock.patch(PLAIN, lambda *a: False):
        torch.manual_seed(2)
        assert torch.equal(aug(x), y)


def test_fusion_inside_a_longer_pipeline_and_bad_input():
    """A fusable pair after other transforms is found with the batch it gets there; errors are
    the modules' own."""
    aug = batchaug.Augment(batchaug.RandomInvert(0.5), batchaug.RandomCrop(32, padding=4),
                           batchaug.Normalize(MEAN, STD), batchaug.RandomErasing(0.7))
    x = torch.randint(0, 256, (6, 3, 32, 32), dtype=torch.uint8)
    keys = _random.sample_keys(1, 0, torch.arange(6))
    y, calls = _count_fast(aug, x, keys)
    assert calls == 1
    with mock.patch(PLAIN, lambda *a: False):
        assert torch.equal(aug(x, keys), y)
    with pytest.raises(ValueError, match="Normalize: mean/std have 3 values but the input has 2 channels"):
        batchaug.Augment(batchaug.Normalize(MEAN, STD), batchaug.RandomErasing())(x[:, :2])
    with pytest.raises(ValueError, match=r"\(N, C, H, W\)"):
        _normalize_erase_aug()(x[0])


def _spy_builds():
    import batchaug._fusion as fusion

    real = fusion.build_plan
    built = []

    def spy(modules):
        built.append(len(modules))
        return real(modules)

    return mock.patch.object(fusion, "build_plan", spy), built


def test_the_plan_is_built_once_and_again_after_changes():
    """Augment plans once for many calls; eval(), train(), a child's eval(), append, insert,
    setitem and del each make the next call plan again (and use the new modules)."""
    aug = _normalize_erase_aug().train()
    x = torch.randint(0, 256, (4, 3, 32, 32), dtype=torch.uint8)
    patch, built = _spy_builds()
    with patch:
        for _ in range(3):
            aug(x)
        assert built == [3]
        steps = [
            lambda: aug.eval(), lambda: aug.train(), lambda: aug[2].eval(),
            lambda: aug[2].train(), lambda: aug.append(batchaug.RandomErasing()),
            lambda: aug.insert(0, batchaug.RandomInvert()),
            lambda: aug.__setitem__(0, batchaug.RandomInvert()), lambda: aug.__delitem__(0),
        ]
        for step in steps:
            step()
            n = len(built)
            aug(x)
            aug(x)
            assert len(built) == n + 1, step
        assert built[-1] == 4
        assert _count_fast(aug, x)[1] == 1  # Normalize -> RandomErasing still fuses
        aug[2].eval()
        assert _count_fast(aug, x)[1] == 0  # a child's mode is seen: the modules run


@pytest.mark.parametrize("group", [True, False], ids=["grouped", "static"])
def test_fusions_fire_inside_random_apply(group):
    """RandomApply's sequence runs through the same plan: Normalize -> RandomErasing erases in
    place, bit-identical to the modules, keyed and unkeyed."""
    m = batchaug.RandomApply([batchaug.Normalize(MEAN, STD), batchaug.RandomErasing(0.7)],
                             p=0.6, group_by_branch=group)
    x = torch.randint(0, 256, (21, 3, 32, 32)).float()
    keys = _random.sample_keys(6, 0, torch.arange(21))
    for k in (None, keys):
        torch.manual_seed(3)
        y, calls = _count_fast(m, x, k)
        assert calls == 1
        after = torch.rand(2)
        with mock.patch(PLAIN, lambda *a: False):
            torch.manual_seed(3)
            y_plain, calls = _count_fast(m, x, k)
            assert torch.equal(torch.rand(2), after)
        assert calls == 0 and torch.equal(y, y_plain)
    assert _count_fast(m.eval(), x)[1] == 0
