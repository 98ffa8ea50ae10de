"""``show``: a PNG grid of what an augmentation does (one row per image: the original, then
``draws`` augmented versions), and ``batchaug show``, which draws it from a cache with row
labels (sample index, class) and column labels (original, epoch or draw).
"""
from __future__ import annotations

import io
import os
from typing import List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor, nn

from batchaug.transforms import Normalize


def _last_normalize(augment: nn.Module) -> Optional[Normalize]:
    found = None
    for m in augment.modules():
        if isinstance(m, Normalize):
            found = m
    return found


def _displayable(x: Tensor, norm: Optional[Normalize]) -> Tensor:
    """(N, C, H, W) -> float32 RGB in [0, 1] on the CPU: uint8 scaled, Normalize undone."""
    x = x.detach().cpu()
    if x.dtype == torch.uint8:
        x = x.float() / 255
    else:
        x = x.float()
        if norm is not None:
            c = x.shape[1]
            mean = norm.mean.cpu().float().view(1, -1, 1, 1).expand(1, c, 1, 1)
            std = norm.std.cpu().float().view(1, -1, 1, 1).expand(1, c, 1, 1)
            x = x * std + mean
    if x.shape[1] == 1:
        x = x.expand(-1, 3, -1, -1)
    elif x.shape[1] == 4:
        x = x[:, :3]
    return x.clamp(0, 1)


