"""Move the flat tests/ into packages a reader can navigate (issue 29 item 6), and fix what points
at the old places.

    python tools/reorganise_tests.py            # move, rewrite, print what it did
    python tools/reorganise_tests.py --dry-run  # print what it would do, change nothing

The layout (one folder per part of the library, a docstring in each ``__init__.py``)::

    tests/conftest.py       hypothesis profiles, the ``device`` fixture, DEVICES
    tests/contract/         the transform contract (cases.py, references.py, checks.py, sync.py,
                            targets.py; ``__init__.py`` re-exports them), fake_cuda.py,
                            tolerances.py, timm_reference.py, and the tests that run them on
                            every transform
    tests/transforms/       kernels, modules, containers, targets, keyed draws
    tests/data/             cache, storage, writer, loader and its crop stage, resume
    tests/cli/              the command line and ``show``
    tests/bench/            the benchmarks' own tests
    tests/integrations/     timm, torchvision migration, Lightning, Accelerate
    tests/docs/             the documentation site, its snippets, the examples
    tests/api/              the public surface and the import graph

Every folder is a package (``tests/__init__.py`` too), so pytest imports ``tests.data.test_loader``
with the repository root on ``sys.path``: two folders may hold files of the same name, and
``python -m pytest``, ``pytest tests/data/test_loader.py`` and ``pytest tests/data`` all work.
Helpers are imported by their package path: ``from tests.contract import CASES``,
``from tests.contract.fake_cuda import fake_cuda``.

Files are mapped by the explicit ``TABLE`` first, then by the name rules in ``PATTERNS``; a test
file that neither knows stays in tests/ (still collected, its imports still fixed) and is printed,
so that a new file is placed by a person, not by a guess. Run it again after adding rows: it is
idempotent (a second run changes nothing). The rewrites are textual:

- imports of the helpers and of other test modules (``from contract import`` ->
  ``from tests.contract import``; ``from test_mix import`` -> ``from tests.transforms.test_mix
  import``), except a module importing itself (a subprocess that puts the file's own folder on
  ``sys.path`` and imports it by name: the file moved with its folder entry, so that still works);
- in a file moved one folder down, the ``__file__`` idioms that reach the repository root
  (``Path(__file__).resolve().parent.parent``, ``.parents[1]``, ``os.path.dirname`` twice);
  ``Path(__file__).parent / "NAME"`` for a NAME that stays at the top of tests/ (a fixtures
  folder) becomes ``.parents[1] / "NAME"``; any other ``__file__`` use in a moved file is
  printed for a look;
- every tracked text file's ``tests/NAME.py`` paths (docs, tools/mutation.py's selections,
  comments) to the file's new place.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"

# Each package's __init__.py docstring: what a reader finds there.
PACKAGES: Dict[str, str] = {
    # the flat tests/contract.py moves to its __init__.py; it was split by hand afterwards into
    # cases/references/checks/sync/targets.py, which that __init__.py re-exports
    "contract": None,
    "transforms": "Kernels and transform modules against torchvision references: geometry, colour, "
                  "policies, mixers, containers, targets (masks, boxes, keypoints), sizes and "
                  "keyed draws.",
    "data": "The data path: DeviceCache and its storage (fixed, ragged, JPEG), the writer, "
            "placements, the DeviceLoader and its crop stage, resume, distributed runs.",
    "cli": "The command line (`batchaug cache`, `batchaug bench`, `batchaug show`) and "
           "batchaug.show's pictures.",
    "bench": "The benchmarks' own rules (benchmarks/ and `batchaug bench`): equal windows, "
             "contenders doing the same job, each script's quick mode.",
    "integrations": "Other libraries: timm equivalents against timm, from_torchvision, "
                    "PyTorch Lightning and Accelerate.",
    "docs": "The documentation site builds, its snippets run and say what they do; the examples "
            "run.",
    "api": "The public surface: exported names, argument types, where the exceptions live, and "
           "the import graph (no circle).",
}
TESTS_INIT = ('"""batchaug\'s tests. One package per part of the library (see each '
              '__init__.py); shared\nsettings in conftest.py, the transform contract and its '
              'helpers in tests/contract/."""\n')

# Helpers: old name in tests/ -> new path under tests/.
HELPERS: Dict[str, str] = {
    "contract.py": "contract/__init__.py",
    "fake_cuda.py": "contract/fake_cuda.py",
    "tolerances.py": "contract/tolerances.py",
    "timm_reference.py": "contract/timm_reference.py",
    "loader_crop.py": "data/loader_crop.py",
}
# Helper module name -> its import path now.
HELPER_MODULES = {"contract": "tests.contract", "fake_cuda": "tests.contract.fake_cuda",
                  "tolerances": "tests.contract.tolerances",
                  "timm_reference": "tests.contract.timm_reference",
                  "loader_crop": "tests.data.loader_crop",
                  "conftest": "tests.conftest"}

