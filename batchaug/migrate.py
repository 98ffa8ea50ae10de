"""One-call migration from a torchvision pipeline: :func:`from_torchvision`.

A torchvision pipeline mixes two jobs that batchaug keeps apart: the deterministic per-image
part that runs once, before the images are cached (``pre_transform``), and the random part that
runs per batch on the device (an :class:`~batchaug.Augment`). The split is done by reading the
torchvision objects' arguments; nothing is drawn or run here.
"""
import inspect
import textwrap
import warnings
from typing import Any, Callable, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import torch
from torch import Tensor, nn

from . import transforms as BT
from . import _equivalents
from .compose import Augment

# Deterministic per-image transforms that may lead the pipeline and run in the pre_transform.
_PRE = {"Resize", "CenterCrop", "Pad", "PILToTensor", "ToImage", "ToTensor", "ToDtype",
        "ConvertImageDtype", "Grayscale", "ToPILImage", "ToPureTensor"}
# Type conversions that are a no-op once the images are a uint8 tensor batch.
_NOOP = {"PILToTensor", "ToImage", "ToPILImage", "ToPureTensor"}
# What to do about a transform without an equivalent: the one "not yet" list, less what batchaug
# exports (a torchvision name batchaug exports is converted by _by_signature or above).
_HINTS = _equivalents.not_yet()


def _interp(mode: Any) -> str:
    return str(getattr(mode, "value", mode))


def _fill(fill: Any) -> Any:
    if fill is None:
        return 0
    if isinstance(fill, dict):  # v2 per-type fill: keep the image's
        for key, value in fill.items():
            if getattr(key, "__name__", "") in ("Image", "Tensor"):
                return _fill(value)
        return 0
    return list(fill) if isinstance(fill, (list, tuple)) else fill


def _range(value: Any, default: float) -> Any:
    if value is None:
        return default
    return list(value) if isinstance(value, (list, tuple)) else value


def _is_float(dtype: Any) -> bool:
    return isinstance(dtype, torch.dtype) and dtype.is_floating_point


class _Context:
    def __init__(self) -> None:
        self.errors: List[str] = []
        self.notes: List[str] = []


def _is_torchvision(t: Any) -> bool:
    return type(t).__module__.startswith("torchvision")


def _where(t: Any) -> str:
    """``v2.Name`` or ``Name`` (v1), as the user wrote it."""
    return ("v2." if ".v2" in type(t).__module__ else "") + type(t).__name__


def _is_scaling(t: Any) -> bool:
    """A conversion of uint8 to float in [0, 1]."""
    name = type(t).__name__
    if name == "ToTensor":
        return True
    if name == "ConvertImageDtype":
        return _is_float(t.dtype)
    if name == "ToDtype":
        return _is_float(t.dtype) and bool(getattr(t, "scale", False))
    return False


def _flatten(transform: Any) -> List[Any]:
    """The steps of a Compose / list / nn.Sequential, nested ones inlined."""
    if isinstance(transform, (list, tuple)):
        items = list(transform)
    elif isinstance(transform, nn.Sequential):
        items = list(transform.children())
    elif type(transform).__name__ == "Compose" and hasattr(transform, "transforms"):
        items = list(transform.transforms)
    else:
        return [transform]
    out: List[Any] = []
    for item in items:
        out.extend(_flatten(item))
    return out


