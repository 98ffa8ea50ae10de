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
