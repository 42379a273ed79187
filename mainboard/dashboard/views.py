"""The JSON each page polls: runs list, one run, fleet, jobs; receipts first, Redis on top.

Every view answers with the broker down: rows come from receipts, and what only Redis
knows (live status, worker registry, run logs) is left empty while ``broker.ok`` is false.
Slow sources (the fleet's schedulers over ssh) are cached for a few seconds so that a
page polling every second costs the hosts nothing extra. Job states come from one shared
sweep (``mainboard.jobs.live.SharedSweep``): an open Jobs page keeps them a few seconds
fresh, however many pages ask, with at most one sweep running at a time.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from typing import Any

from mainboard.config import Config
from mainboard.dashboard import rundata
from mainboard.dashboard.live import Live
from mainboard.dashboard.runextras import RunExtras
from mainboard.errors import MainboardError, first_line
from mainboard.fleet.records import read_fleet
from mainboard.fleet.status import fleet_status
from mainboard.fleet.workers import scheduler_share
from mainboard.hosts.access import Hosts
from mainboard.jobs.job import Job
from mainboard.jobs.live import SharedSweep, Sweep
from mainboard.parents.table import view
from mainboard.runs.rasters import raster_views
from mainboard.runs.store import RunHistory
from mainboard.runs.tasktable import task_rows

PAGE_SIZE = 1000
FLEET_CACHE_S = 3.0
LOG_LINES = 500
LOGS_EVERY_S = 5
JOBS_FRESH_S = 2.0  # an open Jobs page shows job states no older than this (plus one sweep)


def _digest(parts: list[str]) -> str:
    return hashlib.blake2b("\n".join(parts).encode(), digest_size=8).hexdigest()


def _runs_digest(histories: list[RunHistory], broker_ok: bool,
                 states: dict[str, dict[str, str]]) -> str:
    parts = [f"{h.run_id}:{h.updated}" for h in histories]
    parts += [f"{k}:{v.get('live')}:{v.get('status')}" for k, v in sorted(states.items())]
    return _digest([str(broker_ok), *parts])


def _status(h: RunHistory, state: dict[str, str]) -> str:
    """The receipts' verdict, sharpened by Redis: live runs are running (or paused)."""
    status = h.status
    if status != "unfinished":
        return status
    told = state.get("status", "")
    if told in ("paused", "stopped"):
        return told
    return "running" if state.get("live") else "unfinished"


