"""A/B of the geometric transforms between two trees of batchaug: records every case's outputs
(images, targets, their dtypes and strides), ``repr`` and ``torch.get_rng_state()`` after the call
under one tree, then compares another tree's with them.

    cd /tmp && PYTHONPATH=/path/to/old/tree python /path/to/ab_geometry.py record /tmp/ab_old.pt
    PYTHONPATH=. python tools/ab_geometry.py compare /tmp/ab_old.pt

Cases: each geometric transform with a spread of constructor arguments (and the ragged pairs of
an ``Augment``), train/eval, uint8/float32, with and without keys, a dense batch (``forward``),
a dense batch with masks, boxes and keypoints (``with_targets``) and a ragged batch with
``sizes`` and the same targets, over seeds. Prints the counts; exits 1 on any difference.
Then, on the new tree alone: each keyed ragged image, and its masks, boxes and keypoints,
against the same image alone (a batch of one).
"""
import sys
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

import batchaug as B

N, H, W = 6, 40, 36

MODULES: List[str] = [
    "B.RandomHorizontalFlip(0.5)",
    "B.RandomHorizontalFlip(1.0, keypoint_flip_indices=[1, 0, 2])",
    "B.RandomVerticalFlip(0.5)",
    "B.RandomCrop(16, padding=4)",
    "B.RandomCrop((12, 20), pad_if_needed=True, padding_mode='reflect')",
    "B.RandomCrop(30, pad_if_needed=True, fill=7)",
    "B.RandomCrop(8, padding=[1, 2, 3, 4], padding_mode='edge', mask_fill=3)",
    "B.Pad(3)",
    "B.Pad([1, 2, 3, 4], padding_mode='reflect')",
    "B.Pad(2, fill=5, mask_fill=9)",
    "B.CenterCrop(16)",
    "B.CenterCrop((44, 10))",
    "B.RandomResizedCrop(16)",
    "B.RandomResizedCrop((12, 20), scale=(0.5, 1.0), antialias=False)",
    "B.RandomResizedCrop(16, interpolation='bicubic')",
    "B.RandomResizedCrop(16, interpolation='nearest', eval_crop_pct=None)",
    "B.Resize((16, 20))",
    "B.Resize(16)",
    "B.Resize(12, max_size=20)",
    "B.Resize((14, 14), interpolation='bicubic', antialias=False)",
    "B.RandomRotation(30)",
    "B.RandomRotation((10, 80), interpolation='bilinear', center=[3, 5], fill=[1, 2, 3])",
    "B.RandomRotation(180, mask_fill=2)",
    "B.RandomAffine(20, translate=(0.1, 0.2), scale=(0.8, 1.2), shear=10)",
    "B.RandomAffine(0, translate=(0.3, 0.3))",
    "B.RandomAffine(15, shear=[-5, 5, -3, 3], interpolation='bilinear', fill=4, center=[2, 2])",
    "B.RandomPerspective(0.5, p=0.7)",
    "B.RandomPerspective(0.3, p=1.0, interpolation='nearest', fill=9)",
    "B.RandomResizedCrop(16, scale=(0.95, 1.0), ratio=(3.0, 4.0))",  # the fallback box
    "B.RandomResizedCrop(16, scale=(0.95, 1.0), ratio=(0.1, 0.2))",
    "B.RandomResizedCrop((20, 10), scale=(0.01, 0.02), ratio=(0.5, 2.0))",
    "B.TimmRandomResizedCrop(16)",
    "B.Augment(B.Resize(16), B.CenterCrop(14))",
    "B.Augment(B.Resize(20), B.RandomCrop(16, pad_if_needed=True))",
    "B.Augment(B.RandomRotation(20, interpolation='bilinear'), B.RandomResizedCrop(16))",
    "B.Augment(B.RandomAffine(10, translate=(0.1, 0.1)), B.RandomResizedCrop(12))",
    "B.Augment(B.RandomHorizontalFlip(), B.RandomRotation(20), B.CenterCrop(18))",
]


