"""Targets through RandomApply / RandomChoice / RandomOrder / Augment: each sample's targets go
through the branch its image took (torchvision v2 on tv_tensors per sample as the reference),
keyed results independent of batch position, grouped == static, scripted == eager, export with
a dynamic batch, compile, and the TypeError for children that cannot move targets."""
from __future__ import annotations

import pytest
import torch
import torchvision.transforms.v2 as V2
import torchvision.transforms.v2.functional as TF
from torch import nn
from torch.export import Dim, export
from torchvision import tv_tensors

import batchaug
import batchaug.transforms as T
from batchaug import _random

H, W, M, K = 8, 10, 3, 4
HF, VF = T.RandomHorizontalFlip, T.RandomVerticalFlip


def _batch(n: int, seed: int = 0):
    """uint8 images and every kind of target (boxes at least 2 px wide: no flip drops them)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (n, 3, H, W), generator=g, dtype=torch.uint8)
    x1 = torch.randint(0, W - 3, (n, M), generator=g).float()
    y1 = torch.randint(0, H - 3, (n, M), generator=g).float()
    bw = torch.randint(2, 4, (n, M), generator=g).float()
    bh = torch.randint(2, 4, (n, M), generator=g).float()
    targets = {
        "masks": torch.randint(0, 5, (n, H, W), generator=g, dtype=torch.uint8),
        "boxes": torch.stack((x1, y1, x1 + bw, y1 + bh), dim=2),
        "box_valid": torch.rand(n, M, generator=g) < 0.8,
        "keypoints": torch.randint(0, W, (n, K, 2), generator=g).float().clamp(max=H - 1),
        "keypoint_valid": torch.rand(n, K, generator=g) < 0.8,
        "labels": torch.arange(n),
        "box_labels": torch.randint(0, 9, (n, M), generator=g),
    }
    targets["boxes"] = targets["boxes"] * targets["box_valid"].unsqueeze(2)
    targets["keypoints"] = targets["keypoints"] * targets["keypoint_valid"].unsqueeze(2)
    return x, targets


def _keys(n: int, offset: int = 0) -> torch.Tensor:
    return _random.sample_keys(7, 1, torch.arange(offset, offset + n))


def _same(a, b):
    (ya, ta), (yb, tb) = a, b
    assert torch.equal(ya, yb)
    assert sorted(ta) == sorted(tb)
    for k in ta:
        assert ta[k].dtype == tb[k].dtype and torch.equal(ta[k], tb[k]), k


def _tv_one(ops, x, t, i):
    """Sample i through torchvision v2's functional flips ``ops`` ("h"/"v"), on tv_tensors."""
    img = x[i]
    mask = tv_tensors.Mask(t["masks"][i])
    boxes = tv_tensors.BoundingBoxes(t["boxes"][i], format="XYXY", canvas_size=(H, W))
    kps = tv_tensors.KeyPoints(t["keypoints"][i], canvas_size=(H, W))
    for op in ops:
        f = TF.horizontal_flip if op == "h" else TF.vertical_flip
        img, mask, boxes, kps = f(img), f(mask), f(boxes), f(kps)
    bv, kv = t["box_valid"][i], t["keypoint_valid"][i]
    return img, {"masks": mask.as_subclass(torch.Tensor),
                 "boxes": boxes.as_subclass(torch.Tensor) * bv.unsqueeze(1), "box_valid": bv,
                 "keypoints": kps.as_subclass(torch.Tensor) * kv.unsqueeze(1),
                 "keypoint_valid": kv, "labels": t["labels"][i], "box_labels": t["box_labels"][i]}


# container, and each sample's flips from its drawn params
def _apply(g):
    return T.RandomApply([HF(1.0), VF(1.0)], p=0.5, group_by_branch=g)


def _choice(g):
    return T.RandomChoice([HF(1.0), VF(1.0), batchaug.Augment(HF(1.0), VF(1.0))],
                          p=[1, 1, 2], group_by_branch=g)


def _order(g):
    return T.RandomOrder([HF(1.0), VF(1.0)], group_by_branch=g)


