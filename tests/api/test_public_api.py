"""The public surface: functional's argument types, what is exported, where the exceptions live,
and the lists derived from the exports (Augment's refusals, from_torchvision's conversions)."""
from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import typing
import warnings
from pathlib import Path
from typing import Dict

import pytest
import torch
import torchvision.transforms.v2 as v2
from torch import Tensor

import batchaug
import batchaug.functional as F
from batchaug import _equivalents, errors
from batchaug.functional import _kernels

INTERNAL = ["select_samples", "group_by_branch", "inverse_permutation", "partner", "box_mask",
            "gaussian_kernel1d"]


# ------------------------------------------------------------------ functional: per-sample tensors

def test_functional_names_a_python_number_or_list_where_a_tensor_belongs():
    x = torch.zeros(4, 3, 16, 16, dtype=torch.uint8)
    with pytest.raises(TypeError, match=r"rotate: argument 'angle' must be a per-sample "
                                        r"parameter tensor.*got float 30.0"):
        F.rotate(x, 30.0)
    with pytest.raises(TypeError, match=r"center_crop: argument 'height' must be an int, "
                                        r"got list \[8, 8\]"):
        F.center_crop(x, [8, 8])
    with pytest.raises(TypeError, match=r"crop: argument 'top' must be a per-sample"):
        F.crop(x, 1, 2, 8, 8)
    with pytest.raises(TypeError, match=r"adjust_hue: argument 'factor'.*got list"):
        F.adjust_hue(x, [0.1] * 4)
    with pytest.raises(TypeError, match=r"center_crop.*missing a required argument: 'width'"):
        F.center_crop(x, 8)
    # the right kinds of values pass through to the kernel unchanged
    angle = torch.tensor([0.0, 90.0, 180.0, -30.0])
    assert torch.equal(F.rotate(x, angle), _kernels.rotate(x, angle))
    assert torch.equal(F.center_crop(x, 8, 8), x[:, :, 4:12, 4:12])


def _value_for(annotation: object) -> object:
    """A value of the right kind for a parameter (the check runs before the kernel)."""
    text = str(annotation)
    if "Dict" in text or "dict" in text:
        return {}
    if annotation is Tensor or "Tensor" in text:
        return torch.zeros(2)
    if "List" in text or "list" in text or "Tuple" in text:
        return [1.0]
    return {int: 1, float: 1.0, bool: False, str: "nearest", torch.dtype: torch.float32}.get(
        annotation, None)


@pytest.mark.parametrize("name", F.__all__)
def test_every_functional_tensor_argument_refuses_a_number(name):
    fn = getattr(F, name)
    kernel = getattr(_kernels, name)
    hints = typing.get_type_hints(kernel)
    params = list(inspect.signature(kernel).parameters.values())
    tensor_params = [p.name for p in params if hints.get(p.name) is Tensor]
    assert fn.__wrapped__ is kernel  # checked, and documented with the kernel's signature
    for target in tensor_params:
        kwargs = {p.name: _value_for(hints.get(p.name)) for p in params
                  if p.default is inspect.Parameter.empty}
        kwargs[target] = 0.5
        with pytest.raises(TypeError, match=rf"{name}: argument '{target}' must be"):
            fn(**kwargs)


def test_functional_under_torchscript_compiles_the_kernel():
    x = torch.randint(0, 256, (3, 3, 12, 12), dtype=torch.uint8)
    angle = torch.tensor([10.0, -20.0, 45.0])
    scripted = torch.jit.script(F.rotate)
    assert torch.equal(scripted(x, angle), _kernels.rotate(x, angle))
    scripted_user = torch.jit.script(_rotate_twice)  # a scripted function calling F.rotate
    assert torch.equal(scripted_user(x, angle), _rotate_twice(x, angle))


def _rotate_twice(x: Tensor, angle: Tensor) -> Tensor:
    return F.rotate(F.rotate(x, angle), -angle)


def test_functional_compiles_fullgraph():
    x = torch.randint(0, 256, (3, 3, 12, 12), dtype=torch.uint8)
    flip = torch.tensor([True, False, True])
    compiled = torch.compile(F.hflip_where, fullgraph=True, backend="eager")
    assert torch.equal(compiled(x, flip), _kernels.hflip_where(x, flip))


TARGET_KERNELS = ["move_targets", "check_targets", "flip_matrix", "resized_crop_matrix",
                  "rotation_matrix", "affine_to_matrix", "perspective_to_matrix",
                  "compose_matrices", "affine_boxes", "affine_keypoints", "warp_masks"]


@pytest.mark.parametrize("name", TARGET_KERNELS)
def test_target_kernels_are_public_with_a_running_example(name):
    import doctest

    assert name in F.__all__
    fn = getattr(F, name)
    assert ">>>" in (fn.__doc__ or ""), f"{name}: no example"
    finder = doctest.DocTestFinder(recurse=False)
    globs = {"torch": torch, **{n: getattr(F, n) for n in F.__all__}}
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    for test in finder.find(fn, name, globs=globs):
        runner.run(test)
    assert runner.failures == 0 and runner.tries > 0, name


