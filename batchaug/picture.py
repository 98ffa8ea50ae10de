"""``show``: a PNG grid of what an augmentation does, one row per image, its targets drawn by
``draw_targets`` with plain tensor operations. ``batchaug show`` (``batchaug.show_command``) is
the command-line form.
"""
from __future__ import annotations

import io
import os
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor, nn

from batchaug.functional._targets import check_targets
from batchaug.transforms import Normalize

if TYPE_CHECKING:
    from batchaug.data import DeviceCache


def _last_normalize(augment: nn.Module) -> Optional[Normalize]:
    found = [m for m in augment.modules() if isinstance(m, Normalize)]
    return found[-1] if found else None


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


def _drawable(points: Tensor, valid: Tensor) -> Tuple[Tensor, Tensor]:
    """``(N, M, d)`` boxes or keypoints in float64 with the invalid and non-finite ones zeroed,
    and the ``(N, M)`` mask of the ones to draw."""
    points = points.to(torch.float64)
    valid = valid & torch.isfinite(points).all(dim=2)
    return torch.where(valid.unsqueeze(2), points, torch.zeros_like(points)), valid


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
        safe, valid = _drawable(targets["boxes"], targets["box_valid"])
        mm = safe.shape[1]
        x0, y0 = safe[:, :, 0].floor().long(), safe[:, :, 1].floor().long()
        x1, y1 = safe[:, :, 2].ceil().long() - 1, safe[:, :, 3].ceil().long() - 1
        x0, y0, x1, y1 = (v.view(n, mm, 1, 1) for v in (x0, y0, x1, y1))
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
        safe, valid = _drawable(targets["keypoints"], targets["keypoint_valid"])
        k = safe.shape[1]
        cx, cy = (safe[:, :, i].floor().long().view(n, k, 1, 1) for i in (0, 1))
        hit = ((xs - cx) ** 2 + (ys - cy) ** 2 <= radius * (radius + 1)) & valid.view(n, k, 1, 1)
        colours = _colours(torch.arange(1, k + 1)).to(images.device)
        out = paint(out, hit, colours.unsqueeze(0).expand(n, k, 3), 1.0)
    return out


def show(
    augment: Any,
    images: Union[Tensor, "DeviceCache", str, os.PathLike],
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
    *,
    index: Optional[Sequence[int]] = None,
    n: int = 8,
    epochs: Optional[Sequence[int]] = None,
) -> str:
    """Write a PNG grid to ``path`` and return the path: one row per image of ``images``
    ((N, C, H, W) uint8, or float in [0, 1]; normalised float input: give ``input_mean``/
    ``input_std``), the original first, then ``draws`` outputs of ``augment`` in train mode
    (each draw a new per-sample random augmentation of the whole batch). A ``Normalize`` inside
    ``augment`` is undone for display. ``seed`` makes the picture reproducible. The module's
    train/eval mode is restored afterwards. Needs Pillow.

    ``augment`` is an ``Augment`` (any module), a ``Migration`` (``from_torchvision``'s: its
    ``.crop`` runs first, then its ``.augment``) or a ``(crop, augment)`` pair: the pipeline of
    ``DeviceLoader(cache, crop=crop)`` followed by ``augment(x, keys)``.

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

    ``images`` may instead be a ``DeviceCache`` (or a cache directory): the rows ``index``
    (default: ``n`` rows picked with ``seed``), the first column each stored image at its own
    size (a ragged cache's photos are not squared; all scaled by one factor, at most 1, so
    that the largest fits the augmented cells), then one column per epoch of ``epochs``: each
    sample exactly as a run with ``DeviceLoader(cache, crop=crop, seed=seed,
    return_keys=True)`` and ``augment(x, keys)`` saw it then (see ``batchaug.pipeline.replay``,
    which returns these tensors); without ``epochs``, ``draws`` random draws. The cache's
    masks and boxes are drawn moved with the images (``targets={}``: images only); rows are
    labelled with index and class, columns with ``original`` and the epoch (or draw).

    Example:
        >>> import torch, batchaug
        >>> x = torch.randint(0, 256, (4, 3, 32, 32), dtype=torch.uint8)
        >>> batchaug.show(batchaug.recipes.cifar10(), x, "grid.png")  # doctest: +SKIP
        'grid.png'
        >>> batchaug.show(migration, cache, "epochs.png", index=[3, 17], epochs=[0, 5])
        ... # doctest: +SKIP
        'epochs.png'
    """
    if isinstance(draws, bool) or not isinstance(draws, int) or draws < 0:
        raise ValueError(f"draws must be an int >= 0, got {draws!r}")
    if not isinstance(images, Tensor):
        return _show_cache(augment, images, path, draws, seed, pad, keys, row_labels,
                           column_labels, targets, index, n, epochs)
    from batchaug.pipeline import run_columns, split_pipeline

    if images.dim() != 4:
        raise ValueError("show: images must be an (N, C, H, W) tensor")
    if index is not None or epochs is not None:
        raise ValueError("show: index and epochs pick rows and keys of a cache; for a tensor "
                         "of images give keys=batchaug.sample_keys(seed, epoch, index)")
    crop, augment = split_pipeline(augment, "augment")
    key_rows: List[Optional[Tensor]] = []
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
        targets = check_targets({k: v.to(images.device) for k, v in targets.items()},
                                list(images.shape))
    in_norm: Optional[Normalize] = None
    if input_mean is not None or input_std is not None:
        in_norm = Normalize(input_mean or [0.0], input_std or [1.0])
    out_norm = _last_normalize(augment)
    drawn = run_columns(crop, augment, images, targets or {},
                        key_rows if keys is not None else [None] * draws, seed)
    columns = [_cells(images, targets or {}, in_norm)]
    columns += [_cells(out, moved, out_norm) for out, moved in drawn]
    return _write_grid(columns, path, row_labels, column_labels, pad)