def _ops_apply(params, i):
    return "hv" if params[i] else ""


def _ops_choice(params, i):
    return ["h", "v", "hv"][int(params[i])]


def _ops_order(params, i):
    return "".join("hv"[int(j)] for j in params[i])


CASES = [(_apply, _ops_apply), (_choice, _ops_choice), (_order, _ops_order)]


@pytest.mark.parametrize("group", [True, False], ids=["grouped", "static"])
@pytest.mark.parametrize("keyed", [False, True], ids=["seed", "keys"])
@pytest.mark.parametrize("make, ops", CASES, ids=["apply", "choice", "order"])
def test_each_sample_gets_its_branch_as_torchvision(make, ops, keyed, group):
    x, t = _batch(16)
    keys = _keys(16) if keyed else None
    m = make(group)
    torch.manual_seed(3)
    y, out = m.with_targets(x, t, keys)
    torch.manual_seed(3)
    params = m.make_params(x, keys)
    assert len({ops(params, i) for i in range(16)}) > 1  # more than one branch taken
    torch.manual_seed(3)
    assert torch.equal(m(x, keys), y)  # the images of forward
    for i in range(16):
        ry, rt = _tv_one(ops(params, i), x, t, i)
        assert torch.equal(y[i], ry)
        for k in rt:
            assert torch.equal(out[k][i], rt[k]), (i, k)


def _random_containers(g):
    return [
        T.RandomApply([HF(), VF()], p=0.6, group_by_branch=g),
        T.RandomChoice([HF(), VF(), T.RandomApply([HF(), VF()], group_by_branch=g)],
                       group_by_branch=g),
        T.RandomOrder([HF(), VF(0.3), T.RandomApply([VF()], group_by_branch=g)],
                      group_by_branch=g),
        batchaug.Augment(T.RandomApply([HF()], group_by_branch=g), VF(),
                         T.RandomChoice([HF(), VF()], group_by_branch=g)),
    ]


@pytest.mark.parametrize("index", range(4), ids=["apply", "choice", "order", "augment"])
def test_keyed_targets_follow_the_key_not_the_position(index):
    """Keyed: a sample's images and targets depend on its key only (alone, in a reversed
    batch), the grouped and static paths agree, and the scripted module agrees."""
    x, t = _batch(12, seed=1)
    keys = _keys(12, 40)
    grouped, static = _random_containers(True)[index], _random_containers(False)[index]
    ref = grouped.with_targets(x, t, keys)
    _same(static.with_targets(x, t, keys), ref)
    scripted = torch.jit.script(grouped)
    _same(scripted.with_targets(x, t, keys), ref)
    torch.manual_seed(4)
    unkeyed = grouped.with_targets(x, t)
    torch.manual_seed(4)
    _same(scripted.with_targets(x, t), unkeyed)
    rev = torch.arange(11, -1, -1)
    y, out = grouped.with_targets(x[rev], {k: v[rev] for k, v in t.items()}, keys[rev])
    _same((y[rev], {k: v[rev] for k, v in out.items()}), ref)
    for i in (0, 5, 11):
        yi, oi = grouped.with_targets(x[i:i + 1], {k: v[i:i + 1] for k, v in t.items()},
                                      keys[i:i + 1])
        _same((yi, oi), (ref[0][i:i + 1], {k: v[i:i + 1] for k, v in ref[1].items()}))


@pytest.mark.parametrize("index", range(4), ids=["apply", "choice", "order", "augment"])
def test_eval_and_empty_batch(index):
    x, t = _batch(9, seed=2)
    m = _random_containers(True)[index]
    y, out = m.eval().with_targets(x, {"boxes": t["boxes"]})
    assert torch.equal(y, x) and torch.equal(out["boxes"], t["boxes"])
    assert out["box_valid"].all()  # check_targets filled the flags in
    for n in (0,):
        y0, o0 = m.train().with_targets(x[:n], {k: v[:n] for k, v in t.items()}, _keys(n))
        assert y0.shape == (0, 3, H, W) and o0["masks"].shape == (0, H, W)


