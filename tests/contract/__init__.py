"""The shared transform contract: every transform in CASES gets the common checks.

Adding a transform means adding one entry to CASES (see the format under the warp marker).
``tests/contract/test_contract.py`` runs every function in ``CHECKS`` on every case, for uint8 and
float32 input, so a new transform gets scripting, eval behaviour, empty batch, no in-place
change, channels_last, seeding and per-sample independence checks from one line.

Each check is ``check_x(case, dtype, device)`` and raises ``AssertionError`` on failure.

``CASE_CHECKS`` (``check_x(case)``, CPU, run once per case) add gradients (requires_grad,
float64 gradcheck, gradient equal to torchvision's per-sample functional with the same
parameters, aot_eager-compiled gradients), ``torch.export`` with a dynamic batch (batch 1, 7,
64; train and eval; train float32 exported with keys and compared with eager), scripted ==
eager for every input dtype, and keyed randomness (``check_keyed``: a random transform has
``takes_keys`` and ``forward(x, keys)``, and each sample's output depends only on its key). A new transform class also
needs a torchvision reference in ``_REFERENCES``; a new fast path needs a case that takes it,
with ``plain_path`` naming the predicate that selects it (check_fast_path_matches_plain then
compares it with the plain path: values, dtype, layout, empty batch, gradients).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, List, Optional, Tuple

import torch
from torch import Tensor, nn

from tests.contract import timm_reference as _timm_ref


@dataclass(frozen=True)
class Case:
    """One transform under the contract.

    id:        test id (usually the class name plus a hint of the arguments)
    factory:   builds a fresh module; called once per check (import inside the lambda body is
               fine: ``lambda: T.RandomRotation(30)`` with ``T = batchaug.transforms``)
    random:    True for per-sample random transforms: they must have ``make_params(x)``, be the
               identity in ``eval()``, reproduce under a seed and give per-sample different
               outputs for a batch of identical images. False: deterministic, always runs.
    out_dtype: the output dtype when the transform's job is to change it (Normalize, ToDtype);
               None means "same as input".
    out_size:  (H, W) of the output when it differs from the input, else None.
    in_size:   (H, W) of the test input batch.
    channels:  channel count of the test input (Normalize needs its own).
    exact_script: scripted output must equal eager exactly (set False only for kernels whose
               float arithmetic legitimately differs by rounding when scripted; the check then
               allows 1 uint8 step / 1e-5 float).
    affine:    with its parameters fixed the transform is affine in x (y = A x + b), so
               check_gradients runs the adjoint test against torchvision; False for clamped or
               piecewise colour ops (ColorJitter, solarize, posterize, sharpness, ...).
    tv_grad:   torchvision's kernel is differentiable, so the gradient is compared with its
               gradient (False for equalize, which bins through uint8 in torchvision).
    value_range: [low, high) of the test input's uint8 values (autocontrast needs images
               that do not span the full range to change them).
    """

    id: str
    factory: Callable[[], nn.Module]
    random: bool = True
    out_dtype: Optional[torch.dtype] = None
    out_size: Optional[Tuple[int, int]] = None
    in_size: Tuple[int, int] = (20, 24)
    channels: int = 3
    exact_script: bool = True
    affine: bool = True
    tv_grad: bool = True
    value_range: Tuple[int, int] = (0, 256)
    # A CPU fast path: "module.predicate" that, patched to return False, forces the plain
    # (batched) path in eager mode; check_fast_path_matches_plain then compares the two.
    # plain_tol: how far they may differ (0: exact; uint8 steps / float absolute otherwise).
    plain_path: Optional[str] = None
    plain_tol: float = 0.0
    # Draws that depend on the path (a RandomChoice over random branches: grouped per branch
    # on the CPU, every branch on every sample under compile): check_gradients and
    # check_compiled_gradients draw with keys, which make each sample's draw path-independent;
    # the reference then gets (make_params(x, keys), keys).
    keyed_draws: bool = False
    # --- targets (with_targets; the checks in the "targets" section below run on every case
    # whose module is a GeometricTransform, or a container/Augment with one inside) ---
    # target_factory: the module the target checks use, when the case's own is not the one to
    #            check targets on (a container of colour ops here gets geometric children).
    # tv_pinned: (our module, torchvision v2 equivalent) with every random range degenerate:
    #            boxes, keypoints and masks must equal torchvision's on tv_tensors, per sample.
    # tv_pinned_why: why no such pair exists (then tv_pinned is None; say where it is tested).
    # tv_tol:    absolute tolerance on pinned boxes/keypoints (0: exact; torchvision rounds its
    #            warp matrices to float32, batchaug moves points in float64).
    # target_samples(module, x, keys) -> (N,) int64: 1 the sample's geometry is only
    #            geometric ops (co-registration checked), 0 only colour ops (targets must come
    #            back unchanged), -1 both (not compared). None: all 1.
    target_factory: Optional[Callable[[], nn.Module]] = None
    tv_pinned: Optional[Callable[[], Tuple[nn.Module, nn.Module]]] = None
    tv_pinned_why: str = ""
    tv_tol: float = 0.0
    target_samples: Optional[Callable[[nn.Module, Tensor, Optional[Tensor]], Tensor]] = None
    # target_random: whether the target module is random (eval() leaves targets unchanged);
    # None: ``random``
    target_random: Optional[bool] = None


def _T():
    import batchaug.transforms as T

    return T


def _V2():
    from torchvision.transforms import v2

    return v2


def _Augment():
    from batchaug import Augment

    return Augment


def _NEAREST():
    from torchvision.transforms import InterpolationMode

    return InterpolationMode.NEAREST


def _BILINEAR():
    from torchvision.transforms import InterpolationMode

    return InterpolationMode.BILINEAR


def _BICUBIC():
    from torchvision.transforms import InterpolationMode

    return InterpolationMode.BICUBIC


def _tv_fill(image_fill):
    """torchvision's fill for the images only: masks get 0, batchaug's default mask_fill."""
    from torchvision import tv_tensors

    return {tv_tensors.Image: image_fill, "others": 0}


def _branch_samples(branch: Tensor, colour: List[int]) -> Tensor:
    """target_samples of a RandomChoice: 0 where the sample took a colour branch, else 1."""
    out = torch.ones_like(branch)
    for b in colour:
        out = torch.where(branch == b, torch.zeros_like(out), out)
    return out


# op ids 1-5 (ShearX/Y, TranslateX/Y, Rotate) are geometric, 0 the identity, >= 6 colour ops
def _policy_samples(m: nn.Module, x: Tensor, keys: Optional[Tensor]) -> Tensor:
    op = m.make_params(x, keys)[0]
    op = op.view(op.shape[0], -1)
    geometric = (op <= 5).all(dim=1)
    colour = ((op == 0) | (op >= 6)).all(dim=1)
    return torch.where(geometric, torch.ones_like(op[:, 0]),
                       torch.where(colour, torch.zeros_like(op[:, 0]), -torch.ones_like(op[:, 0])))


_POLICY_WHY = ("torchvision draws each op from the policy's whole space (no argument restricts "
               "it), so no construction pins the op; the random-parameter checks cover it")
_TIMM_POLICY_WHY = ("timm's ops exist only for PIL images (no torchvision equivalent moves "
                    "targets); pinned ops against the image warp's matrix: "
                    "tests/transforms/test_policy_targets.py")


CASES: List[Case] = [
    # --- basic transform cases ---
    Case("RandomHorizontalFlip", lambda: _T().RandomHorizontalFlip(0.5),
         tv_pinned=lambda: (_T().RandomHorizontalFlip(1.0), _V2().RandomHorizontalFlip(1.0))),
    Case("RandomVerticalFlip", lambda: _T().RandomVerticalFlip(0.5),
         tv_pinned=lambda: (_T().RandomVerticalFlip(1.0), _V2().RandomVerticalFlip(1.0))),
    # pinned crops: the crop as large as the padded image, so its position is fixed
    Case("RandomCrop-pad4-constant", lambda: _T().RandomCrop(20, padding=4), out_size=(20, 20),
         tv_pinned=lambda: (_T().RandomCrop((28, 32), padding=4),
                            _V2().RandomCrop((28, 32), padding=4))),
    Case("RandomCrop-reflect", lambda: _T().RandomCrop((16, 18), padding=(2, 3),
                                                       padding_mode="reflect"),
         out_size=(16, 18),
         tv_pinned=lambda: (_T().RandomCrop((26, 28), padding=(2, 3), padding_mode="reflect"),
                            _V2().RandomCrop((26, 28), padding=(2, 3), padding_mode="reflect"))),
    Case("RandomCrop-symmetric-4pad", lambda: _T().RandomCrop(
        24, padding=[1, 2, 3, 4], padding_mode="symmetric", pad_if_needed=True),
         out_size=(24, 24),
         tv_pinned=lambda: (_T().RandomCrop((26, 28), padding=[1, 2, 3, 4],
                                            padding_mode="symmetric"),
                            _V2().RandomCrop((26, 28), padding=[1, 2, 3, 4],
                                             padding_mode="symmetric"))),
    Case("RandomCrop-edge", lambda: _T().RandomCrop(12, padding=2, padding_mode="edge"),
         out_size=(12, 12),
         tv_pinned=lambda: (_T().RandomCrop((24, 28), padding=2, padding_mode="edge"),
                            _V2().RandomCrop((24, 28), padding=2, padding_mode="edge"))),
    Case("CenterCrop", lambda: _T().CenterCrop((10, 30)), random=False, out_size=(10, 30),
         tv_pinned=lambda: (_T().CenterCrop((10, 30)), _V2().CenterCrop((10, 30)))),
    Case("Pad-constant-per-channel", lambda: _T().Pad([1, 2, 3, 4], fill=[10, 20, 30]),
         random=False, out_size=(26, 28),
         tv_pinned=lambda: (_T().Pad([1, 2, 3, 4], fill=[10, 20, 30]),
                            _V2().Pad([1, 2, 3, 4], fill=_tv_fill([10, 20, 30])))),
    Case("Pad-reflect", lambda: _T().Pad((3, 2), padding_mode="reflect"), random=False,
         out_size=(24, 30),
         tv_pinned=lambda: (_T().Pad((3, 2), padding_mode="reflect"),
                            _V2().Pad((3, 2), padding_mode="reflect"))),
    Case("Pad-symmetric", lambda: _T().Pad(5, padding_mode="symmetric"), random=False,
         out_size=(30, 34),
         tv_pinned=lambda: (_T().Pad(5, padding_mode="symmetric"),
                            _V2().Pad(5, padding_mode="symmetric"))),
    Case("Normalize", lambda: _T().Normalize([0.5, 0.4, 0.3], [0.2, 0.25, 0.3]), random=False,
         out_dtype=torch.float32),
    Case("Normalize-fp16", lambda: _T().Normalize([0.5], [0.2], dtype=torch.float16),
         random=False, out_dtype=torch.float16, channels=1),
    Case("ToDtype-float-scale", lambda: _T().ToDtype(torch.float32, scale=True), random=False,
         out_dtype=torch.float32),
    Case("ToDtype-uint8-scale", lambda: _T().ToDtype(torch.uint8, scale=True), random=False,
         out_dtype=torch.uint8),
    # Fast paths need their own cases: a crop as wide as the image takes pad_crop's flat path
    # (CIFAR's RandomCrop(32, padding=4)); half outputs once rounded differently when scripted.
    Case("RandomCrop-full-width", lambda: _T().RandomCrop((20, 24), padding=4),
         out_size=(20, 24), plain_path="batchaug.functional._crop._flat_crop_applies",
         tv_pinned=lambda: (_T().RandomCrop((28, 32), padding=4),
                            _V2().RandomCrop((28, 32), padding=4))),
    Case("ToDtype-bfloat16-scale", lambda: _T().ToDtype(torch.bfloat16, scale=True),
         random=False, out_dtype=torch.bfloat16),
    Case("ToDtype-float16-scale", lambda: _T().ToDtype(torch.float16, scale=True),
         random=False, out_dtype=torch.float16),
    # dtype=None follows the module's cast, as in a bfloat16 model
    Case("Normalize-module-bf16", lambda: _T().Normalize([0.5, 0.4, 0.3], [0.2, 0.25, 0.3])
         .to(torch.bfloat16), random=False, out_dtype=torch.bfloat16),
    # --- warp transform cases ---
    # One entry per transform, e.g.
    #   Case("RandomRotation", lambda: _T().RandomRotation(30)),
    #   Case("RandomResizedCrop", lambda: _T().RandomResizedCrop(16), out_size=(16, 16)),
    #   Case("Resize", lambda: _T().Resize((10, 12)), random=False, out_size=(10, 12)),
    # Fields: see Case above (random=False for deterministic ones; out_dtype/out_size when the
    # output differs from the input; exact_script=False only if scripting changes rounding).
    # pinned warps: a one-value range of degrees/scale/shear; translate (0, 0)
    Case("RandomRotation-nearest", lambda: _T().RandomRotation(30),
         tv_pinned=lambda: (_T().RandomRotation((-37.5, -37.5)),
                            _V2().RandomRotation((-37.5, -37.5))), tv_tol=1e-3),
    Case("RandomRotation-bilinear-fill-center", lambda: _T().RandomRotation(
        (-20, 45), interpolation="bilinear", center=(3, 5), fill=[10, 20, 30]),
         # 40, not 45: at 45 degrees about an integer centre sample points fall exactly on
         # pixel edges, where float rounding order picks the nearest pixel (batchaug's and
         # torchvision's nearest images differ there too, 2-4 pixels on the diagonal)
         tv_pinned=lambda: (_T().RandomRotation((40, 40), interpolation="bilinear",
                                                center=(3, 5), fill=[10, 20, 30]),
                            _V2().RandomRotation((40, 40), interpolation=_BILINEAR(),
                                                 center=[3, 5], fill=_tv_fill([10, 20, 30]))),
         tv_tol=1e-3),
    Case("RandomAffine-nearest", lambda: _T().RandomAffine(30, translate=(0.1, 0.2)),
         tv_pinned=lambda: (_T().RandomAffine((-30, -30), translate=(0.0, 0.0)),
                            _V2().RandomAffine((-30, -30), translate=(0.0, 0.0))), tv_tol=1e-3),
    Case("RandomAffine-bilinear-all", lambda: _T().RandomAffine(
        (-20, 45), translate=(0.2, 0.1), scale=(0.7, 1.2), shear=(-10, 10, -5, 15),
        interpolation="bilinear", fill=[10, 20, 30], center=(3, 5)),
         tv_pinned=lambda: (_T().RandomAffine(
             (20, 20), translate=(0.0, 0.0), scale=(0.8, 0.8), shear=(10, 10, -5, -5),
             interpolation="bilinear", fill=[10, 20, 30], center=(3, 5)),
             _V2().RandomAffine((20, 20), translate=(0.0, 0.0), scale=(0.8, 0.8),
                                shear=(10, 10, -5, -5), interpolation=_BILINEAR(),
                                fill=_tv_fill([10, 20, 30]), center=[3, 5])), tv_tol=1e-3),
    # torchvision draws each corner offset in [0, distortion_scale * side / 2]: only
    # distortion_scale=0 pins it (the identity warp, run with p=1); non-trivial perspective
    # targets against torchvision: tests/transforms/test_targets.py (perspective_to_matrix)
    Case("RandomPerspective", lambda: _T().RandomPerspective(),
         tv_pinned=lambda: (_T().RandomPerspective(0.0, p=1.0),
                            _V2().RandomPerspective(0.0, p=1.0)), tv_tol=1e-3),
    Case("RandomPerspective-nearest-fill", lambda: _T().RandomPerspective(
        0.8, p=0.8, interpolation="nearest", fill=[10, 20, 30]),
         tv_pinned=lambda: (_T().RandomPerspective(0.0, p=1.0, fill=[10, 20, 30]),
                            _V2().RandomPerspective(0.0, p=1.0, fill=_tv_fill([10, 20, 30]))),
         tv_tol=1e-3),
    # eval_crop_pct=None: eval() is the identity (the contract's rule for random transforms);
    # the default eval() centre crop + resize is tested in tests/transforms/test_warp.py.
    # antialias=True (default) on CPU takes the per-box F.interpolate loop (eager/scripted);
    # compile/export take the batched filter, compared with it in check_compiled_gradients
    # and tests/transforms/test_warp.py. antialias=False is the batched grid_sample path everywhere.
    # pinned resized crops: scale (1, 1) and the image's own ratio 24/20 make torchvision's box
    # the whole image (its position is drawn otherwise); crops of other boxes against
    # torchvision: tests/transforms/test_targets.py (resized_crop_matrix)
    Case("RandomResizedCrop", lambda: _T().RandomResizedCrop(16, eval_crop_pct=None),
         out_size=(16, 16), plain_path="batchaug.functional._resize._chunked", plain_tol=1.0,
         tv_pinned=lambda: (_T().RandomResizedCrop(16, scale=(1.0, 1.0), ratio=(1.2, 1.2),
                                                   eval_crop_pct=None),
                            _V2().RandomResizedCrop(16, scale=(1.0, 1.0), ratio=(1.2, 1.2))),
         tv_tol=1e-4),
    Case("RandomResizedCrop-no-antialias", lambda: _T().RandomResizedCrop(
        (14, 18), antialias=False, eval_crop_pct=None), out_size=(14, 18),
         tv_pinned=lambda: (_T().RandomResizedCrop((14, 18), scale=(1.0, 1.0), ratio=(1.2, 1.2),
                                                   antialias=False, eval_crop_pct=None),
                            _V2().RandomResizedCrop((14, 18), scale=(1.0, 1.0),
                                                    ratio=(1.2, 1.2), antialias=False)),
         tv_tol=1e-4),
    Case("RandomResizedCrop-nearest", lambda: _T().RandomResizedCrop(
        (10, 30), scale=(0.2, 0.9), interpolation="nearest", eval_crop_pct=None),
         out_size=(10, 30),
         tv_pinned=lambda: (_T().RandomResizedCrop((10, 30), scale=(1.0, 1.0), ratio=(1.2, 1.2),
                                                   interpolation="nearest", eval_crop_pct=None),
                            _V2().RandomResizedCrop((10, 30), scale=(1.0, 1.0),
                                                    ratio=(1.2, 1.2), interpolation=_NEAREST())),
         tv_tol=1e-4),
    # bicubic: per box on CPU eager/scripted, batched separable matrices elsewhere (uint8 within
    # 2 steps: fixed-point vs float weights, each pass rounded)
    Case("RandomResizedCrop-bicubic", lambda: _T().RandomResizedCrop(
        (12, 14), interpolation="bicubic", eval_crop_pct=None), out_size=(12, 14),
         plain_path="batchaug.functional._resize._chunked", plain_tol=2.0,
         tv_pinned=lambda: (_T().RandomResizedCrop((12, 14), scale=(1.0, 1.0), ratio=(1.2, 1.2),
                                                   interpolation="bicubic", eval_crop_pct=None),
                            _V2().RandomResizedCrop((12, 14), scale=(1.0, 1.0),
                                                    ratio=(1.2, 1.2), interpolation=_BICUBIC())),
         tv_tol=1e-4),
    Case("RandomResizedCrop-bicubic-no-antialias", lambda: _T().RandomResizedCrop(
        (14, 12), interpolation="bicubic", antialias=False, eval_crop_pct=None),
         out_size=(14, 12), plain_path="batchaug.functional._resize._chunked", plain_tol=2.0,
         tv_pinned=lambda: (_T().RandomResizedCrop((14, 12), scale=(1.0, 1.0), ratio=(1.2, 1.2),
                                                   interpolation="bicubic", antialias=False,
                                                   eval_crop_pct=None),
                            _V2().RandomResizedCrop((14, 12), scale=(1.0, 1.0), ratio=(1.2, 1.2),
                                                    interpolation=_BICUBIC(), antialias=False)),
         tv_tol=1e-4),
    Case("Resize", lambda: _T().Resize((10, 12)), random=False, out_size=(10, 12),
         tv_pinned=lambda: (_T().Resize((10, 12)), _V2().Resize((10, 12))), tv_tol=1e-4),
    Case("Resize-bicubic", lambda: _T().Resize((10, 30), interpolation="bicubic"), random=False,
         out_size=(10, 30),
         tv_pinned=lambda: (_T().Resize((10, 30), interpolation="bicubic"),
                            _V2().Resize((10, 30), interpolation=_BICUBIC())), tv_tol=1e-4),
    Case("Resize-max-size", lambda: _T().Resize(18, max_size=20), random=False,
         out_size=(17, 20),
         tv_pinned=lambda: (_T().Resize(18, max_size=20), _V2().Resize(18, max_size=20)),
         tv_tol=1e-4),
    Case("Resize-shorter-side-nearest", lambda: _T().Resize(10, interpolation="nearest"),
         random=False, out_size=(10, 12),
         tv_pinned=lambda: (_T().Resize(10, interpolation="nearest"),
                            _V2().Resize(10, interpolation=_NEAREST())), tv_tol=1e-4),
    # --- colour, blur, erasing and container cases (issue 9) ---
    # grouped by step on CPU; static elsewhere (every adjustment, torch.where; uint8: the
    # grouped phases with per-sample weights): plain_path compares the two
    Case("ColorJitter", lambda: _T().ColorJitter(0.4, 0.4, 0.4, 0.1), affine=False,
         plain_path="batchaug.transforms._color.group_on_host"),
    Case("ColorJitter-hue-only", lambda: _T().ColorJitter(hue=(-0.5, 0.5)), affine=False,
         plain_path="batchaug.transforms._color.group_on_host"),
    Case("Grayscale-3", lambda: _T().Grayscale(3), random=False),
    Case("RandomGrayscale", lambda: _T().RandomGrayscale(0.5)),
    Case("RandomInvert", lambda: _T().RandomInvert(0.5)),
    Case("RandomPosterize", lambda: _T().RandomPosterize(3, p=0.5), affine=False),
    Case("RandomSolarize", lambda: _T().RandomSolarize(0.5, p=0.5), affine=False),
    Case("RandomAdjustSharpness", lambda: _T().RandomAdjustSharpness(3.0, p=0.5), affine=False),
    Case("RandomAutocontrast", lambda: _T().RandomAutocontrast(0.5), affine=False,
         value_range=(40, 200)),
    Case("RandomEqualize", lambda: _T().RandomEqualize(0.5), affine=False, tv_grad=False),
    Case("GaussianBlur", lambda: _T().GaussianBlur((5, 3), sigma=(0.1, 2.0))),
    Case("RandomErasing-per-channel", lambda: _T().RandomErasing(
        p=0.8, scale=(0.05, 0.3), value=[0.25, 0.5, 0.75])),
    # inner transforms deterministic in effect, so grouped (eager) == static (compiled) and a
    # torchvision reference exists; random inner transforms: tests/transforms/test_container.py
    # (plain_path: the static path, which accelerators take, against the grouped one)
    # target_factory: the containers' targets are checked with random geometric children
    # (RandomChoice also with a colour branch, whose samples keep their targets)
    Case("RandomApply", lambda: _T().RandomApply([_T().RandomInvert(1.0), _T().Grayscale(3)]),
         plain_path="batchaug.transforms._container.group_on_host",
         target_factory=lambda: _T().RandomApply(
             [_T().RandomHorizontalFlip(0.5), _T().RandomRotation(20)], p=0.7),
         tv_pinned=lambda: (
             _T().RandomApply([_T().RandomHorizontalFlip(1.0), _T().RandomRotation((20, 20))],
                              p=1.0),
             _V2().RandomApply([_V2().RandomHorizontalFlip(1.0), _V2().RandomRotation((20, 20))],
                               p=1.0)), tv_tol=1e-3),
    Case("RandomChoice", lambda: _T().RandomChoice(
        [_T().RandomInvert(1.0), _T().Grayscale(3), _T().RandomHorizontalFlip(1.0)],
        p=[2, 1, 1]), plain_path="batchaug.transforms._container.group_on_host",
         target_factory=lambda: _T().RandomChoice(
             [_T().RandomHorizontalFlip(1.0), _T().RandomRotation(30), _T().RandomInvert(1.0)]),
         target_samples=lambda m, x, keys: _branch_samples(m.make_params(x, keys), [2]),
         tv_pinned=lambda: (_T().RandomChoice([_T().RandomVerticalFlip(1.0)]),
                            _V2().RandomChoice([_V2().RandomVerticalFlip(1.0)]))),
    Case("RandomOrder", lambda: _T().RandomOrder([_T().RandomInvert(1.0), _T().Grayscale(3)]),
         plain_path="batchaug.transforms._container.group_on_host",
         target_factory=lambda: _T().RandomOrder(
             [_T().RandomHorizontalFlip(0.5), _T().RandomRotation(20),
              _T().RandomVerticalFlip(0.5)]),
         tv_pinned=lambda: (
             _T().RandomOrder([_T().RandomHorizontalFlip(1.0), _T().RandomVerticalFlip(1.0)]),
             _V2().RandomOrder([_V2().RandomHorizontalFlip(1.0),
                                _V2().RandomVerticalFlip(1.0)]))),
    # Augment of deterministic steps (train == eval); its targets: a typical segmentation
    # pipeline (random resized crop, flip, rotation)
    Case("Augment", lambda: _Augment()(_T().Grayscale(3), _T().CenterCrop((16, 20))),
         random=False, out_size=(16, 20),
         target_factory=lambda: _Augment()(
             _T().RandomResizedCrop((16, 20), scale=(0.3, 1.0), eval_crop_pct=None),
             _T().RandomHorizontalFlip(), _T().RandomRotation(20)), target_random=True,
         tv_pinned=lambda: (
             _Augment()(_T().RandomRotation((25, 25)), _T().RandomHorizontalFlip(1.0),
                        _T().CenterCrop((16, 20))),
             _V2().Compose([_V2().RandomRotation((25, 25)), _V2().RandomHorizontalFlip(1.0),
                            _V2().CenterCrop((16, 20))])), tv_tol=1e-3),
    # --- automatic augmentation policies (issue 10): grouped by op in eager/TorchScript,
    # static (every op, torch.where) under compile/export; group_by_branch=False, fill and
    # bilinear in tests/transforms/test_auto_augment.py (grouped == static there) ---
    Case("TrivialAugmentWide", lambda: _T().TrivialAugmentWide(), affine=False, tv_grad=False,
         target_samples=_policy_samples, tv_pinned_why=_POLICY_WHY,
         plain_path="batchaug.transforms._auto_augment.group_on_host", plain_tol=1e-5),
    Case("RandAugment", lambda: _T().RandAugment(num_ops=2, magnitude=9), affine=False,
         target_samples=_policy_samples, tv_pinned_why=_POLICY_WHY,
         tv_grad=False,
         plain_path="batchaug.transforms._auto_augment.group_on_host", plain_tol=1e-5),
    Case("AutoAugment-svhn", lambda: _T().AutoAugment("svhn"), affine=False, tv_grad=False,
         target_samples=_policy_samples, tv_pinned_why=_POLICY_WHY,
         plain_path="batchaug.transforms._auto_augment.group_on_host", plain_tol=1e-5),
    # one chain of one op: the default 3x3 chains reach points where posterize/solarize jump
    # (a step of the function itself), which float64 gradcheck reads as a wrong gradient;
    # tests/transforms/test_auto_augment.py checks the default AugMix against torchvision
    Case("AugMix", lambda: _T().AugMix(mixture_width=1, chain_depth=1), affine=False,
         tv_grad=False,
         plain_path="batchaug.transforms._auto_augment.group_on_host", plain_tol=1e-5),
    # --- timm's policies and erasing (from_timm), references in tests/contract/timm_reference.py ---
    # weighted op choice without replacement, magnitude noise, nearest warps; the AutoAugment
    # and AugMix cases warp bilinearly (v0 is left out: its Solarize/Posterize jumps make
    # float64 gradcheck read finite differences across a step)
    Case("TimmRandAugment-weighted-mstd", lambda: _T().TimmRandAugment(
        9, prob=0.8, magnitude_std=0.5, ops=list(_T()._timm.RAND_WEIGHTS),
        choice_weights=list(_T()._timm.RAND_WEIGHTS.values()), interpolation="nearest"),
         affine=False, tv_grad=False, target_samples=_policy_samples,
         tv_pinned_why=_TIMM_POLICY_WHY,
         # fill 0: the target checks read grey (timm's default fill) as the box's pixels
         target_factory=lambda: _T().TimmRandAugment(
             9, prob=0.8, magnitude_std=0.5, ops=list(_T()._timm.RAND_WEIGHTS),
             choice_weights=list(_T()._timm.RAND_WEIGHTS.values()), interpolation="nearest",
             fill=0),
         plain_path="batchaug.transforms._timm.group_on_host", plain_tol=1e-5),
    Case("TimmAutoAugment-original", lambda: _T().TimmAutoAugment("original"), affine=False,
         tv_grad=False, target_samples=_policy_samples, tv_pinned_why=_TIMM_POLICY_WHY,
         target_factory=lambda: _T().TimmAutoAugment("original", fill=0),
         plain_path="batchaug.transforms._timm.group_on_host", plain_tol=1e-5),
    Case("TimmAugMix", lambda: _T().TimmAugMix(5, width=1, depth=1), affine=False,
         tv_grad=False,
         plain_path="batchaug.transforms._timm.group_on_host", plain_tol=1e-5),
    Case("TimmRandomErasing", lambda: _T().TimmRandomErasing(0.8, max_count=3)),
    # per-sample bilinear or bicubic (eval_crop_pct=None: eval() is the identity; the centre
    # crop is tested in tests/integrations/test_timm.py); its box law against timm's: tests/integrations/test_timm.py
    Case("TimmRandomResizedCrop", lambda: _T().TimmRandomResizedCrop(
        (12, 14), eval_crop_pct=None), out_size=(12, 14), keyed_draws=True,
         plain_path="batchaug.functional._resize._chunked", plain_tol=2.0,
         tv_pinned=lambda: (_T().TimmRandomResizedCrop((12, 14), scale=(1.0, 1.0),
                                                       ratio=(1.2, 1.2), eval_crop_pct=None),
                            _V2().RandomResizedCrop((12, 14), scale=(1.0, 1.0),
                                                    ratio=(1.2, 1.2))), tv_tol=1e-4),
]

DTYPES = [torch.uint8, torch.float32]


# ----------------------------------------------------------------------------- helpers

def make_batch(case: Case, dtype: torch.dtype, device: str, n: int = 6, seed: int = 0) -> Tensor:
    """A random (n, C, H, W) batch with distinct content per sample (so flips etc. show)."""
    g = torch.Generator().manual_seed(seed)
    h, w = case.in_size
    lo, hi = case.value_range
    x = torch.randint(lo, hi, (n, case.channels, h, w), generator=g, dtype=torch.uint8)
    if dtype != torch.uint8:
        x = (x.to(torch.float32) / 255).to(dtype)
    return x.to(device)


def expected_dtype(case: Case, dtype: torch.dtype) -> torch.dtype:
    return dtype if case.out_dtype is None else case.out_dtype


def expected_shape(case: Case, n: int) -> Tuple[int, int, int, int]:
    h, w = case.out_size if case.out_size is not None else case.in_size
    return (n, case.channels, h, w)


def _run(module: nn.Module, x: Tensor, seed: int) -> Tensor:
    torch.manual_seed(seed)
    if x.is_cuda:
        torch.cuda.manual_seed_all(seed)
    return module(x)


def _assert_close(a: Tensor, b: Tensor, exact: bool, what: str) -> None:
    assert a.shape == b.shape, f"{what}: shapes differ {a.shape} vs {b.shape}"
    assert a.dtype == b.dtype, f"{what}: dtypes differ {a.dtype} vs {b.dtype}"
    if exact:
        assert torch.equal(a, b), f"{what}: outputs differ (max abs diff " \
            f"{(a.double() - b.double()).abs().max().item() if a.numel() else 0})"
    else:
        atol = 1.0 if a.dtype == torch.uint8 else 1e-5
        torch.testing.assert_close(a.double(), b.double(), atol=atol, rtol=0, msg=what)


# ----------------------------------------------------------------------------- checks

def check_shape_dtype_device(case: Case, dtype: torch.dtype, device: str) -> None:
    x = make_batch(case, dtype, device)
    for mode in ("train", "eval"):
        m = case.factory().to(device)
        m.train(mode == "train")
        y = m(x)
        if case.random and mode == "eval":
            assert y.shape == x.shape and y.dtype == x.dtype
            continue
        assert tuple(y.shape) == expected_shape(case, x.shape[0]), (mode, y.shape)
        assert y.dtype == expected_dtype(case, dtype), (mode, y.dtype)
        assert y.device == x.device


def check_script_matches_eager(case: Case, dtype: torch.dtype, device: str) -> None:
    m = case.factory().to(device)
    s = torch.jit.script(m)
    x = make_batch(case, dtype, device)
    for seed in (0, 1):
        _assert_close(_run(s, x, seed), _run(m, x, seed), case.exact_script,
                      f"{case.id} scripted vs eager (train, seed {seed})")
    m.eval()
    s.eval()
    # eval must be exact: nothing random happens there.
    _assert_close(s(x), m(x), True, f"{case.id} scripted vs eager (eval)")


def check_eval_behaviour(case: Case, dtype: torch.dtype, device: str) -> None:
    m = case.factory().to(device).eval()
    x = make_batch(case, dtype, device)
    y = m(x)
    if case.random:
        assert y is x or torch.equal(y, x), f"{case.id}: random transform must be identity in eval"
    else:
        # deterministic transforms always run, the same in train and eval
        m2 = case.factory().to(device).train()
        assert torch.equal(y, m2(x)), f"{case.id}: deterministic transform differs train/eval"


def check_empty_batch(case: Case, dtype: torch.dtype, device: str) -> None:
    x = make_batch(case, dtype, device, n=0)
    for train in (True, False):
        m = case.factory().to(device).train(train)
        y = m(x)
        assert y.shape[0] == 0, f"{case.id}: empty batch gave {y.shape}"
        if train or not case.random:
            assert tuple(y.shape) == expected_shape(case, 0)
            assert y.dtype == expected_dtype(case, dtype)


def check_no_inplace(case: Case, dtype: torch.dtype, device: str) -> None:
    x = make_batch(case, dtype, device)
    before = x.clone()
    version = x._version
    for train in (True, False):
        m = case.factory().to(device).train(train)
        y = m(x)
        assert x._version == version, f"{case.id}: input modified in place (version bumped)"
        assert torch.equal(x, before), f"{case.id}: input values changed"
        if y.data_ptr() == x.data_ptr() and y.numel() and not (case.random and not train):
            # A view of the input is only allowed as the identity.
            assert torch.equal(y, x)


def check_channels_last(case: Case, dtype: torch.dtype, device: str) -> None:
    x = make_batch(case, dtype, device)
    xc = x.contiguous(memory_format=torch.channels_last)
    m = case.factory().to(device)
    _assert_close(_run(m, xc, 3), _run(m, x, 3), True, f"{case.id}: channels_last vs contiguous")


def check_seed_reproduces(case: Case, dtype: torch.dtype, device: str) -> None:
    m = case.factory().to(device)
    x = make_batch(case, dtype, device, n=16)
    assert torch.equal(_run(m, x, 7), _run(m, x, 7)), f"{case.id}: same seed, different output"


def check_per_sample(case: Case, dtype: torch.dtype, device: str) -> None:
    if not case.random:
        return
    m = case.factory().to(device)
    x = make_batch(case, dtype, device, n=1).expand(64, -1, -1, -1).contiguous()
    y = _run(m, x, 11)
    flat = y.reshape(y.shape[0], -1)
    distinct = torch.unique(flat, dim=0).shape[0]
    assert distinct > 1, f"{case.id}: 64 identical images all came out the same (one draw per batch?)"
    # and a different seed gives a different batch
    assert not torch.equal(y, _run(m, x, 12)), f"{case.id}: output does not depend on the seed"


def check_make_params(case: Case, dtype: torch.dtype, device: str) -> None:
    m = case.factory().to(device)
    if not case.random:
        return
    assert callable(getattr(m, "make_params", None)), f"{case.id}: random transform lacks make_params"
    x = make_batch(case, dtype, device)
    params = m.make_params(x)
    tensors = list(params) if isinstance(params, (tuple, list)) else [params]
    for p in tensors:
        if isinstance(p, Tensor):
            assert p.device == x.device, f"{case.id}: make_params drew on {p.device}, not {x.device}"
            assert p.shape[0] == x.shape[0], f"{case.id}: params are not per sample: {p.shape}"


CHECKS: List[Callable[[Case, torch.dtype, str], None]] = [
    check_shape_dtype_device,
    check_script_matches_eager,
    check_eval_behaviour,
    check_empty_batch,
    check_no_inplace,
    check_channels_last,
    check_seed_reproduces,
    check_per_sample,
    check_make_params,
]


# ----------------------------------------------------------------------------- once-per-case
# Gradients, export with a dynamic batch, compile, and every input dtype. They do not depend on
# the contract's input dtype (uint8/float32 above), so tests/contract/test_contract.py runs each of them
# once per case (CASE_CHECKS). A new transform needs a torchvision reference in _REFERENCES.

ALL_DTYPES = [torch.uint8, torch.float16, torch.bfloat16, torch.float32, torch.float64]


def _tv_pad(m: nn.Module, x: Tensor, pad: List[int]) -> Tensor:
    import torchvision.transforms.v2.functional as TF

    fill = m.fill[0] if len(m.fill) == 1 else list(m.fill)
    return TF.pad(x, pad, fill=fill, padding_mode=m.padding_mode)


def _ref_hflip(m: nn.Module, x: Tensor, mask: Tensor) -> Tensor:
    return torch.stack([x[i].flip(-1) if bool(mask[i]) else x[i] for i in range(x.shape[0])])


def _ref_vflip(m: nn.Module, x: Tensor, mask: Tensor) -> Tensor:
    return torch.stack([x[i].flip(-2) if bool(mask[i]) else x[i] for i in range(x.shape[0])])


def _ref_random_crop(m: nn.Module, x: Tensor, params) -> Tensor:
    import torchvision.transforms.v2.functional as TF

    top, left = params
    pad = m.padding_for(x.shape[2], x.shape[3])
    out = []
    for i in range(x.shape[0]):
        xi = _tv_pad(m, x[i], pad) if sum(pad) else x[i]
        out.append(TF.crop(xi, int(top[i]), int(left[i]), m.height, m.width))
    return torch.stack(out)


def _ref_rotation(m: nn.Module, x: Tensor, angle: Tensor) -> Tensor:
    import torchvision.transforms.v2.functional as TF

    fill = None if m.fill is None else list(m.fill)
    return torch.stack([
        TF.rotate(x[i], float(angle[i]), m.interpolation, False, m.center, fill)
        for i in range(x.shape[0])
    ])


def _ref_affine(m: nn.Module, x: Tensor, params) -> Tensor:
    import torchvision.transforms.v2.functional as TF

    angle, translate, scale, shear = params
    fill = m.fill[0] if len(m.fill) == 1 else list(m.fill)
    return torch.stack([
        TF.affine(x[i], float(angle[i]), [int(translate[i, 0]), int(translate[i, 1])],
                  float(scale[i]), [float(shear[i, 0]), float(shear[i, 1])], m.interpolation,
                  fill, m.center)
        for i in range(x.shape[0])
    ])


def _ref_perspective(m: nn.Module, x: Tensor, params) -> Tensor:
    import torchvision.transforms.v2.functional as TF

    mask, ends = params
    h, w = x.shape[-2], x.shape[-1]
    start = [[0, 0], [w - 1, 0], [w - 1, h - 1], [0, h - 1]]
    fill = m.fill[0] if len(m.fill) == 1 else list(m.fill)
    return torch.stack([
        TF.perspective(x[i], start, ends[i].tolist(), m.interpolation, fill) if bool(mask[i])
        else x[i] for i in range(x.shape[0])])


def _ref_resized_crop(m: nn.Module, x: Tensor, params) -> Tensor:
    import torchvision.transforms.v2.functional as TF

    t, l, h, w = params
    return torch.stack([
        TF.resized_crop(x[i], int(t[i]), int(l[i]), int(h[i]), int(w[i]), list(m.size),
                        m.interpolation, antialias=m.antialias)
        for i in range(x.shape[0])
    ])


def _ref_center_crop(m: nn.Module, x: Tensor, params) -> Tensor:
    import torchvision.transforms.v2.functional as TF

    return TF.center_crop(x, [m.height, m.width])


def _ref_pad(m: nn.Module, x: Tensor, params) -> Tensor:
    return _tv_pad(m, x, list(m.padding))


def _ref_resize(m: nn.Module, x: Tensor, params) -> Tensor:
    import torchvision.transforms.v2.functional as TF

    size = list(m.size) if len(m.size) else None
    return TF.resize(x, size, m.interpolation, max_size=m.max_size, antialias=m.antialias)


def _ref_normalize(m: nn.Module, x: Tensor, params) -> Tensor:
    import torchvision.transforms.v2.functional as TF

    c = x.shape[1]
    mean = m.mean.tolist() * (c if m.mean.numel() == 1 else 1)
    std = m.std.tolist() * (c if m.std.numel() == 1 else 1)
    return TF.normalize(x, mean, std).to(m.out_dtype())


def _ref_to_dtype(m: nn.Module, x: Tensor, params) -> Tensor:
    import torchvision.transforms.v2.functional as TF

    return TF.to_dtype(x, m.dtype, scale=m.scale)


# --- colour / misc / container references (issue 9) ---

def _per_sample_ref(mask: Tensor, x: Tensor, fn: Callable[[Tensor], Tensor]) -> Tensor:
    return torch.stack([fn(x[i]) if bool(mask[i]) else x[i] for i in range(x.shape[0])])


def _tv_adjust(xi: Tensor, op: int, factor: float) -> Tensor:
    import torchvision.transforms.v2.functional as TF

    if op == 3 and xi.dtype == torch.float64 and xi.shape[0] == 3:
        # adjust_hue rounds through float32; its own HSV round trip, kept in float64
        from torchvision.transforms.v2.functional._color import _hsv_to_rgb, _rgb_to_hsv

        hsv = _rgb_to_hsv(xi)
        h = (hsv[0] + factor).remainder(1.0)
        return _hsv_to_rgb(torch.stack((h, hsv[1], hsv[2])))
    fns = [TF.adjust_brightness, TF.adjust_contrast, TF.adjust_saturation, TF.adjust_hue]
    return fns[op](xi, factor)


def _ref_color_jitter(m: nn.Module, x: Tensor, params) -> Tensor:
    factors, order = params
    out = []
    for i in range(x.shape[0]):
        xi = x[i]
        for op in order[i].tolist():
            xi = _tv_adjust(xi, op, float(factors[i, op]))
        out.append(xi)
    return torch.stack(out)


def _ref_grayscale(m: nn.Module, x: Tensor, params) -> Tensor:
    import torchvision.transforms.v2.functional as TF

    return TF.rgb_to_grayscale(x, m.num_output_channels)


def _ref_random_grayscale(m: nn.Module, x: Tensor, mask: Tensor) -> Tensor:
    import torchvision.transforms.v2.functional as TF

    return _per_sample_ref(mask, x, lambda t: TF.rgb_to_grayscale(t, t.shape[0]))


def _ref_invert(m: nn.Module, x: Tensor, mask: Tensor) -> Tensor:
    import torchvision.transforms.v2.functional as TF

    return _per_sample_ref(mask, x, TF.invert)


def _ref_posterize(m: nn.Module, x: Tensor, mask: Tensor) -> Tensor:
    import torchvision.transforms.v2.functional as TF

    return _per_sample_ref(mask, x, lambda t: TF.posterize(t, m.bits))


def _ref_solarize(m: nn.Module, x: Tensor, mask: Tensor) -> Tensor:
    import torchvision.transforms.v2.functional as TF

    return _per_sample_ref(mask, x, lambda t: TF.solarize(t, m.threshold))


def _ref_sharpness(m: nn.Module, x: Tensor, mask: Tensor) -> Tensor:
    import torchvision.transforms.v2.functional as TF

    return _per_sample_ref(mask, x, lambda t: TF.adjust_sharpness(t, m.sharpness_factor))


def _ref_autocontrast(m: nn.Module, x: Tensor, mask: Tensor) -> Tensor:
    import torchvision.transforms.v2.functional as TF

    return _per_sample_ref(mask, x, TF.autocontrast)


def _ref_equalize(m: nn.Module, x: Tensor, mask: Tensor) -> Tensor:
    import torchvision.transforms.v2.functional as TF

    return _per_sample_ref(mask, x, TF.equalize)


def _ref_gaussian_blur(m: nn.Module, x: Tensor, sigma: Tensor) -> Tensor:
    import torchvision.transforms.v2.functional as TF

    return torch.stack([TF.gaussian_blur(x[i], list(m.kernel_size), [float(sigma[i])] * 2)
                        for i in range(x.shape[0])])


def _ref_erasing(m: nn.Module, x: Tensor, params) -> Tensor:
    import torchvision.transforms.v2.functional as TF

    top, left, h, w = params[:4]  # params[4]: the module's value (the reference builds its own)
    v = torch.tensor(m.value, dtype=x.dtype).view(-1, 1, 1)
    return torch.stack([
        TF.erase(x[i], int(top[i]), int(left[i]), int(h[i]), int(w[i]), v) if int(h[i]) > 0
        else x[i] for i in range(x.shape[0])])


def _ref_seq(ts, xi: Tensor) -> Tensor:
    """Inner transforms that are deterministic in effect (Random*(p=1.0), Grayscale) through
    their torchvision functionals, one sample at a time."""
    import torchvision.transforms.v2.functional as TF

    for t in ts:
        name = type(t).__name__
        if name == "RandomInvert":
            xi = TF.invert(xi)
        elif name == "Grayscale":
            xi = TF.rgb_to_grayscale(xi, t.num_output_channels)
        elif name == "RandomHorizontalFlip":
            xi = xi.flip(-1)
        elif name == "CenterCrop":
            xi = TF.center_crop(xi, [t.height, t.width])
        else:
            raise AssertionError(f"no reference for {name} inside a container")
    return xi


def _ref_augment(m: nn.Module, x: Tensor, params) -> Tensor:
    return torch.stack([_ref_seq(list(m), x[i]) for i in range(x.shape[0])])


def _ref_random_apply(m: nn.Module, x: Tensor, mask: Tensor) -> Tensor:
    return _per_sample_ref(mask, x, lambda t: _ref_seq(m.transforms, t))


def _ref_random_choice(m: nn.Module, x: Tensor, branch: Tensor) -> Tensor:
    return torch.stack([_ref_seq([m.transforms[int(branch[i])]], x[i])
                        for i in range(x.shape[0])])


def _ref_random_order(m: nn.Module, x: Tensor, order: Tensor) -> Tensor:
    return torch.stack([_ref_seq([m.transforms[j] for j in order[i].tolist()], x[i])
                        for i in range(x.shape[0])])



# --- automatic augmentation references (issue 10): torchvision's own op application ---

def _tv_auto_op(m: nn.Module, xi: Tensor, op: int, magnitude: float) -> Tensor:
    """torchvision's ``_apply_image_or_video_transform`` of op id ``op`` on one image."""
    from torchvision.transforms import v2

    from batchaug.functional._auto_augment import OPS

    fill = m.fill
    tv = v2.TrivialAugmentWide(fill=None if fill is None else (
        fill[0] if len(fill) == 1 else list(fill)))
    return tv._apply_image_or_video_transform(xi, OPS[op], magnitude, m.interpolation, tv._fill)