class Views:
    """One workspace's dashboard data; thread-safe, shared by every request."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.runs = rundata.RunData(config.state_dir)
        self.live = Live(config)
        self._fleet: tuple[float, dict[str, Any]] | None = None
        self._fleet_lock = threading.Lock()
        self.extras = RunExtras(self.runs, self.live)  # logs, workers, timeline of a run
        self.chi2: dict[str, rundata.Chi2Memo] = {}  # run id -> its chi2/dof series so far
        self._hosts: Hosts | None = None
        self._hosts_lock = threading.Lock()
        self.job_sweep = SharedSweep(self._sweep_hosts, max_age=JOBS_FRESH_S,
                                     share=scheduler_share(config))  # the broker's, if any

    def broker(self) -> dict[str, Any]:
        """Whether the broker answers, and the one line to show when it does not."""
        return self.live.probe().to_dict()

    # -- runs ------------------------------------------------------------------------------

    def runs_list(self, offset: int = 0, limit: int = PAGE_SIZE) -> dict[str, Any]:
        """Runs, live ones first, then most recently updated; one page of ``limit`` rows."""
        broker = self.broker()
        histories = self.runs.histories()
        open_ids = [h.run_id for h in histories if h.status == "unfinished"]
        states = self.live.run_states(open_ids) if broker["ok"] else {}
        rows = []
        for h in histories:
            row = self.runs.row(h)
            row["status"] = _status(h, states.get(h.run_id, {}))
            rows.append(row)
        rows.sort(key=lambda r: (r["status"] not in ("running", "paused"), -r["updated"]))
        return {"broker": broker, "total": len(rows), "offset": offset, "limit": limit,
                "runs": rows[offset:offset + limit],
                "version": _runs_digest(histories, broker["ok"], states)}

    def run(self, ref: str) -> dict[str, Any]:
        """Everything the run page shows; UnknownRun for an id that names no run."""
        h, entry = self.runs.resolve(ref)
        broker = self.broker()
        if h.created.kind is not None:  # a scan, tune or campaign: its table of children
            return self._parent(h, broker)
        state = self.live.run_states([h.run_id]).get(h.run_id, {}) if broker["ok"] else {}
        out: dict[str, Any] = {
            "broker": broker, "summary": {**self.runs.row(h), "status": _status(h, state)},
            "live_state": state, "settings": h.created.spec,
            "exact": rundata.exact_of(h),
            "series": rundata.series(h, entry.times,
                                     self.chi2.setdefault(h.run_id, rundata.Chi2Memo())),
            "result": h.result,
            "failure": h.failed.model_dump() if h.failed else None,
            "snapshots": rundata.snapshots(h, entry.snapshots),
            "lineage": rundata.lineage(self.runs, h),
            "diagnostics": rundata.diagnostics(h),
            "observables": rundata.observables(h),
        }
        out.update(self.extras.of(h, broker["ok"]))
        return out

    def run_tasks(self, ref: str) -> dict[str, Any]:
        """A run's task table (as ``runs tasks`` lists it) and what its plot_line and image
        tasks evaluated (a line plot, a heat map); empty for a run without tasks."""
        h, _ = self.runs.resolve(ref)
        plain = h.created.kind is None
        return {"run_id": h.run_id, "status": h.status,
                "tasks": task_rows(h) if plain else [],
                "rasters": raster_views(h) if plain else []}

    def _parent(self, h: RunHistory, broker: dict[str, Any]) -> dict[str, Any]:
        """A parent run's page: its table (parents.table, as `runs show` prints it)."""
        return {"broker": broker, "summary": self.runs.row(h), "settings": h.created.spec,
                "parent": view(h)}

    def runs_version(self) -> str:
        """Changes when the runs list would: a receipt written, a run going live or not (the
        list's data carries the same digest, so an opening page needs no version first)."""
        histories = self.runs.histories()
        broker = self.live.probe()
        open_ids = [h.run_id for h in histories if h.status == "unfinished"]
        states = self.live.run_states(open_ids) if broker.ok else {}
        return _runs_digest(histories, broker.ok, states)

    def run_version(self, ref: str) -> str:
        """Changes when the run page would: a receipt, the live state, the broker, and every
        LOGS_EVERY_S seconds while a coordinator holds the run (logs and worker rows live in
        Redis, not in receipts)."""
        h, _ = self.runs.resolve(ref)
        broker = self.live.probe()
        state = self.live.run_states([h.run_id]).get(h.run_id, {}) if broker.ok else {}
        ticking = str(int(time.time() // LOGS_EVERY_S)) if state.get("live") else ""
        return _digest([str(self.runs.stamp(h.run_id)), str(sorted(state.items())),
                        str(broker.ok), ticking])

    # -- fleet and jobs --------------------------------------------------------------------

    def fleet(self) -> dict[str, Any]:
        """Every fleet worker (receipts + scheduler + Celery) and every worker that beats on
        the broker; cached for FLEET_CACHE_S (asking schedulers costs an ssh round trip)."""
        with self._fleet_lock:
            if self._fleet and time.monotonic() - self._fleet[0] < FLEET_CACHE_S:
                return self._fleet[1]
            data = self._fleet_now()
            self._fleet = (time.monotonic(), data)
            return data

    def _fleet_now(self) -> dict[str, Any]:
        broker = self.broker()
        note = ""
        rows: list[dict[str, Any]] = []
        if broker["ok"] and _fleet_from_receipts(self.config, live_only=True):
            try:
                rows = [v.to_dict() for v in fleet_status(self.config, include_stopped=True,
                                                          timeout=0.5)]
            except MainboardError as exc:
                note = first_line(exc)
        if not rows:
            rows = _fleet_from_receipts(self.config)
            if not broker["ok"] and rows:
                note = "broker down: workers as the fleet's receipts record them (state " \
                    "unknown until the broker answers)"
        registry = self.live.registry() if broker["ok"] else []
        now = time.time()
        for entry in registry:
            started = float(entry.get("started") or 0) or None
            done = int(entry.get("tasks_done") or 0)
            entry["tasks_per_s"] = done / (entry["beat"] - started) if started and \
                entry["beat"] > started else None
            entry["age_s"] = now - entry["beat"]
        by_prefix = {e["node"].partition("@")[0]: e for e in registry}
        for row in rows:  # a fleet worker's throughput, from its registry entry
            entry = by_prefix.get(str(row.get("node", "")).partition("@")[0], {})
            row["tasks_per_s"] = entry.get("tasks_per_s")
        return {"broker": broker, "workers": rows, "registry": registry, "note": note}

    def jobs(self) -> dict[str, Any]:
        """Every job in its current state (the shared sweep: no older than JOBS_FRESH_S),
        host, times and exit code; which hosts did not answer; unreadable lines."""
        look = self.job_sweep.get()
        now = time.time()
        rows = []
        for v in reversed(look.views):  # newest first
            row = look.entry(v, now)
            row.pop("spec", None)
            row["updated"] = v.file.stat().st_mtime if v.file and v.file.exists() else None
            rows.append(row)
        return {"jobs": rows, "errors": [str(e) for e in look.errors[:20]],
                "checked_at": look.at, "unreachable_hosts": look.unreachable,
                "version": self._jobs_digest(look)}

    def jobs_version(self) -> str:
        """Changes when any job's receipts change or a host stops or starts answering;
        asking it starts a sweep in the background when the last is JOBS_FRESH_S old, so
        an open Jobs page keeps the states fresh (one directory scan, no file read)."""
        self.job_sweep.kick()
        return self._jobs_digest(self.job_sweep.latest())

    def _jobs_digest(self, look: Sweep | None) -> str:
        folder = self.config.state_dir / "jobs"
        try:
            with os.scandir(folder) as found:
                stamps = sorted(f"{e.name}:{e.stat().st_mtime_ns}:{e.stat().st_size}"
                                for e in found if e.name.endswith(".ndjson"))
        except OSError:
            stamps = []
        down = sorted(look.unreachable) if look is not None else []
        return _digest([*stamps, f"unreachable:{down}"])

    def _sweep_hosts(self) -> Hosts:
        """The hosts the job sweep asks, opened once and kept (their connections reused)."""
        with self._hosts_lock:
            if self._hosts is None:
                self._hosts = Hosts(config=self.config)
            return self._hosts

    def job_logs(self, ref: str, stream: str) -> str:
        """The last LOG_LINES lines of a job's stdout or stderr, fetched from its host."""
        hosts = Hosts(config=self.config)
        try:
            return Job(hosts, ref).logs(tail=LOG_LINES, stream=stream)  # type: ignore[arg-type]
        finally:
            hosts.close()

    def close(self) -> None:
        self.live.close()
        with self._hosts_lock:
            if self._hosts is not None:
                self._hosts.close()


def _fleet_from_receipts(config: Config, live_only: bool = False) -> list[dict[str, Any]]:
    """Fleet workers as ``fleet.ndjson`` records them (no scheduler, no broker asked)."""
    state = read_fleet(config.state_dir)
    rows = []
    for worker_id, w in state.started.items():
        stop = state.stopped.get(worker_id)
        if live_only and stop is not None:
            continue
        rows.append({"worker_id": worker_id, "host": w.host, "kind": w.kind,
                     "node": w.node, "job_id": str(w.job.get("job_id", "")),
                     "state": ("lost" if stop.lost else "stopped") if stop else "unknown",
                     "job_state": "unknown",
                     "queues": list(w.queues), "concurrency": w.concurrency,
                     "tasks_done": None, "last_heartbeat": None, "online": False,
                     "reason": stop.reason if stop else ""})
    return rows

__all__ = ["PAGE_SIZE", "Views"]
