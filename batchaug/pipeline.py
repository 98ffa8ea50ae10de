"""A training pipeline as ``show`` replays it: ``split_pipeline`` reads a ``Migration``, a
``(crop, augment)`` pair or an ``Augment``; ``load_pipeline`` imports one named
``module:attribute`` (``batchaug show --pipeline``); ``replay`` runs it on cache rows with the
loader's keys, as ``DeviceLoader(cache, crop=crop, seed=seed, return_keys=True)`` and
``augment(x, keys)`` did at an epoch.
"""
from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import sys
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch
from torch import Tensor, nn

from batchaug import _random
from batchaug.compose import Augment, AugmentedModel

def split_pipeline(pipeline: Any, name: str = "pipeline"
                   ) -> Tuple[Optional[nn.Module], nn.Module]:
    """``(crop, augment)`` of ``pipeline``: a ``Migration`` (or any object with ``.augment`` and
    optionally ``.crop``, such as a recipe's ``TrainingRecipe``), a ``(crop, augment)`` pair
    (``crop`` may be None), an ``AugmentedModel`` (its ``.augment``), a ``DeployedModel`` (its
    ``.prefix``, the evaluation pipeline) or one module (no crop).
    A crop that is not an ``Augment`` is wrapped in one, as the loader runs it (step 0 draws
    from ``substream(keys, 0)``). ``TypeError`` naming ``name`` for anything else.

    Example:
        >>> from batchaug import Augment, RandomHorizontalFlip, RandomResizedCrop
        >>> crop, augment = split_pipeline((RandomResizedCrop(8), Augment(RandomHorizontalFlip())))
        >>> type(crop).__name__, type(augment).__name__
        ('Augment', 'Augment')
    """
    from batchaug.deploy import DeployedModel

    if isinstance(pipeline, AugmentedModel):  # the model's first layer, not the model
        crop, augment = None, pipeline.augment
    elif isinstance(pipeline, DeployedModel):  # its evaluation prefix, not the net
        crop, augment = None, pipeline.prefix
    elif isinstance(pipeline, nn.Module):
        crop, augment = None, pipeline
    elif hasattr(pipeline, "augment"):
        # a Migration, or a recipe's TrainingRecipe (augment, mix, eval_augment): no crop
        crop, augment = getattr(pipeline, "crop", None), pipeline.augment
    elif isinstance(pipeline, (tuple, list)) and len(pipeline) == 2:
        crop, augment = pipeline
    else:
        what = (f"a {type(pipeline).__name__} of {len(pipeline)}"
                if isinstance(pipeline, (tuple, list)) else type(pipeline).__name__)
        raise TypeError(f"{name} must be a Migration (from_torchvision's), a (crop, augment) "
                        f"pair or an Augment, got {what}")
    if crop is not None and not isinstance(crop, nn.Module):
        raise TypeError(f"{name}: the crop must be a transform module or an Augment (or None), "
                        f"got {type(crop).__name__}")
    if not isinstance(augment, nn.Module):
        raise TypeError(f"{name}: the augment must be a module such as an Augment, got "
                        f"{type(augment).__name__}")
    if crop is not None and not isinstance(crop, Augment):
        crop = Augment(crop)
    return crop, augment


def load_pipeline(spec: str, name: str = "--pipeline") -> Tuple[Optional[nn.Module], nn.Module]:
    """Import ``spec`` (``"module:attribute"``, the module a dotted name importable from the
    current directory or a ``.py`` file path, the attribute dotted too) and return
    ``split_pipeline`` of it; an attribute that is a plain function (not a module) is called
    without arguments first. ``ValueError`` naming ``name`` when it cannot be found, with what
    to write instead.

    Example:
        >>> crop, augment = load_pipeline("batchaug.recipes:imagenet")
        >>> crop is None, type(augment).__name__
        (True, 'Augment')
    """
    if not isinstance(spec, str) or spec.count(":") < 1 or not all(spec.rpartition(":")[::2]):
        raise ValueError(f"{name} {spec!r}: expected MODULE:ATTRIBUTE, e.g. train:migration "
                         f"(a Migration, a (crop, augment) pair or an Augment named migration "
                         f"in train.py)")
    module_name, _, attribute = spec.rpartition(":")
    module = _import(module_name, spec, name)
    value: Any = module
    for part in attribute.split("."):
        if not hasattr(value, part):
            raise ValueError(f"{name} {spec}: {module_name} has no attribute {attribute!r}")
        value = getattr(value, part)
    if callable(value) and not isinstance(value, nn.Module) and not isinstance(value, type):
        try:
            value = value()
        except TypeError as exc:
            raise ValueError(f"{name} {spec}: {attribute} is a function that cannot be called "
                             f"without arguments ({exc})") from None
    try:
        return split_pipeline(value, f"{name} {spec}")
    except TypeError as exc:
        raise ValueError(str(exc)) from None


