"""The contract's cases: one Case per transform configuration (CASES), the input dtypes
of the per-dtype checks (DTYPES) and the batch a case is checked on (make_batch).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, List, Optional, Tuple

import torch
from torch import Tensor, nn


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
    # the default eval() centre crop + resize is tested in TestRandomResizedCrop
    # (tests/transforms/test_geometry.py). antialias=True (default) on CPU takes the per-box
    # F.interpolate loop (eager/scripted); compile/export take the batched filter, compared
    # with it in check_compiled_gradients and TestRandomResizedCrop. antialias=False is the
    # batched grid_sample path everywhere.
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
         plain_path="batchaug.transforms._auto_augment.group_on_host", plain_tol=1e-5),
    Case("TimmAutoAugment-original", lambda: _T().TimmAutoAugment("original"), affine=False,
         tv_grad=False, target_samples=_policy_samples, tv_pinned_why=_TIMM_POLICY_WHY,
         target_factory=lambda: _T().TimmAutoAugment("original", fill=0),
         plain_path="batchaug.transforms._auto_augment.group_on_host", plain_tol=1e-5),
    Case("TimmAugMix", lambda: _T().TimmAugMix(5, width=1, depth=1), affine=False,
         tv_grad=False,
         plain_path="batchaug.transforms._auto_augment.group_on_host", plain_tol=1e-5),
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
