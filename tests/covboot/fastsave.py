"""Each process's coverage written as one small marshal file; the report makes coverage's data.

Coverage saves a process's arcs into a SQLite file of its own: the tracer's packed arcs
unpacked in Python, a schema, a file table, an insert per file (12 ms for a CLI command of
30 files, more for a worker), and the report then opens ~1,500 such files one by one to
combine them (7 s at the end of the suite). Here ``Coverage.save`` writes the tracer's raw
sets instead, named by the file mapper as coverage would name them, in one ``marshal``
dump (under a millisecond), and ``gather`` (run by scripts/coverage_report.py) unions them
all and unpacks each distinct arc once, into one coverage data file that ``combine`` takes
with any others: the format is written and read here only.

Coverage's own save runs where this cannot stand in for it: a plugin's file tracers, the
process that records the files no test ran (``MAINBOARD_COVERAGE_FIND_UNEXECUTED``), or a
coverage release whose collector lacks the names used here. A file appears whole or not
at all (written beside its name, then renamed): a process killed while saving leaves a
``.part`` file, which ``gather`` names and deletes.

Format (``FORMAT``): ``marshal.dumps((FORMAT, packed, {file: set_of_arcs}))``: ``packed``
says the arcs are the C tracer's packed ints (coverage/ctracer/tracer.c,
``CTracer_record_pair``), else ``(from, to)`` pairs.
"""

from __future__ import annotations

import marshal
import os
import socket
import sys
from pathlib import Path
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


def _unpack(packed: int) -> tuple[int, int]:
    """One arc from the C tracer's packed int (coverage/ctracer/tracer.c,
    ``CTracer_record_pair``: two 28-bit line numbers, their signs in bits 56 and 57)."""
    first, second = packed & 0xFFFFFFF, (packed >> 28) & 0xFFFFFFF
    return (-first if packed & (1 << 56) else first, -second if packed & (1 << 57) else second)


def gather(data: Path) -> None:
    """The processes' files in ``data`` unioned into one coverage data file beside coverage's
    own (``cov.fast.<pid>``), which combine then takes like the others; each distinct arc is
    unpacked once. Read files are deleted, as combine deletes its own."""
    # lazy: this module loads at every process's start, before coverage may be importable
    from coverage import CoverageData

    merged: dict[str, set[tuple[int, int]]] = {}
    packed: dict[str, set[int]] = {}
    files = sorted(p for p in data.iterdir() if p.name.startswith(PREFIX))
    torn = [p for p in files if p.name.endswith(PART)]
    if torn:
        print(f"coverage_report: {len(torn)} data file(s) left unfinished by a process killed "
              f"while saving (skipped): {', '.join(p.name for p in torn)}", file=sys.stderr)
    for part in files:
        if part not in torn:
            fmt, is_packed, arcs = marshal.loads(part.read_bytes())
            if fmt != FORMAT:
                raise SystemExit(f"coverage_report: {part} has format {fmt!r}; this checkout "
                                 f"reads {FORMAT} (tests/covboot/fastsave.py)")
            for name, found in arcs.items():
                (packed if is_packed else merged).setdefault(name, set()).update(found)
        part.unlink()
    for name, found in packed.items():
        merged.setdefault(name, set()).update(map(_unpack, found))
    if merged:
        out = CoverageData(basename=str(data / f"cov.fast.{os.getpid()}"))
        out.add_arcs(merged)
        out.write()
