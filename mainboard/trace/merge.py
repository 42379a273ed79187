"""Runs, jobs and trace files merged into one Chrome/Perfetto trace, with a manifest.

Why one clock: a run's spans are on the broker's clock already (each worker measured its
offset); a job's phases are on this machine's clock and its user spans
(``spans.ndjson`` in its directory) on the job host's, so both are moved by the offset
measured here (this machine to the broker, the host to this machine) and each part's
offset and source are recorded in ``otherData.merge``. A track (pid) per machine, a thread
(tid) per worker or job process.

A study or a batch stands for its jobs (``study:ID``, ``batch:ID``, or a bare id that
names no run or job): each dispatched job is a part of its own, its manifest entry
naming the study or batch it came from.

Extension point ``SOURCES``: a reader for items written ``KIND:REF`` (for example GPU
kernel timelines from CUPTI, ``cupti:FILE``, not shipped: no GPU here) returns a
:class:`Part`; register it with :func:`register_source`.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from mainboard.batch.store import BatchStore
from mainboard.errors import (
    BrokerError,
    StudyError,
    UnknownBatch,
    UnknownJob,
    UnknownRun,
    UserError,
)
from mainboard.hosts.access import Hosts
from mainboard.jobs.job import Job, bridge_of
from mainboard.jobs.trace import job_phases
from mainboard.runs.spans import clock_offset
from mainboard.runs.store import RunStore
from mainboard.runs.trace import TraceSpan, chrome_trace, run_trace
from mainboard.runs.userspans import JOB_SPANS
from mainboard.study.ledger import StudyStore


@dataclass
class Part:
    """One merged item: what it is, where its events came from, the offset applied."""

    kind: str
    id: str
    source: str
    offset: float
    spans: list[TraceSpan] = field(default_factory=list)
    of: str | None = None  # "study ID" / "batch ID" for a job that came from one

    def manifest(self) -> dict[str, Any]:
        """Its manifest entry."""
        entry = {"kind": self.kind, "id": self.id, "source": self.source,
                 "offset_s": self.offset, "events": len(self.spans)}
        return entry if self.of is None else {**entry, "of": self.of}


Reader = Callable[[str], Part]
SOURCES: dict[str, Reader] = {}


def register_source(kind: str, reader: Reader) -> None:
    """Items ``KIND:REF`` are read by ``reader`` (the CUPTI hook, and any other)."""
    SOURCES[kind] = reader


def spans_of_document(doc: dict[str, Any]) -> list[TraceSpan]:
    """A Trace Event document (ours: ``otherData.origin_unix_s``) back to spans."""
    origin = float(doc.get("otherData", {}).get("origin_unix_s", 0.0))
    events = doc.get("traceEvents", [])
    names = {(e.get("name"), e.get("pid"), e.get("tid")): e["args"]["name"]
             for e in events if e.get("ph") == "M"}
    out = []
    for e in events:
        if e.get("ph") not in ("X", "i"):
            continue
        group = names.get(("process_name", e["pid"], None), str(e["pid"]))
        track = names.get(("thread_name", e["pid"], e["tid"]), str(e["tid"]))
        dur = e.get("dur")
        out.append(TraceSpan(group, track, e["name"], origin + e["ts"] / 1e6,
                             None if dur is None else dur / 1e6, e.get("args", {})))
    return out


def _file_part(path: Path) -> Part:
    try:
        doc = json.loads(path.read_text())
        spans = spans_of_document(doc)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:  # any other JSON
        raise UserError(f"{path}: not a trace file written by mainboard ({exc}); give a "
                        "run, a job or a file from `mainboard trace profile`") from None
    return Part("file", path.name, str(path), 0.0, spans)


def host_offset(board: Hosts, host: str) -> float:
    """Seconds to add to ``host``'s clock to get this machine's (one round trip)."""
    bridge = bridge_of(board.on(host))
    before = time.time()
    done = bridge.run(["date", "+%s.%N"], timeout=30)
    after = time.time()
    try:
        return (before + after) / 2 - float(done.stdout.split()[-1])
    except (ValueError, IndexError):
        return 0.0  # a host without %N: its clock taken as ours


def _job_part(board: Hosts, job_id: str, broker_offset: float) -> Part:
    handle = Job(board, job_id)
    view = handle.view()
    track = f"{view.name} ({handle.id})"
    spans = [TraceSpan(view.host, track, p.name, p.start + broker_offset, p.end - p.start,
                       {"job": handle.id}) for p in job_phases(handle.store, handle.id)]
    path = f"{view.submitted.job_dir}/{JOB_SPANS}"
    bridge = bridge_of(board.on(view.host), view.submitted.root)
    done = bridge.run(["/bin/sh", "-c", f"cat -- {shlex.quote(path)} 2>/dev/null || true"],
                      timeout=60)
    offset = broker_offset + (host_offset(board, view.host) if done.stdout.strip() else 0.0)
    for line in done.stdout.splitlines():
        try:
            row = json.loads(line)
            spans.append(TraceSpan(view.host, f"{track} pid {row['pid']}", str(row["name"]),
                                   float(row["t"]) + offset, float(row["d"]),
                                   {**row.get("args", {}), "job": handle.id, "user": True}))
        except (ValueError, KeyError, TypeError):
            continue  # a line cut by a job killed mid-write
    return Part("job", handle.id, f"receipts + {view.host}:{path}", offset, spans)


def resolve(board: Hosts, items: Sequence[str], r: redis.Redis | None) -> list[Part]:
    """Every item as a part, all resolved before anything is written (an unknown one
    raises UserError naming it)."""
    store = RunStore(board.config.state_dir)
    offset = clock_offset(r) if r is not None else 0.0
    found: list[tuple[str, str, str | None]] = []
    for item in items:
        kind, _, ref = item.partition(":")
        if ref and kind in GROUPS:
            found += [("job", job, f"{kind} {ref}") for job in GROUPS[kind](board, ref)]
        elif ref and kind in SOURCES:
            found.append((kind, ref, None))
        elif item.endswith(".json") and Path(item).is_file():
            found.append(("file", item, None))
        else:
            found += _named(board, store, item)
    parts = []
    for kind, ref, of in found:
        if kind == "run":
            if r is None:
                raise BrokerError(f"run {ref}: its spans live in the broker, which is not "
                                  "running; start it with `mainboard broker up`")
            doc = run_trace(r, store, ref)
            parts.append(Part("run", ref, f"redis spans of run {ref} + receipts", 0.0,
                              spans_of_document(doc)))
        elif kind == "job":
            parts.append(_job_part(board, ref, offset))
            parts[-1].of = of
        elif kind == "file":
            parts.append(_file_part(Path(ref)))
        else:
            parts.append(SOURCES[kind](ref))
    return parts


def study_jobs(board: Hosts, ref: str) -> list[str]:
    """The latest job of each of a study's runs (a run retried counts once: its last try)."""
    view = StudyStore(board.config.state_dir).load(ref)
    return [entry.submitted.job for entry in view.runs.values()]


