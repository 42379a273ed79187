"""The import graph of the source tree, read from the code (never imported), by unit.

A *unit* is a subpackage of ``mainboard`` (``mainboard.jobs``, ``mainboard.tasks`` ...) or a
top-level module (``mainboard.errors``); ``mainboard`` itself is the package's ``__init__``.
Every import counts, including those inside functions and under ``TYPE_CHECKING``: a lazy
import that breaks a cycle at run time is still a dependency of the design.

``python -m tests.support.importgraph`` prints each unit and the units it imports, lowest first.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Folder -> import name (pyproject's [tool.setuptools.package-dir]).
ROOTS = {"mainboard": "mainboard", "tasks": "mainboard.tasks", "bridges": "mainboard.bridges",
         "integrators": "mainboard.integrators"}


@dataclass(frozen=True)
class Module:
    """One source file: its dotted name and path."""

    name: str
    path: Path

    @property
    def is_package(self) -> bool:
        return self.path.name == "__init__.py"


def parse(path: Path) -> ast.Module:
    """``path``'s syntax tree, parsed once per content: the architecture tests walk every
    file of the tree a dozen times (read it, do not change it)."""
    stat = path.stat()
    return _parse(path, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=4096)
def _parse(path: Path, mtime_ns: int, size: int) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def nodes(path: Path) -> tuple[ast.AST, ...]:
    """Every node of ``path``'s tree, in ``ast.walk`` order, listed once per content: a walk
    is pure Python (5 M node visits over the suite's architecture checks, half their time)."""
    return _nodes(parse(path))


def import_nodes(path: Path) -> tuple[ast.Import | ast.ImportFrom, ...]:
    """``path``'s Import and ImportFrom nodes (module level, in functions, anywhere)."""
    return _import_nodes(parse(path))


# Keyed by the tree itself: ``parse`` gives one tree object per content.
@functools.lru_cache(maxsize=4096)
def _nodes(tree: ast.Module) -> tuple[ast.AST, ...]:
    return tuple(ast.walk(tree))


@functools.lru_cache(maxsize=4096)
def _import_nodes(tree: ast.Module) -> tuple[ast.Import | ast.ImportFrom, ...]:
    return tuple(_imports_under(tree))


_BLOCK = (ast.stmt, ast.excepthandler, ast.match_case)


def _imports_under(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Imports are statements: only statement blocks are walked, not expressions."""
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield child
        elif isinstance(child, _BLOCK):
            yield from _imports_under(child)


def _in_functions(tree: ast.AST, inside: bool = False) -> Iterator[ast.Import | ast.ImportFrom]:
    """The imports under ``tree`` that sit in a function body (nested ones once)."""
    for child in ast.iter_child_nodes(tree):
        if inside and isinstance(child, ast.Import | ast.ImportFrom):
            yield child
        yield from _in_functions(
            child, inside or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef))


def modules(repo: Path = REPO) -> dict[str, Module]:
    """Every module of the four source folders, by dotted import name."""
    found: dict[str, Module] = {}
    for folder, package in ROOTS.items():
        for path in sorted((repo / folder).rglob("*.py")):
            parts = list(path.relative_to(repo / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            name = ".".join([package, *parts])
            found[name] = Module(name, path)
    return found


def _absolute(module: Module, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.name.split(".")
    if not module.is_package:
        base.pop()
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def imported(module: Module, known: dict[str, Module]) -> Iterator[str]:
    """Dotted names ``module`` imports: a module of the tree where one matches, else the
    top-level distribution name (``celery``, ``numpy``)."""
    for node in import_nodes(module.path):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            base = _absolute(module, node)
            # `from pkg import sub` names the submodule when there is one, else pkg itself.
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                     for a in node.names]
        for name in names:
            while name not in known and "." in name and name.startswith("mainboard"):
                name = name.rpartition(".")[0]
            yield name if name in known else name.split(".")[0]


@dataclass(frozen=True)
class LocalImport:
    """An import inside a function body: where it is and the reason its comment gives."""

    path: str
    line: int
    reason: str | None


LAZY_REASON = "# lazy:"


def _reason(lines: list[str], lineno: int) -> str | None:
    """The ``# lazy:`` reason on line ``lineno`` (1-based) or in the comments and imports
    right above it (one comment may head a block of imports)."""
    at = lineno - 1
    while at >= 0:
        line = lines[at]
        if LAZY_REASON in line:
            return line.split(LAZY_REASON, 1)[1].strip() or None
        above = lines[at - 1].strip() if at else ""
        if not above.startswith(("#", "from ", "import ")):
            return None
        at -= 1
    return None


def local_imports(repo: Path = REPO, skip: tuple[str, ...] = ("mainboard/cli/",)
                  ) -> list[LocalImport]:
    """Every Import/ImportFrom inside a function (nested ones too) in the four source folders
    but ``skip`` (the CLI edge), with the ``# lazy: <reason>`` on its line or heading the
    comments and imports right above it."""
    found: list[LocalImport] = []
    for folder in ROOTS:
        for path in sorted((repo / folder).rglob("*.py")):
            rel = path.relative_to(repo).as_posix()
            if rel.startswith(skip):
                continue
            text = path.read_text(encoding="utf-8")
            lines = text.splitlines()
            found += [LocalImport(rel, node.lineno, _reason(lines, node.lineno))
                      for node in _in_functions(parse(path))]
    return sorted(set(found), key=lambda i: (i.path, i.line))


def unit_of(name: str) -> str:
    """The unit a dotted module name belongs to (``mainboard.jobs.store`` -> ``mainboard.jobs``)."""
    parts = name.split(".")
    return ".".join(parts[:2]) if parts[0] == "mainboard" and len(parts) > 1 else name


def unit_graph(repo: Path = REPO) -> dict[str, set[str]]:
    """unit -> the other units (and outside distributions) that its modules import."""
    known = modules(repo)
    graph: dict[str, set[str]] = {}
    for module in known.values():
        unit = unit_of(module.name)
        targets = graph.setdefault(unit, set())
        for name in imported(module, known):
            target = unit_of(name) if name in known else name
            if target != unit:
                targets.add(target)
    return graph


def module_graph(repo: Path = REPO) -> dict[str, set[str]]:
    """module -> the modules of its own unit that it imports (functions and ``TYPE_CHECKING``
    included). A package's ``__init__`` is its room's door: its submodules may read its
    constants, and what it hands out of them lazily (PEP 562 ``__getattr__``) is not an
    edge, so ``pkg -> pkg.sub`` is left out."""
    known = modules(repo)
    graph: dict[str, set[str]] = {}
    for module in known.values():
        unit = unit_of(module.name)
        graph[module.name] = {
            name for name in imported(module, known)
            if name in known and name != module.name and unit_of(name) == unit
            and not (module.is_package and name.startswith(module.name + "."))}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one unit (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in graph.get(node, ()):
            if succ not in graph:
                continue
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            group = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                group.append(top)
                if top == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def layers(graph: dict[str, set[str]]) -> list[str]:
    """Units ordered so that each comes after everything it imports (needs no cycle)."""
    done: list[str] = []
    seen: set[str] = set()

    def place(node: str) -> None:
        if node in seen:
            return
        seen.add(node)
        for succ in sorted(graph.get(node, ())):
            if succ in graph:
                place(succ)
        done.append(node)

    for node in sorted(graph):
        place(node)
    return done


def main() -> None:
    graph = unit_graph()
    for group in cycles(graph):
        print("CYCLE:", " <-> ".join(group))
    for group in cycles(module_graph()):
        print("CYCLE inside a room:", " <-> ".join(group))
    for unit in layers(graph):
        inside = sorted(u for u in graph[unit] if u in graph)
        print(f"{unit:28} <- {', '.join(inside) or '(ground)'}")


if __name__ == "__main__":
    main()
