"""The documentation site: it builds with warnings as errors, the API reference lists every public
name, the gallery's registry holds every transform (and its script draws them), and no page or
docstring speaks of the project's own process."""
from __future__ import annotations

import ast
import importlib.util
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import batchaug
import batchaug.data
import batchaug.functional
from batchaug import errors

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _gallery():
    spec = importlib.util.spec_from_file_location("batchaug_docs_gallery", DOCS / "gallery.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_build_with_warnings_as_errors(tmp_path):
    pytest.importorskip("sphinx")  # the docs extra; `make test` installs it
    pytest.importorskip("myst_parser")
    pytest.importorskip("furo")
    env = dict(os.environ, BATCHAUG_DOCS_GALLERY="skip", PYTHONPATH=str(ROOT))
    start = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
                          "-d", str(tmp_path / "doctrees"), str(DOCS), str(tmp_path / "html")],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    seconds = time.perf_counter() - start
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-8000:]
    html = tmp_path / "html"
    for page in ("index", "start", "migrating", "semantics", "prefix", "augmentation", "data",
                 "performance", "development", "gallery", "api/transforms", "api/functional"):
        assert (html / f"{page}.html").exists(), page
    # the reference is generated from the docstrings: a class page holds its docstring's words
    rotation = (html / "api/generated/batchaug.RandomRotation.html").read_text()
    first_line = batchaug.RandomRotation.__doc__.strip().splitlines()[0]
    assert " ".join(first_line.split()[:5]) in rotation, first_line
    assert "make_params" in rotation and "register_forward_hook" not in rotation
    # a member from a private base (_Container, _BlendsChains) is the class's own to a reader;
    # one from a public base (Transform.is_identity) is on that base's page
    for name in ("RandomApply", "RandomOrder", "AugMix", "TimmAugMix"):
        page = (html / f"api/generated/batchaug.{name}.html").read_text()
        assert f'id="batchaug.{name}.with_targets"' in page, name
        assert f'id="batchaug.{name}.is_identity"' not in page, name
    print(f"docs built in {seconds:.1f} s")


def _documented_names() -> set:
    names = set()
    for page in (DOCS / "api").glob("*.md"):
        names |= set(re.findall(r"^   (\w+)$", page.read_text(), re.M))
    return names


def test_every_public_name_is_in_the_api_reference():
    documented = _documented_names()
    modules = {"recipes", "errors"}  # pages of their own: api/prefix.md, api/errors.md
    for owner, names in [("batchaug", set(batchaug.__all__) - modules),
                         ("batchaug.functional", batchaug.functional.__all__),
                         ("batchaug.data", batchaug.data.__all__),
                         ("batchaug.errors", errors.__all__)]:
        missing = sorted(set(names) - documented)
        assert not missing, f"{owner}: not in docs/api/*.md: {missing}"
    for name in batchaug.recipes.names():
        if not name.startswith("_") and hasattr(batchaug.recipes, name):
            assert name in documented, f"recipes.{name} not in docs/api/prefix.md"


def test_gallery_registry_holds_every_exported_transform():
    gallery = _gallery()
    missing = sorted(set(batchaug.transforms.__all__) - set(gallery.TRANSFORMS))
    assert not missing, f"add these to TRANSFORMS in docs/gallery.py: {missing}"
    assert not set(gallery.TRANSFORMS) - set(batchaug.transforms.__all__)
    with pytest.raises(ValueError, match="not in the gallery registry"):
        gallery.make(["NoSuchTransform"])


def test_gallery_script_draws_a_transform_and_a_recipe(tmp_path, monkeypatch):
    pytest.importorskip("skimage")  # the docs extra (sample photographs, bundled, no download)
    from PIL import Image
    import numpy as np

    gallery = _gallery()
    monkeypatch.setattr(gallery, "OUT", tmp_path)
    written = gallery.make(["RandomRotation", "cifar10"])
    assert [p.name for p in written] == ["RandomRotation.png", "cifar10.png"]
    for path in written:
        grid = np.asarray(Image.open(path))
        n, cols = len(gallery.PHOTOS), gallery.DRAWS + 1
        assert grid.shape[0] >= n * 32 and grid.shape[1] >= cols * 32
        # the columns differ from the original: the picture shows the transform acting
        cell = grid.shape[1] // cols
        original = grid[:, :cell].astype(int)
        assert any(np.abs(grid[:, j * cell:(j + 1) * cell].astype(int) - original).mean() > 1
                   for j in range(1, cols))
    page = tmp_path / "gallery.md"
    gallery.write_page(page)
    text = page.read_text()
    assert "_gallery/RandomRotation.png" in text and "_gallery/cifar10.png" in text
    assert "pictures are not built here" in text  # the others were not drawn