def _inputs(seed: int, dtype: torch.dtype, ragged: bool
            ) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(1000 + seed)
    x = torch.randint(0, 256, (N, 3, H, W), generator=g, dtype=torch.uint8)
    if dtype != torch.uint8:
        x = x.to(dtype) / 255.0
    mdtype = torch.uint8 if seed % 2 else torch.int64
    masks = torch.randint(0, 6, (N, H, W), generator=g).to(mdtype)
    xy = torch.rand(N, 4, 2, generator=g) * torch.tensor([W, H])
    boxes = torch.cat((xy[:, :, 0:1].minimum(xy[:, :, 1:2] * W / H),
                       xy[:, :, 1:2].minimum(xy[:, :, 0:1] * H / W),
                       xy[:, :, 0:1].maximum(xy[:, :, 1:2] * W / H),
                       xy[:, :, 1:2].maximum(xy[:, :, 0:1] * H / W)), 2)
    keypoints = torch.rand(N, 3, 2, generator=g) * torch.tensor([W, H])
    targets = {"masks": masks, "boxes": boxes, "keypoints": keypoints}
    if ragged:
        hs = torch.randint(8, H + 1, (N,), generator=g)
        ws = torch.randint(8, W + 1, (N,), generator=g)
        targets["sizes"] = torch.stack((hs, ws), 1)
    return x, targets


def _record(out: Dict[str, torch.Tensor], name: str, value: object) -> None:
    if isinstance(value, torch.Tensor):
        out[name] = value.clone()
        out[name + ".stride"] = torch.tensor(value.stride())
        out[name + ".dtype"] = torch.tensor(list(str(value.dtype).encode()))
    elif isinstance(value, dict):
        for k, v in value.items():
            _record(out, f"{name}.{k}", v)
    elif isinstance(value, (tuple, list)):
        for i, v in enumerate(value):
            _record(out, f"{name}.{i}", v)


def _extent_only(out: object) -> object:
    """A ragged result with its padding zeroed: the padding of a ragged batch is undefined
    (``torch.empty``), only each image's extent is a result."""
    if not isinstance(out, tuple):
        return out
    images, second = out
    sizes = second.get("sizes") if isinstance(second, dict) else second
    if sizes is None:
        return out
    rows = torch.arange(images.shape[2]).view(1, -1, 1)
    cols = torch.arange(images.shape[3]).view(1, 1, -1)
    inside = (rows < sizes[:, 0].view(-1, 1, 1)) & (cols < sizes[:, 1].view(-1, 1, 1))
    images = torch.where(inside.unsqueeze(1), images, torch.zeros_like(images))
    if isinstance(second, dict) and "masks" in second:
        m = second["masks"]
        keep = inside if m.dim() == 3 else inside.unsqueeze(1)
        second = dict(second, masks=torch.where(keep, m, torch.zeros_like(m)))
    return images, second


# the "params" cases: make_params alone on shape-only batches (large areas, extreme aspects)
PARAM_SHAPES = [(5000, 4000), (4097, 4099), (33, 7), (1, 1), (2, 300), (224, 224)]


def cases():
    for spec in MODULES:
        if spec.startswith("B.Augment"):
            continue
        for train in (True, False):
            for keyed in (False, True):
                for shape in PARAM_SHAPES:
                    for seed in (0, 1):
                        yield spec, train, shape, keyed, "params", seed
    for spec in MODULES:
        for train in (True, False):
            for dtype in (torch.uint8, torch.float32):
                for keyed in (False, True):
                    for kind in ("forward", "targets", "ragged", "ragged_images"):
                        for seed in (0, 1):
                            yield spec, train, dtype, keyed, kind, seed


