"""batchaug.show with targets: masks as an overlay, boxes as rectangles, keypoints as dots, on
the originals and on the augmented cells (moved with the image), and `batchaug show` on a cache
with masks or boxes."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

import batchaug
from batchaug.cli import main
from batchaug.picture import cell_labels, draw_targets
from tests.cli.pictures import cell_origin

# the documented colours of labels 1 and 3 (red, yellow)
RED = torch.tensor([230, 25, 75]) / 255
YELLOW = torch.tensor([255, 225, 25]) / 255


def _box_outline(h, w, x0, y0, x1, y1):
    """Pixels of a 1 px outline from column x0 to x1 and row y0 to y1 (inclusive), by loops."""
    out = torch.zeros(h, w, dtype=torch.bool)
    for y in range(y0, y1 + 1):
        for x in range(x0, x1 + 1):
            if x in (x0, x1) or y in (y0, y1):
                out[y, x] = True
    return out


def test_a_box_is_drawn_on_its_edge_pixels_in_its_colour_and_invalid_boxes_are_not():
    x = torch.full((2, 3, 20, 24), 0.5)
    boxes = torch.tensor([[[2.0, 3.0, 10.0, 8.0], [5.0, 5.0, 15.0, 15.0], [1.0, 1.0, 4.0, 4.0]],
                          [[2.5, 3.2, 9.1, 7.9], [float("nan"), 0.0, 9.0, 9.0],
                           [0.0, 0.0, 24.0, 20.0]]])
    valid = torch.tensor([[True, False, False], [True, True, True]])
    labels = torch.tensor([[3, 1, 1], [3, 1, 1]])
    out = draw_targets(x, {"boxes": boxes, "box_valid": valid, "box_labels": labels},
                       thickness=1)
    assert torch.equal(x, torch.full((2, 3, 20, 24), 0.5))  # the input is untouched
    # [2, 3, 10, 8] covers columns 2..9 and rows 3..7; the fractional box the same pixels
    edge = _box_outline(20, 24, 2, 3, 9, 7)
    for i in range(2):
        changed = (out[i] != 0.5).any(dim=0)
        assert torch.equal(out[i][:, edge], YELLOW.view(3, 1).expand(3, int(edge.sum())))
        if i == 0:  # the invalid boxes (flag False) left no pixel
            assert torch.equal(changed, edge)
    # sample 1: the NaN box is not drawn; the whole-image box is the image's border in red
    border = _box_outline(20, 24, 0, 0, 23, 19)
    assert torch.equal((out[1] != 0.5).any(dim=0), edge | border)
    assert torch.equal(out[1][:, border], RED.view(3, 1).expand(3, int(border.sum())))
    # overlapping outlines: the later slot is drawn on top
    two = draw_targets(x[:1], {"boxes": torch.tensor([[[2.0, 3.0, 10.0, 8.0],
                                                       [2.0, 3.0, 6.0, 8.0]]]),
                               "box_labels": torch.tensor([[3, 1]])}, thickness=1)
    assert torch.equal(two[0, :, 5, 2], RED) and torch.equal(two[0, :, 5, 9], YELLOW)
    # thicker outlines grow inwards
    thick = draw_targets(x[:1], {"boxes": boxes[:1, :1]}, thickness=2)
    assert torch.equal((thick[0] != 0.5).any(dim=0),
                       edge | _box_outline(20, 24, 3, 4, 8, 6))


def test_a_mask_overlay_changes_exactly_the_masks_pixels():
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (2, 3, 16, 16), generator=g).float() / 255
    masks = torch.randint(0, 4, (2, 16, 16), generator=g) * (torch.rand(2, 16, 16, generator=g)
                                                              < 0.4)
    out = draw_targets(x, {"masks": masks}, alpha=0.5)
    assert torch.equal((out != x).any(dim=1), masks != 0)
    one = masks == 1
    torch.testing.assert_close(out.permute(0, 2, 3, 1)[one],
                               0.5 * x.permute(0, 2, 3, 1)[one] + 0.5 * RED)
    # (N, K, H, W) masks: the union of the channels, channel k in the colour of k + 1
    inst = torch.zeros(2, 2, 16, 16, dtype=torch.bool)
    inst[:, 0, 2:6, 2:6] = True
    inst[1, 1, 10:12, 3:9] = True
    out = draw_targets(x, {"masks": inst.to(torch.uint8)}, alpha=0.5)
    assert torch.equal((out != x).any(dim=1), inst.any(dim=1))
    torch.testing.assert_close(out[0, :, 3, 3], 0.5 * x[0, :, 3, 3] + 0.5 * RED)
    with pytest.raises(ValueError, match="float masks are refused"):
        draw_targets(x, {"masks": masks.float()})


def test_keypoints_are_dots_and_invalid_ones_are_not_drawn():
    x = torch.zeros(1, 3, 12, 12)
    kps = torch.tensor([[[4.5, 6.9], [9.0, 2.0], [float("nan"), 1.0]]])
    out = draw_targets(x, {"keypoints": kps,
                           "keypoint_valid": torch.tensor([[True, False, True]])}, radius=1)
    expected = torch.zeros(12, 12, dtype=torch.bool)
    expected[5:8, 3:6] = True  # a 3x3 dot around pixel (4, 6)
    assert torch.equal((out[0] != 0).any(dim=0), expected)
    assert torch.equal(out[0, :, 6, 4], RED)  # keypoint 0 in the colour of label 1


def _cell(picture, row, column, n_columns, h, w, **labels):
    top, left = cell_origin(row, column, h, w, n_columns, **labels)
    return torch.from_numpy(picture[top:top + h, left:left + w].copy()).permute(2, 0, 1)


def test_show_draws_the_targets_where_the_augmentation_moved_them(tmp_path):
    x = torch.full((2, 3, 20, 24), 128, dtype=torch.uint8)
    boxes = torch.tensor([[[2.0, 3.0, 10.0, 8.0]], [[2.0, 3.0, 10.0, 8.0]]])
    keys = torch.tensor([[5, 6]])
    path = batchaug.show(batchaug.RandomHorizontalFlip(p=1.0), x, tmp_path / "g.png", draws=1,
                         seed=0, targets={"boxes": boxes, "box_labels": torch.tensor([[3], [3]])})
    picture = np.asarray(Image.open(path))
    yellow = (YELLOW * 255).round().to(torch.uint8).view(3, 1)
    for column, (x0, x1) in enumerate([(2, 9), (14, 21)]):  # flipped: x -> 24 - x
        cell = _cell(picture, 0, column, 2, 20, 24)
        edge = _box_outline(20, 24, x0, 3, x1, 7)
        assert torch.equal((cell != 128).any(dim=0), edge), column
        assert torch.equal(cell[:, edge], yellow.expand(3, int(edge.sum())))
    # keyed columns go through with_targets with each row of keys, and the train/eval mode
    # of the module is restored
    flip = batchaug.RandomHorizontalFlip(p=0.5).eval()
    batchaug.show(flip, x, tmp_path / "k.png", keys=keys, targets={"boxes": boxes})
    assert not flip.training
    with pytest.raises(TypeError, match="targets need an augment with with_targets"):
        batchaug.show(torch.nn.Identity(), x, tmp_path / "i.png", targets={"boxes": boxes})
    with pytest.raises(ValueError, match="unknown key 'mask'"):
        batchaug.show(flip, x, tmp_path / "i.png", targets={"mask": boxes})


def test_row_labels_without_per_image_labels():
    assert cell_labels([3, 7], None, None, None, 1) == (["#3", "#7"], ["original", "draw 1"])


def _target_cache(path, kind):
    from batchaug.data import DeviceCache

    g = torch.Generator().manual_seed(0)
    x = torch.full((6, 3, 24, 24), 128, dtype=torch.uint8)
    if kind == "masks":
        masks = torch.zeros(6, 24, 24, dtype=torch.uint8)
        masks[:, 4:12, 6:18] = 1
        masks[:, 16:20, 2:8] = 2
        cache = DeviceCache.from_tensors(x, None, device="cpu", masks=masks)
    else:
        boxes = torch.tensor([[2.0, 3.0, 10.0, 8.0], [12.0, 12.0, 20.0, 22.0]]).expand(6, 2, 4)
        cache = DeviceCache.from_tensors(x, torch.randint(0, 3, (6,), generator=g), device="cpu",
                                         classes=["a", "b", "c"], boxes=boxes.clone(),
                                         box_labels=torch.tensor([[1, 2]]).expand(6, 2).clone())
    cache.save(path)
    return path


@pytest.mark.parametrize("kind", ["masks", "boxes"])
def test_show_command_draws_a_target_caches_masks_or_boxes(tmp_path, capsys, kind):
    cache = _target_cache(tmp_path / "cache", kind)
    out = tmp_path / "g.png"
    assert main(["show", str(cache), "--out", str(out), "--recipe", "cifar10", "--index", "0",
                 "4", "--draws", "2", "--seed", "1"]) == 0
    text = capsys.readouterr().out
    assert f"with its {kind} drawn" in text, text
    rows = text.split("rows: ")[1].strip().split(", ")
    assert rows == (["#0", "#4"] if kind == "masks" else [f"#0 {rows[0][3:]}", f"#4 {rows[1][3:]}"])
    picture = np.asarray(Image.open(out))
    plain = tmp_path / "plain.png"
    assert main(["show", str(cache), "--out", str(plain), "--recipe", "cifar10", "--index", "0",
                 "4", "--draws", "2", "--seed", "1", "--no-targets"]) == 0
    assert "drawn" not in capsys.readouterr().out
    plain_picture = np.asarray(Image.open(plain))
    assert picture.shape == plain_picture.shape
    # the original cells (first column) differ from the plain ones exactly where the targets
    # are drawn: the mask's labelled pixels, or the two boxes' outlines
    if kind == "masks":
        expected = torch.zeros(24, 24, dtype=torch.bool)
        expected[4:12, 6:18] = True
        expected[16:20, 2:8] = True
    else:
        expected = _box_outline(24, 24, 2, 3, 9, 7) | _box_outline(24, 24, 12, 12, 19, 21)
    diff = torch.from_numpy((picture != plain_picture).any(axis=2))
    cols = ["original", "draw 1", "draw 2"]
    for row in range(2):
        top, left = cell_origin(row, 0, 24, 24, 3, row_labels=rows, column_labels=cols)
        assert torch.equal(diff[top:top + 24, left:left + 24], expected), row
    # the augmented columns have the targets drawn too (moved with the crop and flip)
    top, left = cell_origin(0, 1, 24, 24, 3, row_labels=rows, column_labels=cols)
    assert diff[top:, left:].sum() > expected.sum()


class _RaggedMasks(torch.utils.data.Dataset):
    """Grey images of different sizes, each with a labelled rectangle in its mask."""

    def __len__(self):
        return 4

    def __getitem__(self, i):
        h, w = 20 + 3 * i, 30 - 2 * i
        mask = torch.zeros(h, w, dtype=torch.uint8)
        mask[4:10, 5 + i:15 + i] = 1 + i % 3
        return torch.full((3, h, w), 128, dtype=torch.uint8), mask


def test_show_command_draws_a_ragged_caches_masks_at_each_images_own_size(tmp_path, capsys):
    from batchaug.data import DeviceCache

    DeviceCache.from_dataset(_RaggedMasks(), device="cpu").save(tmp_path / "cache")
    pictures = []
    for extra in ([], ["--no-targets"]):
        out = tmp_path / f"g{len(extra)}.png"
        assert main(["show", str(tmp_path / "cache"), "--out", str(out), "--recipe", "cifar10",
                     "--index", "0", "3", "--draws", "1", "--crop", "30", *extra]) == 0
        text = capsys.readouterr().out
        assert "largest centred square, resized to 30x30" in text, text
        assert ("with its masks drawn" in text) != bool(extra)
        pictures.append(np.asarray(Image.open(out)))
    diff = torch.from_numpy((pictures[0] != pictures[1]).any(axis=2))
    # the first column: each stored image at its own size (20x30, 29x24), not squared, centred
    # in a 30x30 cell (the crop's side, the largest of all cells), its mask drawn exactly
    for row, i in enumerate([0, 3]):
        mask = _RaggedMasks()[i][1]
        h, w = mask.shape
        top, left = cell_origin(row, 0, 30, 30, 2, row_labels=["#0", "#3"],
                                column_labels=["original", "draw 1"])
        expected = torch.zeros(30, 30, dtype=torch.bool)
        expected[(30 - h) // 2:(30 - h) // 2 + h, (30 - w) // 2:(30 - w) // 2 + w] = mask != 0
        assert torch.equal(diff[top:top + 30, left:left + 30], expected), i
