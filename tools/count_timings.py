"""Count the timings written in batchaug's code comments and docstrings.

A timing is a number with a unit of time or rate (``12 ms``, ``40 us``, ``850 img/s``) or a
ratio written ``1.5x``. Measurements belong in docs/performance.md with the command that gives
them; the code says why in words. Strings the code uses at run time (messages, report formats)
are not read.

    python tools/count_timings.py            # every timing as path:line: text, then the total
    python tools/count_timings.py --quiet    # the total only
"""
from __future__ import annotations

import argparse
import ast
import io
import re
import sys
import tokenize
from pathlib import Path
from typing import Iterator, List, Tuple

ROOT = Path(__file__).resolve().parents[1]

TIMING = re.compile(
    r"(?<![\w.])\d[\d.,]*\s?(?:ms|us|µs|img/s)\b"  # 12 ms, 0.5us, 1,200 img/s
    r"|(?<![\w.])\d[\d.]*x\b"  # 1.5x; not 0x1f, not 3x3 or 256x3x32x32 (sizes)
)


def _docstrings(tree: ast.AST) -> Iterator[Tuple[int, str]]:
    nodes = [tree] + [n for n in ast.walk(tree)
                      if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    for node in nodes:
        body = getattr(node, "body", [])
        if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            yield body[0].value.lineno, body[0].value.value


def _comments(source: str) -> Iterator[Tuple[int, str]]:
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string


def timings(path: Path) -> List[Tuple[int, str]]:
    """``(line, matched text)`` of every timing in the file's comments and docstrings."""
    source = path.read_text(encoding="utf-8")
    found = []
    for start, text in list(_comments(source)) + list(_docstrings(ast.parse(source))):
        for match in TIMING.finditer(text):
            found.append((start + text.count("\n", 0, match.start()), start, match.start(),
                          match.group(0)))
    return [(line, text) for line, _, _, text in sorted(found)]


def count(package: Path = ROOT / "batchaug") -> List[Tuple[str, int, str]]:
    """Every timing under ``package`` as ``(relative path, line, text)``."""
    rows = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package.parent).as_posix()
        rows.extend((rel, line, text) for line, text in timings(path))
    return rows


def main(argv: List[str] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quiet", action="store_true", help="print the total only")
    args = parser.parse_args(argv)
    rows = count()
    if not args.quiet:
        for rel, line, text in rows:
            print(f"{rel}:{line}: {text}")
    print(f"{len(rows)} timings in comments and docstrings under batchaug/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
