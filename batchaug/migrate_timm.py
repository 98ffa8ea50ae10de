"""One-call migration from timm's data pipeline: :func:`from_timm`.

timm builds its pipelines from torchvision transforms plus its own (crop with a random
interpolation, RandAugment/AutoAugment/AugMix from config strings, RandomErasing with several
boxes, Mixup). Their timm-specific steps become the batchaug modules of the same semantics
(:class:`TimmRandAugment`, ...), then the pipeline is split as :func:`from_torchvision` splits
it. Nothing is drawn or run here; timm itself is only needed to build the objects passed in.
"""
import math
import re
import warnings
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import torch
from torch import nn

from . import transforms as BT
from .compose import Augment
from .migrate import _NO_SIZE_NOTE, Migration, _flatten, from_torchvision
from .transforms import _timm as TT

_UNSUPPORTED = {
    "ResizeKeepRatio": "random resize keeping the aspect ratio has no batchaug equivalent yet",
    "CenterCropOrPad": "no batchaug equivalent yet",
    "RandomCropOrPad": "no batchaug equivalent yet",
    "RandomPad": "no batchaug equivalent yet",
    "TrimBorder": "no batchaug equivalent yet",
    "ToNumpy": "the cache stores uint8 tensors; drop it",
    "ToTensor": "timm's ToTensor keeps 0-255 floats; use MaybePILToTensor / MaybeToTensor",
    "RandomResizedCropToSequence": "NaFlex sequences have no batchaug equivalent",
    "ResizeToSequence": "NaFlex sequences have no batchaug equivalent",
    "Patchify": "patchify in the model, after the augment",
}


def _is_timm(t: Any) -> bool:
    return type(t).__module__.startswith("timm.")


def _interp_name(mode: Any) -> str:
    value = getattr(mode, "value", mode)
    if isinstance(value, int):  # a PIL resampling filter
        return {0: "nearest", 2: "bilinear", 3: "bicubic", 1: "lanczos", 4: "box",
                5: "hamming"}.get(value, str(value))
    return str(value).lower()


def _warp_interpolation(hparams: dict, where: str, notes: List[str]) -> str:
    """The interpolation of the policies' warps: timm's, or bilinear in place of bicubic and
    of its per-op random choice."""
    interp = hparams.get("interpolation")
    if interp is None or isinstance(interp, (list, tuple)):
        timm = "picks bilinear or bicubic per op (PIL)"
    else:
        name = _interp_name(interp)
        if name in ("nearest", "bilinear"):
            return name
        timm = f"warps with PIL {name}"
    notes.append(f"{where}: timm {timm}; batchaug warps bilinearly (uint8 within the "
                 f"tolerances of the timm table of the migration guide)")
    return "bilinear"


def _policy_args(hparams: dict) -> dict:
    mean = hparams.get("img_mean", (128, 128, 128))
    return dict(magnitude_std=float(hparams.get("magnitude_std", 0.0)),
                magnitude_max=hparams.get("magnitude_max"),
                translate_const=float(hparams.get("translate_const", 250)),
                translate_pct=float(hparams.get("translate_pct", 0.45)),
                fill=[float(v) for v in mean])


def _rand_augment(t: Any, errors: List[str], notes: List[str]) -> Optional[nn.Module]:
    ops = list(t.ops)
    names = [op.name for op in ops]
    bad = [n for n in names if n not in TT.FA.TIMM_NAMES]
    if bad:
        errors.append(f"timm RandAugment: ops {bad} have no batchaug equivalent (PIL blur / "
                      f"desaturate of the '3a' sets)")
        return None
    first = ops[0]
    if any(op.prob != first.prob or op.magnitude != first.magnitude
           or op.hparams != first.hparams for op in ops):
        errors.append("timm RandAugment: ops with different probabilities, magnitudes or "
                      "hparams (not what rand_augment_transform builds)")
        return None
    weights = None if t.choice_weights is None else [float(w) for w in t.choice_weights]
    return BT.TimmRandAugment(
        magnitude=float(first.magnitude), num_layers=int(t.num_layers), prob=float(first.prob),
        ops=names, choice_weights=weights,
        interpolation=_warp_interpolation(first.hparams, "timm RandAugment", notes),
        **_policy_args(first.hparams))


def _auto_augment(t: Any, errors: List[str], notes: List[str]) -> Optional[nn.Module]:
    table = [tuple((op.name, float(op.prob), float(op.magnitude)) for op in sub)
             for sub in t.policy]
    for name, subs in TT.POLICIES.items():
        if table == [tuple((o, float(p), float(m)) for o, p, m in sub) for sub in subs]:
            hp = t.policy[0][0].hparams
            return BT.TimmAutoAugment(
                name, interpolation=_warp_interpolation(hp, "timm AutoAugment", notes),
                **_policy_args(hp))
    errors.append(f"timm AutoAugment: the policy is none of {sorted(TT.POLICIES)} (e.g. '3a', "
                  f"with PIL blur, or a custom one)")
    return None


