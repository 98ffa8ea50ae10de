"""The shared transform contract: every transform in CASES gets the common checks.

Adding a transform means adding one entry to CASES in cases.py (see the format under the warp
marker). ``tests/contract/test_contract.py`` runs every function in ``CHECKS`` on every case,
for uint8 and float32 input, so a new transform gets scripting, eval behaviour, empty batch, no
in-place change, channels_last, seeding and per-sample independence checks from one line.

Each check is ``check_x(case, dtype, device)`` and raises ``AssertionError`` on failure.

``CASE_CHECKS`` (``check_x(case)``, CPU, run once per case) add gradients (requires_grad,
float64 gradcheck, gradient equal to torchvision's per-sample functional with the same
parameters, aot_eager-compiled gradients), ``torch.export`` with a dynamic batch (batch 1, 7,
64; train and eval; train float32 exported with keys and compared with eager), scripted == eager
for every input dtype, and keyed randomness (``check_keyed``: a random transform has
``takes_keys`` and ``forward(x, keys)``, and each sample's output depends only on its key). A
new transform class also needs a torchvision reference in ``_REFERENCES`` (references.py); a new
fast path needs a case that takes it, with ``plain_path`` naming the predicate that selects it
(check_fast_path_matches_plain then compares it with the plain path: values, dtype, layout,
empty batch, gradients).

The contract is split by what each module holds (each imports only the ones before it):
``cases`` (Case, CASES, DTYPES, make_batch), ``references`` (torchvision's per-sample
functional for each class, _REFERENCES), ``checks`` (CHECKS and CASE_CHECKS), ``sync``
(NoHostSync, check_no_host_sync) and ``targets`` (with_targets: TARGET_CHECKS and their
helpers). This package re-exports their public names: ``from tests.contract import CASES``.
"""
from __future__ import annotations

from tests.contract.cases import (
    Case, CASES, DTYPES, make_batch, expected_dtype, expected_shape,
)
from tests.contract.checks import (
    check_shape_dtype_device, check_script_matches_eager, check_eval_behaviour,
    check_empty_batch, check_no_inplace, check_channels_last, check_seed_reproduces,
    check_per_sample, check_make_params, CHECKS, ALL_DTYPES, check_requires_grad,
    check_gradients, check_compiled_gradients, check_export_dynamic_batch, check_keyed,
    check_keys_length, check_script_every_dtype, check_fast_path_matches_plain, CASE_CHECKS,
)
from tests.contract.sync import (
    HostSyncError, NoHostSync, check_no_host_sync,
)
from tests.contract.targets import (
    GEOMETRIC_CLASSES, TARGET_CONTAINERS, TARGET_COMPILE_IDS, TARGET_REFUSERS,
    TARGET_EXPORT_IDS, MASK_FILL, is_geometric, target_module, target_case_is_geometric,
    nearest_module, make_targets, check_target_invariants, check_targets_coregistered,
    check_targets_boxes_enclose, check_targets_keypoints_land,
    check_targets_match_torchvision, check_targets_keyed_and_scripted, check_targets_export,
    check_targets_compile, check_targets_no_host_sync, check_targets_empty, TARGET_CHECKS,
    check_targets_passthrough, check_targets_refused,
)

__all__ = [
    "Case", "CASES", "DTYPES", "make_batch", "expected_dtype", "expected_shape",
    "check_shape_dtype_device", "check_script_matches_eager", "check_eval_behaviour",
    "check_empty_batch", "check_no_inplace", "check_channels_last", "check_seed_reproduces",
    "check_per_sample", "check_make_params", "CHECKS", "ALL_DTYPES", "check_requires_grad",
    "check_gradients", "check_compiled_gradients", "check_export_dynamic_batch",
    "check_keyed", "check_keys_length", "check_script_every_dtype",
    "check_fast_path_matches_plain", "CASE_CHECKS", "HostSyncError", "NoHostSync",
    "check_no_host_sync", "GEOMETRIC_CLASSES", "TARGET_CONTAINERS", "TARGET_COMPILE_IDS",
    "TARGET_REFUSERS", "TARGET_EXPORT_IDS", "MASK_FILL", "is_geometric", "target_module",
    "target_case_is_geometric", "nearest_module", "make_targets", "check_target_invariants",
    "check_targets_coregistered", "check_targets_boxes_enclose",
    "check_targets_keypoints_land", "check_targets_match_torchvision",
    "check_targets_keyed_and_scripted", "check_targets_export", "check_targets_compile",
    "check_targets_no_host_sync", "check_targets_empty", "TARGET_CHECKS",
    "check_targets_passthrough", "check_targets_refused",
]
