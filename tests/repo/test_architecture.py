"""The layout rules of docs/architecture.md, checked on the source tree (read, never imported)."""

from __future__ import annotations

import ast
import builtins
import re
from collections.abc import Iterable
from pathlib import Path

from tests.support.importgraph import (
    REPO,
    ROOTS,
    cycles,
    import_nodes,
    imported,
    local_imports,
    module_graph,
    modules,
    nodes,
    unit_graph,
)

GROUND = {"errors", "keys", "locks", "redact", "receipts", "statedir", "ids", "daemon", "store",
          "redisclient", "names"}
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


def test_integrators_import_only_themselves_errors_and_names() -> None:
    known = modules()
    offenders = sorted(
        f"{m.path.relative_to(REPO)} imports {name}"
        for m in known.values() if m.name.startswith("mainboard.integrators")
        for name in imported(m, known)
        if name.startswith("mainboard") and not name.startswith("mainboard.integrators")
        and name not in ("mainboard.errors", "mainboard.names"))
    assert not offenders, "integrators/ is pure:\n" + "\n".join(offenders)


def test_no_import_cycle_between_units() -> None:
    found = cycles(unit_graph())
    assert not found, "import cycles between units: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_checker_sees_cycles_and_lazy_imports() -> None:
    """The rules above would pass vacuously if the graph missed edges: check it finds them."""
    graph = unit_graph()
    assert "mainboard.hosts" in graph["mainboard.jobs"]  # module-level import
    assert "mainboard.jobs" in graph["mainboard.board"]
    # imports inside a function (`# lazy:`) count
    assert "mainboard.fleet.autoscale" in module_graph()["mainboard.fleet.status"]
    assert "mainboard.tasks" in graph["mainboard"]       # import inside __getattr__
    assert "celery" in graph["mainboard.tasks"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_only_the_cli_imports_the_dashboard() -> None:
    """The dashboard reads every room below it; a room importing it back would be a cycle
    waiting to happen (and would pull tornado into workers)."""
    graph = unit_graph()
    users = sorted(u for u, deps in graph.items() if "mainboard.dashboard" in deps)
    assert users == ["mainboard.cli"], users


# Function-local imports outside the CLI edge (mainboard/cli/): issue 25 took them from 166 to
# this ceiling; each one left says why on its line or the line above (`# lazy: <reason>`):
# start-up time, an optional dependency, or a documented cycle. Lower it, never raise it.
MAX_LOCAL_IMPORTS = 8


def test_function_local_imports_are_few_and_each_says_why() -> None:
    found = local_imports()
    unexplained = [f"{i.path}:{i.line}" for i in found if not i.reason]
    assert not unexplained, ("a function-local import says why (`# lazy: <reason>` on its "
                             "line or heading the lines above it), or moves to the top:\n"
                             + "\n".join(unexplained))
    assert len(found) <= MAX_LOCAL_IMPORTS, \
        f"{len(found)} function-local imports outside cli/ (ceiling {MAX_LOCAL_IMPORTS})"


def test_the_local_import_count_sees_planted_ones(tmp_path: Path) -> None:
    for folder in ROOTS:
        (tmp_path / folder).mkdir()
    (tmp_path / "mainboard" / "cli").mkdir()
    (tmp_path / "mainboard" / "cli" / "verb.py").write_text("def f():\n    import json\n")
    (tmp_path / "tasks" / "planted.py").write_text(
        "import os\n\n\ndef f():\n    # lazy: an optional dependency\n    import numba\n\n"
        "    def g():\n        from os import path  # lazy: start-up time\n\n"
        "    import json\n\n"
        "    # lazy: a cycle, one comment over\n    # two lines and two imports\n"
        "    import a\n    import b\n")
    found = local_imports(tmp_path)
    assert [(i.path, i.line, i.reason) for i in found] == [
        ("tasks/planted.py", 6, "an optional dependency"),
        ("tasks/planted.py", 9, "start-up time"), ("tasks/planted.py", 11, None),
        ("tasks/planted.py", 15, "a cycle, one comment over"),
        ("tasks/planted.py", 16, "a cycle, one comment over")]


# ----- scheduler facts live in bridges/ (and the one table of host kinds) -------------------

SCHEDULER_WORDS = ("sbatch", "squeue", "scancel", "sacct", "scontrol", "srun", "qsub", "qstat",
                   "qdel", "pbsdsh", "mpirun")
SCHEDULER_KINDS = ("slurm", "pbs")
# Where they may be spelled: the bridges, and the table of host kinds (each model's literal).
SCHEDULER_HOMES = ("bridges/", "mainboard/config/hostkinds.py")


def _docstrings(tree: tuple[ast.AST, ...]) -> set[int]:
    """ids of the string constants that are docstrings (prose may name a command)."""
    found = set()
    for node in tree:
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) \
                and node.body and isinstance(node.body[0], ast.Expr) \
                and isinstance(node.body[0].value, ast.Constant):
            found.add(id(node.body[0].value))
    return found