def _augmix(t: Any, errors: List[str], notes: List[str]) -> Optional[nn.Module]:
    names = [op.name for op in t.ops]
    if names != TT.AUGMIX_OPS:
        errors.append(f"timm AugMixAugment: ops {names} differ from timm's AugMix set")
        return None
    if t.blended:
        errors.append("timm AugMixAugment(blended=True): the blended variant (config 'b1') has "
                      "no batchaug equivalent; use b0")
        return None
    first = t.ops[0]
    args = _policy_args(first.hparams)
    del args["translate_const"]
    return BT.TimmAugMix(magnitude=float(first.magnitude), width=int(t.width),
                         depth=int(t.depth), alpha=float(t.alpha),
                         interpolation=_warp_interpolation(first.hparams, "timm AugMix", notes),
                         **args)


def _erasing(t: Any, errors: List[str], notes: List[str]) -> nn.Module:
    if t.num_splits > 1:
        notes.append("timm RandomErasing(num_splits>1): in a per-image pipeline timm erases "
                     "every image; so does batchaug (no clean split)")
    lo, hi = t.log_aspect_ratio
    return BT.TimmRandomErasing(float(t.probability), float(t.min_area), float(t.max_area),
                                math.exp(lo), math.exp(hi), t.mode or "const",
                                int(t.min_count), int(t.max_count))


def _crop(t: Any, errors: List[str], notes: List[str]) -> nn.Module:
    size = list(t.size)
    notes.append(f"timm RandomResizedCropAndInterpolation: boxes drawn per sample by timm's "
                 f"law, resized by torchvision's tensor kernel on the uint8 batch (timm resizes "
                 f"PIL images: slightly different resampling and rounding); eval() returns "
                 f"{size} images by a centre crop + resize (crop_pct 0.875)")
    if isinstance(t.interpolation, (list, tuple)):
        return BT.TimmRandomResizedCrop(size, scale=list(t.scale), ratio=list(t.ratio),
                                        interpolations=[_interp_name(i)
                                                        for i in t.interpolation])
    return BT.RandomResizedCrop(size, scale=list(t.scale), ratio=list(t.ratio),
                                interpolation=_interp_name(t.interpolation))


# timm's own steps -> their batchaug module (None: an error of ``errors``)
_CONVERTERS = {"RandAugment": _rand_augment, "AutoAugment": _auto_augment,
               "AugMixAugment": _augmix, "RandomErasing": _erasing,
               "RandomResizedCropAndInterpolation": _crop}


def _normalize(t: Any) -> Any:
    """torchvision's Normalize with its tensor mean/std as lists of floats."""
    import torchvision.transforms as T

    mean, std = ([float(a) for a in (v.flatten() if isinstance(v, torch.Tensor) else v)]
                 for v in (t.mean, t.std))
    return T.Normalize(mean, std)


def _mixup(t: Any) -> nn.Module:
    problems = []
    if getattr(t, "multi_label", False):
        problems.append("multi_label=True (dense multi-label targets)")
    if t.mode not in ("batch", "pair", "elem"):
        problems.append(f"mode={t.mode!r} (collate modes 'half'... of FastCollateMixup)")
    if problems:
        raise ValueError("from_timm: cannot convert timm Mixup: " + "; ".join(problems))
    if not t.mixup_enabled:
        warnings.warn("timm Mixup(mixup_enabled=False): the batchaug mixer mixes; keep it out "
                      "of the training step to disable it", UserWarning, stacklevel=3)
    return BT.TimmMixup(
        mixup_alpha=float(t.mixup_alpha), cutmix_alpha=float(t.cutmix_alpha),
        cutmix_minmax=None if t.cutmix_minmax is None else list(t.cutmix_minmax),
        prob=float(t.mix_prob), switch_prob=float(t.switch_prob), mode=t.mode,
        correct_lam=bool(t.correct_lam), label_smoothing=float(t.label_smoothing),
        num_classes=int(t.num_classes))


def _whole(text: str) -> float:
    return float(int(text))


def _flag(text: str) -> bool:
    return bool(int(text))


# a config section's letters -> (the keyword it sets, how its number reads)
_RAND_SECTIONS = {"mstd": ("magnitude_std", float), "mmax": ("magnitude_max", _whole),
                  "inc": ("inc", _flag), "m": ("magnitude", _whole), "n": ("num_layers", int),
                  "p": ("prob", float), "t": ("tset", str)}
_AUGMIX_SECTIONS = {"mstd": ("magnitude_std", float), "m": ("magnitude", _whole),
                    "w": ("width", int), "d": ("depth", int), "a": ("alpha", float),
                    "b": ("blended", _flag)}


