"""benchmarks/bench_photos.py: the photo set, the stored forms, the padded batches, the report."""
import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("skimage")  # in the test extra; the benchmark's photo source
PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_photos.py"


@pytest.fixture(scope="module")
def bp():
    spec = importlib.util.spec_from_file_location("bench_photos", PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


def test_photo_set_has_varied_sizes_and_stored_forms(bp, tmp_path):
    paths = bp.make_photo_folder(str(tmp_path), 10)
    assert len(paths) == 10 and all(Path(p).suffix == ".jpg" for p in paths)
    ragged, fixed = bp.stored_images(paths)
    shapes = {tuple(r.shape[1:]) for r in ragged}
    assert len(shapes) > 5  # different sizes and aspects
    assert all(min(r.shape[1:]) == 256 for r in ragged)
    assert all(tuple(f.shape) == (3, 256, 256) for f in fixed)
    canvas, sizes = bp.padded_batch(ragged[:4])
    for i, r in enumerate(ragged[:4]):
        assert sizes[i].tolist() == list(r.shape[1:])
        assert torch.equal(canvas[i, :, :r.shape[1], :r.shape[2]], r)


def test_report_runs_end_to_end(bp, tmp_path, capsys):
    out = tmp_path / "r.json"
    bp.main(["--images", "8", "--batch", "4", "--batches", "1", "--rounds", "1",
             "--window", "0.05", "--threads", "1", "--json", str(out)])
    text = capsys.readouterr().out
    assert "(a) bytes per image" in text and "| rrc | 1 |" in text
    assert "| rotation_rrc | 1 |" in text
    report = json.loads(out.read_text())
    assert 0 < report["bytes"]["jpeg_over_raw"] < 1
    assert set(report["crop"]) == {"rrc", "rotation_rrc"}
