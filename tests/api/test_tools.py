"""The repository's tools keep up with the code they name."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_mutant_still_finds_its_text():
    # A mutant whose text was refactored away silently tests nothing; --check names it.
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "mutation.py"), "--check"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert " 0 of " in " " + run.stdout, run.stdout


def _count_timings():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import count_timings
    finally:
        sys.path.remove(str(ROOT / "tools"))
    return count_timings


def test_count_timings_reads_comments_and_docstrings_only(tmp_path):
    source = tmp_path / "mod.py"
    source.write_text(
        '"""Module: 12 ms here."""\n'
        'X = "40 us at run time, 1.5x"  # but 3x in this comment\n'
        'def f():\n'
        '    """1,200 img/s and 0.5us."""\n'
        '    return f"{2}x" + hex(0x1f) + "3x3 256x3x32x32"\n')
    found = [text for _, text in _count_timings().timings(source)]
    assert found == ["12 ms", "3x", "1,200 img/s", "0.5us"]


def test_code_comments_and_docstrings_hold_at_most_five_timings():
    # Measurements go to docs/performance.md with their command; the code says why in words.
    rows = _count_timings().count()
    assert len(rows) <= 5, "\n".join(f"{p}:{line}: {text}" for p, line, text in rows)
