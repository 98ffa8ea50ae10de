"""The package's modules import each other one way: the import graph has no circle.

Every ``import``/``from ... import`` of a batchaug module anywhere in a file (also inside
functions: a deferred import is still a dependency), and every
``importlib.import_module("batchaug....")``, is an edge; the parent packages that Python
runs implicitly are not (a package ``__init__`` only re-exports). A circle fails the test,
printed module by module.
"""
from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict, List, Set

import batchaug

ROOT = Path(batchaug.__file__).resolve().parent


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> Dict[str, Path]:
    return {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def imports_of(name: str, path: Path, known: Set[str]) -> Set[str]:
    """The batchaug modules ``path`` (module ``name``) names in an import, anywhere in it."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: Set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative import
                up = package.split(".")
                up = up[:len(up) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            if base not in known:
                continue
            subs = {f"{base}.{a.name}" for a in node.names} & known
            out.update(subs)  # ``from pkg import module``: that module
            if len(subs) < len(node.names):  # a name defined in ``base`` itself
                out.add(base)
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant)
              and node.args[0].value in known):  # a lookup by name closes a circle as well
            out.add(node.args[0].value)
    out.discard(name)
    return out


def graph() -> Dict[str, Set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imports_of(name, path, known) for name, path in mods.items()}


def circles(g: Dict[str, Set[str]]) -> List[List[str]]:
    """The groups of modules that import each other (strongly connected, more than one), sorted."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    out: List[List[str]] = []

    def visit(v: str) -> None:  # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return sorted(out)


#: Circles known and accepted: none (issue 12 removed bench <-> bench.train).
KNOWN: list = []


def test_the_checker_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []


def test_the_graph_sees_deferred_and_from_imports():
    g = graph()
    # Deferred (inside a function) and ``from package import module`` imports are edges.
    assert "batchaug.bench" in g["batchaug.cli"]
    assert "batchaug.data.atomic" in g["batchaug.data.format"]


def test_the_graph_sees_import_module(tmp_path):
    # _equivalents once reached batchaug.transforms by importlib.import_module, closing the
    # circle _equivalents -> transforms -> _container -> compose -> _equivalents
    f = tmp_path / "m.py"
    f.write_text("import importlib\n\ndef f():\n    return importlib.import_module("
                 "'batchaug.transforms')\n")
    assert imports_of("batchaug.m", f, set(modules())) == {"batchaug.transforms"}


def test_every_module_imports_in_a_fresh_interpreter():
    # Importing any batchaug module runs batchaug/__init__ first, which imports the rest in
    # one fixed order: a fresh interpreter importing the package, then every module it did not
    # reach (cli, bench, ...), is each module's first import as a user would make it.
    names = sorted(n for n in modules() if n != "batchaug.__main__")
    script = textwrap.dedent("""
        import importlib, sys
        import batchaug  # noqa: F401
        for name in sys.argv[1:]:
            importlib.import_module(name)
    """)
    r = subprocess.run([sys.executable, "-c", script, *names], cwd=ROOT.parent,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr


def test_no_new_circle():
    # The two circles issue 8 removed: cache <-> format <-> ingest, and cli <-> bench / build
    # through CLIError. Any circle but the known one fails here.
    found = circles(graph())
    assert [c for c in found if c not in KNOWN] == [], found


def test_no_circle_at_all():
    assert circles(graph()) == []


def test_the_format_knows_nothing_of_the_device_cache():
    g = graph()
    for name in ("batchaug.data.format", "batchaug.data.meta", "batchaug.data.atomic"):
        assert "batchaug.data.cache" not in g[name], name
        code = ast.walk(ast.parse(modules()[name].read_text()))
        used = {n.id for n in code if isinstance(n, ast.Name)}
        assert "DeviceCache" not in used, name
    # The command line's error type lives below it: nothing the CLI drives imports the CLI.
    assert not [m for m, deps in g.items() if "batchaug.cli" in deps and m != "batchaug.__main__"]


def test_star_import_exports_every_public_transform():
    """``from batchaug import *`` gives every transform ``batchaug.transforms`` exports (the
    auto-augment policies were once imported but missing from ``__all__``), and every name in
    ``__all__`` exists."""
    import batchaug.transforms as T

    assert set(T.__all__) <= set(batchaug.__all__), sorted(set(T.__all__) - set(batchaug.__all__))
    assert all(hasattr(batchaug, name) for name in batchaug.__all__)