def _targets_case():
    targets = {"boxes": torch.tensor([[[2.0, 3.0, 10.0, 8.0]], [[0.0, 0.0, 4.0, 4.0]]]),
               "masks": torch.arange(2 * 16 * 32).view(2, 16, 32) % 5,
               "keypoints": torch.tensor([[[1.0, 2.0]], [[30.0, 15.0]]])}
    m = F.flip_matrix(torch.tensor([True, False]), torch.tensor([False, True]))
    return F.check_targets(targets, [2, 3, 16, 32]), m


def _move_twice(targets: Dict[str, Tensor], m: Tensor) -> Dict[str, Tensor]:
    moved = F.move_targets(targets, m, [16, 32], [16, 32])
    return F.move_targets(moved, m, [16, 32], [16, 32])


def test_target_kernels_check_arguments_script_and_compile():
    targets, m = _targets_case()
    with pytest.raises(TypeError, match=r"move_targets: argument 'targets' must be a dict, "
                                        r"got list"):
        F.move_targets([targets["boxes"]], m, [16, 32], [16, 32])
    with pytest.raises(TypeError, match=r"check_targets: argument 'image_shape' must be a list"):
        F.check_targets(targets, 32)
    with pytest.raises(TypeError, match=r"flip_matrix: argument 'horizontal' must be a per-sample"):
        F.flip_matrix(True, torch.tensor([False, True]))
    expected = _kernels.move_targets(targets, m, [16, 32], [16, 32])
    assert torch.equal(expected["boxes"], torch.tensor([[[22.0, 3.0, 30.0, 8.0]],
                                                        [[0.0, 12.0, 4.0, 16.0]]]))
    assert torch.equal(expected["masks"][0], targets["masks"][0].flip(-1))
    eager = F.move_targets(targets, m, [16, 32], [16, 32])
    scripted = torch.jit.script(F.move_targets)(targets, m, [16, 32], [16, 32])
    compiled = torch.compile(F.move_targets, fullgraph=True, backend="eager")(
        targets, m, [16, 32], [16, 32])
    user = torch.jit.script(_move_twice)(targets, m)  # a scripted function calling F.*
    for key in expected:
        assert torch.equal(eager[key], expected[key]), key
        assert torch.equal(scripted[key], expected[key]), key
        assert torch.equal(compiled[key], expected[key]), key
        assert torch.equal(user[key], _move_twice(targets, m)[key]), key
    assert torch.equal(user["masks"], targets["masks"])  # flipped there and back


def test_internals_left_the_public_api_but_still_import():
    for name in INTERNAL:
        assert name not in F.__all__
        assert callable(getattr(F, name))  # old imports keep working
    assert "functional" in (F.__doc__ or "") or "per-sample parameter tensors" in F.__doc__


# ------------------------------------------------------------------ top level and exceptions

def test_top_level_exports_the_data_writer_and_keys():
    from batchaug import DiskFullError, WriteResult, sample_keys, substream, write_cache

    assert write_cache is batchaug.data.write_cache and WriteResult is batchaug.data.WriteResult
    assert DiskFullError is errors.DiskFullError
    assert sample_keys is batchaug._random.sample_keys
    assert substream is batchaug._random.substream
    for name in batchaug.__all__:
        assert hasattr(batchaug, name), name


def _all_modules():
    for info in pkgutil.walk_packages(batchaug.__path__, "batchaug."):
        if info.name.endswith("__main__"):
            continue
        yield importlib.import_module(info.name)


def test_every_public_exception_lives_in_errors_and_old_paths_still_work():
    found = {}
    for module in _all_modules():
        for name, obj in vars(module).items():
            if (isinstance(obj, type) and issubclass(obj, BaseException)
                    and obj.__module__.startswith("batchaug") and not name.startswith("_")):
                found.setdefault(name, set()).add(module.__name__)
                assert obj.__module__ == "batchaug.errors", (
                    f"{module.__name__}.{name} is defined outside batchaug.errors")
                assert getattr(errors, name) is obj
    assert set(errors.__all__) == set(found), set(errors.__all__) ^ set(found)
    # where users meet them, as before
    from batchaug.data.format import CacheFormatError
    from batchaug.data.ingest import BadImageError
    from batchaug.data.storage import DeviceMemoryError
    from batchaug.data.writer import DiskFullError

    assert CacheFormatError is batchaug.CacheFormatError is errors.CacheFormatError
    assert BadImageError is batchaug.BadImageError is errors.BadImageError
    assert DeviceMemoryError is batchaug.DeviceMemoryError is errors.DeviceMemoryError
    assert DiskFullError is batchaug.data.DiskFullError is errors.DiskFullError
    assert issubclass(errors.CacheFormatError, ValueError)
    assert issubclass(errors.DiskFullError, OSError)


# ------------------------------------------------------------------ derived lists

