"""Chrome/Perfetto traces (Trace Event Format JSON) of a run, and the format itself.

Why this format: Perfetto (ui.perfetto.dev) and chrome://tracing open it as is, one
process row per host and one track per worker, so a user sees where time goes across
machines without installing anything. Span times are on the broker's clock (each worker
corrected its own by the offset it measured against Redis ``TIME``); the coordinator's
phases come from the run's receipts, corrected by the offset it registered.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from mainboard.runs.spans import read_spans, run_workers
from mainboard.runs.store import RunStore
from mainboard.runs.timeline import timeline
from mainboard.runs.userspans import USER_PREFIX

COORDINATOR = "coordinator"
_INSTANTS = ("resend", "pause", "resume", "stop", "finish", "fail", "start")


@dataclass(frozen=True)
class TraceSpan:
    """One slice: on track ``track`` of group ``group`` (a host), from ``start`` for ``duration``
    seconds (``duration`` None: an instant)."""

    group: str
    track: str
    name: str
    start: float
    duration: float | None
    args: Mapping[str, Any] = field(default_factory=dict)


def chrome_trace(spans: Iterable[TraceSpan], other: Mapping[str, Any] | None = None
                 ) -> dict[str, Any]:
    """The Trace Event Format document: a process per group, a thread (track) per track,
    times in microseconds from the first span."""
    spans = sorted(spans, key=lambda s: s.start)
    origin = spans[0].start if spans else 0.0
    groups: dict[str, int] = {}
    tracks: dict[tuple[str, str], int] = {}
    events: list[dict[str, Any]] = []
    for s in spans:
        pid = groups.setdefault(s.group, len(groups) + 1)
        tid = tracks.setdefault((s.group, s.track), len(tracks) + 1)
        event = {"name": s.name, "cat": s.group, "pid": pid, "tid": tid,
                 "ts": round((s.start - origin) * 1e6, 3), "args": dict(s.args)}
        if s.duration is None:
            event.update(ph="i", s="t")
        else:
            event.update(ph="X", dur=round(max(s.duration, 0.0) * 1e6, 3))
        events.append(event)
    meta = [{"name": "process_name", "ph": "M", "pid": pid, "args": {"name": group}}
            for group, pid in groups.items()]
    meta += [{"name": "thread_name", "ph": "M", "pid": groups[group], "tid": tid,
              "args": {"name": track}} for (group, track), tid in tracks.items()]
    return {"traceEvents": meta + events, "displayTimeUnit": "ms",
            "otherData": {"origin_unix_s": origin, "spans": len(spans),
                          "tracks": len(tracks), "groups": len(groups), **dict(other or {})}}


def run_trace(r: redis.Redis, store: RunStore, run_id: str) -> dict[str, Any]:
    """Every stage span of the run (a track per worker, grouped by host) and the
    coordinator's iteration phases and events (its own track)."""
    info = run_workers(r, run_id)
    spans = read_spans(r, run_id)
    out = [TraceSpan(str(info.get(s.worker, {}).get("host", "?")), s.worker,
                     s.stage.removeprefix(USER_PREFIX), s.start, s.duration,
                     {**s.attrs, "iteration": s.iteration, "batch": s.batch, "n": s.n,
                      "attempt": s.attempt, "user": s.stage.startswith(USER_PREFIX)})
           for s in spans]
    coordinator = info.get(COORDINATOR, {})
    offset, host = float(coordinator.get("offset", 0.0)), str(coordinator.get("host", "?"))
    phase: dict[tuple[int | None, str], float] = {}
    for event in timeline(store, run_id):
        t = event.time + offset
        phase[(event.iteration, event.kind)] = t
        if event.kind in _INSTANTS:
            out.append(TraceSpan(host, COORDINATOR, event.kind, t, None,
                                 {"iteration": event.iteration, "detail": event.detail}))
    for (k, kind), t in phase.items():
        start_kind = {"complete": "dispatch", "adapt": "complete", "snapshot": "adapt"}.get(kind)
        if start_kind and (k, start_kind) in phase:
            began = phase[(k, start_kind)]
            name = {"complete": "batches", "adapt": "merge+adapt", "snapshot": "snapshot"}[kind]
            out.append(TraceSpan(host, COORDINATOR, f"{name} it={k}", began, t - began,
                                 {"iteration": k}))
    workers = {s.worker for s in spans}
    hosts = {str(info.get(w, {}).get("host", "?")) for w in workers}
    return chrome_trace(out, {"run_id": run_id, "workers": len(workers), "hosts": len(hosts)})


def write_trace(doc: Mapping[str, Any], path: Path) -> None:
    """Write the document whole (a reader never sees half a file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, allow_nan=False, separators=(",", ":")))
    tmp.replace(path)


__all__ = ["TraceSpan", "chrome_trace", "run_trace", "write_trace"]