def test_gallery_timm_mixup_pairs_each_photo_with_another():
    """timm pairs sample i with N - 1 - i: on the gallery's three photos the middle one met
    itself. The gallery's row mixes each photo with the next one, never with itself."""
    gallery = _gallery()
    module, _ = gallery.TRANSFORMS["TimmMixup"]
    shades = torch.tensor([0.0, 0.35, 0.9])
    x = shades.view(3, 1, 1, 1).expand(3, 3, 8, 8).clone()
    torch.manual_seed(0)
    out = module()(x)
    for i in range(3):
        lo, hi = sorted((float(shades[i]), float(shades[(i + 1) % 3])))
        assert out[i].min() >= lo - 1e-6 and out[i].max() <= hi + 1e-6, i
        assert not torch.equal(out[i], x[i]), i  # mixed with another photo


def test_gallery_has_a_masks_and_boxes_row(tmp_path, monkeypatch):
    """The gallery shows targets moving with the pixels: its row is drawn with masks and boxes
    (the augmented cells differ from the same draws without targets) and is on the page."""
    pytest.importorskip("skimage")
    from PIL import Image
    import numpy as np

    gallery = _gallery()
    monkeypatch.setattr(gallery, "OUT", tmp_path)
    (path,) = gallery.make(["masks_and_boxes"])
    with_targets = np.asarray(Image.open(path)).astype(int)
    plain = batchaug.show(gallery.TARGETS["masks_and_boxes"][0](), gallery.photographs(),
                          tmp_path / "plain.png", draws=gallery.DRAWS, seed=gallery.SEED)
    without = np.asarray(Image.open(plain)).astype(int)
    assert with_targets.shape == without.shape
    assert np.abs(with_targets - without).mean() > 5  # the overlay and the boxes
    page = tmp_path / "gallery.md"
    gallery.write_page(page)
    assert "## Masks and boxes" in page.read_text()
    assert "_gallery/masks_and_boxes.png" in page.read_text()


# Words about the project's own process (issue numbers, targets, internal paths, the team),
# which users cannot act on. Checked in the docs and every docstring.
PROCESS = re.compile(
    r"\bissues? ?#?\d+|\bthe issue\b|\bissue's\b|\bshared/|/tmp/batchaug|\bproject's\b"
    r"|\(target:|\btargets? \(>=|\bagainst the targets\b|\bengineers?\b|\bproject notes\b"
    r"|\bthis work\b|\bwas lent\b|\.ci/|\bthe lead\b|\bhelpers? H\d", re.I)


def _offences(text: str, where: str) -> list:
    return [f"{where}: ...{text[max(0, m.start() - 50):m.end() + 30]!r}..."
            for m in PROCESS.finditer(text)]


def test_no_process_words_in_docs():
    found = []
    for path in sorted(DOCS.rglob("*")):
        if path.suffix in (".md", ".py", ".rst") and "_build" not in path.parts \
                and "generated" not in path.parts:
            found += _offences(path.read_text(), str(path.relative_to(ROOT)))
    assert not found, "\n".join(found)


def test_no_process_words_in_docstrings():
    found = []
    for path in sorted((ROOT / "batchaug").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc:
                    found += _offences(doc, f"{path.relative_to(ROOT)}:{getattr(node, 'name', '')}")
    assert not found, "\n".join(found)


def test_the_grep_catches_process_words():
    for text in ("see issue 8", "the issue's target", "shared/seeds/003", "(target: 2x)",
                 "four other engineers' tests", "flock /tmp/batchaug-bench.lock"):
        assert _offences(text, "x"), text
    for text in ("(images, targets)", "F.cross_entropy(logits, targets)", "a symlink's target",
                 "the target device"):
        assert not _offences(text, "x"), text


def test_no_process_words_in_readme():
    found = _offences((ROOT / "README.md").read_text(), "README.md")
    assert not found, "\n".join(found)


def _github_slug(heading: str) -> str:
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_readme_links_resolve():
    text = (ROOT / "README.md").read_text()
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    anchors = {_github_slug(h) for h in re.findall(r"^#{1,6} (.+)$", prose, re.M)}
    bad = []
    for target in re.findall(r"\]\(([^)\s]+)\)", prose):
        if re.match(r"[a-z]+://", target):
            continue  # no network in the tests
        path, _, anchor = target.partition("#")
        if path and not (ROOT / path).exists():
            bad.append(f"{target}: no file {path}")
        elif not path and anchor not in anchors:
            bad.append(f"{target}: no heading with that anchor")
    assert not bad, "\n".join(bad)


def test_readme_first_example_runs(tmp_path):
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, "the README has no Python example"
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    run = subprocess.run([sys.executable, "-c", blocks[0]], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
