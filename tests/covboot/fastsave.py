"""Each process's coverage written as one small marshal file; the report makes coverage's data.

Coverage saves a process's arcs into a SQLite file of its own: the tracer's packed arcs
unpacked in Python, a schema, a file table, an insert per file (12 ms for a CLI command of
30 files, more for a worker), and the report then opens ~1,500 such files one by one to
combine them (7 s at the end of the suite). Here ``Coverage.save`` writes the tracer's raw
sets instead, named by the file mapper as coverage would name them, in one ``marshal``
dump (under a millisecond), and scripts/coverage_report.py unions them all and unpacks each
distinct arc once, into one coverage data file that ``combine`` takes with any others.

Coverage's own save runs where this cannot stand in for it: a plugin's file tracers, the
process that records the files no test ran (``MAINBOARD_COVERAGE_FIND_UNEXECUTED``), or a
coverage release whose collector lacks the names used here. A file appears whole or not
at all (written beside its name, then renamed): a process killed while saving leaves a
``.part`` file, which the report names and deletes.

Format (``FORMAT``): ``marshal.dumps((FORMAT, packed, {file: set_of_arcs}))``: ``packed``
says the arcs are the C tracer's packed ints (coverage/ctracer/tracer.c,
``CTracer_record_pair``), else ``(from, to)`` pairs.
"""

from __future__ import annotations

import marshal
import os
import socket
from typing import Any

FORMAT = 1
PREFIX = "mcov."  # beside coverage's own files (``cov.*``), in COVERAGE_FILE's folder
PART = ".part"


def install(coverage: Any, find_unexecuted: str) -> None:
    """Make ``Coverage.save`` the fast one in this process (and its forks)."""
    cls = coverage.Coverage
    original = cls.save
    if getattr(original, "_mainboard_fast", False):
        return

    def save(self: Any) -> None:
        if os.environ.get(find_unexecuted) or not _save(self):
            original(self)

    save._mainboard_fast = True  # type: ignore[attr-defined]
    cls.save = save


def _save(cov: Any) -> bool:
    """Write what the collector holds and take it out of the collector; False: coverage's
    own save is needed (nothing was written)."""
    collector = getattr(cov, "_collector", None)
    if collector is None or not getattr(collector, "branch", False):
        return False
    core = getattr(collector, "core", None)
    data, tracers = getattr(collector, "data", None), getattr(collector, "file_tracers", {})
    if core is None or not isinstance(data, dict) or tracers:
        return False
    taken: dict[str, set[Any]] = {}
    for name, live in list(data.items()):  # tracers on other threads may still add
        if live:
            snapshot = live.copy()
            taken.setdefault(collector.cached_mapped_file(name), set()).update(snapshot)
            live.difference_update(snapshot)
    if taken:
        _write((FORMAT, bool(core.packed_arcs), taken), cov.config.data_file)
    return True


def _write(payload: tuple[int, bool, dict[str, set[Any]]], data_file: str) -> None:
    folder = os.path.dirname(os.path.abspath(data_file))
    name = f"{PREFIX}{socket.gethostname()}.pid{os.getpid()}.{os.urandom(4).hex()}"
    part = os.path.join(folder, name + PART)
    with open(part, "wb") as file:
        file.write(marshal.dumps(payload))
    os.replace(part, os.path.join(folder, name))