def _show_cache(pipeline: Any, cache: Any, path: Union[str, os.PathLike], draws: int,
                seed: Optional[int], pad: int, keys: Optional[Tensor],
                row_labels: Optional[Sequence[str]], column_labels: Optional[Sequence[str]],
                targets: Optional[Dict[str, Tensor]], index: Optional[Sequence[int]], n: int,
                epochs: Optional[Sequence[int]]) -> str:
    """``show`` on rows of a cache (see its doc): ``replay``, then the grid."""
    from batchaug.data import DeviceCache
    from batchaug.pipeline import replay, split_pipeline

    if isinstance(cache, (str, os.PathLike)):
        cache = DeviceCache.load(cache, device="cpu", placement="disk")
    if not isinstance(cache, DeviceCache):
        raise TypeError(f"show: images must be an (N, C, H, W) tensor, a DeviceCache or a "
                        f"cache directory, got {type(cache).__name__}")
    if keys is not None:
        raise ValueError("show: with a cache, give epochs=[...] instead of keys (each column "
                         "then uses batchaug.sample_keys(seed, epoch, index), the loader's keys)")
    if targets is not None and (not isinstance(targets, dict) or targets):
        raise ValueError("show: with a cache, targets draws the cache's own masks and boxes "
                         "(None) or nothing ({})")
    seed = 0 if seed is None else seed
    if index is None:
        index = pick_rows(len(cache), n, seed)
    _, augment = split_pipeline(pipeline)
    r = replay(pipeline, cache, index, epochs, seed, draws, targets is None)
    rows, cols = cell_labels([int(i) for i in r.index],
                             None if cache.labels is None
                             else cache.labels.index_select(0, r.index.to(cache.labels.device))
                             .tolist(), cache.classes, epochs, draws)
    out_norm = _last_normalize(augment)
    columns = [_cells(out, moved, out_norm) for out, moved in r.columns]
    # one scale for every stored image: the largest fits the largest augmented cell
    target = max((max(c.shape[1], c.shape[2]) for col in columns for c in col), default=0)
    largest = int(r.targets["sizes"].max()) if "sizes" in r.targets else max(r.images.shape[2:])
    scale = min(1.0, target / largest) if target else 1.0
    columns.insert(0, _cells(r.images, r.targets, None, scale))
    return _write_grid(columns, path, rows if row_labels is None else row_labels,
                       cols if column_labels is None else column_labels, pad)


def pick_rows(total: int, n: int, seed: int) -> List[int]:
    """``min(n, total)`` sorted cache rows picked with ``seed`` (``batchaug show`` without
    ``--index``)."""
    if total == 0:
        raise ValueError("show: the cache holds no images")
    g = torch.Generator().manual_seed(seed)
    return torch.randperm(total, generator=g)[: min(n, total)].sort().values.tolist()


