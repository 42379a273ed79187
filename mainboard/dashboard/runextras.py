"""The run page's logs, per-worker table, timeline and forecast, from the runs room.

Logs and the worker table live in Redis (the run's log stream, its spans and worker
hash), so they are empty while the broker is down, and the page says why; the timeline
is built from the run's receipts, so it is always there.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import redis

from mainboard import keys
from mainboard.dashboard.live import Live
from mainboard.dashboard.rundata import RunData
from mainboard.errors import MainboardError, first_line
from mainboard.runs.forecast import forecast_lines, read_forecast
from mainboard.runs.logs import LogLine, log_counts
from mainboard.runs.store import RunHistory
from mainboard.runs.timeline import timeline
from mainboard.runs.workers import WorkerTally

LOG_LIMIT = 500


def plain(record: Any) -> dict[str, Any]:
    """A record (dataclass or mapping) as a JSON-ready dict."""
    if dataclasses.is_dataclass(record) and not isinstance(record, type):
        return dataclasses.asdict(record)
    return dict(record)


class RunExtras:
    """What the run page adds to a run's receipts, with what it keeps between requests: each
    run's worker tally (spans summed so far) and its timeline (until its receipts change)."""

    def __init__(self, runs: RunData, live: Live) -> None:
        self.runs, self.live = runs, live
        self.timelines: dict[str, tuple[Any, list[dict[str, Any]]]] = {}  # id -> (stamp, events)
        self.tallies: dict[str, WorkerTally] = {}  # run id -> its spans summed so far

    def of(self, h: RunHistory, broker_ok: bool) -> dict[str, Any]:
        """``logs``, ``workers``, ``timeline`` of a run, each with a note when it is partial."""
        client = self.live.client() if broker_ok else None
        logs, logs_note = _logs(client, h.run_id)
        workers, workers_note = _workers(client, self.tallies, h.run_id)
        forecast = _forecast(client, h.run_id)
        return {"logs": logs, "logs_note": logs_note, "workers": workers,
                "workers_note": workers_note, "timeline": self.timeline(h),
                "forecast": forecast,
                "forecast_lines": forecast_lines(forecast) if forecast else []}

    def timeline(self, h: RunHistory) -> list[dict[str, Any]]:
        """Dispatch, completion, re-sends, adaptation, snapshots, pauses of the run, with
        times; computed once per change of its receipts (it reads every line, snapshots
        included)."""
        stamp = self.runs.stamp(h.run_id)
        cached = self.timelines.get(h.run_id)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        try:
            events = [plain(e) for e in timeline(self.runs.store, h.run_id)]
        except MainboardError as exc:  # an unreadable line: say so where the events would be
            events = [{"time": None, "kind": "unreadable", "iteration": None,
                       "detail": first_line(exc)}]
        self.timelines[h.run_id] = (stamp, events)
        return events


def _forecast(client: redis.Redis | None, run_id: str) -> dict[str, Any] | None:
    """The run's live forecast (a run with an error target), None without the broker."""
    if client is None:
        return None
    try:
        return read_forecast(client, run_id)
    except (redis.RedisError, MainboardError):
        return None


def _logs(client: redis.Redis | None, run_id: str) -> tuple[list[dict[str, Any]], str]:
    """The newest LOG_LIMIT lines in time order (the stream keeps up to 100k: reading all of
    it every refresh would cost the broker more than the page is worth)."""
    if client is None:
        return [], "the run's logs are kept in the broker, which does not answer"
    try:
        raw = client.xrevrange(keys.run_logs(run_id), count=LOG_LIMIT)
        kept, dropped = log_counts(client, run_id)
    except (redis.RedisError, MainboardError) as exc:
        return [], first_line(exc)
    lines = sorted((LogLine.from_entry(i, f) for i, f in raw), key=LogLine.order)
    note = f"the last {len(lines):,} of {kept:,} lines kept for the run" if kept else \
        "no line logged about this run yet"
    if dropped:
        note += f"; {dropped:,} older lines dropped by the cap"
    return [plain(x) for x in lines], note


def _workers(client: redis.Redis | None, tallies: dict[str, WorkerTally], run_id: str
             ) -> tuple[list[dict[str, Any]], str]:
    """One row per worker that ran a stage of the run (its spans and the worker registry);
    the run's tally is kept between requests, so each reads only the spans added since."""
    if client is None:
        return [], "the worker table comes from the broker, which does not answer"
    tally = tallies.setdefault(run_id, WorkerTally(run_id))
    try:
        rows = [plain(r) for r in tally.table(client)]
    except (redis.RedisError, MainboardError) as exc:
        return [], first_line(exc)
    return rows, "" if rows else "no worker has run a batch of this run yet"


__all__ = ["RunExtras", "plain"]