def _convert_one(t: Any, ctx: _Context) -> Optional[nn.Module]:
    """The batchaug module for one torchvision transform (None: a no-op on a uint8 batch)."""
    name = type(t).__name__
    if not _is_torchvision(t):
        if isinstance(t, nn.Module) and type(t).__module__.startswith("batchaug"):
            return t
        ctx.errors.append(f"{name}: not a torchvision transform; "
                          f"{_HINTS['Lambda']}")
        return None
    where = _where(t)
    try:
        if name in _NOOP:
            return None
        if name == "ColorJitter":
            return BT.ColorJitter(_range(t.brightness, 0), _range(t.contrast, 0),
                                  _range(t.saturation, 0), _range(t.hue, 0))
        # RandomRotation and RandomResizedCrop: after their checks and notes, _by_signature
        if name == "RandomRotation":
            if t.expand:
                ctx.errors.append(f"{where}(expand=True): the output size would depend on each "
                                  f"sample's angle; use expand=False or pad beforehand")
                return None
            if _interp(t.interpolation) != "nearest":
                ctx.notes.append(f"{where}: interpolation={_interp(t.interpolation)!r} as "
                                 f"torchvision's tensor kernel (PIL input in torchvision "
                                 f"differs slightly)")
        if name == "RandomResizedCrop":
            ctx.notes.append(
                f"{where}: eval() returns {list(t.size)} images by a centre crop + resize "
                f"(eval_crop_pct=0.875) where torchvision's (no eval mode) crops at random; "
                f"training boxes are drawn per sample, resized exactly as torchvision on CPU (on "
                f"GPU or compiled: uint8 within 1, bicubic within 2)")
            if not t.antialias:
                ctx.notes.append(f"{where}(antialias=False): one batched grid_sample per batch; "
                                 f"a strongly shrunk box aliases (as torchvision's "
                                 f"antialias=False)")
        if name == "RandomCrop":
            padding = t.padding
            if isinstance(padding, (list, tuple)):
                padding = list(padding)
                if ".v2" in type(t).__module__ and len(padding) == 4:
                    # v2 stores it parsed, as F.pad's (left, right, top, bottom)
                    padding = [padding[0], padding[2], padding[1], padding[3]]
            return BT.RandomCrop(list(t.size), padding=padding, pad_if_needed=t.pad_if_needed,
                                 fill=_fill(t.fill), padding_mode=t.padding_mode)
        if name == "Resize":
            size = t.size if (t.size is None or isinstance(t.size, int)) else list(t.size)
            antialias = t.antialias if t.antialias is not None else True
            return BT.Resize(size, interpolation=_interp(t.interpolation),
                             max_size=getattr(t, "max_size", None), antialias=bool(antialias))
        if name == "RandomErasing":
            value = t.value
            if value is None or value == "random":
                value = "random"
            elif isinstance(value, (list, tuple)):
                value = list(value)[0] if len(value) == 1 else list(value)
            if getattr(t, "inplace", False):
                ctx.notes.append(f"{where}: inplace=True ignored (batchaug never erases in place)")
            return BT.RandomErasing(p=t.p, scale=list(t.scale), ratio=list(t.ratio), value=value)
        if name in ("RandomApply", "RandomChoice", "RandomOrder"):
            errors = len(ctx.errors)
            inner = _convert_list(_flatten(list(t.transforms)), ctx, scaled=False)
            if len(ctx.errors) > errors:
                return None  # its contents are reported already
            if name == "RandomApply":
                return BT.RandomApply(inner, p=t.p)
            if name == "RandomChoice":
                return BT.RandomChoice(inner, p=None if t.p is None else list(t.p))
            return BT.RandomOrder(inner)
    except (ValueError, TypeError) as exc:
        ctx.errors.append(f"{where}: batchaug refuses its arguments: {exc}")
        return None
    if name in ("MixUp", "CutMix"):  # (images, labels) -> (images, targets): not an augment
        ctx.errors.append(
            f"{where}: it mixes labels, so it is not part of the augment: call "
            f"batchaug.{name}(num_classes={t.num_classes}, alpha={t.alpha}) (one λ per sample) "
            f"in the training step, images, targets = mix(augment(x), labels)")
        return None
    return _by_signature(t, name, ctx)


def _by_signature(t: Any, name: str, ctx: _Context) -> Optional[nn.Module]:
    """A batchaug transform of the same name built from the torchvision object's attributes of
    the same names (the flips, Pad, Normalize, RandomAffine...); None and an error without."""
    cls = getattr(BT, name, None)
    if cls is None or not isinstance(cls, type) or not issubclass(cls, nn.Module):
        ctx.errors.append(f"{_where(t)}: {_equivalents.hint(name)}")
        return None
    kwargs = {}
    for pname in list(inspect.signature(cls.__init__).parameters)[1:]:
        if hasattr(t, pname):
            value = getattr(t, pname)
            if pname == "interpolation":
                value = _interp(value)
            elif pname == "fill":
                value = _fill(value)
            elif isinstance(value, tuple):
                value = list(value)
            kwargs[pname] = value
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as exc:
        ctx.errors.append(f"{_where(t)}: batchaug refuses its arguments: {exc}")
        return None


