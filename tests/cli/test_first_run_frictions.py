"""What new users met on a first run (issue 39): the words of `cache build` from tar shards,
`cache info` on a cache of the files' own bytes, `show`'s row labels without class names, the
bench picture's labels, and the error for a tar member whose name has a second dot."""
import io
import tarfile

import pytest
import torch
from PIL import Image

from batchaug.cli import main as cli_main
from batchaug.picture import cell_labels


def _jpeg(seed, h, w):
    g = torch.Generator().manual_seed(seed)
    arr = torch.randint(0, 256, (h, w, 3), generator=g, dtype=torch.uint8).numpy()
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def _shard(path, names):
    with tarfile.open(path, "w") as tar:
        for k, (image, cls) in enumerate(names):
            for name, blob in ((image, _jpeg(k, 20 + k, 30)), (cls, str(k % 2).encode())):
                info = tarfile.TarInfo(name)
                info.size = len(blob)
                tar.addfile(info, io.BytesIO(blob))
    return path


def test_cache_build_from_tar_shards_says_the_labels_have_no_names(tmp_path, capsys):
    shard = _shard(tmp_path / "s-000.tar", [(f"k{k}.jpg", f"k{k}.cls") for k in range(4)])
    assert cli_main(["cache", "build", str(shard), str(tmp_path / "c"), "--storage", "jpeg",
                     "--no-shuffle"]) == 0
    out = capsys.readouterr().out
    assert "? classes" not in out
    assert "2 labels (no class names)" in out


def test_cache_info_of_the_files_own_bytes_names_no_quality(tmp_path, capsys):
    shard = _shard(tmp_path / "s-000.tar", [(f"k{k}.jpg", f"k{k}.cls") for k in range(4)])
    assert cli_main(["cache", "build", str(shard), str(tmp_path / "c"), "--storage", "jpeg",
                     "--no-shuffle"]) == 0
    capsys.readouterr()
    assert cli_main(["cache", "info", str(tmp_path / "c")]) == 0
    out = capsys.readouterr().out
    assert "q90" not in out
    assert "stored jpeg (each the source file's own bytes" in out


def test_tar_member_with_a_second_dot_is_named(tmp_path):
    from batchaug.data import TarShards

    shard = _shard(tmp_path / "s-000.tar", [("x.v1.jpg", "x.v1.cls")])
    with pytest.raises(ValueError) as info:
        TarShards(str(shard))
    text = str(info.value)
    assert "'x.v1.jpg'" in text and "key 'x'" in text and "first dot" in text


def test_show_rows_without_class_names_say_label():
    rows, _ = cell_labels([0, 7], [0, 3], None, None, 2)
    assert rows == ["#0 label 0", "#7 label 3"]
    rows, _ = cell_labels([0], [1], ["cat", "dog"], None, 2)
    assert rows == ["#0 dog"]


def _results(n_contenders):
    keys = ["torchvision_w0", "torchvision_w2", "torchvision_w4", "torchvision_v2_batch",
            "torchvision_v2_per_sample", "kornia", "batchaug", "dali_cpu"][:n_contenders]
    entries = [{"key": k, "per_sample": True,
                "by_threads": {"1": {"images_per_s": 1000.0 * (i + 1)},
                               "2": {"images_per_s": 1500.0 * (i + 1)}}}
               for i, k in enumerate(keys)]
    return {"recipes": [{"name": "photos", "contenders": entries}], "thread_counts": [1, 2],
            "device": "cpu", "batch_size": 64, "rounds": 3}


@pytest.mark.parametrize("n", [4, 8])
def test_bench_picture_x_labels_do_not_overlap(n):
    from batchaug.bench.report import figure

    fig = figure(_results(n))
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        boxes = [t.get_window_extent(renderer) for t in ax.get_xticklabels() if t.get_text()]
        assert len(boxes) == n
        for a, b in zip(boxes, boxes[1:]):
            assert a.x1 <= b.x0, (a, b)


def _photos_cache(path, sizes, storage):
    from batchaug import DeviceCache

    g = torch.Generator().manual_seed(0)
    data = [(torch.randint(0, 256, (3, h, w), dtype=torch.uint8, generator=g), 0)
            for h, w in sizes]
    DeviceCache.from_dataset(data, device="cpu", storage=storage, progress=False).save(path)


def test_cache_info_suggests_a_faster_storage_where_one_clearly_is(tmp_path, capsys):
    _photos_cache(tmp_path / "jpeg", [(40, 60), (50, 30)], "jpeg")
    _photos_cache(tmp_path / "big", [(300, 400), (420, 280), (350, 350)], "raw")
    _photos_cache(tmp_path / "small", [(120, 160), (100, 90)], "raw")
    said = {}
    for name in ("jpeg", "big", "small"):
        assert cli_main(["cache", "info", str(tmp_path / name)]) == 0
        said[name] = [line for line in capsys.readouterr().out.splitlines()
                      if line.startswith("speed:")]
    assert len(said["jpeg"]) == 1 and "raw storage" in said["jpeg"][0]
    assert "faster" in said["jpeg"][0] and "Which storage wins when" in said["jpeg"][0]
    assert len(said["big"]) == 1 and "--resize 256" in said["big"][0]
    assert "shorter side is 300 px (median)" in said["big"][0]
    assert said["small"] == []  # nothing clearly faster: no suggestion