def _parse_sections(config: str, head: str, table: Dict[str, Tuple[str, Callable[[str], Any]]],
                    bad: List[str]) -> Dict[str, Any]:
    """The keywords ``config``'s sections set, read through ``table``; an unknown section or
    one that is not a number goes to ``bad``."""
    out: Dict[str, Any] = {}
    for c in config.split("-")[1:]:
        if head == "rand" and c.startswith("t"):
            key, val = "t", c[1:]
        else:
            parts = re.split(r"(\d.*)", c)
            key, val = (parts[0], parts[1]) if len(parts) >= 2 else (c, "")
        if key not in table:
            bad.append(f"section {key + val!r}")
            continue
        name, read = table[key]
        try:
            out[name] = read(val)
        except ValueError:
            bad.append(f"section {key + val!r} (not a number)")
    return out


def timm_augment(config: str, img_size: int = 224,
                 mean: Tuple[float, ...] = (0.485, 0.456, 0.406),
                 interpolation: str = "bilinear") -> nn.Module:
    """The batchaug module of a timm ``auto_augment`` config string, with the hparams timm's
    ``create_transform(img_size, auto_augment=config, mean=mean, interpolation=...)`` gives
    it: ``rand-m9-mstd0.5-inc1`` (TimmRandAugment), ``augmix-m5-w4-d2`` (TimmAugMix),
    ``original-mstd0.5`` / ``v0`` / ``v0r`` / ``originalr`` (TimmAutoAugment).

    Unknown policies or sections raise one ``ValueError`` listing them.

    Example:
        >>> aug = timm_augment("rand-m9-mstd0.5-inc1")
        >>> type(aug).__name__, aug.magnitude, aug.magnitude_std
        ('TimmRandAugment', 9.0, 0.5)
    """
    if not isinstance(config, str) or not config:
        raise TypeError(f"config must be a timm auto_augment string, got {config!r}")
    head = config.split("-")[0]
    fill = [float(min(255, round(255 * m))) for m in mean]
    interp = interpolation if interpolation in ("nearest", "bilinear") else "bilinear"
    common = dict(translate_const=float(int(img_size * 0.45)), fill=fill, interpolation=interp)
    bad: List[str] = []
    if head == "rand":
        kw = dict(magnitude=10.0, num_layers=2, prob=0.5, magnitude_std=0.0, magnitude_max=None)
        kw.update(_parse_sections(config, head, _RAND_SECTIONS, bad))
        ops = TT.RAND_INCREASING_OPS if kw.pop("inc", False) else TT.RAND_OPS
        weights = None
        tset = kw.pop("tset", None)
        if tset == "weights":
            ops, weights = list(TT.RAND_WEIGHTS), list(TT.RAND_WEIGHTS.values())
        elif tset is not None:
            bad.append(f"op set 't{tset}' (only the default sets and 'tweights'; '3a'/'3aw' "
                       f"use PIL blur)")
        if not bad:
            return BT.TimmRandAugment(ops=list(ops), choice_weights=weights, **kw, **common)
    elif head == "augmix":
        kw = dict(magnitude=3.0, width=3, depth=-1, alpha=1.0, magnitude_std=math.inf)
        kw.update(_parse_sections(config, head, _AUGMIX_SECTIONS, bad))
        if kw.pop("blended", False):
            bad.append("blended AugMix ('b1')")
        if not bad:
            del common["translate_const"]
            return BT.TimmAugMix(translate_pct=0.3, **kw, **common)
    elif head in TT.POLICIES:
        kw = dict(magnitude_std=0.0)
        kw.update(_parse_sections(config, head, {"mstd": ("magnitude_std", float)}, bad))
        if not bad:
            return BT.TimmAutoAugment(head, **kw, **common)
    else:
        bad.append(f"policy {head!r} (known: rand, augmix, {', '.join(sorted(TT.POLICIES))})")
    raise ValueError(f"timm_augment: cannot convert {config!r}: " + "; ".join(bad))


def _timm_steps(steps: List[Any], errors: List[str], notes: List[str]) -> List[Any]:
    """timm's steps as torchvision's or batchaug's, in order (for :func:`from_torchvision`)."""
    out: List[Any] = []
    import torchvision.transforms as T

    for t in steps:
        name = type(t).__name__
        if not _is_timm(t):
            out.append(_normalize(t) if name == "Normalize" else t)
            continue
        if name in _CONVERTERS:
            m = _CONVERTERS[name](t, errors, notes)
            if m is not None:
                out.append(m)
        elif name == "MaybeToTensor":
            out.append(T.ToTensor())
        elif name == "MaybePILToTensor":
            out.append(T.PILToTensor())
        elif name in ("Mixup", "FastCollateMixup"):
            errors.append(f"{name}: it mixes labels: convert it on its own, "
                          f"mix = from_timm(mixup), and call mix(images, labels) after the "
                          f"augment")
        else:
            errors.append(f"timm {name}: {_UNSUPPORTED.get(name, 'no batchaug equivalent yet')}")
    return out