def _convert_list(steps: Sequence[Any], ctx: _Context, scaled: bool) -> List[nn.Module]:
    """Convert ``steps`` in order. ``scaled``: a [0, 1] float conversion is pending (from
    ToTensor and the like) and is folded into the next Normalize, else made a ToDtype."""
    out: List[nn.Module] = []
    for t in steps:
        name = type(t).__name__
        if _is_torchvision(t) and _is_scaling(t):
            scaled = True
            continue
        if scaled:
            scaled = False
            if name == "Normalize":
                ctx.notes.append(
                    f"{_where(t)}: the [0, 1] float conversion before it is folded into "
                    f"batchaug.Normalize, which takes the uint8 batch (same values)")
            else:
                out.append(BT.ToDtype(torch.float32, scale=True))
        if _is_torchvision(t) and name in ("ToDtype", "ConvertImageDtype"):
            if isinstance(t.dtype, dict):
                ctx.errors.append(f"{_where(t)}: a per-type dtype dict is not supported; pass "
                                  f"one dtype")
                continue
            out.append(BT.ToDtype(t.dtype, scale=bool(getattr(t, "scale", True))))
            continue
        module = _convert_one(t, ctx)
        if module is not None:
            out.append(module)
    if scaled:
        out.append(BT.ToDtype(torch.float32, scale=True))
    return out


# Steps whose PIL and tensor kernels differ (PIL resamples with its own filters and rounding).
_PIL_DIFFERS = {"RandomRotation", "RandomResizedCrop", "Resize", "ColorJitter", "GaussianBlur",
                "RandomAdjustSharpness"}


def _note_pil_kernels(steps: Sequence[Any], start: int, ctx: _Context) -> None:
    """Warn when the augment takes over steps that torchvision ran on PIL images (before its
    ToTensor/PILToTensor/ToImage): batchaug runs the tensor kernels on the cached uint8 batch."""
    to_tensor = next((k for k, t in enumerate(steps) if _is_torchvision(t) and type(t).__name__
                      in ("ToTensor", "PILToTensor", "ToImage")), None)
    if to_tensor is None or to_tensor <= start:
        return
    names = [type(t).__name__ for t in steps[start:to_tensor] if type(t).__name__ in _PIL_DIFFERS]
    if names:
        ctx.notes.append(
            f"{', '.join(names)}: torchvision ran these on PIL images (before its tensor "
            f"conversion); batchaug runs torchvision's tensor kernels on the uint8 batch, which "
            f"can differ slightly from PIL's results with the same parameters (resampling "
            f"filters and rounding; nearest rotation: rare pixels on ties, e.g. 0.06 % of pixels "
            f"at 5 degrees)")


_TABLE_WIDTH = 100  # print(migration): the table's lines at most this long


def _cell(m: Any) -> str:
    """One step of the printed table on one line: a batchaug module as ``Name(arguments)``
    (a container's transforms in a list, other modules' children left out), else its repr."""
    if not (isinstance(m, nn.Module) and type(m).__module__.startswith("batchaug")):
        return " ".join(repr(m).split())
    args = " ".join(m.extra_repr().split())
    inner = getattr(m, "transforms", None)
    if isinstance(inner, nn.ModuleList):
        listed = "[" + ", ".join(_cell(t) for t in inner) + "]"
        args = f"{args}, {listed}" if args else listed
    elif not args and len(list(m.children())) > 0:
        return " ".join(repr(m).split())
    return f"{type(m).__name__}({args})"


