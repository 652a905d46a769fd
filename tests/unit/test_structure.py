"""The package's shape: no import cycles (counting imports inside functions and under
TYPE_CHECKING too, which hide a cycle rather than break it, and the package `__init__`
every import of a submodule runs first), no module and no class past the length a reader
takes in."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "actorq"
MAX_LINES = 450
MAX_CLASS_LINES = 250
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


def _imports(path: Path, known: dict[str, Path], own_module: str = "") -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            if name in known:
                found.add(name)
            # Importing a.b.c from outside package a.b runs a.b's __init__ first: an import
            # too (inside a.b it has already started, so it adds nothing there).
            parts = name.split(".")
            for i in range(1, len(parts)):
                parent = ".".join(parts[:i])
                if parent in known and not own_module.startswith(parent + "."):
                    found.add(parent)
    return found


def import_cycles(package: Path = PACKAGE) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    mods = _modules(package)
    graph = {m: _imports(p, mods, m) - {m} for m, p in mods.items()}
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


def test_finder_counts_the_package_init_a_submodule_import_runs(tmp_path):
    pkg = tmp_path / "actorq"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from actorq.a import x\n")
    (pkg / "sub" / "leaf.py").write_text("")
    (pkg / "a.py").write_text("from actorq.sub.leaf import y\n")  # runs sub/__init__ first
    assert import_cycles(pkg) == [["actorq.a", "actorq.sub"]]


def test_no_import_cycles():
    assert import_cycles() == []


def test_no_module_too_long():
    long = {
        m: n for m, p in _modules().items() if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}, f"modules over {MAX_LINES} lines: split them by concern"


def long_classes(package: Path = PACKAGE) -> dict[str, int]:
    """Classes longer than MAX_CLASS_LINES, as module.Class -> lines."""
    found = {}
    for module, path in _modules(package).items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_CLASS_LINES:
                    found[f"{module}.{node.name}"] = lines
    return found


def test_class_length_finder(tmp_path):
    pkg = tmp_path / "actorq"
    pkg.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_CLASS_LINES))
    (pkg / "big.py").write_text(f"class Big:\n{body}\n\n\nclass Small:\n    pass\n")
    assert long_classes(pkg) == {"actorq.big.Big": MAX_CLASS_LINES + 1}


def test_no_class_too_long():
    assert long_classes() == {}, f"classes over {MAX_CLASS_LINES} lines: split by responsibility"