def run_case(spec, train, dtype, keyed, kind, seed):
    module = eval(spec)  # noqa: S307 -- the specs above
    module.train(train)
    if kind == "params":  # dtype holds the (h, w) of a batch of which only the shape is read
        x = torch.zeros(1, 1, 1, 1, dtype=torch.uint8).expand(N, 3, dtype[0], dtype[1])
        targets = {}
    else:
        x, targets = _inputs(seed, dtype, kind.startswith("ragged"))
    keys = (torch.arange(N, dtype=torch.int64) * 7919 + 13 * seed + 1) if keyed else None
    torch.manual_seed(seed)
    result: Dict[str, torch.Tensor] = {}
    error = ""
    try:
        if kind == "params":
            p = module.make_params(x, keys) if keys is not None else module.make_params(x)
            if type(module).__name__ == "RandomRotation" and isinstance(p, tuple):
                # an affine of angle only: (angle, translate, scale, shear), compared by its
                # angle (the old class's params) and the identity elsewhere
                if not (bool((p[1] == 0).all()) and bool((p[2] == 1).all())
                        and bool((p[3] == 0).all())):
                    raise AssertionError("RandomRotation params: not an angle only")
                p = p[0]
            _record(result, "out", p)
        elif kind == "forward":
            _record(result, "out", module(x, keys) if keys is not None else module(x))
        elif kind == "targets":
            t = {k: v for k, v in targets.items() if k != "sizes"}
            _record(result, "out", module.with_targets(x, t, keys))
        elif kind == "ragged":
            _record(result, "out", _extent_only(module.with_targets(x, targets, keys)))
        else:
            _record(result, "out", _extent_only(module.with_sizes(x, targets["sizes"], keys)))
    except Exception as e:  # the same refusal on both trees counts as the same result
        error = f"{type(e).__name__}: {e}"
    result["rng"] = torch.get_rng_state()
    return {"out": result, "error": error, "repr": repr(module)}


def _ragged_case(spec: str, train: bool, dtype: torch.dtype, seed: int
                 ) -> Tuple[torch.nn.Module, torch.Tensor, Dict[str, torch.Tensor], torch.Tensor]:
    """The module, the ragged batch, its targets (with ``"sizes"``) and per-image keys."""
    module = eval(spec)  # noqa: S307 -- the specs above
    module.train(train)
    x, targets = _inputs(seed, dtype, True)
    return module, x, targets, torch.arange(N, dtype=torch.int64) * 7919 + 13 * seed + 1


def alone_mismatches(spec: str, train: bool, dtype: torch.dtype, seed: int
                     ) -> Optional[List[int]]:
    """Keyed ``with_sizes`` on the ragged batch: the images whose result differs from the same
    call on that image alone (its own pixels, a batch of one, its key): a step that reads the
    padding or the batchmates shows here."""
    module, x, targets, keys = _ragged_case(spec, train, dtype, seed)
    sizes = targets["sizes"]
    try:
        y, out_sizes = module.with_sizes(x, sizes, keys)
    except (ValueError, RuntimeError):  # refused on a ragged batch (Resize(int) alone)
        return None
    bad = []
    for i in range(N):
        h, w = int(sizes[i, 0]), int(sizes[i, 1])
        one = x[i:i + 1, :, :h, :w].contiguous()
        yi, si = module.with_sizes(one, sizes[i:i + 1], keys[i:i + 1])
        oh, ow = int(out_sizes[i, 0]), int(out_sizes[i, 1])
        if not torch.equal(si[0], out_sizes[i]) or not torch.equal(
                yi[0, :, :oh, :ow], y[i, :, :oh, :ow]):
            bad.append(i)
    return bad


