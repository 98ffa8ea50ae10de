"""``show``: a PNG grid of what an augmentation does (one row per image: the original, then
``draws`` augmented versions), and ``batchaug show``, which draws it from a cache with row
labels (sample index, class) and column labels (original, epoch or draw). With targets, each
cell also shows its masks (a translucent overlay), boxes (rectangles) and keypoints (dots),
drawn by ``draw_targets`` with plain tensor operations.
"""
from __future__ import annotations

import io
import os
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor, nn

from batchaug.functional._targets import check_targets
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


# 20 colours that stay apart from each other and from grey (Sasha Trubetskoy's list of
# distinct colours); label l > 0 gets entry (l - 1) mod 20, label 0 white
_DISTINCT = [(230, 25, 75), (60, 180, 75), (255, 225, 25), (0, 130, 200), (245, 130, 48),
             (145, 30, 180), (70, 240, 240), (240, 50, 230), (210, 245, 60), (250, 190, 212),
             (0, 128, 128), (220, 190, 255), (170, 110, 40), (255, 250, 200), (128, 0, 0),
             (170, 255, 195), (128, 128, 0), (255, 215, 180), (0, 0, 128), (128, 128, 128)]


def palette(n: int = 256) -> Tensor:
    """``(n, 3)`` uint8 RGB colours of labels ``0 .. n - 1``, as ``draw_targets`` uses them:
    label 0 white (masks leave it clear), then 20 distinct colours (1 red, 2 green, 3 yellow,
    4 blue, 5 orange...), repeating from label 21.

    Example:
        >>> palette(4).tolist()
        [[255, 255, 255], [230, 25, 75], [60, 180, 75], [255, 225, 25]]
    """
    table = torch.tensor(_DISTINCT, dtype=torch.uint8)
    labels = torch.arange(n)
    out = table[(labels - 1).remainder(len(_DISTINCT))]
    out[labels == 0] = 255
    return out


def _colours(labels: Tensor) -> Tensor:
    """Float RGB in [0, 1] of integer ``labels`` (any shape), from ``palette``."""
    table = palette(len(_DISTINCT) + 1).to(torch.float32).div(255)
    labels = labels.long()
    return table[torch.where(labels == 0, labels, (labels - 1).remainder(len(_DISTINCT)) + 1)]