def _wrap(text: str, width: int) -> List[str]:
    """``text`` in lines of at most ``width`` characters, broken after the commas between a
    call's arguments (a longer argument by words), continuation lines indented by two."""
    pieces: List[str] = []
    depth = 0
    start = 0
    for k, ch in enumerate(text):
        if ch in "([{":
            depth += 1
            if depth == 1 and ch == "(":  # "Name(" on its own when the first argument is long
                pieces.append(text[start:k + 1].strip())
                start = k + 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 1:
            pieces.append(text[start:k + 1].strip())
            start = k + 1
    pieces.append(text[start:].strip())
    lines: List[str] = []
    for piece in pieces:
        glue = "" if lines and lines[-1].endswith("(") else " "
        if not piece:
            continue
        if lines and len(lines[-1]) + len(glue) + len(piece) <= width:
            lines[-1] += glue + piece
        elif len(piece) + (2 if lines else 0) <= width:
            lines.append(("  " if lines else "") + piece)
        else:
            lines.extend(textwrap.wrap(piece, width, initial_indent="  " if lines else "",
                                       subsequent_indent="  ", break_on_hyphens=False))
    return lines


class PreTransform:
    """The deterministic per-image steps of a torchvision pipeline, ending in a uint8
    ``(C, H, W)`` tensor: what :meth:`DeviceCache.from_dataset` and :func:`write_cache` store.

    The steps are the torchvision objects themselves (so a PIL image is resized by PIL, as in
    the original pipeline); ``ToTensor``'s [0, 1] scaling is left out (it moves to the augment).

    Example:
        >>> from PIL import Image
        >>> import torchvision.transforms as T
        >>> pre = PreTransform([T.Resize(8), T.CenterCrop(8)])
        >>> pre(Image.new("RGB", (16, 12))).shape
        torch.Size([3, 8, 8])
    """

    def __init__(self, steps: Sequence[Callable]) -> None:
        self.steps = list(steps)

    def __call__(self, image: Any) -> Tensor:
        from torchvision.transforms.v2 import functional as TF

        for step in self.steps:
            image = step(image)
        if not isinstance(image, Tensor):
            image = TF.pil_to_tensor(image)
        return image.as_subclass(Tensor)

    def __repr__(self) -> str:
        inner = ", ".join(repr(s) for s in self.steps)
        return f"PreTransform([{inner}])"


class _MigrationFields(NamedTuple):
    pre_transform: PreTransform
    augment: Augment