TABLE: Dict[str, str] = {
    # the contract, run on every transform case
    "test_contract.py": "contract", "test_contract_targets.py": "contract",
    "test_fake_cuda_contract.py": "contract", "test_fake_cuda_probe.py": "contract",
    "test_arguments.py": "contract", "test_export_dynamic.py": "contract",
    "test_compose_export.py": "contract", "test_gradients.py": "contract",
    # transforms and their kernels
    "test_affine.py": "transforms", "test_auto_augment.py": "transforms",
    "test_color.py": "transforms", "test_container.py": "transforms",
    "test_container_targets.py": "transforms", "test_dtypes.py": "transforms",
    "test_functional_basic.py": "transforms", "test_fused.py": "transforms",
    "test_geometry_targets.py": "transforms", "test_keyed.py": "transforms",
    "test_misc.py": "transforms", "test_mix.py": "transforms", "test_perspective.py": "transforms",
    "test_photometric_targets.py": "transforms", "test_policy_targets.py": "transforms",
    "test_random.py": "transforms", "test_sizes.py": "transforms",
    "test_target_fast_paths.py": "transforms", "test_targets.py": "transforms",
    "test_transforms_basic.py": "transforms", "test_warp.py": "transforms",
    "test_warp_targets.py": "transforms", "test_cuda_graph.py": "transforms",
    "test_chunk_policy.py": "transforms",
    # the data path
    "test_cache.py": "data", "test_cache_targets.py": "data", "test_chunked_io.py": "data",
    "test_ragged_cache.py": "data", "test_crop.py": "data", "test_crop_masks.py": "data",
    "test_distributed.py": "data", "test_ingest.py": "data", "test_loader.py": "data",
    "test_loader_fake_cuda.py": "data", "test_original_jpeg.py": "data",
    "test_placement.py": "data", "test_ragged_boxes.py": "data", "test_ragged_kernels.py": "data",
    "test_resume.py": "data", "test_roi_decode.py": "data", "test_save_crash.py": "data",
    "test_sources.py": "data", "test_stall.py": "data", "test_writer.py": "data",
    "test_cache_fixtures.py": "data", "test_roi_crop.py": "data",
    # the command line
    "test_cli_bench.py": "cli", "test_cli_cache.py": "cli", "test_cli_errors.py": "cli",
    "test_recipes_show.py": "cli", "test_show_targets.py": "cli",
    "test_show_pipeline.py": "cli",
    # benchmarks
    "test_bench_contenders.py": "bench", "test_bench_launches.py": "bench",
    "test_bench_photos.py": "bench", "test_bench_targets.py": "bench",
    "test_bench_timing.py": "bench", "test_bench_transforms_script.py": "bench",
    "test_gpu_bench.py": "bench",
    # other libraries
    "test_timm.py": "integrations", "test_migrate.py": "integrations",
    "test_lightning.py": "integrations", "test_accelerate.py": "integrations",
    # documentation and examples
    "test_docs.py": "docs", "test_docs_targets.py": "docs", "test_examples.py": "docs",
    # the public surface
    "test_public_api.py": "api", "test_imports.py": "api",
}
# For files the table does not name (new ones), first match wins; none: stays in tests/.
PATTERNS: List[Tuple[str, str]] = [
    (r"test_contract", "contract"), (r"test_fake_cuda", "contract"),
    (r"test_cli|test_show|show", "cli"),
    (r"test_bench|bench", "bench"),
    (r"test_docs|test_examples", "docs"),
    (r"test_(timm|lightning|accelerate|migrat)", "integrations"),
    (r"test_(cache|loader|writer|compact|crop|ragged|storage|column|format|prefetch|placement|"
     r"jpeg|roi|decode|resume|order|ingest|source)", "data"),
    (r"test_(functional|transforms|warp|geometry|color|colour|policy|auto_augment|mix|container|"
     r"targets|keyed|random)", "transforms"),
]

TEXT_SUFFIXES = {".py", ".md", ".rst", ".txt", ".toml", ".cfg", ".ini", ".sh", ".yml", ".yaml"}
TEXT_NAMES = {"Makefile", "run"}


def package_for(name: str) -> Optional[str]:
    if name in TABLE:
        return TABLE[name]
    for pattern, package in PATTERNS:
        if re.search(pattern, name):
            return package
    return None


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True,
                          text=True).stdout


def tracked_text_files() -> List[Path]:
    out = []
    for rel in git("ls-files", "-z").split("\0"):
        if not rel:
            continue
        p = ROOT / rel
        if p.is_file() and (p.suffix in TEXT_SUFFIXES or p.name in TEXT_NAMES):
            out.append(p)
    # files created by this run are not tracked yet
    out += [p for p in TESTS.rglob("*.py") if p not in out]
    return out