def targets_alone_mismatches(spec: str, train: bool, dtype: torch.dtype, seed: int
                             ) -> Optional[List[str]]:
    """Keyed ``with_targets`` on the ragged batch with masks, boxes and keypoints: the targets
    (``image:key``) that differ from the same call on that image alone (its own pixels,
    targets, size and key, a batch of one): masks within the output extent, boxes, keypoints
    and their flags bit for bit, edges included."""
    module, x, targets, keys = _ragged_case(spec, train, dtype, seed)
    sizes = targets["sizes"]
    try:
        y, t = module.with_targets(x, targets, keys)
    except (ValueError, RuntimeError):  # refused on a ragged batch (Resize(int) alone)
        return None
    out_sizes = t.get("sizes")
    bad = []
    for i in range(N):
        h, w = int(sizes[i, 0]), int(sizes[i, 1])
        one = {"masks": targets["masks"][i:i + 1, :h, :w].contiguous(),
               "boxes": targets["boxes"][i:i + 1], "keypoints": targets["keypoints"][i:i + 1],
               "sizes": sizes[i:i + 1]}
        yi, ti = module.with_targets(x[i:i + 1, :, :h, :w].contiguous(), one, keys[i:i + 1])
        oh, ow = (y.shape[2], y.shape[3]) if out_sizes is None else (
            int(out_sizes[i, 0]), int(out_sizes[i, 1]))
        if (oh, ow) != (yi.shape[2], yi.shape[3]):
            bad.append(f"{i}:size")
            continue
        if not torch.equal(ti["masks"][0], t["masks"][i, :oh, :ow]):
            bad.append(f"{i}:masks")
        for key in ("boxes", "box_valid", "keypoints", "keypoint_valid"):
            if not torch.equal(ti[key][0], t[key][i]):
                bad.append(f"{i}:{key}")
    return bad


def _report_alone(check: Callable[[str, bool, torch.dtype, int], Optional[List[Any]]],
                  what: str, tag: str) -> None:
    """Prints how many keyed ragged images pass ``check`` (a list of what differs per case:
    image indices, or ``"image:key"``), and the cases that do not."""
    alone, wrong = 0, []
    for spec in MODULES:
        for train in (True, False):
            for dtype in (torch.uint8, torch.float32):
                for seed in (0, 1):
                    bad = check(spec, train, dtype, seed)
                    if bad is None:  # refused on a ragged batch (Resize(int) alone)
                        continue
                    alone += N - len({str(b).split(":")[0] for b in bad})
                    if bad:
                        wrong.append(f"{spec} train={train} {dtype} seed={seed}: {bad}")
    print(f"ragged, keyed: {alone} images whose {what} equal the same image's alone, "
          f"{len(wrong)} cases with an image whose {what} do not")
    for w in wrong:
        print(tag, w)


def main(argv: List[str]) -> int:
    torch.set_num_threads(1)
    what, path = argv[0], argv[1]
    if what == "record":
        print("batchaug from", B.__file__)
        torch.save({repr(c): run_case(*c) for c in cases()}, path)
        return 0
    print("batchaug from", B.__file__)
    old = torch.load(path)
    counts = {"same": 0, "differ": 0, "errors_same": 0}
    by_kind: Dict[str, int] = {}
    diffs: List[str] = []
    for c in cases():
        key = repr(c)
        a, b = old[key], run_case(*c)
        same = a["error"] == b["error"] and a["repr"] == b["repr"]
        same = same and sorted(a["out"]) == sorted(b["out"])
        if same:
            for k, v in a["out"].items():
                w = b["out"][k]
                if v.dtype != w.dtype or v.shape != w.shape or not torch.equal(v, w):
                    same = False
                    diffs.append(f"{key}: {k}")
                    break
        elif len(diffs) < 50:
            diffs.append(f"{key}: error {a['error']!r} vs {b['error']!r}, repr {a['repr']} vs "
                         f"{b['repr']}, keys {sorted(set(a['out']) ^ set(b['out']))}")
        if same:
            counts["same"] += 1
            counts["errors_same"] += bool(a["error"])
            by_kind[c[4]] = by_kind.get(c[4], 0) + 1
        else:
            counts["differ"] += 1
    print(f"{counts['same'] + counts['differ']} cases: {counts['same']} identical (outputs, "
          f"dtypes, strides, targets, repr and RNG state after the call; "
          f"{counts['errors_same']} of them the same error on both), {counts['differ']} differ")
    print("identical by kind:", by_kind)
    _report_alone(alone_mismatches, "pixels", "NOT ALONE")
    _report_alone(targets_alone_mismatches, "masks, boxes and keypoints", "TARGETS NOT ALONE")
    for d in diffs[:50]:
        print("DIFF", d)
    return 1 if counts["differ"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