def _cells(images: Tensor, targets: Dict[str, Tensor], norm: Optional[Normalize],
           scale: float = 1.0) -> List[Tensor]:
    """Each image of a batch as a displayable ``(3, h, w)`` cell with its targets drawn: at
    its own size where ``targets["sizes"]`` says the batch is ragged, scaled by ``scale``."""
    x = _displayable(images, norm)
    sizes = targets.get("sizes")
    drawable = {k: v.cpu() for k, v in targets.items() if k not in ("sizes", "labels")}
    if sizes is None and scale == 1.0:
        return list(draw_targets(x, drawable) if drawable else x)
    side = min(x.shape[2], x.shape[3]) * scale
    thickness, radius = max(1, round(side / 100)), max(1, int(side) // 50)
    cells = []
    for i in range(x.shape[0]):
        h, w = (int(sizes[i, 0]), int(sizes[i, 1])) if sizes is not None else x.shape[2:]
        img = x[i:i + 1, :, :h, :w]
        own = {k: v[i:i + 1] for k, v in drawable.items()}
        if "masks" in own:
            own["masks"] = own["masks"][..., :h, :w]
        if scale != 1.0:
            oh, ow = max(1, round(h * scale)), max(1, round(w * scale))
            img = torch.nn.functional.interpolate(img, size=(oh, ow), mode="bilinear",
                                                  align_corners=False, antialias=True).clamp(0, 1)
            if "masks" in own:  # nearest: labels stay labels
                ys = ((torch.arange(oh) + 0.5) * h / oh).long().clamp(max=h - 1)
                xs = ((torch.arange(ow) + 0.5) * w / ow).long().clamp(max=w - 1)
                own["masks"] = own["masks"][..., ys, :][..., xs]
            factor = torch.tensor([ow / w, oh / h], dtype=torch.float64)
            if "boxes" in own:
                own["boxes"] = own["boxes"] * factor.repeat(2).to(own["boxes"].dtype)
            if "keypoints" in own:
                own["keypoints"] = own["keypoints"] * factor.to(own["keypoints"].dtype)
        if own:
            img = draw_targets(img, own, thickness=thickness, radius=radius)
        cells.append(img[0])
    return cells


def _write_grid(columns: List[List[Tensor]], path: Union[str, os.PathLike],
                row_labels: Optional[Sequence[str]], column_labels: Optional[Sequence[str]],
                pad: int) -> str:
    """The PNG of ``columns`` (each a list of ``(3, h, w)`` float cells, one per row), every
    cell centred in a box of the largest cell's height and width."""
    from PIL import Image

    n = len(columns[0])
    for name, labels, count in (("row_labels", row_labels, n),
                                ("column_labels", column_labels, len(columns))):
        if labels is not None and (isinstance(labels, str) or len(labels) != count):
            raise ValueError(f"show: {name} must be a sequence of {count} strings, got "
                             f"{labels!r}"[:300])
    cell_h = max(c.shape[1] for col in columns for c in col)
    cell_w = max(c.shape[2] for col in columns for c in col)
    font, left, top0, col_w, col_x = _layout(len(columns), cell_w, row_labels, column_labels, pad)
    grid = torch.ones(3, top0 + n * (cell_h + pad) + pad, left + sum(w + pad for w in col_w) + pad)
    for j, col in enumerate(columns):
        for i, img in enumerate(col):
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
    from PIL import ImageFont

    labelled = row_labels is not None or column_labels is not None
    font = ImageFont.load_default() if labelled else None
    left = top0 = 0
    col_w = [cell_w] * n_columns
    if row_labels is not None:
        left = max(_text_size(font, str(t))[0] for t in row_labels) + pad
    if column_labels is not None:
        top0 = max(_text_size(font, str(t))[1] for t in column_labels) + pad
        col_w = [max(cell_w, _text_size(font, str(t))[0]) for t in column_labels]
    col_x = [left + pad + sum(w + pad for w in col_w[:j]) for j in range(n_columns)]
    return font, left, top0, col_w, col_x


def _text_size(font, text: str) -> Tuple[int, int]:
    """Width and height of ``text`` in ``font`` (right and bottom of its box)."""
    box = font.getbbox(text)
    return int(box[2]), int(box[3])


def cell_labels(index: Sequence[int], labels: Optional[Sequence[int]],
                classes: Optional[Sequence[str]], epochs: Optional[Sequence[int]],
                draws: int) -> Tuple[List[str], List[str]]:
    """``batchaug show``'s labels: one per row (``"#INDEX CLASS"``, the class name from
    ``classes``, else ``"#INDEX label N"``; ``"#INDEX"`` when ``labels`` is None, a cache of
    masks or boxes without per-image labels) and one per column (``"original"``, then
    ``"epoch E"`` for each epoch, else ``"draw K"``)."""
    rows = []
    for k, i in enumerate(index):
        if labels is None:
            rows.append(f"#{i}")
            continue
        label = labels[k]
        if classes is not None and 0 <= label < len(classes):
            rows.append(f"#{i} {classes[label]}")
        else:  # no class names (tar shards' .cls numbers): the number, said to be a label
            rows.append(f"#{i} label {label}")
    cols = ["original"] + ([f"epoch {e}" for e in epochs] if epochs
                           else [f"draw {k + 1}" for k in range(draws)])
    return rows, cols
