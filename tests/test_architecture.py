"""The layout rules of docs/architecture.md, checked on the source tree (read, never imported)."""

from __future__ import annotations

from tests.importgraph import REPO, cycles, imported, modules, unit_graph

GROUND = {"errors", "keys", "locks", "redact", "receipts", "statedir", "ids", "daemon", "store",
          "redisclient"}
FACADE = {"board"}
MAX_TOP_LEVEL = 12


def test_mainboard_top_level_holds_only_ground_modules_and_the_facade() -> None:
    plain = sorted(p.stem for p in (REPO / "mainboard").glob("*.py")
                   if p.stem not in ("__init__", "__main__"))
    assert len(plain) <= MAX_TOP_LEVEL, f"{len(plain)} top-level modules: {plain}"
    assert set(plain) <= GROUND | FACADE, \
        f"not ground, not the facade: {sorted(set(plain) - GROUND - FACADE)}; give it a room"


def test_ground_modules_import_nothing_above_the_ground() -> None:
    graph = unit_graph()
    ground = {f"mainboard.{name}" for name in GROUND}
    for unit in sorted(ground & graph.keys()):
        above = sorted(u for u in graph[unit] if u.startswith("mainboard") and u not in ground)
        assert not above, f"{unit} is ground but imports {above}"


def test_only_tasks_imports_celery_or_kombu() -> None:
    known = modules()
    offenders = sorted(
        f"{m.path.relative_to(REPO)} imports {name}"
        for m in known.values() if not m.name.startswith("mainboard.tasks")
        for name in imported(m, known) if name in ("celery", "kombu"))
    assert not offenders, "Celery code belongs in tasks/:\n" + "\n".join(offenders)


def test_integrators_import_only_themselves_and_errors() -> None:
    known = modules()
    offenders = sorted(
        f"{m.path.relative_to(REPO)} imports {name}"
        for m in known.values() if m.name.startswith("mainboard.integrators")
        for name in imported(m, known)
        if name.startswith("mainboard") and not name.startswith("mainboard.integrators")
        and name != "mainboard.errors")
    assert not offenders, "integrators/ is pure:\n" + "\n".join(offenders)


def test_no_import_cycle_between_units() -> None:
    found = cycles(unit_graph())
    assert not found, "import cycles between units: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_checker_sees_cycles_and_lazy_imports() -> None:
    """The rules above would pass vacuously if the graph missed edges: check it finds them."""
    graph = unit_graph()
    assert "mainboard.hosts" in graph["mainboard.jobs"]  # module-level import
    assert "mainboard.jobs" in graph["mainboard.board"]  # import inside a method
    assert "mainboard.tasks" in graph["mainboard"]       # import inside __getattr__
    assert "celery" in graph["mainboard.tasks"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_only_the_cli_imports_the_dashboard() -> None:
    """The dashboard reads every room below it; a room importing it back would be a cycle
    waiting to happen (and would pull tornado into workers)."""
    graph = unit_graph()
    users = sorted(u for u, deps in graph.items() if "mainboard.dashboard" in deps)
    assert users == ["mainboard.cli"], users