def from_timm(obj: Any, eval_transform: Any = None) -> Union[Migration, nn.Module]:
    """batchaug's equivalent of a timm data pipeline or mixer.

    ``obj`` a timm transform (``timm.data.create_transform(...)``'s ``Compose``, or a list):
    returns the :class:`Migration` (``.pre_transform``, ``.crop``, ``.augment``) with timm's
    semantics drawn per sample: ``RandomResizedCropAndInterpolation`` (a leading one becomes
    ``.crop``, the loader's crop stage on each photo's own size, as in :func:`from_torchvision`:
    a ``RandomResizedCrop``, or for ``interpolation="random"`` a ``TimmRandomResizedCrop``,
    bilinear or bicubic per sample), timm's RandAugment / AutoAugment / AugMix
    (``TimmRandAugment``, ``TimmAutoAugment``, ``TimmAugMix``), ``RandomErasing``
    (``TimmRandomErasing``: modes const/rand/pixel, several boxes), ``MaybeToTensor`` +
    ``Normalize`` (tensor mean/std) folded into ``batchaug.Normalize``, and torchvision's steps
    as :func:`from_torchvision`.
    ``obj`` a timm ``Mixup``: returns a :class:`TimmMixup` with its arguments.
    ``eval_transform`` (``create_transform(..., is_training=False)``: ``Resize``,
    ``CenterCrop``, ``MaybeToTensor``, ``Normalize``) becomes the migration's ``.deploy``, the
    prefix of :class:`~batchaug.DeployedModel`, as in :func:`from_torchvision`.

    What cannot be converted is listed in one ``ValueError``; differences (PIL's resampling)
    are ``UserWarning``\\ s.

    Example:
        >>> from timm.data import create_transform  # doctest: +SKIP
        >>> migration = from_timm(create_transform(224, is_training=True,
        ...                       auto_augment="rand-m9-mstd0.5-inc1"))  # doctest: +SKIP
        >>> pre, aug = migration.pre_transform, migration.augment  # doctest: +SKIP
        >>> crop = migration.crop  # DeviceLoader(cache, batch_size, crop=crop)  # doctest: +SKIP
    """
    if type(obj).__name__ in ("Mixup", "FastCollateMixup") and _is_timm(obj):
        return _mixup(obj)
    if isinstance(obj, str):
        raise TypeError("from_timm takes a timm transform or Mixup; for a config string use "
                        "batchaug.timm_augment(config)")
    if not isinstance(obj, (list, tuple, nn.Module)) and not callable(obj):
        raise TypeError(f"obj must be a timm transform (create_transform's Compose, or a list "
                        f"of transforms) or a timm Mixup, got {type(obj).__name__}")
    steps = _flatten(obj)
    errors: List[str] = []
    notes: List[str] = []
    out = _timm_steps(steps, errors, notes)
    eval_out = None if eval_transform is None else _timm_steps(_flatten(eval_transform), errors,
                                                                notes)
    if any(type(m).__module__.startswith("batchaug") and "Timm" in type(m).__name__
           and type(m).__name__ != "TimmRandomResizedCrop" for m in out):
        notes.append("timm's RandAugment/AutoAugment/AugMix ops run on PIL images; batchaug's "
                     "run torchvision's tensor kernels on the uint8 batch with timm's arguments "
                     "(differences: the timm table of the migration guide)")
    crop = None  # a leading RandomResizedCropAndInterpolation: the loader's crop stage
    if steps and out and type(steps[0]).__name__ == "RandomResizedCropAndInterpolation" \
            and _is_timm(steps[0]):
        crop, out = Augment(out[0]), out[1:]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            migration = from_torchvision(out, eval_out)
        except ValueError as exc:
            lines = str(exc).split("\n")[1:]
            errors.extend(line.strip()[2:] for line in lines if line.strip())
            migration = None
    if errors:
        raise ValueError("from_timm: no batchaug equivalent for:\n  - " + "\n  - ".join(errors))
    for w in caught:
        if crop is not None and str(w.message).startswith(_NO_SIZE_NOTE):
            continue  # from_torchvision saw the pipeline after the crop; the loader has it
        warnings.warn(str(w.message), w.category, stacklevel=2)
    for note in notes:
        warnings.warn(note, UserWarning, stacklevel=2)
    assert migration is not None
    return migration if crop is None else migration._replace(crop=crop)


__all__ = ["from_timm", "timm_augment", "Migration"]