def deeper(text: str, top: List[str]) -> str:
    """The repository-root idioms of a file moved one folder down, and its references to what
    stays at the top of tests/ (``top``: e.g. a fixtures folder) through ``Path(__file__)``."""
    # parents[N] first: the .parent.parent rewrite below writes a parents[2]
    text = re.sub(r"(Path\(__file__\)(?:\.resolve\(\))?\.parents\[)(\d+)\]",
                  lambda m: f"{m.group(1)}{int(m.group(2)) + 1}]", text)
    text = re.sub(r"Path\(__file__\)(\.resolve\(\))?\.parent\.parent(?!\.parent)",
                  r"Path(__file__)\1.parents[2]", text)
    text = re.sub(r"os\.path\.dirname\(os\.path\.dirname\(os\.path\.abspath\(__file__\)\)\)",
                  "os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))",
                  text)
    # last: the parents[1] written here is not to be bumped again
    for name in top:
        text = re.sub(r"Path\(__file__\)(\.resolve\(\))?\.parent \/ ([\"'])" + re.escape(name)
                      + r"\2", lambda m: f"Path(__file__){m.group(1) or ''}.parents[1] / "
                      f"{m.group(2)}{name}{m.group(2)}", text)
    return text


def fix_imports(text: str, own: str, test_modules: Dict[str, str]) -> str:
    def helper(m: re.Match) -> str:
        indent, name, rest = m.group(1), m.group(2), m.group(3)
        return f"{indent}from {HELPER_MODULES[name]} import{rest}"

    names = "|".join(HELPER_MODULES)
    text = re.sub(rf"^([ \t]*)from ({names}) import(\b.*)$", helper, text, flags=re.M)
    # `import contract` / `import timm_reference as x` -> from the package
    def plain(m: re.Match) -> str:
        indent, name, alias = m.group(1), m.group(2), m.group(3) or ""
        parent, _, leaf = HELPER_MODULES[name].rpartition(".")
        return f"{indent}from {parent} import {leaf}{alias}"

    text = re.sub(rf"^([ \t]*)import ({names})( as \w+)?[ \t]*$", plain, text, flags=re.M)

    def test_module(m: re.Match) -> str:
        indent, name, rest = m.group(1), m.group(2), m.group(3)
        if name == own or name not in test_modules:
            return m.group(0)
        return f"{indent}from {test_modules[name]} import{rest}"

    return re.sub(r"^([ \t]*)from (test_\w+) import(\b.*)$", test_module, text, flags=re.M)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    args = ap.parse_args(argv)
    dry = args.dry_run
    notes: List[str] = []

    def move(src: Path, dst: Path) -> None:
        print(f"move {src.relative_to(ROOT)} -> {dst.relative_to(ROOT)}")
        if not dry:
            dst.parent.mkdir(parents=True, exist_ok=True)
            git("mv", str(src.relative_to(ROOT)), str(dst.relative_to(ROOT)))

    def write(path: Path, text: str) -> None:
        print(f"write {path.relative_to(ROOT)}")
        if not dry:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            git("add", str(path.relative_to(ROOT)))  # the layout commit is then `git commit`

    def rewrite(path: Path, text: str, new: str, what: str) -> None:
        print(f"rewrite {what} in {path.relative_to(ROOT)}")
        if dry:
            return
        path.write_text(new)
        git("add", str(path.relative_to(ROOT)))
        old_long = sum(len(line) > 100 for line in text.splitlines())
        now_long = [i for i, line in enumerate(new.splitlines(), 1) if len(line) > 100]
        if path.suffix == ".py" and len(now_long) > old_long:
            notes.append(f"{path.relative_to(ROOT)}: lines over 100 characters now: {now_long}")

    # 1. the helpers, then the packages' __init__.py
    for old, new in HELPERS.items():
        src, dst = TESTS / old, TESTS / new
        if src.exists() and dst.exists():
            notes.append(f"both {src.relative_to(ROOT)} and {dst.relative_to(ROOT)} exist: "
                         "merge them by hand")
        elif src.exists():
            move(src, dst)
    if not (TESTS / "__init__.py").exists():
        write(TESTS / "__init__.py", TESTS_INIT)
    for package, doc in PACKAGES.items():
        init = TESTS / package / "__init__.py"
        if doc is not None and not init.exists():
            write(init, f'"""{doc}"""\n')

    # 2. the test files at the top of tests/
    moved: List[Path] = []
    left: List[str] = []
    for src in sorted(TESTS.glob("test_*.py")):
        package = package_for(src.name)
        if package is None:
            left.append(src.name)
            continue
        dst = TESTS / package / src.name
        if dst.exists():
            notes.append(f"{src.relative_to(ROOT)} not moved: {dst.relative_to(ROOT)} exists")
            continue
        move(src, dst)
        moved.append(dst if not dry else src)

    # Where every test module and helper is now (after the moves), by file name.
    places: Dict[str, List[Path]] = {}
    for p in TESTS.rglob("*.py"):
        places.setdefault(p.name, []).append(p)
    if dry:  # the planned places
        for src in sorted(TESTS.glob("test_*.py")):
            package = package_for(src.name)
            if package is not None:
                places[src.name] = [TESTS / package / src.name]
        for old, new in HELPERS.items():
            if (TESTS / old).exists():
                places[old] = [TESTS / new]
    test_modules: Dict[str, str] = {}
    for name, paths in places.items():
        if name.startswith("test_") and len(paths) == 1:
            rel = paths[0].relative_to(ROOT).with_suffix("")
            test_modules[paths[0].stem] = ".".join(rel.parts)

    # 3. imports in every file under tests/, root idioms in the moved ones
    if not dry:
        for path in sorted(TESTS.rglob("*.py")):
            text = path.read_text()
            new = fix_imports(text, path.stem, test_modules)
            if path in moved:
                top = [p.name for p in TESTS.iterdir() if p.name not in PACKAGES
                       and not p.name.startswith(("test_", "__")) and p.suffix != ".py"]
                new = deeper(new, top)
            if new != text:
                rewrite(path, text, new, "imports/paths")
        for path in moved:
            for i, line in enumerate(path.read_text().splitlines(), 1):
                if re.search(r"(?<![\w.])__file__", line) and "parents[" not in line \
                        and "dirname(os.path.dirname(" not in line:
                    notes.append(f"check {path.relative_to(ROOT)}:{i} (relative to its own "
                                 f"folder, which moved): {line.strip()}")

    # 4. `tests/NAME.py` in every tracked text file -> its new place
    old_to_new: Dict[str, str] = {}
    for old, new in HELPERS.items():
        # the contract is its package: "the contract (tests/contract/)"
        old_to_new[f"tests/{old}"] = f"tests/{new}".replace("/__init__.py", "/")
    for name, paths in places.items():
        if not name.startswith("test_"):
            continue
        if len(paths) > 1:
            notes.append(f"{name} is in {len(paths)} folders: references to tests/{name} left")
            continue
        rel = paths[0].relative_to(ROOT).as_posix()
        if rel != f"tests/{name}":
            old_to_new[f"tests/{name}"] = rel
    if old_to_new:
        pattern = re.compile(r"(?<![\w/.-])(" + "|".join(map(re.escape, sorted(
            old_to_new, key=len, reverse=True))) + r")(?![\w])")
        for path in tracked_text_files():
            if path.resolve() == Path(__file__).resolve() or not path.exists():
                continue
            try:
                text = path.read_text()
            except UnicodeDecodeError:
                continue
            new = pattern.sub(lambda m: old_to_new[m.group(1)], text)
            if new != text:
                rewrite(path, text, new, "tests/ paths")

    # 5. the layout in docs/development.md (once; the folders' docstrings are the source)
    dev = ROOT / "docs" / "development.md"
    if dev.exists() and "## Where the tests are" not in dev.read_text():
        lines = ["## Where the tests are", ""]
        lines += textwrap.wrap(
            "`python -m pytest` runs them all (`HYPOTHESIS_PROFILE=ci` as CI); one folder or file "
            "runs alone (`python -m pytest tests/data`). Every folder is a package: helpers are "
            "imported by package path (`from tests.contract import CASES`).", 100,
            break_on_hyphens=False)
        lines += ["", "- `tests/conftest.py`: hypothesis profiles, the `device` fixture."]
        for package, doc in PACKAGES.items():
            doc = doc or ("the transform contract, one module per part (`cases.py`, "
                          "`references.py`, `checks.py`, `sync.py`, `targets.py`) re-exported by "
                          "its `__init__.py`, its helpers (`fake_cuda.py`, `tolerances.py`, "
                          "`timm_reference.py`) and the tests that run it on every transform.")
            lines += textwrap.wrap(f"- `tests/{package}/`: {doc[0].lower() + doc[1:]}", 100,
                                   subsequent_indent="  ", break_on_hyphens=False)
        block = "\n".join(lines) + "\n\n"
        text = dev.read_text()
        at = text.find("## Benchmarks")
        text = text[:at] + block + text[at:] if at >= 0 else text.rstrip("\n") + "\n\n" + block
        rewrite(dev, dev.read_text(), text, "the test layout")

    for name in left:
        print(f"LEFT in tests/ (no table row or name rule; add one to TABLE): {name}")
    for note in notes:
        print(f"NOTE: {note}")
    print(f"{len(moved)} moved, {len(left)} left in tests/" + (" (dry run)" if dry else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