# constructor arguments of torchvision's transforms that need some
TV_ARGS = {
    "RandomCrop": (8,), "RandomResizedCrop": (8,), "Resize": (8,), "CenterCrop": (8,),
    "Pad": (2,), "RandomRotation": (10,), "RandomAffine": (10,), "ToDtype": (torch.float32,),
    "Normalize": ([0.5] * 3, [0.5] * 3), "RandomPosterize": (4,), "RandomSolarize": (100,),
    "RandomAdjustSharpness": (2.0,), "GaussianBlur": (3,), "MixUp": (), "CutMix": (),
    "RandomApply": ([v2.RandomInvert()],), "RandomChoice": ([v2.RandomInvert()],),
    "RandomOrder": ([v2.RandomInvert()],),
}
TV_KWARGS = {"MixUp": {"num_classes": 10}, "CutMix": {"num_classes": 10}}


def _contract_names():
    from tests import contract
    from tests.transforms.test_mix import FACTORIES

    names = {type(case.factory()).__name__ for case in contract.CASES}
    return names | {type(make()).__name__ for _, make in FACTORIES}


# Transforms whose contract is a property test of their own (named, and checked to exist).
OWN_CONTRACT = {
    # a label mixer without keys: hypothesis properties in tests/integrations/test_timm.py
    "TimmMixup": ("test_timm", "test_mixup_properties"),
}


def _defines_test(module: str, test: str) -> bool:
    """Whether a file ``module``.py anywhere under tests/ defines ``test`` (found by name, so the
    check holds whichever folder tests/ keeps the file in, at module level or in a class)."""
    tests = next(p for p in Path(__file__).resolve().parents if p.name == "tests")
    return any(re.search(rf"^\s*def {test}\(", f.read_text(), re.M)
               for f in tests.rglob(f"{module}.py"))


# Known gaps, said out loud: strict xfail, so the test reports when one is closed.
CONTRACT_GAPS: dict = {}


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=CONTRACT_GAPS[n]))
    if n in CONTRACT_GAPS else n for n in sorted(batchaug.transforms.__all__)])
def test_every_exported_transform_is_under_the_test_contract(name):
    if name in OWN_CONTRACT:
        module, test = OWN_CONTRACT[name]
        assert _defines_test(module, test), (module, test)
        return
    assert name in _contract_names(), f"{name} is not under the test contract (tests/contract/)"


@pytest.mark.parametrize("name", sorted(batchaug.transforms.__all__))
def test_every_exported_transform_is_known_to_augment_and_migration(name):
    assert name in batchaug.__all__
    assert _equivalents.equivalent(name) == f"batchaug.{name}"
    assert name not in _equivalents.not_yet()
    tv_cls = getattr(v2, name, None)
    if tv_cls is None:
        return  # batchaug's own (MixUpOrCutMix, ...): nothing of torchvision's to convert
    tv = tv_cls(*TV_ARGS.get(name, ()), **TV_KWARGS.get(name, {}))
    random = not isinstance(tv, (v2.Normalize, v2.Resize, v2.CenterCrop, v2.Pad, v2.ToDtype,
                                 v2.Grayscale))
    if random:
        with pytest.raises(TypeError, match=rf"use batchaug\.{name}\b"):
            batchaug.Augment(tv)
    else:
        batchaug.Augment(tv)  # deterministic: torchvision's is fine inside the prefix
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if _equivalents.mixes_labels(name):
            with pytest.raises(ValueError, match=rf"batchaug\.{name}\("):
                batchaug.from_torchvision([v2.RandomHorizontalFlip(), tv])
        else:
            migration = batchaug.from_torchvision([v2.RandomHorizontalFlip(), tv])
            # a size-fixing crop after the flip goes to the loader's crop stage, the rest to
            # the model's augment: the converted step is the last of crop + augment
            steps = list(migration.crop or []) + list(migration.augment)
            assert [type(t).__name__ for t in steps][-1] == name


def test_not_yet_list_drops_what_batchaug_exports(monkeypatch):
    assert "ElasticTransform" in _equivalents.not_yet()
    with pytest.raises(TypeError, match="ElasticTransform.*has no equivalent yet"):
        batchaug.Augment(v2.ElasticTransform())
    with pytest.raises(ValueError, match="v2.FiveCrop: returns several images"):
        batchaug.from_torchvision([v2.RandomHorizontalFlip(), v2.FiveCrop(4)])
    # a transform that batchaug starts exporting leaves the list and is offered by Augment
    monkeypatch.setattr(batchaug.transforms, "__all__",
                        batchaug.transforms.__all__ + ["ElasticTransform"])
    monkeypatch.setattr(batchaug.transforms, "ElasticTransform", batchaug.RandomInvert,
                        raising=False)
    assert "ElasticTransform" not in _equivalents.not_yet()
    with pytest.raises(TypeError, match=r"use batchaug\.ElasticTransform"):
        batchaug.Augment(v2.ElasticTransform())