def scheduler_literals(path: Path, rel: str) -> list[str]:
    """``rel:line: text`` for each string in code (not a docstring; comments are not strings)
    that names a scheduler command as a word, or is a scheduler host kind."""
    tree = nodes(path)
    words = re.compile(r"\b(" + "|".join(SCHEDULER_WORDS) + r")\b")
    skip = _docstrings(tree)
    return [f"{rel}:{node.lineno}: {node.value!r}" for node in tree
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in skip
            and (words.search(node.value) or node.value.strip().lower() in SCHEDULER_KINDS)]


def scheduler_leaks(repo: Path = REPO) -> list[str]:
    """Every scheduler literal outside its homes, in the package's source folders."""
    found = []
    for folder in ROOTS:
        for path in sorted((repo / folder).rglob("*.py")):
            rel = path.relative_to(repo).as_posix()
            if not rel.startswith(SCHEDULER_HOMES):
                found += scheduler_literals(path, rel)
    return found


def test_no_scheduler_command_or_kind_is_spelled_outside_the_bridges() -> None:
    """Adding a scheduler is a bridge module and a row of config/hostkinds.py: code
    elsewhere asks the bridge (``bridge_class(kind).scheduler_command()``...)."""
    leaks = scheduler_leaks()
    assert not leaks, "ask the bridge instead:\n" + "\n".join(leaks)


def test_the_scheduler_check_finds_a_planted_literal(tmp_path: Path) -> None:
    """The rule above would pass vacuously if the checker missed strings: plant some."""
    for folder in ROOTS:
        (tmp_path / folder).mkdir()
    (tmp_path / "mainboard" / "planted.py").write_text(
        '"""Module prose may say squeue."""\n'
        "import subprocess\n\n\n"
        "def end(job: str) -> str:\n"
        '    """So may a function\'s: scancel, kind = "slurm"."""\n'
        "    # and a comment: qdel\n"
        '    if KIND == "pbs":\n'
        '        return f"qdel {job}"\n'
        '    return subprocess.run(["squeue", "-j", job]).stdout\n', encoding="utf-8")
    (tmp_path / "bridges" / "lsf.py").write_text('SUBMIT = ("bsub", "sbatch")\n',
                                                 encoding="utf-8")
    leaks = scheduler_leaks(tmp_path)
    assert [leak.split(": ", 1)[0] for leak in leaks] == \
        ["mainboard/planted.py:8", "mainboard/planted.py:9", "mainboard/planted.py:10"], leaks


def test_every_host_kind_has_its_bridge_and_agrees_on_nodes() -> None:
    """One row per kind in config/hostkinds.py names a bridge that exists; a kind whose
    pools may span nodes is one whose bridge fans a job out over them."""
    from mainboard.bridges import bridge_class
    from mainboard.config.hostkinds import HOST_TABLE

    for kind, row in HOST_TABLE.items():
        bridge = bridge_class(kind)
        assert bridge.kind == kind
        assert row.multi_node == (bridge.node_fanout is not None), kind


def test_no_import_cycle_inside_a_room() -> None:
    """Between the files of one room too, counting lazy imports: a function-local import
    that only hides a cycle still makes each file need the other to be understood."""
    found = cycles(module_graph())
    assert not found, "import cycles inside a room: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_room_cycle_check_sees_a_planted_cycle(tmp_path: Path) -> None:
    """A cycle hidden by a function-local import is found; a package's door is not one."""
    room = tmp_path / "mainboard" / "room"
    room.mkdir(parents=True)
    (tmp_path / "mainboard" / "__init__.py").write_text("")
    (room / "__init__.py").write_text("def lazy():\n    from mainboard.room import a\n")
    (room / "a.py").write_text("from mainboard.room import LIMIT\nfrom mainboard.room.b import f\n")
    (room / "b.py").write_text("def f():\n    from mainboard.room.a import g\n")
    for folder in ("bridges", "tasks", "integrators"):
        (tmp_path / folder).mkdir()
    assert cycles(module_graph(tmp_path)) == [["mainboard.room.a", "mainboard.room.b"]]


