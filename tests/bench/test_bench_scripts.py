"""Every script in benchmarks/ imports and parses its command line (``--help``), and reads its
timing options through batchaug.bench.timing instead of a loop of its own."""
import argparse
import importlib.util
import re
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
SCRIPTS = sorted(BENCHMARKS.glob("bench_*.py"))


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(spec.name, None)
    return module


def test_there_are_scripts():
    assert len(SCRIPTS) >= 10


@pytest.mark.parametrize("path", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_help_runs(path, capsys):
    module = _load(path)
    with pytest.raises(SystemExit) as exit_:
        module.main(["--help"])
    assert exit_.value.code == 0
    assert "usage:" in capsys.readouterr().out


# A script that counts operations instead of timing them
UNTIMED = {"bench_launches"}


@pytest.mark.parametrize("path", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_timing_comes_from_batchaug_bench(path):
    """No private clock loop: the rounds, windows and ratios are batchaug.bench.timing's
    (excepted: bench_loader's placements, which set the page cache before each whole epoch;
    bench_writer's child process, which times one whole pass; bench_color --parts, best of N calls
    with their page faults)."""
    text = path.read_text()
    if path.stem in UNTIMED:
        return
    assert "batchaug.bench" in text and "timing" in text, path.name
    loops = len(re.findall(r"perf_counter\(\)", text))
    allowed = {"bench_loader": 4, "bench_writer": 4, "bench_color": 2}.get(path.stem, 0)
    assert loops <= allowed, f"{path.name}: {loops} perf_counter() calls"


def _quoted_commands():
    """(file, script, argv) of every benchmark command quoted in README.md and docs/*.md."""
    root = BENCHMARKS.parent
    out = []
    for doc in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        for span in re.findall(r"`([^`]*bench_\w+\.py[^`]*)`", doc.read_text()):
            m = re.search(r"(bench_\w+)\.py(.*)", span, flags=re.S)
            out.append((doc.name, m.group(1), m.group(2).split()))
    return out


QUOTED = _quoted_commands()


class _Parsed(Exception):
    pass


def test_the_docs_quote_benchmarks():
    assert len(QUOTED) >= 20


@pytest.mark.parametrize("doc,script,argv", QUOTED,
                         ids=[f"{d}:{s}:{' '.join(a)}"[:80] for d, s, a in QUOTED])
def test_every_quoted_command_names_a_script_that_takes_its_flags(doc, script, argv,
                                                                   monkeypatch):
    path = BENCHMARKS / f"{script}.py"
    assert path.exists(), f"{doc} quotes {script}.py, which benchmarks/ does not hold"
    if any(a.startswith("[") or a.isupper() or "..." in a for a in argv):
        argv = []  # a placeholder (REV, [--dtype uint8], op_ShearX,...): the script alone
    parse = argparse.ArgumentParser.parse_args

    def parse_only(self, args=None, namespace=None):
        raise _Parsed(parse(self, args, namespace))

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_only)
    module = _load(path)
    with pytest.raises((_Parsed, SystemExit)) as got:
        module.main(argv)
    if got.type is SystemExit:  # a required argument missing is fine for a bare script name
        assert not argv and got.value.code == 2, f"{doc}: {script} {' '.join(argv)}"