class _Roll(nn.Module):
    """Moves pixels and has no with_targets."""

    def forward(self, x):
        return x.roll(1, dims=3)


class _Brighten(nn.Module):
    """Moves no pixel, says so."""

    moves_targets = False

    def forward(self, x):
        return x // 2


class _Count(T.RandomHorizontalFlip):
    calls = 0

    def with_targets(self, images, targets, keys=None):
        type(self).calls += 1
        return super().with_targets(images, targets, keys)


def test_children_without_with_targets():
    x, t = _batch(6)
    cases = [
        (lambda c: batchaug.Augment(c, _Roll()), r"Augment\.with_targets: transforms\[1\] "
         r"\(_Roll\)"),
        (lambda c: T.RandomApply([c, _Roll()]), r"RandomApply.*transforms\[1\] \(_Roll\)"),
        (lambda c: T.RandomChoice([c, _Roll()]), r"RandomChoice.*transforms\[1\] \(_Roll\)"),
        (lambda c: T.RandomOrder([c, _Roll()]), r"RandomOrder.*transforms\[1\] \(_Roll\)"),
        (lambda c: batchaug.Augment(c, T.RandomApply([HF(), _Roll()])),
         r"transforms\[1\]\.transforms\[1\] \(_Roll\)"),
        (lambda c: T.RandomChoice([c, batchaug.Augment(HF(), _Roll())]),
         r"transforms\[1\]\[1\] \(_Roll\)"),
    ]
    for make, match in cases:
        _Count.calls = 0
        m = make(_Count())
        with pytest.raises(TypeError, match=match):
            m.with_targets(x, t, _keys(6))
        assert _Count.calls == 0  # raised before anything ran
        m(x)  # images alone: fine
    # scripted, nothing can check: such a child runs on the images only (documented)
    y, out = torch.jit.script(T.RandomApply([HF(1.0), _Roll()], p=1.0)).with_targets(x, t)
    ry, rt = HF(1.0).with_targets(x, t)
    assert torch.equal(y, ry.roll(1, dims=3))
    _same((y, out), (y, rt))
    # modules known not to move pixels: images only, targets through
    for child in (_Brighten(), nn.Identity()):
        aug = batchaug.Augment(HF(1.0), child)
        y, out = aug.with_targets(x, t)
        ry, rt = HF(1.0).with_targets(x, t)
        assert torch.equal(y, child(ry))
        _same((y, out), (y, rt))
    xf = x.float() / 255
    aug = T.RandomApply([V2.Normalize([0.5] * 3, [0.2] * 3), V2.ToDtype(torch.float32), VF(1.0)],
                        p=1.0)
    y, out = aug.with_targets(xf, t)
    assert torch.equal(out["masks"], t["masks"].flip(1))
    with pytest.raises(TypeError, match=r"\(Resize\)"):
        T.RandomApply([V2.Resize((H, W))]).with_targets(xf, t)


class _Exported(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x, masks, boxes, bv, kps, kv, keys):
        t = {"masks": masks, "boxes": boxes, "box_valid": bv, "keypoints": kps,
             "keypoint_valid": kv}
        y, out = self.m.with_targets(x, t, keys)
        return y, out["masks"], out["boxes"], out["box_valid"], out["keypoints"], \
            out["keypoint_valid"]


def _flat(n, seed=0):
    x, t = _batch(n, seed)
    return (x, t["masks"], t["boxes"], t["box_valid"], t["keypoints"], t["keypoint_valid"],
            _keys(n, seed))


def test_export_with_dynamic_batch():
    """images, targets and keys share the batch Dim; runs at 1, 7, 64 equal the eager keyed
    result (grouped, which equals static with keys). Augment holds a RandomApply and a
    RandomChoice."""
    eager = _Exported(_random_containers(True)[3])
    batch = Dim("batch")
    run = export(_Exported(_random_containers(False)[3]), _flat(8),
                 dynamic_shapes=tuple({0: batch} for _ in range(7))).module()
    for n in (1, 7, 64):
        for a, b in zip(run(*_flat(n, n)), eager(*_flat(n, n))):
            assert torch.equal(a, b)