# Exception classes that stay beside their code, and why: none of them is an error.
NOT_ERRORS = {
    ("tasks/steering.py", "Halt"): "control flow: the run pauses or stops at a batch boundary",
    ("tasks/context.py", "Skip"): "control flow: a delivery with nothing left to do",
    ("mainboard/supervisor/up.py", "_Interrupted"): "control flow: Ctrl-C while starting",
    ("integrators/gammaboard.py", "IgnoredKeys"): "a warning category, never raised",
    ("bridges/provision_driver.py", "Unavailable"): "raised on a host by a stdlib-only script "
                                                     "that never imports mainboard",
}


def _base_name(node: ast.expr) -> str:
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")


def exception_classes(tree: Iterable[ast.AST], error_names: set[str]) -> list[str]:
    """Names of the classes among a module's nodes (``ast.walk`` order) that derive from an
    exception: a builtin one, one of ``error_names``, or one defined earlier in the module."""
    found: list[str] = []
    names = set(error_names)
    for node in tree:
        if not isinstance(node, ast.ClassDef):
            continue
        for base in map(_base_name, node.bases):
            builtin = getattr(builtins, base, None)
            if base in names or (isinstance(builtin, type) and issubclass(builtin, BaseException)):
                found.append(node.name)
                names.add(node.name)
                break
    return found


def _errors_tree() -> dict[str, list[str]]:
    tree = ast.parse((REPO / "mainboard" / "errors.py").read_text(encoding="utf-8"))
    return {n.name: [_base_name(b) for b in n.bases] for n in tree.body
            if isinstance(n, ast.ClassDef)}


def test_every_error_class_lives_in_errors_py_and_derives_from_mainboard_error() -> None:
    tree = _errors_tree()

    def rooted(name: str) -> bool:
        return name == "MainboardError" or any(rooted(b) for b in tree.get(name, ()))

    assert tree["MainboardError"] == ["Exception"]
    assert [n for n in tree if not rooted(n)] == []
    drawn = ast.get_docstring(ast.parse((REPO / "mainboard" / "errors.py").read_text()))
    assert [n for n in tree if not re.search(rf"\b{n}\b", drawn or "")] == [], \
        "each error class has its place in the tree drawn in errors.py's docstring"
    outside = sorted(
        f"{path}: class {name}" for m in modules().values()
        if m.path != REPO / "mainboard" / "errors.py"
        for path in [m.path.relative_to(REPO).as_posix()]
        for name in exception_classes(nodes(m.path), set(tree))
        if (path, name) not in NOT_ERRORS)
    assert not outside, "error classes belong in mainboard/errors.py:\n" + "\n".join(outside)


def test_the_error_check_sees_a_planted_error_class() -> None:
    planted = ("class Fine:\n    pass\n\nclass Oops(ValueError):\n    pass\n\n"
               "class Worse(Oops):\n    pass\n\nclass Ours(errors.HostError):\n    pass\n")
    assert exception_classes(ast.walk(ast.parse(planted)), set(_errors_tree())) \
        == ["Oops", "Worse", "Ours"]


def test_error_classes_are_imported_from_errors_py_only() -> None:
    """No room hands an error class on (an old home kept as a shim): it has one address."""
    tree = _errors_tree()
    found = sorted(
        f"{path.relative_to(REPO)}:{node.lineno} takes {alias.name} from {node.module}"
        for folder in ("mainboard", "bridges", "tasks", "integrators", "tests", "bench")
        for path in (REPO / folder).rglob("*.py")
        for node in import_nodes(path)
        if isinstance(node, ast.ImportFrom) and node.module not in (None, "mainboard.errors")
        and node.module.startswith("mainboard")
        for alias in node.names if alias.name in tree)
    assert not found, "\n".join(found)


def imports_of_test_modules(path: Path, rel: str) -> list[str]:
    """``rel:line module`` for each import of a test module (``test_*``) in ``path``, lazy
    ones too: what files share lives in tests/support/, so a test file can move alone."""
    found = []
    for node in import_nodes(path):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        found += [f"{rel}:{node.lineno} {n}" for n in names
                  if n.split(".")[0] == "tests" and n.split(".")[-1].startswith("test_")]
    return found