def show(
    augment: nn.Module,
    images: Tensor,
    path: Union[str, os.PathLike],
    draws: int = 4,
    seed: Optional[int] = None,
    input_mean: Optional[Sequence[float]] = None,
    input_std: Optional[Sequence[float]] = None,
    pad: int = 2,
    keys: Optional[Tensor] = None,
    row_labels: Optional[Sequence[str]] = None,
    column_labels: Optional[Sequence[str]] = None,
) -> str:
    """Write a PNG grid to ``path`` and return the path: one row per image of ``images``
    ((N, C, H, W) uint8, or float in [0, 1]; normalised float input: give ``input_mean``/
    ``input_std``), the original first, then ``draws`` outputs of ``augment`` in train mode
    (each draw a new per-sample random augmentation of the whole batch). A ``Normalize`` inside
    ``augment`` is undone for display. ``seed`` makes the picture reproducible. The module's
    train/eval mode is restored afterwards. Needs Pillow.

    ``keys`` (int64, ``(N,)`` or ``(D, N)``; ``augment`` must take ``(x, keys)``, as
    ``Augment`` does) replaces the random draws: one column per row of keys, each the output
    of ``augment(images, keys_row)``: exactly what training with those keys produced. With
    ``keys = batchaug.sample_keys(seed, epoch, index)`` it shows samples ``index`` as
    they looked at ``epoch`` of a run with ``DeviceLoader(..., seed=seed, return_keys=True)``.

    ``row_labels`` (one per image, e.g. ``"#17 cat"``) are written left of the rows and
    ``column_labels`` (one per column, the original's first, e.g. ``"epoch 3"``) above them.

    Example:
        >>> import torch, batchaug
        >>> x = torch.randint(0, 256, (4, 3, 32, 32), dtype=torch.uint8)
        >>> batchaug.show(batchaug.recipes.cifar10(), x, "grid.png")  # doctest: +SKIP
        'grid.png'
    """
    from PIL import Image

    if not isinstance(images, Tensor) or images.dim() != 4:
        raise ValueError("show: images must be an (N, C, H, W) tensor")
    if isinstance(draws, bool) or not isinstance(draws, int) or draws < 0:
        raise ValueError(f"draws must be an int >= 0, got {draws!r}")
    key_rows: List[Tensor] = []
    if keys is not None:
        if not isinstance(keys, Tensor) or keys.dtype != torch.int64 or keys.dim() not in (1, 2) \
                or keys.shape[-1] != images.shape[0]:
            raise ValueError(f"show: keys must be an int64 (N,) or (D, N) tensor with N = "
                             f"{images.shape[0]} images")
        key_rows = list((keys if keys.dim() == 2 else keys.unsqueeze(0)).to(images.device))
    in_norm: Optional[Normalize] = None
    if input_mean is not None or input_std is not None:
        in_norm = Normalize(input_mean or [0.0], input_std or [1.0])
    out_norm = _last_normalize(augment)
    columns: List[Tensor] = [_displayable(images, in_norm)]
    was_training = augment.training
    augment.train()
    try:
        if seed is not None:
            torch.manual_seed(seed)
        with torch.no_grad():
            for row in key_rows:
                columns.append(_displayable(augment(images, row), out_norm))
            for _ in range(draws if keys is None else 0):
                columns.append(_displayable(augment(images), out_norm))
    finally:
        augment.train(was_training)
    n = images.shape[0]
    for name, labels, count in (("row_labels", row_labels, n),
                                ("column_labels", column_labels, len(columns))):
        if labels is not None and (isinstance(labels, str) or len(labels) != count):
            raise ValueError(f"show: {name} must be a sequence of {count} strings, got "
                             f"{labels!r}"[:300])
    cell_h = max(c.shape[2] for c in columns)
    cell_w = max(c.shape[3] for c in columns)
    font, left, top0, col_w, col_x = _layout(len(columns), cell_w, row_labels, column_labels, pad)
    grid = torch.ones(3, top0 + n * (cell_h + pad) + pad, left + sum(w + pad for w in col_w) + pad)
    for j, col in enumerate(columns):
        for i in range(n):
            img = col[i]
            top = top0 + pad + i * (cell_h + pad) + (cell_h - img.shape[1]) // 2
            x0 = col_x[j] + (col_w[j] - img.shape[2]) // 2
            grid[:, top:top + img.shape[1], x0:x0 + img.shape[2]] = img
    array = (grid * 255).round().to(torch.uint8).permute(1, 2, 0).contiguous().numpy()
    picture = Image.fromarray(array)
    if font is not None:
        from PIL import ImageDraw

        draw = ImageDraw.Draw(picture)
        for i, text in enumerate(row_labels or []):
            h = _text_size(font, str(text))[1]
            draw.text((pad, top0 + pad + i * (cell_h + pad) + max(0, (cell_h - h) // 2)),
                      str(text), fill=(0, 0, 0), font=font)
        for j, text in enumerate(column_labels or []):
            draw.text((col_x[j], pad // 2), str(text), fill=(0, 0, 0), font=font)
    buf = io.BytesIO()
    picture.save(buf, format="PNG")  # encoded first: a failed write below leaves no half file
    path = os.fspath(path)
    with open(path, "wb") as f:
        f.write(buf.getvalue())
    return path


def _layout(n_columns: int, cell_w: int, row_labels: Optional[Sequence[str]],
            column_labels: Optional[Sequence[str]], pad: int):
    """The grid's label font, left band, top band, column widths and column x positions."""
    font = _font() if row_labels is not None or column_labels is not None else None
    left = top0 = 0
    col_w = [cell_w] * n_columns
    if row_labels is not None:
        left = max(_text_size(font, str(t))[0] for t in row_labels) + pad
    if column_labels is not None:
        top0 = max(_text_size(font, str(t))[1] for t in column_labels) + pad
        col_w = [max(cell_w, _text_size(font, str(t))[0]) for t in column_labels]
    col_x = [left + pad + sum(w + pad for w in col_w[:j]) for j in range(n_columns)]
    return font, left, top0, col_w, col_x


def cell_origin(row: int, column: int, cell_h: int, cell_w: int, n_columns: int,
                row_labels: Optional[Sequence[str]] = None,
                column_labels: Optional[Sequence[str]] = None, pad: int = 2) -> Tuple[int, int]:
    """(top, left) pixel of the cell at ``row``, ``column`` in a picture ``show`` drew with these
    labels, for images of ``cell_h`` x ``cell_w`` (to read cells back, e.g. in tests)."""
    _, _, top0, col_w, col_x = _layout(n_columns, cell_w, row_labels, column_labels, pad)
    return top0 + pad + row * (cell_h + pad), col_x[column] + (col_w[column] - cell_w) // 2


def _font():
    from PIL import ImageFont

    return ImageFont.load_default()


def _text_size(font, text: str) -> Tuple[int, int]:
    """Width and height of ``text`` in ``font`` (right and bottom of its box)."""
    box = font.getbbox(text)
    return int(box[2]), int(box[3])


def cell_labels(index: Sequence[int], labels: Sequence[int], classes: Optional[Sequence[str]],
                epochs: Optional[Sequence[int]], draws: int) -> Tuple[List[str], List[str]]:
    """``batchaug show``'s labels: one per row (``"#INDEX CLASS"``, the class name from
    ``classes``, else the label number) and one per column (``"original"``, then ``"epoch E"``
    for each epoch, else ``"draw K"``)."""
    rows = []
    for i, label in zip(index, labels):
        name = classes[label] if classes is not None and 0 <= label < len(classes) else str(label)
        rows.append(f"#{i} {name}")
    cols = ["original"] + ([f"epoch {e}" for e in epochs] if epochs
                           else [f"draw {k + 1}" for k in range(draws)])
    return rows, cols


def show_command(args) -> int:
    """``batchaug show CACHE --out grid.png --recipe NAME [--size N] [--n 8] [--draws 4]
    [--seed S] [--index I ...] [--epoch E ...]``: ``n`` images drawn from the cache with
    ``seed`` (or the rows ``--index``), the recipe at ``--size`` (default: the images' shorter
    side); with ``--epoch``, one column per epoch showing each sample exactly as training with
    ``DeviceLoader(cache, seed=S, return_keys=True)`` and ``recipe(x, keys)`` augmented it at
    that epoch. Rows are labelled with the sample index and class name, columns with the
    epoch (or draw)."""
    from batchaug import _random
    from batchaug.recipes import get as get_recipe
    from batchaug.data import DeviceCache
    from batchaug.errors import CLIError

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
        idx = torch.tensor(index, dtype=torch.int64)
    else:
        g = torch.Generator().manual_seed(args.seed)
        idx = torch.randperm(total, generator=g)[: min(args.n, total)].sort().values
    note = ""
    if cache.compact:  # ragged or JPEG: each image resized and centre-cropped to one square
        from batchaug.data.compact_batches import smallest_side, square_crops

        side = getattr(args, "crop", None) or smallest_side(cache.images, idx)
        images = square_crops(cache.images, idx, side)
        note = (f" ({cache.storage}{', ragged' if cache.ragged else ''}: each image resized "
                f"and centre-cropped to {side}x{side})")
    else:
        images = cache.images.index_select(0, idx)
    if images.dtype not in (torch.uint8, torch.float32, torch.float64):
        images = images.float()
    images = images.contiguous()
    side = min(images.shape[2], images.shape[3])
    size = getattr(args, "size", None) or side
    if args.recipe == "cifar10" and size > side:  # a crop without a resize
        raise CLIError(f"--size {size}: the cifar10 recipe crops (RandomCrop, no resize), so "
                       f"--size must be at most the images' shorter side ({side} px here)")
    augment = get_recipe(args.recipe, size=size)
    rows, cols = cell_labels(idx.tolist(), cache.labels.index_select(0, idx).tolist(),
                             cache.classes, epochs, args.draws)
    keys = None
    if epochs:
        keys = torch.stack([_random.sample_keys(args.seed, e, idx) for e in epochs])
    try:
        if keys is not None:
            path = show(augment, images, args.out, keys=keys, row_labels=rows,
                        column_labels=cols)
        else:
            path = show(augment, images, args.out, draws=args.draws, seed=args.seed,
                        row_labels=rows, column_labels=cols)
    except OSError as exc:  # a directory, a full disk, no permission: one line
        reason = exc.strerror or str(exc)
        raise CLIError(f"--out {args.out}: cannot write the PNG there ({reason})") from None
    what = (f"at epochs {list(epochs)} of a run with seed {args.seed}" if epochs
            else f"{args.draws} draws, seed {args.seed}")
    print(f"wrote {path}: images {idx.tolist()} from {args.cache}{note}, recipe {args.recipe} "
          f"({size} px), {what}")
    print("rows: " + ", ".join(rows))
    return 0
