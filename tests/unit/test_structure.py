"""The package's shape: no import cycles (counting imports inside functions too, which
hide a cycle rather than break it) and no module past the length a reader takes in."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "actorq"
MAX_LINES = 450
GENERATED = {"v1"}  # protobuf code from proto/ (make proto)


def _modules(package: Path = PACKAGE) -> dict[str, Path]:
    mods = {}
    for path in package.rglob("*.py"):
        rel = path.relative_to(package.parent).with_suffix("")
        if GENERATED & set(rel.parts):
            continue
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        mods[".".join(parts)] = path
    return mods


def _imports(path: Path, known: dict[str, Path]) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found.update(n for n in names if n in known)
    return found


def import_cycles(package: Path = PACKAGE) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    mods = _modules(package)
    graph = {m: _imports(p, mods) - {m} for m, p in mods.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return cycles


def test_finder_sees_a_cycle(tmp_path):
    pkg = tmp_path / "actorq"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from actorq.b import x\n")
    (pkg / "b.py").write_text("def f():\n    from actorq.a import y\n")
    assert import_cycles(pkg) == [["actorq.a", "actorq.b"]]


def test_no_import_cycles():
    assert import_cycles() == []


def test_no_module_too_long():
    long = {
        m: n for m, p in _modules().items() if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}, f"modules over {MAX_LINES} lines: split them by concern"
