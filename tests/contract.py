"""The shared transform contract: every transform in CASES gets the common checks.

Adding a transform means adding one entry to CASES (see the format under the warp marker).
``tests/test_contract.py`` runs every function in ``CHECKS`` on every case, for uint8 and
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

from dataclasses import dataclass
from typing import Callable, List, Optional, Tuple

import torch
from torch import Tensor, nn

import timm_reference as _timm_ref


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


def _T():
    import batchaug.transforms as T

    return T


CASES: List[Case] = [
    # --- basic transform cases ---
    Case("RandomHorizontalFlip", lambda: _T().RandomHorizontalFlip(0.5)),
    Case("RandomVerticalFlip", lambda: _T().RandomVerticalFlip(0.5)),
    Case("RandomCrop-pad4-constant", lambda: _T().RandomCrop(20, padding=4), out_size=(20, 20)),
    Case("RandomCrop-reflect", lambda: _T().RandomCrop((16, 18), padding=(2, 3),
                                                       padding_mode="reflect"),
         out_size=(16, 18)),
    Case("RandomCrop-symmetric-4pad", lambda: _T().RandomCrop(
        24, padding=[1, 2, 3, 4], padding_mode="symmetric", pad_if_needed=True),
         out_size=(24, 24)),
    Case("RandomCrop-edge", lambda: _T().RandomCrop(12, padding=2, padding_mode="edge"),
         out_size=(12, 12)),
    Case("CenterCrop", lambda: _T().CenterCrop((10, 30)), random=False, out_size=(10, 30)),
    Case("Pad-constant-per-channel", lambda: _T().Pad([1, 2, 3, 4], fill=[10, 20, 30]),
         random=False, out_size=(26, 28)),
    Case("Pad-reflect", lambda: _T().Pad((3, 2), padding_mode="reflect"), random=False,
         out_size=(24, 30)),
    Case("Pad-symmetric", lambda: _T().Pad(5, padding_mode="symmetric"), random=False,
         out_size=(30, 34)),
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
         out_size=(20, 24), plain_path="batchaug.functional._crop._flat_crop_applies"),
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
    Case("RandomRotation-nearest", lambda: _T().RandomRotation(30)),
    Case("RandomRotation-bilinear-fill-center", lambda: _T().RandomRotation(
        (-20, 45), interpolation="bilinear", center=(3, 5), fill=[10, 20, 30])),
    Case("RandomAffine-nearest", lambda: _T().RandomAffine(30, translate=(0.1, 0.2))),
    Case("RandomAffine-bilinear-all", lambda: _T().RandomAffine(
        (-20, 45), translate=(0.2, 0.1), scale=(0.7, 1.2), shear=(-10, 10, -5, 15),
        interpolation="bilinear", fill=[10, 20, 30], center=(3, 5))),
    Case("RandomPerspective", lambda: _T().RandomPerspective()),
    Case("RandomPerspective-nearest-fill", lambda: _T().RandomPerspective(
        0.8, p=0.8, interpolation="nearest", fill=[10, 20, 30])),
    # eval_crop_pct=None: eval() is the identity (the contract's rule for random transforms);
    # the default eval() centre crop + resize is tested in tests/test_warp.py.
    # antialias=True (default) on CPU takes the per-box F.interpolate loop (eager/scripted);
    # compile/export take the batched filter, compared with it in check_compiled_gradients
    # and tests/test_warp.py. antialias=False is the batched grid_sample path everywhere.
    Case("RandomResizedCrop", lambda: _T().RandomResizedCrop(16, eval_crop_pct=None),
         out_size=(16, 16), plain_path="batchaug.functional._resize._chunked", plain_tol=1.0),
    Case("RandomResizedCrop-no-antialias", lambda: _T().RandomResizedCrop(
        (14, 18), antialias=False, eval_crop_pct=None), out_size=(14, 18)),
    Case("RandomResizedCrop-nearest", lambda: _T().RandomResizedCrop(
        (10, 30), scale=(0.2, 0.9), interpolation="nearest", eval_crop_pct=None),
         out_size=(10, 30)),
    # bicubic: per box on CPU eager/scripted, batched separable matrices elsewhere (uint8 within
    # 2 steps: fixed-point vs float weights, each pass rounded)
    Case("RandomResizedCrop-bicubic", lambda: _T().RandomResizedCrop(
        (12, 14), interpolation="bicubic", eval_crop_pct=None), out_size=(12, 14),
         plain_path="batchaug.functional._resize._chunked", plain_tol=2.0),
    Case("RandomResizedCrop-bicubic-no-antialias", lambda: _T().RandomResizedCrop(
        (14, 12), interpolation="bicubic", antialias=False, eval_crop_pct=None),
         out_size=(14, 12), plain_path="batchaug.functional._resize._chunked", plain_tol=2.0),
    Case("Resize", lambda: _T().Resize((10, 12)), random=False, out_size=(10, 12)),
    Case("Resize-bicubic", lambda: _T().Resize((10, 30), interpolation="bicubic"), random=False,
         out_size=(10, 30)),
    Case("Resize-max-size", lambda: _T().Resize(18, max_size=20), random=False,
         out_size=(17, 20)),
    Case("Resize-shorter-side-nearest", lambda: _T().Resize(10, interpolation="nearest"),
         random=False, out_size=(10, 12)),
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
    # torchvision reference exists; random inner transforms: tests/test_container.py
    # (plain_path: the static path, which accelerators take, against the grouped one)
    Case("RandomApply", lambda: _T().RandomApply([_T().RandomInvert(1.0), _T().Grayscale(3)]),
         plain_path="batchaug.transforms._container.group_on_host"),
    Case("RandomChoice", lambda: _T().RandomChoice(
        [_T().RandomInvert(1.0), _T().Grayscale(3), _T().RandomHorizontalFlip(1.0)],
        p=[2, 1, 1]), plain_path="batchaug.transforms._container.group_on_host"),
    Case("RandomOrder", lambda: _T().RandomOrder([_T().RandomInvert(1.0), _T().Grayscale(3)]),
         plain_path="batchaug.transforms._container.group_on_host"),
    # --- automatic augmentation policies (issue 10): grouped by op in eager/TorchScript,
    # static (every op, torch.where) under compile/export; group_by_branch=False, fill and
    # bilinear in tests/test_auto_augment.py (grouped == static there) ---
    Case("TrivialAugmentWide", lambda: _T().TrivialAugmentWide(), affine=False, tv_grad=False,
         plain_path="batchaug.transforms._auto_augment.group_on_host", plain_tol=1e-5),
    Case("RandAugment", lambda: _T().RandAugment(num_ops=2, magnitude=9), affine=False,
         tv_grad=False,
         plain_path="batchaug.transforms._auto_augment.group_on_host", plain_tol=1e-5),
    Case("AutoAugment-svhn", lambda: _T().AutoAugment("svhn"), affine=False, tv_grad=False,
         plain_path="batchaug.transforms._auto_augment.group_on_host", plain_tol=1e-5),
    # one chain of one op: the default 3x3 chains reach points where posterize/solarize jump
    # (a step of the function itself), which float64 gradcheck reads as a wrong gradient;
    # tests/test_auto_augment.py checks the default AugMix against torchvision
    Case("AugMix", lambda: _T().AugMix(mixture_width=1, chain_depth=1), affine=False,
         tv_grad=False,
         plain_path="batchaug.transforms._auto_augment.group_on_host", plain_tol=1e-5),
    # --- timm's policies and erasing (from_timm), references in tests/timm_reference.py ---
    # weighted op choice without replacement, magnitude noise, nearest warps; the AutoAugment
    # and AugMix cases warp bilinearly (v0 is left out: its Solarize/Posterize jumps make
    # float64 gradcheck read finite differences across a step)
    Case("TimmRandAugment-weighted-mstd", lambda: _T().TimmRandAugment(
        9, prob=0.8, magnitude_std=0.5, ops=list(_T()._timm.RAND_WEIGHTS),
        choice_weights=list(_T()._timm.RAND_WEIGHTS.values()), interpolation="nearest"),
         affine=False, tv_grad=False,
         plain_path="batchaug.transforms._timm.group_on_host", plain_tol=1e-5),
    Case("TimmAutoAugment-original", lambda: _T().TimmAutoAugment("original"), affine=False,
         tv_grad=False,
         plain_path="batchaug.transforms._timm.group_on_host", plain_tol=1e-5),
    Case("TimmAugMix", lambda: _T().TimmAugMix(5, width=1, depth=1), affine=False,
         tv_grad=False,
         plain_path="batchaug.transforms._timm.group_on_host", plain_tol=1e-5),
    Case("TimmRandomErasing", lambda: _T().TimmRandomErasing(0.8, max_count=3)),
    # per-sample bilinear or bicubic (eval_crop_pct=None: eval() is the identity; the centre
    # crop is tested in tests/test_timm.py); its box law against timm's: tests/test_timm.py
    Case("TimmRandomResizedCrop", lambda: _T().TimmRandomResizedCrop(
        (12, 14), eval_crop_pct=None), out_size=(12, 14), keyed_draws=True,
         plain_path="batchaug.functional._resize._chunked", plain_tol=2.0),
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
# the contract's input dtype (uint8/float32 above), so tests/test_contract.py runs each of them
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
    pad = m._full_padding(x.shape[2], x.shape[3])
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
        else:
            raise AssertionError(f"no reference for {name} inside a container")
    return xi


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
    scripted == eager. (Compile: tests/test_keyed.py; export with keys:
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