def batch_jobs(board: Hosts, ref: str) -> list[str]:
    """The jobs a batch dispatched (one that never reached its target has none)."""
    view = BatchStore(board.config.state_dir).load(ref)
    return [view.dispatched[j.name].job for j in view.jobs if j.name in view.dispatched]


GROUPS: dict[str, Callable[[Hosts, str], list[str]]] = {"study": study_jobs,
                                                        "batch": batch_jobs}


def _named(board: Hosts, store: RunStore, item: str) -> list[tuple[str, str, str | None]]:
    """A bare id: a run, else a job, else a study, else a batch (the first that knows it)."""
    try:
        return [("run", store.find(item).run_id, None)]
    except UnknownRun:
        pass
    try:
        return [("job", Job(board, item).id, None)]
    except UnknownJob:
        pass
    for kind, jobs_of in GROUPS.items():
        try:
            return [("job", job, f"{kind} {item}") for job in jobs_of(board, item)]
        except (StudyError, UnknownBatch):
            continue
    raise UserError(f"{item!r}: no run, job, study, batch or trace file of that id or name; "
                    "see `mainboard runs list`, `jobs list`, `study list`, `batch list`")


def merge(parts: Sequence[Part], clock: str) -> dict[str, Any]:
    """One document of every part's spans, the manifest in ``otherData.merge``."""
    spans = [s for p in parts for s in p.spans]
    return chrome_trace(spans, {"merge": {"clock": clock,
                                          "parts": [p.manifest() for p in parts]}})


__all__ = ["GROUPS", "SOURCES", "Part", "batch_jobs", "study_jobs", "host_offset", "merge", "register_source", "resolve",
           "spans_of_document"]
