"""The run page's logs, per-worker table and timeline.

Logs and the worker table live in Redis (the run's log ring, the worker registry), so
they are empty while the broker is down, and the page says why; the timeline is built
from the run's receipts, so it is always there.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import redis

from mainboard import keys
from mainboard.errors import MainboardError, first_line
from mainboard.receipts import IterationDone, RunCreated, RunFailed, RunFinished, RunResumed

if TYPE_CHECKING:
    from mainboard.dashboard.views import Views
    from mainboard.runs.store import RunHistory

LOG_LIMIT = 500


def plain(record: Any) -> dict[str, Any]:
    """A record (dataclass, pydantic model or mapping) as a JSON-ready dict."""
    if dataclasses.is_dataclass(record) and not isinstance(record, type):
        return dataclasses.asdict(record)
    for method in ("to_dict", "model_dump"):
        if hasattr(record, method):
            return dict(getattr(record, method)())
    return dict(record)


def extras(views: Views, h: RunHistory, broker_ok: bool) -> dict[str, Any]:
    """``logs``, ``workers``, ``timeline`` of a run, each with a note when it is partial."""
    client = views.live.client() if broker_ok else None
    logs, logs_note = _logs(client, h.run_id)
    workers, workers_note = _workers(views, client, h.run_id)
    return {"logs": logs, "logs_note": logs_note, "workers": workers,
            "workers_note": workers_note, "timeline": timeline_of(views, h)}


def _logs(client: Any, run_id: str) -> tuple[list[dict[str, Any]], str]:
    """The newest LOG_LIMIT lines in time order (the stream keeps up to 100k: reading all of
    it every refresh would cost the broker more than the page is worth)."""
    if client is None:
        return [], "the run's logs are kept in the broker, which does not answer"
    try:
        from mainboard.runs.logs import LogLine, log_counts
    except ImportError:
        return [], "this version records no run logs"
    try:
        raw = client.xrevrange(keys.run_logs(run_id), count=LOG_LIMIT)  # type: ignore[attr-defined]
        kept, dropped = log_counts(client, run_id)
    except (redis.RedisError, MainboardError) as exc:
        return [], first_line(exc)
    lines = sorted((LogLine.from_entry(i, f) for i, f in raw), key=lambda x: (x.ts, x.id))
    note = f"the last {len(lines):,} of {kept:,} lines kept for the run" if kept else \
        "no line logged about this run yet"
    if dropped:
        note += f"; {dropped:,} older lines dropped by the cap"
    return [plain(x) for x in lines], note


def _workers(views: Views, client: Any, run_id: str) -> tuple[list[dict[str, Any]], str]:
    if client is None:
        return [], "the worker table comes from the broker, which does not answer"
    try:
        from mainboard.runs.workers import worker_table
    except ImportError:
        rows = [{"worker": e["node"], "host": e.get("host", ""), "kind": "",
                 "job_id": e.get("job_id", ""), "batches": e.get("tasks_done"),
                 "samples_per_s": None, "last_heartbeat": e["beat"]}
                for e in views.live.registry()]
        return rows, "every worker on this broker (not yet attributed to runs)"
    try:
        return [plain(r) for r in worker_table(client, run_id)], ""
    except (redis.RedisError, MainboardError) as exc:
        return [], first_line(exc)


def timeline_of(views: Views, h: RunHistory) -> list[dict[str, Any]]:
    """Events of the run with times: the runs room's timeline when it has one, else the
    receipts' own (creation, each iteration, resumes, the end); computed once per change
    of the run's receipts (it reads every line, snapshots included)."""
    stamp = views.runs.stamp(h.run_id)
    cached = views.timelines.get(h.run_id)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    try:
        from mainboard.runs.timeline import timeline
    except ImportError:
        events = _receipt_timeline(views, h.run_id)
    else:
        try:
            events = [plain(e) for e in timeline(views.runs.store, h.run_id)]
        except MainboardError:
            events = _receipt_timeline(views, h.run_id)
    views.timelines[h.run_id] = (stamp, events)
    return events


def _receipt_timeline(views: Views, run_id: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for ts, p in views.runs.store.receipts(run_id).read_timed(errors=[]):
        if isinstance(p, RunCreated):
            events = [{"time": ts, "kind": "created", "iteration": p.from_iteration,
                       "detail": f"clone of {p.parent}" if p.parent else ""}]
        elif isinstance(p, IterationDone):
            events.append({"time": ts, "kind": "iteration", "iteration": p.iteration,
                           "detail": f"{p.samples:,} samples"})
        elif isinstance(p, RunResumed):
            events.append({"time": ts, "kind": "resumed", "iteration": p.from_iteration,
                           "detail": ""})
        elif isinstance(p, RunFinished):
            events.append({"time": ts, "kind": "finished", "iteration": None,
                           "detail": str(p.result.get("stop_reason", ""))})
        elif isinstance(p, RunFailed):
            events.append({"time": ts, "kind": "failed", "iteration": p.iteration,
                           "detail": p.error})
    return events


__all__ = ["extras", "plain", "timeline_of"]