def test_compile_fullgraph():
    eager = _Exported(_random_containers(False)[1])
    compiled = torch.compile(eager, fullgraph=True, dynamic=False)
    for a, b in zip(compiled(*_flat(7)), eager(*_flat(7))):
        assert torch.equal(a, b)


def _crop():
    return T.RandomCrop((H, W), padding=3)


@pytest.mark.parametrize("group", [True, False], ids=["grouped", "static"])
@pytest.mark.parametrize("which", ["apply", "choice", "order"])
def test_moving_children_per_sample_reference(which, group):
    """Children that do not commute (a padded crop, a flip): every sample equals its branch's
    children run on that sample alone, in its order, with its key's substreams; the images
    equal forward's (where RandomApply's crop -> flip takes the fused kernel)."""
    x, t = _batch(10, seed=3)
    keys = _keys(10, 7)
    if which == "apply":
        m = T.RandomApply([_crop(), HF()], p=0.5, group_by_branch=group)
    elif which == "choice":
        m = T.RandomChoice([_crop(), HF(), batchaug.Augment(_crop(), VF())], group_by_branch=group)
    else:
        m = T.RandomOrder([_crop(), HF(), VF()], group_by_branch=group)
    y, out = m.with_targets(x, t, keys)
    assert torch.equal(m(x, keys), y)
    params = m.make_params(x, keys)
    children = list(m.transforms)
    for i in range(10):
        if which == "apply":
            steps = list(enumerate(children)) if params[i] else []
        elif which == "choice":
            steps = [(int(params[i]), children[int(params[i])])]
        else:
            steps = [(int(j), children[int(j)]) for j in params[i]]
        yi, ti = x[i:i + 1], {k: v[i:i + 1] for k, v in t.items()}
        for j, c in steps:
            yi, ti = c.with_targets(yi, ti, _random.substream(keys[i:i + 1], j))
        assert torch.equal(y[i:i + 1], yi)
        for k in ti:
            assert torch.equal(out[k][i:i + 1], ti[k]), (i, k)


@pytest.mark.parametrize("make", [
    lambda: T.RandomApply([HF(1.0)], p=0.0),
    lambda: T.RandomChoice([T.RandomInvert(1.0), T.Grayscale(3)], group_by_branch=False),
    lambda: T.RandomOrder([T.RandomInvert(1.0)]),
], ids=["apply-p0", "choice-colour", "order-colour"])
def test_samples_left_alone_follow_the_output_rules(make):
    """In training, samples no geometric child moved come back as the moving kernels would
    write them: invalid boxes/keypoints zeros, non-finite or inverted ones invalid; valid ones
    as given (a box sticking out stays)."""
    x, t = _batch(4)
    t["boxes"][0, 0] = torch.tensor([9.0, 2.0, 3.0, 8.0])  # inverted, flagged valid
    t["box_valid"][0, 0] = True
    t["boxes"][1, 1] = torch.tensor([-2.0, 1.0, W + 3.0, 4.0])  # sticks out, valid
    t["box_valid"][1, 1] = True
    t["boxes"][2, 2] = torch.tensor([1.0, 1.0, 4.0, 4.0])  # nonzero, flagged invalid
    t["box_valid"][2, 2] = False
    t["keypoints"][3, 0, 0] = float("nan")
    t["keypoint_valid"][3, 0] = True
    t["keypoints"][3, 1] = torch.tensor([2.0, 3.0])
    t["keypoint_valid"][3, 1] = False
    _, out = make().with_targets(x, t)
    bv, kv = out["box_valid"], out["keypoint_valid"]
    assert not bv[0, 0] and not bv[2, 2] and bv[1, 1]
    assert torch.equal(out["boxes"][1, 1], t["boxes"][1, 1])
    assert not kv[3, 0] and not kv[3, 1]
    assert (out["boxes"][~bv] == 0).all() and (out["keypoints"][~kv] == 0).all()
    expect = t["box_valid"].clone()
    expect[0, 0] = False
    assert torch.equal(bv, expect)
