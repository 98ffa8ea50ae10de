"""The oldest torch/torchvision pyproject.toml accepts are the ones `make test-floor` tests, and CI
runs that target after `make test`."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _floor(name: str, text: str) -> str:
    found = re.search(rf'"{name}>=([0-9.]+)"', text)
    assert found, f"pyproject.toml declares no {name}>= floor"
    return found.group(1)


def test_the_declared_floor_is_the_tested_one():
    pyproject = (ROOT / "pyproject.toml").read_text()
    makefile = (ROOT / "Makefile").read_text()
    spec = re.search(r"^FLOOR_SPEC \?= (.+)$", makefile, re.M).group(1).split()
    pins = dict(p.split("==") for p in spec)
    for name in ("torch", "torchvision"):
        # torch>=2.11 is tested as torch==2.11.0: the same major.minor
        assert pins[name].startswith(_floor(name, pyproject) + "."), (name, pins[name])
    assert "make test-floor" in (ROOT / ".ci" / "run").read_text()
    assert ".venv-floor" in (ROOT / ".gitignore").read_text().splitlines()
