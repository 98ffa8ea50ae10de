"""Targets (masks, boxes, keypoints) through with_targets: TARGET_CHECKS and their helpers."""
from __future__ import annotations

import math
from typing import Callable, List, Optional, Tuple

import torch
from torch import Tensor, nn

from tests.contract.cases import Case, make_batch
from tests.contract.checks import _assert_close
from tests.contract.sync import HostSyncError, NoHostSync


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