def draw_targets(images: Tensor, targets: Dict[str, Tensor], alpha: float = 0.5,
                 thickness: Optional[int] = None, radius: Optional[int] = None) -> Tensor:
    """Draw ``targets`` on ``images`` ((N, 3, H, W) float RGB in [0, 1]) and return the result
    (the input is not changed).

    - ``"masks"`` (N, H, W): each pixel with a non-zero label blended (``alpha``) with the
      label's ``palette`` colour; pixels labelled 0 are left as they are. (N, K, H, W): the
      non-zero pixels of channel ``k`` in the colour of ``k + 1`` (later channels on top).
    - ``"boxes"``: the outline (``thickness`` px, inside the box) of each valid box
      (``"box_valid"``) in the colour of its ``"box_labels"`` entry, else of its slot + 1.
      A box ``[x1, y1, x2, y2]`` covers the pixels ``floor(x1) .. ceil(x2) - 1`` (torchvision's
      convention: pixel ``j`` spans ``[j, j + 1]``).
    - ``"keypoints"``: a dot of ``radius`` px around the pixel ``(floor(x), floor(y))`` of each
      valid keypoint (``"keypoint_valid"``), keypoint ``k`` in the colour of ``k + 1``.

    Invalid boxes and keypoints are not drawn; other keys (``"labels"``) are ignored.
    ``thickness`` and ``radius`` default to about 1% and 2% of the shorter side (at least 1).

    Example:
        >>> x = torch.zeros(1, 3, 8, 8)
        >>> y = draw_targets(x, {"boxes": torch.tensor([[[1.0, 1.0, 5.0, 4.0]]])}, thickness=1)
        >>> y[0, :, 1, 1].tolist(), y[0, :, 2, 2].tolist()  # an edge pixel, an inner one
        ([0.9019607901573181, 0.09803921729326248, 0.29411765933036804], [0.0, 0.0, 0.0])
    """
    if not isinstance(images, Tensor) or images.dim() != 4 or images.shape[1] != 3 \
            or not images.is_floating_point():
        raise ValueError("draw_targets: images must be an (N, 3, H, W) float tensor in [0, 1]")
    targets = check_targets({k: v.to(images.device) for k, v in targets.items()},
                            list(images.shape))
    n, _, h, w = images.shape
    side = min(h, w)
    thickness = max(1, round(side / 100)) if thickness is None else int(thickness)
    radius = max(1, side // 50) if radius is None else int(radius)
    out = images
    ys = torch.arange(h, device=images.device).view(1, 1, h, 1)
    xs = torch.arange(w, device=images.device).view(1, 1, 1, w)

    def paint(out: Tensor, hit: Tensor, colours: Tensor, blend: float) -> Tensor:
        # hit: (N, S, H, W) bool per shape, colours (N, S, 3); the last shape hitting a pixel
        # gives its colour, found as the first along the reversed slot axis (a uint8 map, not
        # an int64 one: 100 boxes on a batch of 224 px images stay a few tens of MB)
        index = hit.shape[1] - 1 - hit.flip(1).to(torch.uint8).argmax(dim=1)  # (N, H, W)
        colour = colours[torch.arange(n, device=hit.device).view(n, 1, 1), index]
        colour = colour.permute(0, 3, 1, 2)
        drawn = hit.any(dim=1).unsqueeze(1)
        return torch.where(drawn, (1 - blend) * out + blend * colour, out)

    if "masks" in targets and n > 0:
        m = targets["masks"]
        if m.dim() == 3:
            labels = m.long()
            colour = _colours(labels).to(images.device).permute(0, 3, 1, 2)
            on = (labels != 0).unsqueeze(1)
            out = torch.where(on, (1 - alpha) * out + alpha * colour, out)
        elif m.shape[1] > 0:
            k = m.shape[1]
            colours = _colours(torch.arange(1, k + 1)).to(images.device)
            out = paint(out, m != 0, colours.unsqueeze(0).expand(n, k, 3), alpha)
    if "boxes" in targets and targets["boxes"].shape[1] > 0:
        boxes = targets["boxes"].to(torch.float64)
        mm = boxes.shape[1]
        valid = targets["box_valid"] & torch.isfinite(boxes).all(dim=2)
        safe = torch.where(valid.unsqueeze(2), boxes, torch.zeros_like(boxes))
        x0 = safe[:, :, 0].floor().long().view(n, mm, 1, 1)
        y0 = safe[:, :, 1].floor().long().view(n, mm, 1, 1)
        x1 = safe[:, :, 2].ceil().long().view(n, mm, 1, 1) - 1
        y1 = safe[:, :, 3].ceil().long().view(n, mm, 1, 1) - 1
        inside = (xs >= x0) & (xs <= x1) & (ys >= y0) & (ys <= y1)
        inner = ((xs >= x0 + thickness) & (xs <= x1 - thickness)
                 & (ys >= y0 + thickness) & (ys <= y1 - thickness))
        hit = inside & ~inner & valid.view(n, mm, 1, 1)
        if "box_labels" in targets:
            labels = targets["box_labels"]
        else:
            labels = torch.arange(1, mm + 1, device=images.device).expand(n, mm)
        out = paint(out, hit, _colours(labels.cpu()).to(images.device), 1.0)
    if "keypoints" in targets and targets["keypoints"].shape[1] > 0:
        kps = targets["keypoints"].to(torch.float64)
        k = kps.shape[1]
        valid = targets["keypoint_valid"] & torch.isfinite(kps).all(dim=2)
        safe = torch.where(valid.unsqueeze(2), kps, torch.zeros_like(kps))
        cx = safe[:, :, 0].floor().long().view(n, k, 1, 1)
        cy = safe[:, :, 1].floor().long().view(n, k, 1, 1)
        hit = ((xs - cx) ** 2 + (ys - cy) ** 2 <= radius * (radius + 1)) & valid.view(n, k, 1, 1)
        colours = _colours(torch.arange(1, k + 1)).to(images.device)
        out = paint(out, hit, colours.unsqueeze(0).expand(n, k, 3), 1.0)
    return out


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
    targets: Optional[Dict[str, Tensor]] = None,
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

    ``targets`` (the dict ``with_targets`` takes: ``"masks"``, ``"boxes"``, ``"keypoints"``...,
    one entry per image) are drawn on every cell by ``draw_targets``: on the original as given,
    on each augmented cell as ``augment.with_targets(images, targets, keys)`` moved them
    (masks as a translucent overlay, valid boxes as rectangles, valid keypoints as dots).

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
    if targets is not None:
        if not isinstance(targets, dict):
            raise TypeError(f"show: targets must be a dict of tensors (masks, boxes, "
                            f"keypoints...), got {type(targets).__name__}")
        if not callable(getattr(augment, "with_targets", None)):
            raise TypeError(f"show: targets need an augment with with_targets(images, targets, "
                            f"keys), and {type(augment).__name__} has none")
        targets = check_targets({k: v.to(images.device) for k, v in targets.items()},
                                list(images.shape))
    in_norm: Optional[Normalize] = None
    if input_mean is not None or input_std is not None:
        in_norm = Normalize(input_mean or [0.0], input_std or [1.0])
    out_norm = _last_normalize(augment)
    columns: List[Tensor] = [_displayable(images, in_norm)]
    if targets is not None:
        columns[0] = draw_targets(columns[0], targets)
    was_training = augment.training
    augment.train()

    def one_draw(row: Optional[Tensor]) -> Tensor:
        if targets is None:
            return _displayable(augment(images) if row is None else augment(images, row),
                                out_norm)
        out, moved = augment.with_targets(images, targets, row)
        return draw_targets(_displayable(out, out_norm), moved)

    try:
        if seed is not None:
            torch.manual_seed(seed)
        with torch.no_grad():
            for row in key_rows:
                columns.append(one_draw(row))
            for _ in range(draws if keys is None else 0):
                columns.append(one_draw(None))
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


def _square_with_masks(cache, idx: Tensor, side: int) -> Tuple[Tensor, Tensor]:
    """Images ``idx`` of a compact cache with masks, each resized (shorter side ``side``) and
    centre-cropped to ``side`` x ``side``, and their masks moved by the same steps (nearest):
    ``(images (n, C, side, side), masks (n, side, side))``. One image at a time: each has its
    own size, and a grid shows a few."""
    from batchaug.compose import Augment
    from batchaug.transforms import CenterCrop, Resize

    fit = Augment(Resize(side), CenterCrop(side))
    images, masks = [], []
    for i in idx.tolist():
        x, moved = fit.with_targets(cache.image(i).unsqueeze(0).cpu(),
                                    {"masks": cache.masks.image(i).cpu()})
        images.append(x)
        masks.append(moved["masks"])
    return torch.cat(images), torch.cat(masks)


def _font():
    from PIL import ImageFont

    return ImageFont.load_default()


def _text_size(font, text: str) -> Tuple[int, int]:
    """Width and height of ``text`` in ``font`` (right and bottom of its box)."""
    box = font.getbbox(text)
    return int(box[2]), int(box[3])


def cell_labels(index: Sequence[int], labels: Optional[Sequence[int]],
                classes: Optional[Sequence[str]], epochs: Optional[Sequence[int]],
                draws: int) -> Tuple[List[str], List[str]]:
    """``batchaug show``'s labels: one per row (``"#INDEX CLASS"``, the class name from
    ``classes``, else the label number; ``"#INDEX"`` when ``labels`` is None, a cache of
    masks or boxes without per-image labels) and one per column (``"original"``, then
    ``"epoch E"`` for each epoch, else ``"draw K"``)."""
    rows = []
    for k, i in enumerate(index):
        if labels is None:
            rows.append(f"#{i}")
            continue
        label = labels[k]
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
    epoch (or draw). A cache with masks or boxes (``cache.targets``) has them drawn on each
    cell, moved by the recipe's ``with_targets`` (``--no-targets``: images only)."""
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
    held = getattr(cache, "targets", {})  # masks / boxes / box_valid / box_labels
    if getattr(args, "no_targets", False):
        held = {}
    square_masks: Optional[Tensor] = None
    if cache.compact:  # ragged or JPEG: each image resized and centre-cropped to one square
        from batchaug.data.compact_batches import smallest_side, square_crops

        side = getattr(args, "crop", None) or smallest_side(cache.images, idx)
        if set(held) == {"masks"}:
            images, square_masks = _square_with_masks(cache, idx, side)
        else:
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
    labels = None if cache.labels is None else cache.labels.index_select(0, idx).tolist()
    rows, cols = cell_labels(idx.tolist(), labels, cache.classes, epochs, args.draws)
    targets: Optional[Dict[str, Tensor]] = None
    if held and cache.compact and square_masks is None:
        note += (f"; its {' and '.join(k for k in ('masks', 'boxes') if k in held)} not drawn "
                 f"(only masks follow a ragged or JPEG cache's images into the grid)")
    elif held:
        if square_masks is not None:
            targets = {"masks": square_masks}
        else:
            targets = {k: v.index_select(0, idx.to(v.device)).to(images.device)
                       for k, v in held.items()}
        if not callable(getattr(augment, "with_targets", None)):
            raise CLIError(f"--recipe {args.recipe}: its augmentation cannot move the cache's "
                           f"{' and '.join(sorted(held))} (no with_targets); add --no-targets "
                           f"to draw the images only")
    keys = None
    if epochs:
        keys = torch.stack([_random.sample_keys(args.seed, e, idx) for e in epochs])
    try:
        if keys is not None:
            path = show(augment, images, args.out, keys=keys, row_labels=rows,
                        column_labels=cols, targets=targets)
        else:
            path = show(augment, images, args.out, draws=args.draws, seed=args.seed,
                        row_labels=rows, column_labels=cols, targets=targets)
    except OSError as exc:  # a directory, a full disk, no permission: one line
        reason = exc.strerror or str(exc)
        raise CLIError(f"--out {args.out}: cannot write the PNG there ({reason})") from None
    what = (f"at epochs {list(epochs)} of a run with seed {args.seed}" if epochs
            else f"{args.draws} draws, seed {args.seed}")
    drawn = "".join(f", with its {k} drawn" for k in ("masks", "boxes") if k in (targets or {}))
    print(f"wrote {path}: images {idx.tolist()} from {args.cache}{note}{drawn}, recipe "
          f"{args.recipe} ({size} px), {what}")
    print("rows: " + ", ".join(rows))
    return 0