class Migration(_MigrationFields):
    """What :func:`from_torchvision` returns: ``.pre_transform``, ``.augment`` and ``.crop``,
    the loader's crop stage (an ``Augment`` for ``DeviceLoader(..., crop=)``, or None when the
    pipeline fixes the image size before its random steps), and ``.deploy``, the evaluation
    pipeline as the deployed model's prefix (``DeployedModel(migration.deploy, net)``; None
    without an ``eval_transform``). ``print()`` shows the split as a three-column table, the
    deploy prefix below it.

    Without a crop stage it unpacks to ``(pre_transform, augment)``; with one, unpacking (or any
    iteration) raises a ``ValueError`` naming ``.crop`` after the second item, as
    ``pre, augment = migration`` would silently drop the crop: read the three attributes.

    Example:
        >>> import torchvision.transforms as T
        >>> migration = from_torchvision([T.RandomResizedCrop(8), T.RandomHorizontalFlip()])
        >>> pre, crop, augment = migration.pre_transform, migration.crop, migration.augment
        >>> [type(m).__name__ for m in crop], [type(m).__name__ for m in augment]
        (['RandomResizedCrop'], ['RandomHorizontalFlip'])
    """

    crop: Optional[Augment] = None
    deploy: Optional[Augment] = None

    def __new__(cls, pre_transform: PreTransform, augment: Augment,
                crop: Optional[Augment] = None, deploy: Optional[Augment] = None
                ) -> "Migration":
        self = super().__new__(cls, pre_transform, augment)
        self.crop = crop
        self.deploy = deploy
        return self

    def __iter__(self) -> Iterator[Any]:
        yield self.pre_transform
        yield self.augment
        if self.crop is not None:
            raise ValueError(
                "this Migration has a loader crop stage, migration.crop, which unpacking it as "
                "`pre, augment = migration` would drop: use migration.pre_transform, "
                "migration.crop and migration.augment, with "
                "DeviceLoader(cache, batch_size, crop=migration.crop)")

    def __getnewargs__(self) -> Tuple[Any, ...]:  # copy / pickle (tuple(self) would raise)
        return (self.pre_transform, self.augment, self.crop, self.deploy)

    def _replace(self, **changes: Any) -> "Migration":
        """A copy with some of ``pre_transform``, ``augment``, ``crop``, ``deploy`` changed."""
        unknown = set(changes) - {"pre_transform", "augment", "crop", "deploy"}
        if unknown:
            raise ValueError(f"Migration._replace: unknown fields {sorted(unknown)}")
        return Migration(changes.get("pre_transform", self.pre_transform),
                         changes.get("augment", self.augment), changes.get("crop", self.crop),
                         changes.get("deploy", self.deploy))

    def __str__(self) -> str:
        cols = [[_cell(s) for s in self.pre_transform.steps],
                [] if self.crop is None else [_cell(m) for m in self.crop],
                [_cell(m) for m in self.augment]]
        cols[0].append("-> uint8 (C, H, W)")
        if self.crop is None:
            cols[1].append("(none: stored size)")
        heads = ("pre_transform (per image, cached)", "crop (in the loader)",
                 "augment (in the model)")
        widths = [max([len(heads[k])] + [len(v) for v in cols[k]]) for k in range(3)]
        # narrow the widest column until the table fits _TABLE_WIDTH (6: the two " | ")
        while sum(widths) + 6 > _TABLE_WIDTH:
            k = max(range(3), key=lambda j: widths[j] - len(heads[j]))
            if widths[k] <= len(heads[k]):
                break
            widths[k] -= 1
        wrapped = [[line for v in col for line in _wrap(v, widths[k])]
                   for k, col in enumerate(cols)]
        lines = [f"{heads[0]:<{widths[0]}} | {heads[1]:<{widths[1]}} | {heads[2]}",
                 f"{'-' * widths[0]}-+-{'-' * widths[1]}-+-{'-' * widths[2]}"]
        for i in range(max(len(c) for c in wrapped)):
            a, b, c = (col[i] if i < len(col) else "" for col in wrapped)
            lines.append(f"{a:<{widths[0]}} | {b:<{widths[1]}} | {c}".rstrip())
        if self.deploy is not None:
            lines.extend(_wrap("deploy (eval, in the model; DeployedModel(migration.deploy, "
                               "net)): " + ", ".join(_cell(m) for m in self.deploy),
                               _TABLE_WIDTH))
        return "\n".join(lines)

    __repr__ = __str__


def _crop_roles(steps: Sequence[Any]) -> List[str]:
    """Each step's ``data.crop.crop_role`` (of its batchaug twin; ``""`` without one): the
    loader's own rule, so a transform it learns to crop with needs no edit here."""
    from .data.crop import crop_role

    roles = []
    for t in steps:
        m = _convert_one(t, _Context())  # its notes and errors are the real conversion's
        roles.append(crop_role(m) if m is not None else "")
    return roles


def _crop_prefix(steps: Sequence[Any], roles: Sequence[str]) -> int:
    """How many leading ``steps`` (of ``roles``) form a crop stage, up to and including the
    first that fixes the output size (0: none)."""
    for k, (t, role) in enumerate(zip(steps, roles)):
        if not _is_torchvision(t):
            return 0
        if role == "fixing":
            if type(t).__name__ == "RandomCrop" and not t.pad_if_needed:
                return 0  # torchvision raises on a smaller image: not a crop for any size
            return k + 1
        if role == "keeps_aspect":  # Resize(int): only directly before a centre/random crop
            nxt = type(steps[k + 1]).__name__ if k + 1 < len(steps) else ""
            if nxt not in ("CenterCrop", "RandomCrop"):
                return 0
            continue
        if role != "warp":
            return 0
    return 0