def imports_of_test_modules_in(repo: Path = REPO) -> list[str]:
    """Every import of a test module by a file of tests/ or bench/."""
    return [hit for folder in ("tests", "bench") for path in sorted((repo / folder).rglob("*.py"))
            for hit in imports_of_test_modules(path, str(path.relative_to(repo)))]



def test_no_test_module_imports_another_and_bench_imports_none() -> None:
    found = imports_of_test_modules_in()
    assert not found, "import shared helpers from tests/support/, not from a test module: " + \
        "; ".join(found)


def test_the_test_import_check_sees_planted_imports(tmp_path: Path) -> None:
    """Top-level, lazy and ``from tests import test_x`` forms; support modules are fine."""
    (tmp_path / "tests" / "room").mkdir(parents=True)
    (tmp_path / "bench").mkdir()
    (tmp_path / "tests" / "room" / "test_a.py").write_text(
        "from tests.support.dashboard import INK\nfrom tests.room.test_b import helper\n"
        "def f():\n    import tests.test_c\n")
    (tmp_path / "bench" / "bench_x.py").write_text("from tests import test_d\n")
    assert imports_of_test_modules_in(tmp_path) == [
        "tests/room/test_a.py:2 tests.room.test_b", "tests/room/test_a.py:4 tests.test_c",
        "bench/bench_x.py:1 tests.test_d"]


# Where a test file lives besides the rooms of mainboard/ (docs/architecture.md, "Tests").
TEST_HOMES = {"bridges", "tasks", "integrators", "gammaboard_process", "ground", "e2e", "repo"}


def misplaced_tests(repo: Path = REPO) -> list[str]:
    """Test files outside ``tests/<room>/`` (a package), and basenames used twice: the
    xdist groups of tests/conftest.py name files by basename."""
    homes = TEST_HOMES | {p.parent.name for p in (repo / "mainboard").glob("*/__init__.py")}
    found, seen = [], {}
    for path in sorted((repo / "tests").rglob("test_*.py")):
        rel = f"tests/{path.relative_to(repo / 'tests')}"
        if len(path.relative_to(repo / "tests").parts) != 2 or path.parent.name not in homes:
            found.append(f"{rel}: not in a tests/<room>/ folder")
        elif not (path.parent / "__init__.py").exists():
            found.append(f"{rel}: its folder has no __init__.py")
        if path.name in seen:
            found.append(f"{rel}: its name is taken by {seen[path.name]}")
        seen.setdefault(path.name, rel)
    return found


def test_every_test_file_lives_in_its_rooms_folder_under_a_name_of_its_own() -> None:
    found = misplaced_tests()
    assert not found, "; ".join(found)


def test_the_test_layout_check_sees_planted_files(tmp_path: Path) -> None:
    (tmp_path / "mainboard" / "fleet").mkdir(parents=True)
    (tmp_path / "mainboard" / "fleet" / "__init__.py").write_text("")
    for folder in ("fleet", "bridges", "support", "nowhere"):
        (tmp_path / "tests" / folder).mkdir(parents=True)
    for name in ("fleet/__init__.py", "fleet/test_a.py", "support/test_b.py", "test_c.py",
                 "nowhere/__init__.py", "nowhere/test_d.py", "bridges/test_a.py"):
        (tmp_path / "tests" / name).write_text("")
    assert misplaced_tests(tmp_path) == [
        "tests/bridges/test_a.py: its folder has no __init__.py",
        "tests/fleet/test_a.py: its name is taken by tests/bridges/test_a.py",
        "tests/nowhere/test_d.py: not in a tests/<room>/ folder",
        "tests/support/test_b.py: not in a tests/<room>/ folder",
        "tests/test_c.py: not in a tests/<room>/ folder"]


def test_every_lazy_name_resolves_and_is_used() -> None:
    """The one registry of lazily loaded pieces (mainboard/names.py) names real code, and
    nothing in it is left over; no module spells a name it lacks."""
    from mainboard.names import LAZY, lazy

    used = {m for mod in modules().values()
            for m in re.findall(r'\blazy\("([^"]+)"\)', mod.path.read_text(encoding="utf-8"))}
    assert used <= set(LAZY), f"not in names.LAZY: {sorted(used - set(LAZY))}"
    assert set(LAZY) <= used, f"in names.LAZY, used nowhere: {sorted(set(LAZY) - used)}"
    for name in sorted(LAZY):
        if not name.startswith("numba."):  # numba is optional: integrators/kernels.py falls back
            assert lazy(name) is not None, name