def _ref_auto_ops(m: nn.Module, x: Tensor, params) -> Tensor:
    """TrivialAugmentWide / RandAugment / AutoAugment: each sample's ops in order."""
    op, mag = params
    if op.dim() == 1:
        op, mag = op.unsqueeze(1), mag.unsqueeze(1)
    out = []
    for i in range(x.shape[0]):
        xi = x[i]
        for s in range(op.shape[1]):
            xi = _tv_auto_op(m, xi, int(op[i, s]), float(mag[i, s]))
        out.append(xi)
    return torch.stack(out)


def _ref_augmix(m: nn.Module, x: Tensor, params) -> Tensor:
    """torchvision's AugMix.forward on one image with this sample's weights, ops, magnitudes."""
    weights, op, mag = params
    out = []
    for i in range(x.shape[0]):
        mix = weights[i, 0].view(1, 1, 1) * x[i]
        for c in range(op.shape[1]):
            aug = x[i]
            for s in range(op.shape[2]):
                aug = _tv_auto_op(m, aug, int(op[i, c, s]), float(mag[i, c, s]))
            mix = mix + weights[i, c + 1].view(1, 1, 1) * aug
        out.append(mix.to(x.dtype))
    return torch.stack(out)


# Per transform class: reference(module, x, make_params(x) or None) -> output, built from
# torchvision.transforms.v2.functional one sample at a time with the module's own parameters.
_REFERENCES = {
    "RandomHorizontalFlip": _ref_hflip,
    "RandomVerticalFlip": _ref_vflip,
    "RandomCrop": _ref_random_crop,
    "CenterCrop": _ref_center_crop,
    "Pad": _ref_pad,
    "Normalize": _ref_normalize,
    "ToDtype": _ref_to_dtype,
    "RandomRotation": _ref_rotation,
    "RandomAffine": _ref_affine,
    "RandomPerspective": _ref_perspective,
    "RandomResizedCrop": _ref_resized_crop,
    "Resize": _ref_resize,
    "ColorJitter": _ref_color_jitter,
    "Grayscale": _ref_grayscale,
    "RandomGrayscale": _ref_random_grayscale,
    "RandomInvert": _ref_invert,
    "RandomPosterize": _ref_posterize,
    "RandomSolarize": _ref_solarize,
    "RandomAdjustSharpness": _ref_sharpness,
    "RandomAutocontrast": _ref_autocontrast,
    "RandomEqualize": _ref_equalize,
    "GaussianBlur": _ref_gaussian_blur,
    "RandomErasing": _ref_erasing,
    "RandomApply": _ref_random_apply,
    "RandomChoice": _ref_random_choice,
    "RandomOrder": _ref_random_order,
    "Augment": _ref_augment,
    "TrivialAugmentWide": _ref_auto_ops,
    "RandAugment": _ref_auto_ops,
    "AutoAugment": _ref_auto_ops,
    "AugMix": _ref_augmix,
    "TimmRandAugment": _timm_ref.ref_timm_ops,
    "TimmAutoAugment": _timm_ref.ref_timm_ops,
    "TimmAugMix": _timm_ref.ref_timm_augmix,
    "TimmRandomErasing": _timm_ref.ref_timm_erasing,
    "TimmRandomResizedCrop": _timm_ref.ref_timm_resized_crop,
}