# The note when nothing fixes the image size (from_timm drops it when it made a crop stage)
_NO_SIZE_NOTE = "pre_transform: nothing in the pipeline fixes the image size"


def _note_size_fixed_late(steps: Sequence[Any], roles: Sequence[str], ctx: _Context) -> None:
    """The note when the images are cached at their own sizes and no crop stage leads the
    random steps (the augment then keeps each batch's size)."""
    fixing = next((t for t, role in zip(steps, roles) if role == "fixing"), None)
    if fixing is None:
        ctx.notes.append(
            f"{_NO_SIZE_NOTE} (no CenterCrop, Resize((h, w)), RandomResizedCrop or RandomCrop): "
            f"the augment keeps each batch's size, so the cache needs images of one size; for "
            f"images of different sizes give the loader a crop= that fixes one, e.g. "
            f"DeviceLoader(cache, batch_size, crop=batchaug.CenterCrop(224))")
    elif type(fixing).__name__ != "RandomCrop" or fixing.pad_if_needed:
        # (not CIFAR's RandomCrop(32, padding=4): torchvision's raises on a smaller image, so
        # that pipeline already expects images of one size, as the augment does)
        ctx.notes.append(
            f"{_where(fixing)}: it fixes the image size after other random steps, so it runs in "
            f"the augment, on batches of one size (images cached at one size); for images of "
            f"different sizes put it (and only geometric steps) first, so that it becomes "
            f"migration.crop, the loader's crop stage, rather than adding a crop= (which would "
            f"crop twice)")


def _deploy_prefix(eval_transform: Any, ctx: _Context) -> Optional[Augment]:
    """The evaluation pipeline, every step converted, as :class:`DeployedModel`'s prefix; a
    random step or a form it cannot run is an error of ``ctx``."""
    from .deploy import DeployedModel

    steps = _flatten(eval_transform)
    errors = len(ctx.errors)
    before = len(ctx.notes)
    modules = _convert_list(steps, ctx, scaled=False)
    _note_pil_kernels(steps, 0, ctx)
    ctx.notes[before:] = [f"eval_transform: {note}" for note in ctx.notes[before:]]
    ctx.errors[errors:] = [f"eval_transform: {e}" for e in ctx.errors[errors:]]
    if len(ctx.errors) > errors:
        return None
    random = [type(m).__name__ for m in modules if getattr(m, "random", False)]
    if random:
        ctx.errors.append(f"eval_transform: {', '.join(random)} draw at random; the evaluation "
                          f"pipeline must be deterministic (e.g. Resize(256), CenterCrop(224), "
                          f"ToTensor(), Normalize(mean, std))")
        return None
    deploy = Augment(modules)
    try:
        DeployedModel(deploy, nn.Identity())
    except ValueError as exc:
        ctx.errors.append(f"eval_transform: {exc}")
        return None
    return deploy


