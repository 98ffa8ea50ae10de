"""The targets contract (tests/contract/targets.py): every case whose module moves
pixels gets the with_targets checks; every exported transform has a contract case; every
geometric class the issue names moves targets."""
import inspect

import pytest
from torch import nn

from tests.contract import (
    CASES,
    GEOMETRIC_CLASSES,
    TARGET_CHECKS,
    TARGET_COMPILE_IDS,
    TARGET_CONTAINERS,
    TARGET_EXPORT_IDS,
    TARGET_REFUSERS,
    check_targets_compile,
    check_targets_export,
    check_targets_passthrough,
    check_targets_refused,
    target_case_is_geometric,
)

GEOMETRIC_CASES = [c for c in CASES if target_case_is_geometric(c)]
PASSTHROUGH_CASES = [c for c in CASES if not target_case_is_geometric(c)
                     and callable(getattr(c.factory(), "with_targets", None))
                     and type(c.factory()).__name__ not in TARGET_REFUSERS]
REFUSING_CASES = [c for c in CASES if type(c.factory()).__name__ in TARGET_REFUSERS]


@pytest.mark.parametrize("check", TARGET_CHECKS, ids=lambda c: c.__name__.replace("check_", ""))
@pytest.mark.parametrize("case", GEOMETRIC_CASES, ids=lambda c: c.id)
def test_targets_contract(case, check):
    check(case)


@pytest.mark.parametrize("case", [c for c in GEOMETRIC_CASES if c.id in TARGET_COMPILE_IDS],
                         ids=lambda c: c.id)
def test_targets_compile_fullgraph(case):
    """compile is slow on this CPU: TARGET_COMPILE_IDS, a representative subset."""
    check_targets_compile(case)


@pytest.mark.parametrize("case", [c for c in GEOMETRIC_CASES if c.id in TARGET_EXPORT_IDS],
                         ids=lambda c: c.id)
def test_targets_export_dynamic_batch(case):
    """export costs 5-20 s a case here: TARGET_EXPORT_IDS, a representative subset."""
    check_targets_export(case)


@pytest.mark.parametrize("case", PASSTHROUGH_CASES, ids=lambda c: c.id)
def test_targets_pass_through_colour_transforms(case):
    check_targets_passthrough(case)


@pytest.mark.parametrize("case", REFUSING_CASES, ids=lambda c: c.id)
def test_targets_refused_by_blending_modules(case):
    check_targets_refused(case)


def test_compile_and_export_subsets_name_real_cases():
    ids = {c.id for c in CASES}
    for subset in (TARGET_COMPILE_IDS, TARGET_EXPORT_IDS):
        assert set(subset) <= ids, sorted(set(subset) - ids)


# label mixers take (images, labels), AugmentedModel wraps a model, Transform and
# GeometricTransform are the protocol's base classes: not image transforms under the contract
# (tests/transforms/test_mix.py, tests/integrations/test_timm.py, tests/contract/test_compose_export.py, the bases through
# every case built on them)
NOT_TRANSFORMS = {"MixUp", "CutMix", "MixUpOrCutMix", "TimmMixup", "AugmentedModel",
                  "DeployedModel",
                  "Transform", "GeometricTransform"}


def _exported_transform_classes():
    import batchaug
    import batchaug.transforms as T

    out = {}
    for mod in (batchaug, T):
        for name in mod.__all__:
            obj = getattr(mod, name)
            if isinstance(obj, type) and issubclass(obj, nn.Module) and name not in NOT_TRANSFORMS:
                out[name] = obj
    return out


def test_every_exported_transform_has_a_contract_case():
    covered = {type(c.factory()).__name__ for c in CASES}
    missing = sorted(set(_exported_transform_classes()) - covered)
    assert not missing, f"exported transforms without a contract Case: {missing}"
    assert NOT_TRANSFORMS <= set(__import__("batchaug").__all__), "stale NOT_TRANSFORMS entry"


def _moves_targets(cls) -> str:
    """'' when ``cls`` moves targets (a GeometricTransform, or a with_targets of its own that
    is not the colour transforms' pass-through), else why not."""
    from batchaug.transforms._base import GeometricTransform, Transform

    if issubclass(cls, GeometricTransform):
        return ""
    wt = getattr(cls, "with_targets", None)
    if wt is None:
        return "has no with_targets"
    if wt is Transform.with_targets:
        return "inherits Transform.with_targets, which leaves targets unchanged"
    if "targets" not in inspect.signature(wt).parameters:
        return f"with_targets{inspect.signature(wt)} takes no targets"
    return ""


@pytest.mark.parametrize("name", GEOMETRIC_CLASSES + TARGET_CONTAINERS)
def test_geometric_class_moves_targets(name):
    """Each geometric class the issue names is a GeometricTransform (the single transforms)
    or has a with_targets of its own (containers, Augment, policies), and has a contract case
    whose (target) module the target checks run on."""
    import batchaug

    cls = getattr(batchaug, name)
    if name in GEOMETRIC_CLASSES:
        from batchaug.transforms._base import GeometricTransform

        assert issubclass(cls, GeometricTransform), \
            f"{name} is not a GeometricTransform (bases: {[b.__name__ for b in cls.__mro__[1:-1]]})"
    why = _moves_targets(cls)
    assert not why, f"{name} {why}"
    cases = [c for c in GEOMETRIC_CASES if type(c.factory()).__name__ == name]
    assert cases, f"{name}: no contract case gets the target checks"
