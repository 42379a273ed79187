"""Branch coverage in every Python process the suite starts (``scripts/bootstrap test``).

Loaded at interpreter start by a ``.pth`` file in the checkout's venv and, for every other
python (the hosts' ``/usr/bin/python3``, the uv environments built for ssh/SLURM/PBS hosts),
by ``sitecustomize.py`` beside it, which ``PYTHONPATH`` and the test sshd's ``SetEnv`` put on
their path. Does nothing unless ``COVERAGE_PROCESS_START`` names the coverage config.

A python without coverage imports it from the checkout's venv (``MAINBOARD_COVERAGE_SITE``):
same minor version, so the C tracer loads; any other version falls back to coverage's
pure-Python core, and a python coverage cannot run on is left unmeasured, never broken.

Programs shipped to a host on stdin (``python - ARGS``: the facts probe, the provisioning
driver) would be measured as ``<stdin>``, which no report can map to a file: their text is
read here, and when it is byte for byte one of ``SHIPPED`` it runs compiled under that
file's path, so its lines count for the file.
"""

from __future__ import annotations

import os
import sys

import fastsave  # these beside this file: tests/covboot is on sys.path wherever it loads
import foreign_calls
import foreign_imports

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHIPPED = ("mainboard/hosts/facts_probe.py", "bridges/provision_driver.py")


def _import_coverage() -> object | None:
    """The coverage module, from this python's packages or else the checkout venv's."""
    try:
        import coverage
        return coverage
    except ImportError:
        pass
    site = os.environ.get("MAINBOARD_COVERAGE_SITE")
    if not site:
        return None
    sys.path.append(site)
    try:
        import coverage
        return coverage
    except Exception:  # a python coverage cannot run on (too old, another ABI): unmeasured
        return None
    finally:
        sys.path.remove(site)


def _exit_code(exc: SystemExit) -> int:
    """What the interpreter would exit with for ``exc``."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def _run_stdin_program() -> None:
    """Run the program on stdin ourselves (under its file's path when it is a shipped one)
    and exit as the interpreter would have: the interpreter cannot read stdin again."""
    import atexit
    import traceback

    source = sys.stdin.buffer.read()
    filename = "<stdin>"
    for rel in SHIPPED:
        path = os.path.join(ROOT, rel)
        try:
            with open(path, "rb") as file:
                if file.read() == source:
                    filename = path
                    break
        except OSError:
            continue
    main = sys.modules["__main__"]
    main.__dict__["__file__"] = filename
    code = 0
    try:
        exec(compile(source, filename, "exec"), main.__dict__)  # noqa: S102 - it is the program
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException:  # the interpreter's own report of an uncaught exception
        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()  # saves the coverage data, then the program's own handlers
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code)


FIND_UNEXECUTED = "MAINBOARD_COVERAGE_FIND_UNEXECUTED"
TRACE_FOREIGN_IMPORTS = "MAINBOARD_COVERAGE_TRACE_FOREIGN_IMPORTS"  # 1: as coverage alone does
TRACE_FOREIGN_CALLS = "MAINBOARD_COVERAGE_TRACE_FOREIGN_CALLS"  # 1: redis-py's calls traced
SQLITE_SAVE = "MAINBOARD_COVERAGE_SQLITE_SAVE"  # 1: each process saves as coverage alone does


def _quicken(coverage: object) -> None:
    """Two costs coverage pays in each process, which the suite's thousands of processes
    need once: about 0.2 s of CPU each in a forked child of a process that imported much.

    - ``Collector.__init__`` keeps ``short_stack()``, for debug output only: ``inspect.stack()``,
      which looks up every loaded module's file per frame (0.13 s with celery loaded, paid
      again by each fork: a billiard pool child, a CLI fork-server child).
    - ``save`` walks every source folder to record the files no line of ran (0.06 s): one
      process does it for the whole suite (scripts/coverage_report.py, with
      ``MAINBOARD_COVERAGE_FIND_UNEXECUTED`` set).
    Either is left as it is when a coverage release no longer has the name.
    """
    collector = getattr(coverage, "collector", None)
    if collector is not None and hasattr(collector, "short_stack"):
        collector.short_stack = lambda *args, **kwargs: ""
    inorout = getattr(coverage, "inorout", None)
    if (not os.environ.get(FIND_UNEXECUTED) and inorout is not None
            and hasattr(inorout.InOrOut, "find_possibly_unexecuted_files")):
        inorout.InOrOut.find_possibly_unexecuted_files = lambda self: iter(())


def _children_leave_parents_data(coverage: object) -> None:
    """A forked child (billiard's pool children, forking daemons) measures itself from the
    fork; on leaving it also saved its parent's whole pre-fork data, which the parent saves
    when it ends, through the parent's os._exit patch its own wraps: a save of every file the
    parent imported, per child. The parent's object is made to save nothing in the child.
    Registered after ``process_startup``, so that it runs after coverage's own fork handler
    has started the child's object (coverage 7.18 only sets ``_auto_save = False`` on the
    parent's, which its os._exit patch does not read)."""
    current = getattr(getattr(coverage, "Coverage", None), "current", None)
    if current is None:
        return
    stash: dict[str, object] = {}

    def before() -> None:
        stash["parent"] = current()

    def in_child() -> None:
        parent = stash.get("parent")
        if parent is not None and parent is not current():
            parent.save = lambda: None  # type: ignore[attr-defined]

    os.register_at_fork(before=before, after_in_child=in_child)


def start() -> None:
    """Start coverage when asked; take over a shipped program read from stdin."""
    if not os.environ.get("COVERAGE_PROCESS_START"):
        return
    coverage = _import_coverage()
    if coverage is None:
        return
    try:
        import coverage.collector
        import coverage.inorout
        _quicken(coverage)
        if os.environ.get(SQLITE_SAVE) != "1":
            fastsave.install(coverage, FIND_UNEXECUTED)
    except Exception:  # another coverage release: slower, still right
        pass
    try:
        coverage.process_startup()  # type: ignore[attr-defined]
    except Exception:
        return
    _children_leave_parents_data(coverage)
    calls = os.environ.get(TRACE_FOREIGN_CALLS) != "1"
    if calls:
        foreign_calls.wrap_imported()
    foreign_imports.install(ROOT, bodies=os.environ.get(TRACE_FOREIGN_IMPORTS) != "1",
                            after=foreign_calls.wrap if calls else None)
    if sys.argv[:1] == ["-"] and not sys.stdin.isatty():
        _run_stdin_program()


start()