def _seeded(m: nn.Module, seed: int, keys: Optional[Tensor] = None) -> Callable[[Tensor], Tensor]:
    """m with fixed random parameters: the same draw on every call (gradcheck calls it often);
    with ``keys``, ``m(x, keys)``."""
    def f(x: Tensor) -> Tensor:
        torch.manual_seed(seed)
        return m(x) if keys is None else m(x, keys)
    return f


def _case_keys(case: Case, n: int, seed: int) -> Optional[Tensor]:
    """Keys for a ``keyed_draws`` case, else None."""
    if not case.keyed_draws:
        return None
    from batchaug import _random

    return _random.sample_keys(seed, 0, torch.arange(n))


def _cotangent(shape, seed: int = 5) -> Tensor:
    return torch.rand(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _grad_of(f: Callable[[Tensor], Tensor], x: Tensor) -> Tuple[Tensor, Tensor]:
    """(output, d(sum(output * w))/dx) for the fixed random cotangent w = _cotangent(shape)."""
    x = x.detach().clone().requires_grad_(True)
    y = f(x)
    (g,) = torch.autograd.grad((y * _cotangent(y.shape).to(y.dtype)).sum(), x)
    return y, g


def _float_batch(case: Case, n: int = 2, dtype: torch.dtype = torch.float64) -> Tensor:
    return make_batch(case, torch.float32, "cpu", n=n, seed=1).to(dtype)


def check_requires_grad(case: Case) -> None:
    """A floating input that requires grad gives a floating output that requires grad (and
    its gradient reaches the input), in train and eval, contiguous and channels_last; under
    no_grad nothing requires grad. A uint8 output cannot carry a gradient. The output equals
    the one for the same input without grad (where the CPU fast paths run) exactly."""
    for dtype in (torch.float32, torch.float64, torch.float16):
        for train in (True, False):
            for cl in (False, True):
                m = case.factory().train(train)
                x = _float_batch(case, n=3, dtype=dtype)
                if cl:
                    x = x.contiguous(memory_format=torch.channels_last)
                x.requires_grad_(True)
                y = _run(m, x, 0)
                what = f"{case.id} ({dtype}, train={train}, channels_last={cl})"
                if not y.is_floating_point():
                    assert not y.requires_grad, what
                    continue
                assert y.requires_grad, f"{what}: output detached from a requires_grad input"
                # The fast paths run only without grad: they must give the plain path's values.
                _assert_close(y.detach(), _run(m, x.detach(), 0), True, f"{what}: fast vs plain")
                (g,) = torch.autograd.grad(y.float().sum(), x)
                assert g.shape == x.shape and g.dtype == x.dtype, what
                with torch.no_grad():
                    y = _run(m, x, 0)
                    # (eval() of a random transform may return x itself, which requires grad)
                    assert y is x or not y.requires_grad, what


def check_gradients(case: Case) -> None:
    """float64 gradcheck with fixed parameters, and the gradient of sum(y * w) equals the one
    through torchvision's per-sample functional with the same parameters (the output too)."""
    m = case.factory().train()
    if case.out_dtype is not None and not case.out_dtype.is_floating_point:
        return  # uint8 output: not differentiable (check_requires_grad covers it)
    x = _float_batch(case)
    reference = _REFERENCES.get(type(m).__name__)
    assert reference is not None, f"{case.id}: add a torchvision reference to _REFERENCES"
    for train in (True, False):
        m.train(train)
        for seed in (0, 1):
            keys = _case_keys(case, x.shape[0], seed)
            f = _seeded(m, seed, keys)
            torch.manual_seed(seed)
            params = m.make_params(x) if case.random and train else None
            if keys is not None and case.random and train:
                params = (m.make_params(x, keys), keys)
            if case.random and not train:
                ref_f: Callable[[Tensor], Tensor] = lambda t: t.clone()  # noqa: E731
            else:
                ref_f = lambda t: reference(m, t, params)  # noqa: E731
            y, g = _grad_of(f, x)
            what = f"{case.id} (train={train}, seed {seed})"
            g_ref: Optional[Tensor] = None
            try:
                if case.tv_grad or not train:
                    y_ref, g_ref = _grad_of(ref_f, x)
                else:  # torchvision's kernel is not differentiable: compare outputs only
                    y_ref = ref_f(x)
            except RuntimeError as e:
                # torchvision's bilinear fill blends in place (sub_/mul_/add_ on views of one
                # grid_sample output): it has no backward. The adjoint test below still holds.
                if "inplace operation" not in str(e):
                    raise
                y_ref = ref_f(x)
            assert y.dtype == y_ref.dtype, f"{what}: dtype {y.dtype} vs torchvision {y_ref.dtype}"
            tol = 1e-3 if y.dtype in (torch.float16, torch.bfloat16) else 1e-6
            torch.testing.assert_close(y.double(), y_ref.double(), atol=tol, rtol=0,
                                       msg=f"{what}: output vs torchvision")
            if g_ref is not None:
                torch.testing.assert_close(g, g_ref, atol=1e-6, rtol=0,
                                           msg=f"{what}: gradient vs torchvision")
            # With its parameters fixed an affine transform is y = A x + b, so the gradient
            # g = A^T w must satisfy <g, v> = <w, A v> with A v from torchvision.
            w = _cotangent(y.shape)
            with torch.no_grad():
                if train and not case.affine:
                    v_count = 0  # clamped/piecewise: gradcheck below covers the gradient
                else:
                    v_count = 2
                b = ref_f(torch.zeros_like(x)).double()
                for k in range(v_count):
                    v = torch.rand(x.shape, generator=torch.Generator().manual_seed(10 + k),
                                   dtype=torch.float64)
                    lhs = (g.double() * v).sum()
                    rhs = (w * (ref_f(v).double() - b)).sum()
                    assert torch.allclose(lhs, rhs, rtol=tol, atol=tol), \
                        f"{what}: <grad, v> {lhs.item()} != <w, A v> {rhs.item()} (torchvision)"
            if y.dtype == torch.float64:
                xg = x.detach().clone().requires_grad_(True)
                assert torch.autograd.gradcheck(f, (xg,), fast_mode=True), what


def check_compiled_gradients(case: Case) -> None:
    """torch.compile(fullgraph=True, backend="aot_eager"): same output, requires_grad and
    gradient as eager under the same seed (train mode, where the random path runs)."""
    m = case.factory().train()
    x = _float_batch(case, n=4, dtype=torch.float32)
    torch._dynamo.reset()
    compiled = torch.compile(m, backend="aot_eager", fullgraph=True)
    if case.out_dtype is not None and not case.out_dtype.is_floating_point:
        assert not _run(compiled, x.requires_grad_(True), 3).requires_grad, case.id
        return
    keys = _case_keys(case, x.shape[0], 3)
    y, g = _grad_of(_seeded(m, 3, keys), x)
    yc, gc = _grad_of(_seeded(compiled, 3, keys), x)
    torch.testing.assert_close(yc, y, atol=1e-5, rtol=0, msg=f"{case.id}: compiled output")
    torch.testing.assert_close(gc, g, atol=1e-5, rtol=0, msg=f"{case.id}: compiled gradient")


def check_export_dynamic_batch(case: Case) -> None:
    """torch.export with a dynamic batch, eval and train: the program runs at batch 1, 7 and
    64; eval equals eager exactly, train gives eager's shapes and dtypes. A random case in
    train with float32 input is exported with keys as the second input (the batch dimension
    shared with x) and must equal eager with the same keys (1e-5: compile/export may take a
    batched kernel where eager takes a per-sample CPU path)."""
    from torch.export import Dim, export

    from batchaug import _random

    for train in (False, True):
        for dtype in (torch.uint8, torch.float32):
            m = case.factory().train(train)
            keyed = train and case.random and dtype == torch.float32
            batch = Dim("batch")
            if keyed:
                ep = export(m, (make_batch(case, dtype, "cpu", n=4),
                                _random.sample_keys(0, 0, torch.arange(4))),
                            dynamic_shapes=({0: batch}, {0: batch}))
            else:
                ep = export(m, (make_batch(case, dtype, "cpu", n=4),),
                            dynamic_shapes=({0: batch},))
            run = ep.module()
            for n in (1, 7, 64):
                x = make_batch(case, dtype, "cpu", n=n, seed=n)
                what = f"{case.id} exported (train={train}, {dtype}, batch {n})"
                if keyed:
                    k = _random.sample_keys(1, 2, torch.arange(n) + 50)
                    torch.testing.assert_close(run(x, k), m(x, k), atol=1e-5, rtol=0,
                                               msg=f"{what}, keyed")
                    continue
                y = run(x)
                ref = _run(m, x, 0)
                if train:
                    assert y.shape == ref.shape and y.dtype == ref.dtype, what
                else:
                    _assert_close(y, ref, True, what)


def _run_keyed(module: nn.Module, x: Tensor, keys: Tensor, seed: int) -> Tensor:
    torch.manual_seed(seed)  # a different torch seed per call: keyed output must not care
    return module(x, keys)


def check_keyed(case: Case) -> None:
    """Keyed randomness (issue 11), uint8 and float32: a random transform has ``takes_keys`` and
    takes ``forward(x, keys)``; with keys its output ignores torch's generator and each
    sample's output depends only on its image and key: exactly the same in a batch of any size
    and at any position; identical images with distinct keys do not all come out the same;
    scripted == eager. (Compile: tests/transforms/test_keyed.py; export with keys:
    check_export_dynamic_batch.)"""
    if not case.random:
        return
    from batchaug import _random

    m = case.factory().train()
    assert getattr(m, "takes_keys", False) is True, f"{case.id}: random transform lacks takes_keys"
    s = torch.jit.script(m)
    n = 7
    keys = _random.sample_keys(3, 2, torch.arange(n) + 1000)
    for dtype in (torch.uint8, torch.float32):
        what = f"{case.id} keyed ({dtype})"
        x = make_batch(case, dtype, "cpu", n=n, seed=2)
        y = _run_keyed(m, x, keys, 1)
        assert torch.equal(_run_keyed(m, x, keys, 2), y), f"{what}: depends on torch's seed"
        perm = torch.tensor([5, 0, 3])
        assert torch.equal(_run_keyed(m, x[perm], keys[perm], 3), y[perm]), \
            f"{what}: depends on batch size or position"
        assert torch.equal(_run_keyed(m, x[4:5], keys[4:5], 4), y[4:5]), \
            f"{what}: a sample alone differs from it in the batch"
        same = make_batch(case, dtype, "cpu", n=1).expand(16, -1, -1, -1).contiguous()
        ys = m(same, _random.sample_keys(0, 0, torch.arange(16)))
        assert torch.unique(ys.reshape(16, -1), dim=0).shape[0] > 1, \
            f"{what}: 16 identical images with distinct keys all came out the same"
        _assert_close(_run_keyed(s, x, keys, 5), y, case.exact_script, f"{what}: scripted")


def _raises(fn: Callable[[], object], error: type, words: str, what: str) -> None:
    try:
        fn()
    except error as e:
        assert words in str(e), f"{what}: message {str(e)!r} lacks {words!r}"
        return
    raise AssertionError(f"{what}: no {error.__name__}")


def check_keys_length(case: Case) -> None:
    """A random transform called as ``t(x, keys)`` with keys of the wrong length (fewer, more,
    one) raises a ValueError naming ``keys`` and both lengths, in train and eval, eager and
    scripted (torch.jit.Error with the same words), instead of dropping, repeating or
    broadcasting samples; a 2-D keys tensor is a ValueError, int32 keys a TypeError."""
    if not case.random:
        return
    from batchaug import _random

    m = case.factory()
    s = torch.jit.script(m)
    x = make_batch(case, torch.float32, "cpu", n=6)
    for train in (True, False):
        m.train(train)
        s.train(train)
        for nk in (1, 5, 7):
            keys = _random.sample_keys(0, 0, torch.arange(nk))
            words = f"keys must have one key per image: got {nk} keys for a batch of 6 images"
            what = f"{case.id} (train={train}) with {nk} keys for 6 images"
            _raises(lambda: m(x, keys), ValueError, words, what)
            _raises(lambda: s(x, keys), torch.jit.Error, words, f"{what}, scripted")
        keys = _random.sample_keys(0, 0, torch.arange(6))
        _raises(lambda: m(x, keys.view(2, 3)), ValueError,
                "keys must be a 1-D tensor of shape (N,)", f"{case.id}: 2-D keys")
        _raises(lambda: m(x, keys.int()), TypeError, "keys must be an int64 tensor",
                f"{case.id}: int32 keys")


def check_script_every_dtype(case: Case) -> None:
    """Scripted == eager for uint8, float16, bfloat16, float32 and float64 input: exactly in
    eval, and in train under the same seed (within rounding where exact_script is False);
    output dtype and shape as the case says."""
    m = case.factory()
    s = torch.jit.script(m)
    for dtype in ALL_DTYPES:
        x = make_batch(case, dtype, "cpu")
        for train in (True, False):
            m.train(train)
            s.train(train)
            what = f"{case.id} scripted vs eager ({dtype}, train={train})"
            y = _run(m, x, 4)
            exact = case.exact_script or not train
            if dtype in (torch.float16, torch.bfloat16) and not exact:
                torch.testing.assert_close(_run(s, x, 4).double(), y.double(), atol=1e-2, rtol=0,
                                           msg=what)
            else:
                _assert_close(_run(s, x, 4), y, exact, what)
            if train or not case.random:
                assert tuple(y.shape) == expected_shape(case, x.shape[0]), what
                assert y.dtype == expected_dtype(case, dtype), what


def _plain(case: Case):
    """Context manager: ``case.plain_path``'s predicate patched to False (eager only)."""
    from unittest import mock

    module, name = case.plain_path.rsplit(".", 1)
    return mock.patch(f"{module}.{name}", lambda *args, **kwargs: False)


def check_fast_path_matches_plain(case: Case) -> None:
    """For a case with a CPU fast path: the fast path's output equals the plain path's (within
    ``plain_tol``) for uint8, float32 and float64 input, contiguous, channels_last and
    non-contiguous (a column slice), and the empty batch; same dtype and layout; with a
    requires_grad float64 input both require grad and their gradients agree (1e-6)."""
    if case.plain_path is None:
        return
    m = case.factory().train()
    for dtype in (torch.uint8, torch.float32, torch.float64):
        base = make_batch(case, dtype, "cpu", n=5)
        wide = torch.cat([base, base[..., :3]], dim=-1)
        layouts = {
            "contiguous": base,
            "channels_last": base.contiguous(memory_format=torch.channels_last),
            "non-contiguous": wide[..., :base.shape[-1]],
            "empty": base[:0],
        }
        for layout, x in layouts.items():
            what = f"{case.id} fast vs plain ({dtype}, {layout})"
            fast = _run(m, x, 21)
            with _plain(case):
                plain = _run(m, x, 21)
            assert fast.dtype == plain.dtype and fast.shape == plain.shape, what
            assert fast.is_contiguous(memory_format=torch.channels_last) == \
                plain.is_contiguous(memory_format=torch.channels_last), f"{what}: layout"
            if fast.numel():
                diff = (fast.double() - plain.double()).abs().max().item()
                tol = case.plain_tol if dtype == torch.uint8 else min(case.plain_tol, 1e-5)
                assert diff <= tol, f"{what}: max diff {diff} > {tol}"
    x = _float_batch(case, n=3)
    for layout in ("contiguous", "channels_last"):
        xl = x.contiguous(memory_format=torch.channels_last) if layout == "channels_last" else x
        y, g = _grad_of(_seeded(m, 5), xl)
        with _plain(case):
            yp, gp = _grad_of(_seeded(m, 5), xl)
        assert y.requires_grad and yp.requires_grad, f"{case.id}: detached output ({layout})"
        torch.testing.assert_close(g, gp, atol=1e-6, rtol=0,
                                   msg=f"{case.id}: fast vs plain gradient ({layout})")


CASE_CHECKS: List[Callable[[Case], None]] = [
    check_fast_path_matches_plain,
    check_requires_grad,
    check_gradients,
    check_compiled_gradients,
    check_export_dynamic_batch,
    check_script_every_dtype,
    check_keyed,
    check_keys_length,
]


# ----------------------------------------------------------------------------- host syncs
# A default forward off the CPU must not read the device from the host (a sync: the CPU can no
# longer run ahead) nor build a tensor from Python data on it (torch.tensor(list, device=cuda)
# is a blocking copy). The meta device has no data, so a batch on it runs every device op while
# any host read fails; a dispatch mode names the op (rather than meta's own error) and also
# catches what meta lets pass: a copy between the host and the device, linalg's error checks.

class HostSyncError(AssertionError):
    """A forward on a non-CPU device read the device from the host or copied host data to it."""


def _host_read_ops():
    aten = torch.ops.aten
    names = [
        "_local_scalar_dense",       # .item(), bool(t), int(t), float(t)
        "nonzero", "nonzero_static", "argwhere", "masked_select", "unique_dim", "_unique",
        "_unique2", "unique_consecutive", "unique_dim_consecutive", "bincount", "equal",
        "is_nonzero", "allclose", "histc", "repeat_interleave",
        "linalg_lstsq",              # its CUDA path checks the solver's info on the host
        "_linalg_check_errors",      # linalg.solve/inv/cholesky (non-_ex) read info: a sync
    ]
    return {getattr(aten, n) for n in names if hasattr(aten, n)}


def _caller() -> str:
    """file:line of the innermost batchaug frame on the stack (where the sync is written)."""
    import traceback

    frames = [f for f in traceback.extract_stack()
              if "batchaug" in f.filename and "tests" not in f.filename]
    if not frames:
        return "?"
    f = frames[-1]
    return f"{f.filename.split('batchaug', 1)[-1].lstrip('/')}:{f.lineno}"


def _devices(args) -> List[torch.device]:
    from torch.utils._pytree import tree_leaves

    return [a.device for a in tree_leaves(args) if isinstance(a, Tensor)]


class NoHostSync:
    """Context manager: any host read or host->device copy on ``device`` raises HostSyncError.

    On the meta device a TorchDispatchMode rejects the ops that read the device from the host
    (``.item()``/``bool()``, ``.tolist()``/``.cpu()`` (a meta->cpu copy), ``nonzero``,
    ``unique``, ``bincount``, boolean-mask indexing, ``linalg.lstsq``/``solve`` error checks)
    and host->device copies (``torch.tensor(data, device=...)``, ``.to(device)`` of a CPU
    tensor); 0-dim CPU tensors mixed into device ops are fine (CUDA reads them as scalars). On
    CUDA, ``torch.cuda.set_sync_debug_mode("error")`` does the same job on the real device.
    Both wrap ``torch.tensor``/``torch.as_tensor`` so that Python data built on the device fails
    with the caller named, not a later symptom.
    """

    def __init__(self, device: str) -> None:
        self.device = torch.device(device)
        self._mode = None
        self._saved = None

    def _wrap(self, fn, name):
        device = self.device

        def wrapped(data, *args, **kwargs):
            dev = kwargs.get("device")
            if dev is not None and torch.device(dev).type == device.type:
                raise HostSyncError(
                    f"torch.{name}(<Python data>, device={dev}) at {_caller()} in a forward on "
                    f"{device}: build it once per (device, dtype) or with device ops")
            return fn(data, *args, **kwargs)
        return wrapped

    def __enter__(self) -> "NoHostSync":
        self._saved = (torch.tensor, torch.as_tensor)
        torch.tensor = self._wrap(torch.tensor, "tensor")
        torch.as_tensor = self._wrap(torch.as_tensor, "as_tensor")
        try:
            if self.device.type == "meta":
                self._mode = _MetaHostSyncMode()
                self._mode.__enter__()
            elif self.device.type == "cuda":
                torch.cuda.synchronize()
                torch.cuda.set_sync_debug_mode("error")
        except BaseException:
            torch.tensor, torch.as_tensor = self._saved
            raise
        return self

    def __exit__(self, *exc) -> None:
        try:
            if self._mode is not None:
                self._mode.__exit__(*exc)
                self._mode = None
            elif self.device.type == "cuda":
                torch.cuda.set_sync_debug_mode("default")
        finally:
            torch.tensor, torch.as_tensor = self._saved


def _make_meta_mode():
    from torch.utils._python_dispatch import TorchDispatchMode

    reads = _host_read_ops()
    aten = torch.ops.aten
    copies = {aten._to_copy.default, aten.copy_.default, aten.copy.default,
              aten._copy_from.default, aten._copy_from_and_resize.default}
    index_ops = {aten.index.Tensor, aten.index_put.default, aten.index_put_.default,
                 aten._index_put_impl_.default}

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            try:
                return self._check(func, args, kwargs)
            except HostSyncError as e:
                raise HostSyncError(f"{e} (at {_caller()})") from None

        def _check(self, func, args, kwargs):
            if func.overloadpacket in reads:
                raise HostSyncError(f"{func} reads the device from the host")
            if func in copies:
                src = [d.type for d in _devices(args)]
                dst = kwargs.get("device")
                to_cpu = func is aten._to_copy.default and dst is not None \
                    and torch.device(dst).type == "cpu" and "meta" in src
                to_meta = func is aten._to_copy.default and dst is not None \
                    and torch.device(dst).type == "meta" and "cpu" in src
                if func is not aten._to_copy.default and len(set(src)) > 1:
                    to_cpu = src[0] == "cpu"
                    to_meta = src[0] == "meta"
                if to_cpu:
                    raise HostSyncError(f"{func}: a device->host copy (.cpu()/.tolist()/"
                                        "numpy()) reads the device")
                if to_meta:
                    raise HostSyncError(f"{func}: a host->device copy (torch.tensor(data, "
                                        "device=...) or .to(device) of a CPU tensor) blocks")
            if func in index_ops:
                from torch.utils._pytree import tree_leaves

                for a in tree_leaves(args[1]):
                    if isinstance(a, Tensor) and a.dtype in (torch.bool, torch.uint8):
                        raise HostSyncError(f"{func} with a boolean mask: its output size "
                                            "depends on the data (a nonzero on the device)")
            return func(*args, **kwargs)

    return Mode


_MODE_CLASS = None


def _MetaHostSyncMode():
    global _MODE_CLASS
    if _MODE_CLASS is None:
        _MODE_CLASS = _make_meta_mode()
    return _MODE_CLASS()


def check_no_host_sync(case: Case, dtype: torch.dtype, device: str) -> None:
    """The default forward, moved with ``.to(device)`` (train and eval, with and without keys),
    runs on a ``device`` batch without a host read or Python data built on the device."""
    from batchaug import _random

    m = case.factory().to(device)
    x = make_batch(case, dtype, "cpu", n=6).to(device)
    keys = _random.sample_keys(0, 0, torch.arange(6)).to(device)
    runs = [("train", None), ("eval", None)]
    if case.random:
        runs.append(("train", keys))
    if device != "meta":
        for mode, k in runs:  # warm-up outside the checked region (lazy initialisation syncs)
            m.train(mode == "train")
            m(x) if k is None else m(x, k)
    for mode, k in runs:
        m.train(mode == "train")
        what = f"{case.id} on {device} ({dtype}, {mode}{', keyed' if k is not None else ''})"
        try:
            with NoHostSync(device):
                y = m(x) if k is None else m(x, k)
        except HostSyncError as e:
            raise HostSyncError(f"{what}: {e}") from e
        assert y.device.type == torch.device(device).type, what
        if mode == "train" or not case.random:
            assert tuple(y.shape) == expected_shape(case, 6), what
            assert y.dtype == expected_dtype(case, dtype), what


# ----------------------------------------------------------------------------- targets
# with_targets (masks, boxes, keypoints) on every case whose module moves pixels: a
# GeometricTransform, a container/Augment with one inside, or a class the issue names as
# geometric once it has with_targets. tests/contract/test_contract_targets.py runs TARGET_CHECKS on
# them. References: the image itself (co-registration: a mask drawn into the image moves as
# the image does), rasterised boxes and keypoints, and torchvision v2 on tv_tensors with
# pinned parameters (Case.tv_pinned).

# every geometric class the issue names: each must be a GeometricTransform, or (containers,
# policies) have a with_targets of its own (tests/contract/test_contract_targets.py)
GEOMETRIC_CLASSES = [
    "RandomHorizontalFlip", "RandomVerticalFlip", "RandomCrop", "CenterCrop", "Pad", "Resize",
    "RandomResizedCrop", "RandomRotation", "RandomAffine", "RandomPerspective",
]
TARGET_CONTAINERS = ["RandomApply", "RandomChoice", "RandomOrder", "Augment",
                     "TrivialAugmentWide", "RandAugment", "AutoAugment"]

# torch.compile(fullgraph=True) and torch.export of with_targets cost 5-20 s a case on this CPU
# (measured: export RandomResizedCrop 9 s, RandomAffine 12 s, RandomPerspective 14 s, the
# segmentation Augment 20 s; compile 6 s), so each runs on a representative subset within the
# suite's budget. compile: a perspective warp, a container with a colour branch, a policy.
# export (Dim batch shared by images, targets, keys; 1, 7, 64): the resized crop (per-box CPU
# path vs the batched one), an affine warp with every parameter, and Augment (resized crop +
# flip + rotation: crop, flip and rotation targets through a container). Every case's
# image-only export: check_export_dynamic_batch.
TARGET_COMPILE_IDS = ["RandomPerspective-nearest-fill", "RandomChoice", "TrivialAugmentWide"]
# modules that blend several geometries into one image: with_targets refuses masks, boxes and
# keypoints with a ValueError saying why and passes labels (check_targets_refused)
TARGET_REFUSERS = ["AugMix", "TimmAugMix"]
TARGET_EXPORT_IDS = ["RandomResizedCrop", "RandomAffine-bilinear-all", "Augment"]

MASK_FILL = 7  # mask_fill given to every transform that takes one (co-registration)


def _geometric_base():
    from batchaug.transforms._base import GeometricTransform

    return GeometricTransform


def is_geometric(m: nn.Module) -> bool:
    """Whether ``m``'s with_targets must move targets (so the target checks apply)."""
    if not callable(getattr(m, "with_targets", None)):
        return False
    g = _geometric_base()
    return any(isinstance(s, g) or type(s).__name__ in GEOMETRIC_CLASSES for s in m.modules()) \
        or type(m).__name__ in TARGET_CONTAINERS[4:] and type(m).with_targets is not \
        _photometric_with_targets()


def _photometric_with_targets():
    from batchaug.transforms._base import Transform

    return Transform.with_targets


def target_module(case: Case) -> nn.Module:
    return (case.target_factory or case.factory)()


def target_case_is_geometric(case: Case) -> bool:
    return is_geometric(target_module(case))


def _target_random(case: Case) -> bool:
    return case.random if case.target_random is None else case.target_random


def _batchaug_classes() -> List[type]:
    import batchaug
    import batchaug.transforms as T

    out = set()
    for mod in (T, batchaug):
        for name in getattr(mod, "__all__", []):
            c = getattr(mod, name, None)
            if isinstance(c, type) and issubclass(c, nn.Module):
                out.update(k for k in c.__mro__ if isinstance(k, type) and issubclass(k, nn.Module)
                           and k.__module__.startswith("batchaug"))
    return sorted(out, key=lambda c: c.__qualname__)


def nearest_module(case: Case, constant_padding: bool = False
                   ) -> Tuple[nn.Module, int, List[str]]:
    """The case's target module built with ``interpolation="nearest"``, ``fill`` at its
    default (0) and ``mask_fill=MASK_FILL`` in every batchaug class whose ``__init__`` takes
    them (children of containers too); ``constant_padding``: ``padding_mode="constant"`` too
    (reflected/edge margins repeat a box's pixels outside the box, which torchvision moves as
    for constant padding: the box checks use constant padding). Returns the module, the mask
    fill to expect (MASK_FILL when some class took it, else 0) and the names of the geometric
    classes that have a ``fill`` but no ``mask_fill`` argument (the protocol asks for one)."""
    import functools
    import inspect

    saved = []
    took: List[str] = []
    lacking: List[str] = []
    g = _geometric_base()
    for cls in _batchaug_classes():
        init = cls.__dict__.get("__init__")
        if init is None:
            continue
        sig = inspect.signature(init)
        names = set(sig.parameters)
        if not names & {"interpolation", "fill", "mask_fill", "padding_mode"}:
            continue

        def patched(self, *args, _init=init, _sig=sig, _cls=cls, **kwargs):
            bound = _sig.bind(self, *args, **kwargs)
            params = _sig.parameters
            if "interpolation" in params:
                bound.arguments["interpolation"] = "nearest"
            if "fill" in params:
                d = params["fill"].default
                # timm's default fill is grey (128): the checks read fill as label -1
                keep = d is None or (isinstance(d, (int, float)) and d == 0)
                bound.arguments["fill"] = d if keep else 0
                if "mask_fill" not in params and issubclass(_cls, g):
                    lacking.append(_cls.__name__)
            if "padding_mode" in params and constant_padding:
                bound.arguments["padding_mode"] = "constant"
            if "mask_fill" in params:
                bound.arguments["mask_fill"] = MASK_FILL
                took.append(_cls.__name__)
            _init(*bound.args, **bound.kwargs)

        saved.append((cls, init))
        cls.__init__ = functools.wraps(init)(patched)
    try:
        m = target_module(case)
    finally:
        for cls, init in saved:
            cls.__init__ = init
    return m, (MASK_FILL if took else 0), sorted(set(lacking))


def make_targets(in_size: Tuple[int, int], n: int, m: int = 5, k: int = 4, seed: int = 0,
                 layers: int = 0, bad: bool = False) -> dict:
    """Targets for ``n`` images of ``in_size``: uint8 masks (``layers`` > 0: (N, layers, H, W)
    int64), boxes (some with fractional corners, the last one sticking out of the image),
    keypoints, about 15% of each marked invalid, labels and box_labels. ``bad``: sample 0's
    first box inverted and first keypoint NaN (both flagged valid: must come out invalid)."""
    g = torch.Generator().manual_seed(seed)
    h, w = in_size
    shape = (n, layers, h, w) if layers else (n, h, w)
    masks = torch.randint(0, 5, shape, generator=g, dtype=torch.uint8)
    if layers:
        masks = masks.long()
    x1 = torch.rand(n, m, generator=g) * (w - 2)
    y1 = torch.rand(n, m, generator=g) * (h - 2)
    x2 = x1 + 1 + torch.rand(n, m, generator=g) * (w - 1 - x1)
    y2 = y1 + 1 + torch.rand(n, m, generator=g) * (h - 1 - y1)
    boxes = torch.stack((x1, y1, x2, y2), dim=2)
    boxes[:, : m // 2] = boxes[:, : m // 2].round()
    if m:
        boxes[:, -1] = torch.tensor([-3.5, 2.0, w + 2.0, h - 1.0])
    kp = torch.rand(n, k, 2, generator=g) * torch.tensor([w - 1e-3, h - 1e-3])
    kp[:, : k // 2] = kp[:, : k // 2].floor() + 0.5
    bv = torch.rand(n, m, generator=g) < 0.85
    kv = torch.rand(n, k, generator=g) < 0.85
    if bad and n and m and k:
        boxes[0, 0] = torch.tensor([9.0, 2.0, 3.0, 8.0])
        bv[0, 0] = True
        kp[0, 0, 0] = float("nan")
        kv[0, 0] = True
    return {"masks": masks, "boxes": boxes, "box_valid": bv, "keypoints": kp,
            "keypoint_valid": kv, "labels": torch.randint(0, 10, (n,), generator=g),
            "box_labels": torch.randint(0, 10, (n, m), generator=g)}


def _keys(m: nn.Module, n: int, seed: int, device: str = "cpu") -> Optional[Tensor]:
    if not getattr(m, "takes_keys", False):
        return None
    from batchaug import _random

    return _random.sample_keys(seed, 0, torch.arange(n) + 100 * seed).to(device)


def _wt(m: nn.Module, x: Tensor, targets: dict, keys: Optional[Tensor], seed: int = 0):
    torch.manual_seed(seed)
    if keys is None:
        return m.with_targets(x, dict(targets))
    return m.with_targets(x, dict(targets), keys)


def _fwd(m: nn.Module, x: Tensor, keys: Optional[Tensor], seed: int = 0) -> Tensor:
    torch.manual_seed(seed)
    return m(x) if keys is None else m(x, keys)


def _samples(case: Case, m: nn.Module, x: Tensor, keys: Optional[Tensor]) -> Tensor:
    if case.target_samples is None:
        return torch.ones(x.shape[0], dtype=torch.int64)
    return case.target_samples(m, x, keys)


def check_target_invariants(what: str, inp: dict, out: dict, out_hw: Tuple[int, int]) -> None:
    """What every with_targets output satisfies: the same keys (valid flags filled in),
    labels/box_labels untouched, masks of the output size and input dtype, boxes/keypoints of
    the input shape and dtype, invalid ones exactly zero, valid ones finite and inside the
    output (boxes at least 1 x 1, torchvision's sanitizer), never valid where the input was
    flagged invalid."""
    oh, ow = out_hw
    want = set(inp) | ({"box_valid"} if "boxes" in inp else set()) \
        | ({"keypoint_valid"} if "keypoints" in inp else set())
    assert set(out) == want, f"{what}: keys {sorted(out)} != {sorted(want)}"
    for key in ("labels", "box_labels"):
        if key in inp:
            assert torch.equal(out[key], inp[key]), f"{what}: {key} changed"
    if "masks" in inp:
        mi, mo = inp["masks"], out["masks"]
        assert mo.dtype == mi.dtype, f"{what}: masks dtype {mo.dtype} != {mi.dtype}"
        assert tuple(mo.shape) == tuple(mi.shape[:-2]) + (oh, ow), \
            f"{what}: masks shape {tuple(mo.shape)}, expected {tuple(mi.shape[:-2]) + (oh, ow)}"
    for key, vkey, last in (("boxes", "box_valid", 4), ("keypoints", "keypoint_valid", 2)):
        if key not in inp:
            continue
        b, v = out[key], out[vkey]
        assert b.shape == inp[key].shape and b.dtype == inp[key].dtype, \
            f"{what}: {key} {tuple(b.shape)} {b.dtype} from {tuple(inp[key].shape)}"
        assert v.dtype == torch.bool and v.shape == b.shape[:2], f"{what}: {vkey} {v.shape}"
        if vkey in inp:
            assert not (v & ~inp[vkey]).any(), f"{what}: a {key[:-1]} flagged invalid came back valid"
        assert (b[~v] == 0).all(), f"{what}: invalid {key} are not zeros: {b[~v][:3].tolist()}"
        good = b[v].double()
        assert torch.isfinite(good).all(), f"{what}: non-finite valid {key}"
        # a sample left as it is (not drawn, eval(), a colour op) keeps its targets as given,
        # as torchvision does; every moved box/keypoint is clamped/sanitized
        kept = (b == inp[key]).all(dim=2)[v] if b.shape == inp[key].shape else \
            torch.zeros(good.shape[0], dtype=torch.bool)
        if key == "boxes" and good.numel():
            bad = (good[:, 0] < 0) | (good[:, 1] < 0) | (good[:, 2] > ow) | (good[:, 3] > oh) \
                | (good[:, 2] - good[:, 0] < 1) | (good[:, 3] - good[:, 1] < 1)
            bad = bad & ~kept
            assert not bad.any(), f"{what}: valid boxes outside the {oh}x{ow} output or under " \
                f"1 px: {good[bad][:3].tolist()}"
        if key == "keypoints" and good.numel():
            bad = (good[:, 0] < 0) | (good[:, 1] < 0) | (good[:, 0] >= ow) | (good[:, 1] >= oh)
            bad = bad & ~kept
            assert not bad.any(), f"{what}: valid keypoints outside the {oh}x{ow} output: " \
                f"{good[bad][:3].tolist()}"


def _out_hw(case: Case, m: nn.Module, x: Tensor, keys: Optional[Tensor]) -> Tuple[int, int]:
    y = _fwd(m, x, keys)
    return int(y.shape[2]), int(y.shape[3])


def check_targets_coregistered(case: Case) -> None:
    """Masks move exactly as the image: the module built with nearest interpolation (fill 0,
    mask_fill 7) transforms an image made from the mask (label + 1 in every channel) and the
    mask with the same keys; the mask must equal the image's labels, MASK_FILL where the image
    shows fill. (N, H, W) uint8 and (N, 2, H, W) int64 masks; with_targets' images equal
    forward's; samples that only took colour ops (``target_samples`` 0) keep their masks; in
    eval() a random module leaves images and targets as they are."""
    m, fill, lacking = nearest_module(case)
    assert not lacking, f"{case.id}: geometric classes with a fill but no mask_fill " \
        f"argument: {lacking}"
    m.train()
    n = 12
    h, w = case.in_size
    for seed in (0, 1):
        t = make_targets(case.in_size, n, seed=seed)
        mask = t["masks"]
        layers = torch.stack((mask.long(), 4 - mask.long()), dim=1)
        img = (mask + 1).unsqueeze(1).expand(n, case.channels, h, w).contiguous()
        keys = _keys(m, n, seed)
        y = _fwd(m, img, keys, seed)
        yi, out = _wt(m, img, {"masks": mask}, keys, seed)
        what = f"{case.id} co-registration (seed {seed})"
        _assert_close(yi, y, True, f"{what}: with_targets' images vs forward's")
        _, out2 = _wt(m, img, {"masks": layers}, keys, seed)
        check_target_invariants(what, {"masks": mask}, out, (y.shape[2], y.shape[3]))
        check_target_invariants(what, {"masks": layers}, out2, (y.shape[2], y.shape[3]))
        sel = _samples(case, m, img, keys)
        lab = y[:, 0].long() - 1
        expect = torch.where(lab < 0, torch.full_like(lab, fill), lab)
        expect2 = torch.where(lab < 0, torch.full_like(lab, fill), 4 - lab)
        for i in range(n):
            if int(sel[i]) == 1:
                assert (y[i] == y[i, :1]).all(), f"{what}: sample {i}'s channels differ " \
                    "(a colour op on a sample declared geometric)"
                bad = (out["masks"][i].long() != expect[i]).sum().item()
                assert bad == 0, f"{what}: sample {i}: {bad} of {expect[i].numel()} mask " \
                    f"pixels differ from the image's (first at " \
                    f"{(out['masks'][i].long() != expect[i]).nonzero()[0].tolist()})"
                assert torch.equal(out2["masks"][i, 0], expect[i]) and \
                    torch.equal(out2["masks"][i, 1], expect2[i]), \
                    f"{what}: sample {i}: (N, 2, H, W) int64 masks differ from the image's"
            elif int(sel[i]) == 0:
                assert torch.equal(out["masks"][i], mask[i]), \
                    f"{what}: sample {i} took only colour ops but its mask changed"
    m.eval()
    keys = _keys(m, n, 5)
    y, out = _wt(m, img, {"masks": mask}, keys)
    if _target_random(case):
        assert torch.equal(y, img) and torch.equal(out["masks"], mask), \
            f"{case.id}: eval() with_targets changed images or masks"
    else:
        assert torch.equal(out["masks"], expect.to(mask.dtype)) or not (sel == 1).all(), \
            f"{case.id}: deterministic transform's eval() masks differ from train()'s"


def _box_images(case: Case, n: int, g: torch.Generator) -> Tuple[Tensor, Tensor]:
    """n uint8 images, each 255 inside one integer box (at least 3 x 3) and 0 elsewhere."""
    h, w = case.in_size
    x1 = torch.randint(0, w - 3, (n,), generator=g)
    y1 = torch.randint(0, h - 3, (n,), generator=g)
    x2 = x1 + 3 + (torch.rand(n, generator=g) * (w - x1 - 3 + 1)).long().clamp_max(w - x1 - 3)
    y2 = y1 + 3 + (torch.rand(n, generator=g) * (h - y1 - 3 + 1)).long().clamp_max(h - y1 - 3)
    img = torch.zeros(n, case.channels, h, w, dtype=torch.uint8)
    for i in range(n):
        img[i, :, y1[i]:y2[i], x1[i]:x2[i]] = 255
    return img, torch.stack((x1, y1, x2, y2), dim=1).float().view(n, 1, 4)


def check_targets_boxes_enclose(case: Case) -> None:
    """Random parameters: a box moves with its pixels. Each image is 255 inside one box; the
    pixels of the transformed image that keep the box's value (nearest construction: any
    nonzero pixel, whose centre must lie in the output box; the case's own interpolation:
    pixels >= 128, within 1 px of it) lie inside the output box when it is valid. Samples
    that took only colour ops keep their box."""
    g = torch.Generator().manual_seed(3)
    n = 16
    nearest, _, _ = nearest_module(case, constant_padding=True)
    own = _own_with_constant_padding(case)
    for label, m, thr, tol in (("nearest", nearest, 1, 1e-3 + 0.5),
                               ("own interpolation", own, 128, 1.0)):
        m.train()
        img, boxes = _box_images(case, n, g)
        keys = _keys(m, n, 4)
        y, out = _wt(m, img, {"boxes": boxes}, keys, 4)
        what = f"{case.id} boxes enclose their pixels ({label})"
        check_target_invariants(what, {"boxes": boxes}, out, (y.shape[2], y.shape[3]))
        sel = _samples(case, m, img, keys)
        for i in range(n):
            b, ok = out["boxes"][i, 0].double(), bool(out["box_valid"][i, 0])
            if int(sel[i]) == 0:
                assert ok and torch.equal(out["boxes"][i], boxes[i]), \
                    f"{what}: sample {i} took only colour ops but its box moved"
                continue
            if int(sel[i]) != 1 or not ok:
                continue
            rows, cols = (y[i, 0] >= thr).nonzero(as_tuple=True)
            cx, cy = cols.double() + 0.5, rows.double() + 0.5
            out_of = (cx < b[0] - tol) | (cx > b[2] + tol) | (cy < b[1] - tol) | (cy > b[3] + tol)
            assert not out_of.any(), \
                f"{what}: sample {i}: box {boxes[i, 0].tolist()} -> {b.tolist()}, but " \
                f"{int(out_of.sum())} of its {cx.numel()} pixels lie outside, e.g. centre " \
                f"({float(cx[out_of][0])}, {float(cy[out_of][0])})"


def check_targets_keypoints_land(case: Case) -> None:
    """Random parameters: a keypoint lands on its pixel. Each image holds its pixels'
    coordinates (channel 0: x + 1, channel 1: y + 1, channel 2: 255; fill 0), so with
    nearest interpolation every output pixel names the input pixel it came from. A valid
    moved keypoint's output pixel must come from within ``0.5 + step`` input px of the
    keypoint (Chebyshev), ``step`` being the local input distance between horizontally plus
    vertically adjacent output pixels there (1 + 1 at scale 1: a keypoint moved 2 px off
    fails; flips' ``w - 1 - x`` and torch's ``floor(p * scale)`` nearest resize fit in it;
    half-pixel conventions are pinned against torchvision). Samples that took only colour ops
    keep their keypoint."""
    g = torch.Generator().manual_seed(5)
    n = 24
    h, w = case.in_size
    assert case.channels == 3 and max(h, w) < 255, case.id
    m, _, _ = nearest_module(case, constant_padding=True)
    m.train()
    ys, xs = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    coords = torch.stack((xs + 1, ys + 1, torch.full_like(xs, 255))).to(torch.uint8)
    img = coords.unsqueeze(0).expand(n, 3, h, w).contiguous()
    kp = torch.rand(n, 1, 2, generator=g) * torch.tensor([w - 1e-3, h - 1e-3])
    keys = _keys(m, n, 6)
    y, out = _wt(m, img, {"keypoints": kp}, keys, 6)
    what = f"{case.id} keypoints land on their pixel"
    check_target_invariants(what, {"keypoints": kp}, out, (y.shape[2], y.shape[3]))
    sel = _samples(case, m, img, keys)
    oh, ow = int(y.shape[2]), int(y.shape[3])
    src = y[:, :2].double() - 0.5  # the source pixel's centre (x, y)
    inside = y[:, 2] == 255
    landed = 0
    for i in range(n):
        if int(sel[i]) == 0:
            assert bool(out["keypoint_valid"][i, 0]) and torch.equal(out["keypoints"][i], kp[i]), \
                f"{what}: sample {i} took only colour ops but its keypoint moved"
            continue
        if int(sel[i]) != 1 or not bool(out["keypoint_valid"][i, 0]):
            continue
        px, py = out["keypoints"][i, 0].tolist()
        r, c = min(int(math.floor(py)), oh - 1), min(int(math.floor(px)), ow - 1)
        if not bool(inside[i, r, c]):
            continue  # the output pixel samples the fill (the keypoint is at the image border)
        steps = []
        for dr, dc in ((0, 1), (0, -1), (1, 0), (-1, 0)):
            rr, cc = r + dr, c + dc
            if 0 <= rr < oh and 0 <= cc < ow and bool(inside[i, rr, cc]):
                steps.append(float((src[i, :, rr, cc] - src[i, :, r, c]).abs().max()))
        step = 2 * max(steps) if steps else 2.0
        d = float((src[i, :, r, c] - kp[i, 0].double()).abs().max())
        assert d <= 0.5 + step + 1e-6, \
            f"{what}: sample {i}: keypoint {kp[i, 0].tolist()} -> ({px:.3f}, {py:.3f}), whose " \
            f"output pixel ({r}, {c}) comes from input pixel {(src[i, :, r, c] - 0.5).tolist()}: " \
            f"{d:.3f} px away > {0.5 + step:.3f}"
        landed += 1
    assert landed >= 3 or (sel != 1).sum() > n - 3, f"{what}: only {landed} keypoints checked"


def _own_with_constant_padding(case: Case) -> nn.Module:
    """The case's target module with its padding modes set to constant (see nearest_module;
    the mode is read when the module runs)."""
    m = target_module(case)
    for s in m.modules():
        if isinstance(getattr(s, "padding_mode", None), str):
            s.padding_mode = "constant"
    return m


def _tv_sample(tv: nn.Module, x: Tensor, t: dict, i: int):
    """torchvision on sample i. torchvision refuses boxes and keypoints with a non-constant
    padding mode ("not supported with bounding boxes"): then masks come from ``tv`` and boxes
    and keypoints from a copy of it with constant padding (batchaug moves them the same way:
    the padding mode only changes pixel values)."""
    import copy

    from torchvision import tv_tensors
    import torchvision.transforms.v2.functional as TF

    canvas = tuple(x.shape[-2:])
    boxes = TF.clamp_bounding_boxes(tv_tensors.BoundingBoxes(t["boxes"][i], format="XYXY",
                                                             canvas_size=canvas))
    inputs = {"image": tv_tensors.Image(x[i]), "boxes": boxes,
              "keypoints": tv_tensors.KeyPoints(t["keypoints"][i], canvas_size=canvas),
              "masks": tv_tensors.Mask(t["masks"][i])}
    try:
        return tv(inputs)
    except ValueError as e:
        if "not supported" not in str(e):
            raise
    out = tv({"image": inputs["image"], "masks": inputs["masks"]})
    constant = copy.deepcopy(tv)
    for s in constant.modules():
        if hasattr(s, "padding_mode"):
            s.padding_mode = "constant"
    out.update(constant({"image": inputs["image"], "boxes": boxes,
                         "keypoints": inputs["keypoints"]}))
    return out


def _near(d: Tensor) -> Tensor:
    """Where float rounding may decide a sanitizer's threshold: not compared."""
    return (d.abs() > 0) & (d.abs() < 1e-3)


def check_targets_match_torchvision(case: Case) -> None:
    """Pinned parameters (``Case.tv_pinned``): masks equal, boxes and keypoints within
    ``tv_tol`` of torchvision v2 on tv_tensors for each sample (boxes clamped to the image
    first, batchaug's documented input rule), valid flags equal to torchvision's
    SanitizeBoundingBoxes(min_size=1, min_area=1) / SanitizeKeyPoints (but where float
    rounding may decide the threshold), invalid inputs (an inverted box, a NaN keypoint)
    invalid and zero."""
    if case.tv_pinned is None:
        assert case.tv_pinned_why, f"{case.id}: a geometric case needs tv_pinned (a pinned " \
            "construction and torchvision's equivalent) or tv_pinned_why"
        return
    import torchvision.transforms.v2.functional as TF

    ours, tv = case.tv_pinned()
    assert is_geometric(ours), f"{case.id}: the pinned module {type(ours).__name__} does not " \
        "move targets"
    ours.train()
    n = 5
    x = make_batch(case, torch.uint8, "cpu", n=n, seed=8)
    t = make_targets(case.in_size, n, m=7, k=6, seed=8, bad=True)
    keys = _keys(ours, n, 8)
    y, out = _wt(ours, x, t, keys)
    oh, ow = int(y.shape[2]), int(y.shape[3])
    what = f"{case.id} vs torchvision (pinned)"
    check_target_invariants(what, t, out, (oh, ow))
    assert not bool(out["box_valid"][0, 0]) and not bool(out["keypoint_valid"][0, 0]), \
        f"{what}: an inverted box / NaN keypoint came out valid"
    for i in range(n):
        ref = _tv_sample(tv, x, t, i)
        wi = f"{what}, sample {i}"
        assert tuple(ref["image"].shape[-2:]) == (oh, ow), \
            f"{wi}: output size {(oh, ow)} vs torchvision {tuple(ref['image'].shape[-2:])}"
        rm = ref["masks"].as_subclass(Tensor)
        diff = (out["masks"][i] != rm).sum().item()
        assert diff == 0, f"{wi}: {diff} mask pixels differ from torchvision's"
        rb = ref["boxes"]
        _, rv = TF.sanitize_bounding_boxes(rb, min_size=1, min_area=1)
        rbt = rb.as_subclass(Tensor)
        rv = rv & t["box_valid"][i]
        rv[0] = rv[0] & (i != 0)  # the inverted box
        bw, bh = rbt[:, 2] - rbt[:, 0], rbt[:, 3] - rbt[:, 1]
        sure = ~(_near(bw - 1) | _near(bh - 1) | _near(bw * bh - 1))
        ov = out["box_valid"][i]
        assert torch.equal(ov[sure], rv[sure]), \
            f"{wi}: box_valid {ov.tolist()} vs torchvision's sanitizer {rv.tolist()}"
        both = ov & rv
        err = (out["boxes"][i][both] - rbt[both]).abs().max().item() if both.any() else 0.0
        assert err <= case.tv_tol, f"{wi}: boxes differ from torchvision by {err} > " \
            f"{case.tv_tol}: {out['boxes'][i][both][:2].tolist()} vs {rbt[both][:2].tolist()}"
        rk = ref["keypoints"]
        _, rkv = TF.sanitize_keypoints(rk)
        rkt = rk.as_subclass(Tensor)
        rkv = rkv & t["keypoint_valid"][i] & torch.isfinite(t["keypoints"][i]).all(dim=1)
        sure = ~(_near(rkt[:, 0]) | _near(rkt[:, 0] - ow) | _near(rkt[:, 1])
                 | _near(rkt[:, 1] - oh))
        okv = out["keypoint_valid"][i]
        assert torch.equal(okv[sure], rkv[sure]), \
            f"{wi}: keypoint_valid {okv.tolist()} vs torchvision's sanitizer {rkv.tolist()}"
        both = okv & rkv
        err = (out["keypoints"][i][both] - rkt[both]).abs().max().item() if both.any() else 0.0
        assert err <= case.tv_tol, f"{wi}: keypoints differ from torchvision by {err} > " \
            f"{case.tv_tol}: {out['keypoints'][i][both][:2].tolist()} vs {rkt[both][:2].tolist()}"


def _assert_targets_equal(a: dict, b: dict, what: str, tol: float = 0.0) -> None:
    assert set(a) == set(b), f"{what}: keys {sorted(a)} vs {sorted(b)}"
    for key in a:
        if a[key].is_floating_point() and tol:
            torch.testing.assert_close(a[key], b[key], atol=tol, rtol=0, msg=f"{what}: {key}")
        else:
            assert torch.equal(a[key], b[key]), f"{what}: {key} differ" + (
                f" (max {(a[key].double() - b[key].double()).abs().max().item()})"
                if a[key].shape == b[key].shape and a[key].numel() else
                f" (shapes {tuple(a[key].shape)} vs {tuple(b[key].shape)})")


def _sub(t: dict, idx: Tensor) -> dict:
    return {k: v[idx] for k, v in t.items()}


def check_targets_keyed_and_scripted(case: Case) -> None:
    """Keyed targets depend only on the sample and its key: the same under another torch seed,
    in a permuted sub-batch and alone; scripted with_targets equals eager (images within the
    case's script rounding, targets exactly); invalid inputs come out zeros and invalid."""
    m = target_module(case).train()
    n = 7
    x = make_batch(case, torch.uint8, "cpu", n=n, seed=9)
    t = make_targets(case.in_size, n, seed=9, bad=True)
    keys = _keys(m, n, 9)
    y, out = _wt(m, x, t, keys, 1)
    what = f"{case.id} with_targets"
    check_target_invariants(what, t, out, (y.shape[2], y.shape[3]))
    if keys is not None:
        y2, out2 = _wt(m, x, t, keys, 2)
        assert torch.equal(y2, y), f"{what}: keyed images depend on torch's seed"
        _assert_targets_equal(out2, out, f"{what}: keyed targets depend on torch's seed")
    if keys is not None or not _target_random(case):
        for idx in (torch.tensor([5, 0, 3]), torch.tensor([4])):
            yp, op = _wt(m, x[idx], _sub(t, idx), None if keys is None else keys[idx], 3)
            assert torch.equal(yp, y[idx]), f"{what}: images depend on batch position"
            _assert_targets_equal(op, _sub(out, idx),
                                  f"{what}: targets of samples {idx.tolist()} depend on their "
                                  "batch position or size")
    s = torch.jit.script(m)
    ys, outs = _wt(s, x, t, keys, 1)
    _assert_close(ys, y, case.exact_script or keys is None and _target_random(case) is False,
                  f"{what}: scripted images")
    _assert_targets_equal(outs, out, f"{what}: scripted vs eager targets")


class _WithTargets(nn.Module):
    """``with_targets`` as ``forward`` (torch.export/compile trace forward)."""

    def __init__(self, m: nn.Module, keyed: bool) -> None:
        super().__init__()
        self.m = m
        self.keyed = keyed

    def forward(self, x: Tensor, targets: dict, keys: Optional[Tensor] = None):
        if self.keyed:
            return self.m.with_targets(x, targets, keys)
        return self.m.with_targets(x, targets)


def _image_tol(case: Case) -> float:
    # compile/export may take a batched kernel where eager takes a per-sample CPU path
    return max(1.0, case.plain_tol)


def check_targets_export(case: Case) -> None:
    """torch.export of with_targets with one dynamic batch Dim shared by the images, every
    target tensor and the keys (train), run at batch 1, 7 and 64: targets equal eager's with
    the same keys (boxes/keypoints within 1e-5), images within the case's fast-path tolerance;
    uint8 images, (N, H, W) uint8 masks."""
    from torch.export import Dim, export

    m = target_module(case).train()
    keyed = getattr(m, "takes_keys", False)
    wrapper = _WithTargets(m, keyed)
    batch = Dim("batch")
    x = make_batch(case, torch.uint8, "cpu", n=4)
    t = make_targets(case.in_size, 4)
    dyn_t = {k: {0: batch} for k in t}
    if keyed:
        ep = export(wrapper, (x, t, _keys(m, 4, 0)), dynamic_shapes=({0: batch}, dyn_t,
                                                                     {0: batch}))
    else:
        ep = export(wrapper, (x, t), dynamic_shapes=({0: batch}, dyn_t))
    run = ep.module()
    for n in (1, 7, 64):
        x = make_batch(case, torch.uint8, "cpu", n=n, seed=n)
        t = make_targets(case.in_size, n, seed=n)
        k = _keys(m, n, n)
        what = f"{case.id} exported with_targets (batch {n})"
        got = run(x, t, k) if keyed else run(x, t)
        ref = _wt(m, x, t, k)
        if not keyed and _target_random(case):
            assert got[0].shape == ref[0].shape, what
            check_target_invariants(what, t, got[1], tuple(got[0].shape[2:]))
            continue
        torch.testing.assert_close(got[0].double(), ref[0].double(), atol=_image_tol(case),
                                   rtol=0, msg=f"{what}: images")
        _assert_targets_equal(got[1], ref[1], f"{what}: targets", tol=1e-5)


def check_targets_compile(case: Case) -> None:
    """torch.compile(fullgraph=True, backend="aot_eager") of with_targets (train, keyed):
    targets equal eager's with the same keys (boxes/keypoints within 1e-5)."""
    m = target_module(case).train()
    keyed = getattr(m, "takes_keys", False)
    torch._dynamo.reset()
    compiled = torch.compile(_WithTargets(m, keyed), backend="aot_eager", fullgraph=True)
    n = 6
    x = make_batch(case, torch.uint8, "cpu", n=n, seed=2)
    t = make_targets(case.in_size, n, seed=2)
    k = _keys(m, n, 2)
    torch.manual_seed(0)
    got = compiled(x, t, k) if keyed else compiled(x, t)
    ref = _wt(m, x, t, k)
    what = f"{case.id} compiled with_targets"
    torch.testing.assert_close(got[0].double(), ref[0].double(), atol=_image_tol(case), rtol=0,
                               msg=f"{what}: images")
    _assert_targets_equal(got[1], ref[1], f"{what}: targets", tol=1e-5)


def check_targets_no_host_sync(case: Case) -> None:
    """with_targets moved to the meta device (train and eval, keyed where it takes keys, uint8
    and float32 images): no host read, no host->device copy (NoHostSync)."""
    m = target_module(case).to("meta")
    n = 6
    t = {k: v.to("meta") for k, v in make_targets(case.in_size, n).items()}
    keys = _keys(m, n, 0, "meta")
    for dtype in (torch.uint8, torch.float32):
        x = torch.empty(n, case.channels, *case.in_size, dtype=dtype, device="meta")
        for train in (True, False):
            m.train(train)
            what = f"{case.id} with_targets on meta ({dtype}, train={train})"
            try:
                with NoHostSync("meta"):
                    y, out = _wt(m, x, t, keys)
            except HostSyncError as e:
                raise HostSyncError(f"{what}: {e}") from e
            assert y.device.type == "meta" and out["boxes"].device.type == "meta", what
            assert out["masks"].shape[-2:] == y.shape[-2:], what


def check_targets_empty(case: Case) -> None:
    """An empty batch, and M = 0 boxes / K = 0 keypoints per sample (with masks), train and
    eval, eager and scripted: the right shapes and dtypes."""
    m = target_module(case)
    s = torch.jit.script(m)
    for train in (True, False):
        for mod, label in ((m, "eager"), (s, "scripted")):
            mod.train(train)
            for n, nb, nk in ((0, 3, 2), (3, 0, 0)):
                x = make_batch(case, torch.uint8, "cpu", n=n)
                t = make_targets(case.in_size, n, m=nb, k=nk)
                keys = _keys(m, n, 0)
                y, out = _wt(mod, x, t, keys)
                what = f"{case.id} with_targets {label}, train={train}, N={n} M={nb} K={nk}"
                check_target_invariants(what, t, out, (y.shape[2], y.shape[3]))


TARGET_CHECKS: List[Callable[[Case], None]] = [
    check_targets_coregistered,
    check_targets_match_torchvision,
    check_targets_boxes_enclose,
    check_targets_keypoints_land,
    check_targets_keyed_and_scripted,
    check_targets_no_host_sync,
    check_targets_empty,
]


def check_targets_passthrough(case: Case) -> None:
    """A module with with_targets that does not move pixels (colour, erasing, normalisation:
    torchvision's choice) returns forward's images and the targets unchanged (valid flags
    filled in), train and eval."""
    m = case.factory()
    n = 5
    x = make_batch(case, torch.uint8, "cpu", n=n, seed=3)
    t = make_targets(case.in_size, n, seed=3)
    t.pop("box_valid")
    for train in (True, False):
        m.train(train)
        keys = _keys(m, n, 3)
        y, out = _wt(m, x, t, keys, 3)
        what = f"{case.id} with_targets (train={train})"
        _assert_close(y, _fwd(m, x, keys, 3), True, f"{what}: images vs forward's")
        assert torch.equal(out["box_valid"], torch.ones(n, 5, dtype=torch.bool)), what
        out.pop("box_valid")
        _assert_targets_equal(out, t, f"{what}: targets of a transform that moves no pixels")


def check_targets_refused(case: Case) -> None:
    """A module that blends several geometries (AugMix) refuses masks, boxes and keypoints with
    a ValueError saying why, and passes labels through with forward's images."""
    m = case.factory().train()
    n = 4
    x = make_batch(case, torch.uint8, "cpu", n=n, seed=2)
    t = make_targets(case.in_size, n, seed=2)
    keys = _keys(m, n, 2)
    for key in ("masks", "boxes", "keypoints"):
        try:
            _wt(m, x, {key: t[key], "labels": t["labels"]}, keys, 2)
        except ValueError as e:
            assert "no single geometry" in str(e), f"{case.id}: {key} refused without why: {e}"
        else:
            raise AssertionError(f"{case.id}: with_targets accepted targets['{key}']")
    y, out = _wt(m, x, {"labels": t["labels"]}, keys, 2)
    assert torch.equal(y, _fwd(m, x, keys, 2)), f"{case.id}: with_targets' images vs forward's"
    assert set(out) == {"labels"} and torch.equal(out["labels"], t["labels"]), case.id