def _is_main_guard(node: ast.stmt) -> bool:
    """``if __name__ == "__main__":`` (either side of the ``==``)."""
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    sides = [node.test.left] + list(node.test.comparators)
    return (len(sides) == 2 and any(isinstance(x, ast.Name) and x.id == "__name__"
                                    for x in sides)
            and any(isinstance(x, ast.Constant) and x.value == "__main__" for x in sides))


def _work_at_import(body: Sequence[ast.stmt], defined: Sequence[str]) -> Optional[ast.stmt]:
    """The first statement of a module's top level that runs work when imported rather than
    define something: a loop, a ``with`` block, or a call of a function the file defines
    (``train()``, ``main()``); the bodies of ``if`` and ``try`` checked alike, the main
    guard's not. Other calls on their own (``sys.path.insert(...)``,
    ``torch.manual_seed(0)``) are set-up and allowed."""
    for node in body:
        if _is_main_guard(node):
            continue
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith)):
            return node
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) \
                and isinstance(node.value.func, ast.Name) and node.value.func.id in defined:
            return node
        inner: List[ast.stmt] = []
        if isinstance(node, ast.If):
            inner = list(node.body) + list(node.orelse)
        elif isinstance(node, ast.Try):
            inner = list(node.body) + [s for h in node.handlers for s in h.body] \
                + list(node.orelse) + list(node.finalbody)
        found = _work_at_import(inner, defined)
        if found is not None:
            return found
    return None


