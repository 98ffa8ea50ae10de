"""``batchaug show``: the command-line form of ``batchaug.show`` on a cache, its pipeline
from ``--pipeline MODULE:ATTR`` (``batchaug.pipeline.load_pipeline``) or ``--recipe NAME``."""
from __future__ import annotations

from typing import Sequence

import torch

from batchaug.picture import cell_labels, pick_rows, show


def show_command(args) -> int:
    """Run ``batchaug show`` with parsed arguments (see ``batchaug show --help``): ``show`` on
    the cache with ``--pipeline``'s or ``--recipe``'s pipeline; returns the exit status."""
    from batchaug.data import DeviceCache
    from batchaug.errors import CLIError
    from batchaug.pipeline import load_pipeline

    spec = getattr(args, "pipeline", None)
    recipe = getattr(args, "recipe", None)
    if spec is not None:
        used = [f for f, v in (("--size", getattr(args, "size", None)),
                               ("--crop", getattr(args, "crop", None))) if v is not None]
        if used:
            raise CLIError(f"{used[0]} applies to --recipe only: --pipeline {spec} brings its "
                           f"own crop and sizes")
        crop, augment = load_pipeline(spec)  # before the cache: a typo fails fast
    cache = DeviceCache.load(args.cache, device="cpu", placement="disk")
    total = len(cache)
    if total == 0:
        raise ValueError(f"{args.cache}: the cache holds no images")
    index = getattr(args, "index", None)
    epochs = getattr(args, "epoch", None)
    if index:
        bad = [i for i in index if i >= total]
        if bad:
            raise ValueError(f"--index {bad[0]} is out of range: the cache holds {total} images")
    else:
        index = pick_rows(total, args.n, args.seed)
    held = {} if getattr(args, "no_targets", False) else cache.targets
    note = ""
    if spec is None:
        crop, augment, what, note = _recipe_pipeline(args, cache, recipe or "simclr", index)
    else:
        what = f"pipeline {spec}"
    if held and not callable(getattr(augment, "with_targets", None)):
        raise CLIError(f"{what}: its augmentation cannot move the cache's "
                       f"{' and '.join(sorted(held))} (no with_targets); add --no-targets "
                       f"to draw the images only")
    try:
        path = show((crop, augment), cache, args.out, draws=args.draws, seed=args.seed,
                    index=index, epochs=epochs, targets=None if held else {})
    except OSError as exc:  # a directory, a full disk, no permission: one line
        reason = exc.strerror or str(exc)
        raise CLIError(f"--out {args.out}: cannot write the PNG there ({reason})") from None
    except (TypeError, ValueError) as exc:
        if crop is None and _differ(cache, index):
            raise CLIError(f"{what} cannot run on these images of different "
                           f"sizes ({str(exc).splitlines()[0]}); give it a crop that fixes "
                           f"the size, as DeviceLoader(crop=...) needs: a Migration, or a "
                           f"(crop, augment) pair") from None
        if isinstance(exc, TypeError):
            raise CLIError(f"{what}: {exc}") from None
        raise
    drawn = "".join(f", with its {k} drawn" for k in ("masks", "boxes") if k in held)
    when = (f"at epochs {list(epochs)} of a run with seed {args.seed}" if epochs
            else f"{args.draws} draws, seed {args.seed}")
    labels = None if cache.labels is None else cache.labels[torch.tensor(index)].tolist()
    rows, _ = cell_labels(index, labels, cache.classes, epochs, args.draws)
    print(f"wrote {path}: images {list(index)} from {args.cache}{note}{drawn}, {what}, {when}")
    print("rows: " + ", ".join(rows))
    return 0


def _differ(cache, index: Sequence[int]) -> bool:
    """Whether the rows ``index`` of ``cache`` differ in size (a ragged batch)."""
    sizes = cache.sizes[torch.tensor(index)]
    return bool((sizes != sizes[:1]).any())


def _recipe_pipeline(args, cache, recipe: str, index: Sequence[int]):
    """``(crop, augment, description, note)`` of ``--recipe``: when the images shown differ in
    size (or with ``--crop``) a crop first, taking each image's largest centred square resized
    to ``--crop`` (default: the shortest side shown); the recipe at ``--size`` (default: the
    side it then gets)."""
    from batchaug.compose import Augment
    from batchaug.errors import CLIError
    from batchaug.recipes import get as get_recipe
    from batchaug.transforms import RandomResizedCrop

    crop, note = None, ""
    side = int(cache.sizes[torch.tensor(index)].min())
    if getattr(args, "crop", None) or _differ(cache, index):
        side = getattr(args, "crop", None) or side
        # in eval(), with eval_crop_pct=1: each image's largest centred square, resized
        crop = Augment(RandomResizedCrop(side, eval_crop_pct=1.0)).eval()
        note = f" (a crop takes each image's largest centred square, resized to {side}x{side})"
    size = getattr(args, "size", None) or side
    if recipe == "cifar10" and size > side:  # a crop without a resize
        raise CLIError(f"--size {size}: the cifar10 recipe crops (RandomCrop, no resize), so "
                       f"--size must be at most the images' shorter side ({side} px here)")
    return crop, get_recipe(recipe, size=size), f"recipe {recipe} ({size} px)", note