def from_torchvision(transform: Any, eval_transform: Any = None) -> Migration:
    """Split a torchvision v1 or v2 pipeline into a ``pre_transform`` and a batchaug ``Augment``.

    ``transform`` is a ``Compose``, a list or an ``nn.Sequential`` of torchvision transforms.
    Its leading deterministic per-image steps (``Resize``, ``CenterCrop``, ``Grayscale``,
    ``PILToTensor``/``ToImage``/``ToTensor``/``ToDtype``...) become the ``pre_transform``, which
    takes what the dataset yields (a PIL image) and returns a uint8 ``(C, H, W)`` tensor for
    ``DeviceCache.from_dataset(..., pre_transform=...)`` / ``write_cache``. The rest becomes an
    ``Augment`` of the batchaug transforms of the same names and arguments, in the same order;
    ``ToTensor``'s (or ``ToDtype(float, scale=True)``'s) scaling is folded into the following
    ``Normalize`` (batchaug's takes uint8), or becomes a ``batchaug.ToDtype``.

    When no leading step fixes the image size (no ``CenterCrop`` or ``Resize((h, w))``), the
    images are cached at their own sizes and the leading geometric steps up to the first one
    that fixes the size (e.g. ``RandomRotation(30), RandomResizedCrop(224)``) become
    ``.crop``, for ``DeviceLoader(cache, batch_size, crop=migration.crop)``: the loader runs
    them on each image's own pixels, as torchvision does on the whole photo; the rest (flip,
    colour, ``Normalize``) is the ``augment`` for the model (see :class:`Migration` on
    unpacking it).

    ``eval_transform``, the evaluation pipeline (torchvision's ``Resize(256)``,
    ``CenterCrop(224)``, ``ToTensor()``, ``Normalize(...)``), becomes ``.deploy``: the same
    steps as batchaug modules for :class:`~batchaug.DeployedModel`, which runs them in the
    model on each photo at its own size, so that the deployed file takes raw photos as
    torchvision's test pipeline does (``DeployedModel(migration.deploy, net)``).

    Every transform without a batchaug equivalent is listed in one ``ValueError``; changes of
    behaviour (e.g. ``RandomResizedCrop`` in eval, PIL vs tensor kernels) are
    ``UserWarning``\\ s that name the difference.

    Example:
        >>> import torchvision.transforms as T
        >>> pre, aug = from_torchvision(T.Compose([
        ...     T.Resize(256), T.CenterCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
        ...     T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])]))
        >>> [type(m).__name__ for m in aug]
        ['RandomHorizontalFlip', 'Normalize']
    """
    if not isinstance(transform, (list, tuple, nn.Module)) and not callable(transform):
        raise TypeError(f"transform must be a torchvision Compose, a list or an nn.Sequential "
                        f"of transforms, got {type(transform).__name__}")
    steps = _flatten(transform)
    ctx = _Context()
    deploy = None if eval_transform is None else _deploy_prefix(eval_transform, ctx)
    pre: List[Any] = []
    scaled = False  # a [0, 1] float conversion seen: it runs in the augment
    fixed_size = False
    i = 0
    while i < len(steps) and _is_torchvision(steps[i]) and type(steps[i]).__name__ in _PRE:
        t = steps[i]
        name = type(t).__name__
        if _is_scaling(t):
            if name == "ToTensor":
                ctx.notes.append("ToTensor: the pre_transform keeps uint8 (as PILToTensor); its "
                                 "[0, 1] scaling moves to the augment")
            scaled = True
        elif name in ("ToDtype", "ConvertImageDtype"):
            break  # any other cast changes what the cache stores: in the augment
        elif scaled and name in ("Resize", "Grayscale"):
            break  # torchvision runs these on floats here: so does the augment, exactly
        elif name not in ("ToPILImage", "ToPureTensor"):
            if name == "CenterCrop" or (name == "Resize" and not isinstance(t.size, int)
                                        and len(t.size) == 2):
                fixed_size = True
            pre.append(t)
        i += 1
    crop_modules: Optional[List[nn.Module]] = None
    _note_pil_kernels(steps, i, ctx)
    if not fixed_size:
        roles = _crop_roles(steps[i:])
        k = _crop_prefix(steps[i:], roles)
        if k:
            # each image keeps its size in the cache; these steps run in the loader, on each
            # image's own pixels, as torchvision runs them on the whole photo
            crop_modules = _convert_list(steps[i:i + k], ctx, scaled=False)
            i += k
        else:
            _note_size_fixed_late(steps[i:], roles, ctx)
    modules = _convert_list(steps[i:], ctx, scaled)
    crop: Optional[Augment] = None
    if crop_modules is not None and not ctx.errors:
        from .data.crop import check_crop

        try:
            crop = Augment(crop_modules)
            check_crop(crop)
        except ValueError as exc:
            ctx.errors.append(str(exc))
    if ctx.errors:
        raise ValueError("from_torchvision: no batchaug equivalent for:\n  - "
                         + "\n  - ".join(ctx.errors))
    for note in ctx.notes:
        warnings.warn(note, UserWarning, stacklevel=2)
    return Migration(PreTransform(pre), Augment(modules), crop, deploy)