def check_no_work_at_import(path: str, spec: str, name: str = "--pipeline") -> None:
    """Refuse, before it is imported, a file whose top level would run more than definitions
    (a training script without ``if __name__ == "__main__":``): ``ValueError`` naming the line
    and the fix. A file Python cannot parse is left to the import, which says where."""
    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read(), filename=path)
    except (SyntaxError, ValueError, OSError):
        return
    defined = [n.name for n in tree.body
               if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    node = _work_at_import(tree.body, defined)
    if node is not None:
        kind = {ast.For: "a for loop", ast.AsyncFor: "a for loop", ast.While: "a while loop",
                ast.With: "a with block", ast.AsyncWith: "a with block"}.get(
                    type(node), "a function it defines")
        raise ValueError(
            f"{name} {spec}: {os.path.basename(path)} line {node.lineno} runs {kind} when "
            f"imported (training?), so it is not imported: put the training under `if "
            f"__name__ == \"__main__\":`, or name a file that only builds the pipeline "
            f"(e.g. pipeline.py holding the Migration, imported by train.py)")


def _user_file(module_name: str) -> Optional[str]:
    """The .py file of ``module_name`` when it is the user's (under the current directory),
    found without importing it; None for an installed module or a package's submodule."""
    if "." in module_name:
        return None  # finding a submodule imports its package
    try:
        found = importlib.util.find_spec(module_name)
    except (ImportError, ValueError):
        return None
    origin = getattr(found, "origin", None)
    if not origin or not origin.endswith(".py"):
        return None
    cwd = os.path.abspath(os.getcwd())
    return origin if os.path.abspath(origin).startswith(cwd + os.sep) else None


def _import(module_name: str, spec: str, name: str) -> Any:
    """The module ``module_name`` (a dotted name, or a path ending in .py), refused before
    it runs when its top level does work (:func:`check_no_work_at_import`)."""
    if module_name.endswith(".py") or os.sep in module_name:
        if not os.path.isfile(module_name):
            raise ValueError(f"{name} {spec}: no file {module_name}")
        check_no_work_at_import(module_name, spec, name)
        stem = os.path.splitext(os.path.basename(module_name))[0]
        found = importlib.util.spec_from_file_location(stem, module_name)
        module = importlib.util.module_from_spec(found)
        # registered (dataclasses and TorchScript look a class's module up) and its folder
        # importable (its own imports of sibling files), as `python file.py` would have it
        registered = stem not in sys.modules  # never shadow a module already imported
        if registered:
            sys.modules[stem] = module
        folder = os.path.dirname(os.path.abspath(module_name))
        sys.path.insert(0, folder)
        try:
            found.loader.exec_module(module)
        except Exception as exc:  # the user's file: one line saying where it failed
            if registered:
                del sys.modules[stem]
            raise ValueError(f"{name} {spec}: importing {module_name} failed "
                             f"({type(exc).__name__}: {exc})") from None
        finally:
            sys.path.remove(folder)
        return module
    # as `python -m` does: modules next to the user are importable (a console script's
    # sys.path does not hold the current directory)
    added = "" not in sys.path and os.getcwd() not in sys.path
    if added:
        sys.path.insert(0, os.getcwd())
    try:
        path = None if module_name in sys.modules else _user_file(module_name)
        if path is not None:
            check_no_work_at_import(path, spec, name)
        try:
            return importlib.import_module(module_name)
        except Exception as exc:
            if isinstance(exc, ModuleNotFoundError) and exc.name is not None \
                    and module_name.startswith(exc.name):
                raise ValueError(f"{name} {spec}: no module named {module_name!r} (run from "
                                 f"the directory that holds it, or give a .py path)") from None
            raise ValueError(f"{name} {spec}: importing {module_name} failed "
                             f"({type(exc).__name__}: {exc})") from None
    finally:
        if added:
            sys.path.remove(os.getcwd())


class Replay(NamedTuple):
    """What ``replay`` returns. ``images`` ``(n, C, H, W)``: the rows as stored, a ragged
    cache's padded (bottom and right) to the largest, each image's size in
    ``targets["sizes"]`` (absent when there is no crop and every image has one size);
    ``targets``: the stored targets of those rows (masks padded like the images; ``{}`` without
    targets). ``columns``: one ``(images, targets)`` per epoch (or draw), the pipeline's output
    and its moved targets (``"sizes"`` among them while the output is still ragged)."""

    index: Tensor
    images: Tensor
    targets: Dict[str, Tensor]
    columns: List[Tuple[Tensor, Dict[str, Tensor]]]


def stored_rows(cache: Any, index: Tensor, targets: bool = True
                ) -> Tuple[Tensor, Dict[str, Tensor]]:
    """Rows ``index`` of ``cache`` as the loader hands them to its crop, on ``cache.device``:
    ``(images, targets)``, the images (each ``cache.image(i)``, at its own size) padded at the
    bottom and right to the largest, every image's ``(h, w)`` in ``targets["sizes"]``; with
    ``targets`` the cache's masks (padded likewise) / boxes / box_valid / box_labels of those
    rows."""
    rows = [int(i) for i in index]
    parts = [cache.image(i).cpu() for i in rows]  # gathered on the CPU: a few rows
    sizes = torch.tensor([[p.shape[1], p.shape[2]] for p in parts], dtype=torch.int64)
    out: Dict[str, Tensor] = {"sizes": sizes}
    held = dict(cache.targets) if targets else {}
    if "masks" in held:
        masks = held.pop("masks")
        # a ragged cache's masks are images of their own (1, h, w); a fixed one's a tensor
        own = [masks.image(i)[0] if hasattr(masks, "image") else torch.as_tensor(masks[i])
               for i in rows]
        out["masks"] = _pad([m.cpu().unsqueeze(0) for m in own], sizes)[:, 0]
    for key, value in held.items():
        out[key] = value.index_select(0, index.to(value.device)).cpu()
    # where the loader delivers its batches: the same kernels, the same bits
    return (_pad(parts, sizes).to(cache.device),
            {k: v.to(cache.device) for k, v in out.items()})


def _pad(parts: Sequence[Tensor], sizes: Tensor) -> Tensor:
    """``(C, h, w)`` tensors into one zero-padded ``(n, C, H, W)`` batch (a few rows for a
    picture: a loop is fine)."""
    c = parts[0].shape[0]
    h, w = int(sizes[:, 0].max()), int(sizes[:, 1].max())
    if all(p.shape[1] == h and p.shape[2] == w for p in parts):
        return torch.stack(parts).contiguous()
    out = torch.zeros((len(parts), c, h, w), dtype=parts[0].dtype)
    for k, p in enumerate(parts):
        out[k, :, :p.shape[1], :p.shape[2]] = p
    return out


def run_pipeline(crop: Optional[nn.Module], augment: nn.Module, images: Tensor,
                 targets: Dict[str, Tensor], keys: Optional[Tensor]
                 ) -> Tuple[Tensor, Dict[str, Tensor]]:
    """``crop`` then ``augment``, both with ``keys`` (as a loader with ``return_keys`` hands
    the same keys to its crop and to the caller's augment), moving ``targets`` along
    (``"sizes"`` among them: a ragged batch, each step acting on each image's own extent).
    Without targets or sizes the augment is called as ``augment(x, keys)`` (or ``augment(x)``
    without keys), so a module without ``with_targets`` works."""
    if crop is not None:
        images, targets = crop.with_targets(images, targets, keys)
    if targets:
        if not callable(getattr(augment, "with_targets", None)):
            kind = "a ragged batch needs" if "sizes" in targets else "targets need"
            raise TypeError(f"show: {kind} an augment with with_targets(images, targets, "
                            f"keys), and {type(augment).__name__} has none")
        return augment.with_targets(images, targets, keys)
    return (augment(images) if keys is None else augment(images, keys)), targets


def replay(pipeline: Any, cache: Any, index: Sequence[int], epochs: Optional[Sequence[int]]
           = None, seed: int = 0, draws: int = 1, targets: bool = True) -> Replay:
    """Run ``pipeline`` (``split_pipeline``'s kinds) on rows ``index`` of ``cache``, its augment
    in train mode and its crop in its own mode (as the loader runs it): with ``epochs``, one
    column per epoch, the crop and the augment given ``batchaug.sample_keys(seed, epoch,
    index)``, i.e. exactly what ``DeviceLoader(cache, crop=crop, seed=seed,
    return_keys=True)`` yielded for those samples at that epoch, passed through
    ``augment.with_targets(x, targets, keys)`` (or ``augment(x, keys)``); without, ``draws``
    columns of unkeyed draws after ``torch.manual_seed(seed)``. A ragged or JPEG cache's rows
    go in at their own sizes (``Augment.with_targets`` with ``"sizes"``). With ``targets``,
    the cache's masks and boxes move along. The augment's train/eval mode is restored
    afterwards.

    Example:
        >>> r = replay(migration, cache, [0, 5], epochs=[3])  # doctest: +SKIP
        >>> out, moved = r.columns[0]  # doctest: +SKIP
        >>> # samples 0 and 5 as epoch 3 of a seed-0 run saw them, and their moved targets
    """
    crop, augment = split_pipeline(pipeline)
    index_t = torch.as_tensor(list(index), dtype=torch.int64)
    if index_t.dim() != 1 or index_t.numel() == 0:
        raise ValueError("replay: index must name at least one cache row")
    if bool(((index_t < 0) | (index_t >= len(cache))).any()):
        bad = index_t[(index_t < 0) | (index_t >= len(cache))][0]
        raise ValueError(f"replay: index {int(bad)} is out of range: the cache holds "
                         f"{len(cache)} images")
    images, stored = stored_rows(cache, index_t, targets)
    if crop is None and bool((stored["sizes"] == stored["sizes"][:1]).all()):
        # one size: a dense batch, given to the augment as a loader without a crop gives it
        stored.pop("sizes")
    if images.dtype not in (torch.uint8, torch.float32, torch.float64):
        images = images.float()
    if epochs is None:
        return Replay(index_t, images, stored,
                      run_columns(crop, augment, images, stored, [None] * draws, seed))
    keys = [_random.sample_keys(seed, int(e), index_t.to(images.device)) for e in epochs]
    return Replay(index_t, images, stored, run_columns(crop, augment, images, stored, keys))


def run_columns(crop: Optional[nn.Module], augment: nn.Module, images: Tensor,
                targets: Dict[str, Tensor], keys: Sequence[Optional[Tensor]],
                seed: Optional[int] = None) -> List[Tuple[Tensor, Dict[str, Tensor]]]:
    """``run_pipeline`` once per entry of ``keys`` (None: an unkeyed draw, after
    ``torch.manual_seed(seed)`` when ``seed`` is given), the augment in train mode (restored
    afterwards) and the crop in its own mode, as DeviceLoader runs it."""
    was_training = augment.training
    augment.train()
    try:
        if seed is not None:
            torch.manual_seed(seed)
        with torch.no_grad():
            return [run_pipeline(crop, augment, images, targets, k) for k in keys]
    finally:
        augment.train(was_training)


__all__ = ["split_pipeline", "load_pipeline", "Replay", "replay", "run_pipeline", "stored_rows"]
