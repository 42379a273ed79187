"""What workers ship about a run (issue 12): spans and log lines of hosts whose clocks
disagree land on the broker's clock, and a run's log is a ring that counts what it dropped.

Real redis-server; the workers' side is the real :class:`Shipper` (what every batch worker
process runs), the reading side the real ``mainboard runs logs|trace`` commands. A host
clock that is off cannot be made here without root, so each "host" reads a clock shifted
by a fixed skew: the offset it measures against Redis ``TIME`` must undo it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from mainboard import keys
from mainboard.cli import cli
from mainboard.config import Config
from mainboard.dashboard.runextras import _logs as dashboard_logs
from mainboard.receipts import RunCreated
from mainboard.runs import logs as run_logs
from mainboard.runs import spans as run_spans
from mainboard.runs.logs import LogLine, append_logs, log_counts, read_logs
from mainboard.runs.spans import Span, append_spans, read_spans, run_workers
from mainboard.runs.store import RunStore
from mainboard.runs.workers import WorkerRow, WorkerTally, worker_table
from mainboard.tasks import telemetry
from tests.support.integration import spec, write_workspace
from tests.support.services import RedisServer

pytestmark = pytest.mark.live


@pytest.fixture
def workspace(tmp_path: Path, redis_server: RedisServer) -> Config:
    return write_workspace(tmp_path / "ws", redis_server)


def known_run(config: Config, run_id: str, name: str) -> None:
    """A run in the store (its receipts say who it is; what workers ship lives in Redis)."""
    RunStore(config.state_dir).record(RunCreated(run_id=run_id, name=name, spec=spec(name=name)))


def invoke(config: Config, *args: str) -> Any:
    return CliRunner().invoke(cli, ["--config", str(config.path), *args])


def ship_from(url: str, node: str, host: str, skew: float, run_id: str,
              monkeypatch: pytest.MonkeyPatch) -> None:
    """One worker process on a host whose clock is ``skew`` s off: a span and a log line
    stamped with that clock, shipped by the real shipper (which measures its offset)."""
    skewed = SimpleNamespace(time=lambda: time.time() + skew)
    with monkeypatch.context() as patch:
        patch.setattr(run_spans, "time", skewed)  # the clock clock_offset reads
        patch.setenv(telemetry.HOST_ENV, host)
        ship = telemetry.Shipper(url, node)
        start = skewed.time()
        telemetry.span(ship, "evaluate", run_id, 1, 0, 1000, 0, start, 0.25)
        ship.lines.append((run_id, LogLine(start, "warn", node, host, f"hello from {host}",
                                           1, 0, "evaluate")))
        ship.close()  # the last flush, as at worker shutdown
    assert ship.failed == 0


def test_spans_and_lines_of_hosts_with_skewed_clocks_land_on_the_broker_clock(
        workspace: Config, redis_server: RedisServer, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    run_id = "c10c000000000001"
    known_run(workspace, run_id, "skewed")
    r = redis.Redis.from_url(redis_server.url)
    ship_from(redis_server.url, "slurm-ahead-11@nodeA", "nodeA", +3600.0, run_id, monkeypatch)
    ship_from(redis_server.url, "ssh-behind-0@nodeB", "nodeB", -1800.0, run_id, monkeypatch)
    seconds, micros = r.time()
    broker_now = seconds + micros / 1e6

    offsets = {w: info["offset"] for w, info in run_workers(r, run_id).items()}
    assert offsets["slurm-ahead-11@nodeA"] == pytest.approx(-3600.0, abs=1.0)
    assert offsets["ssh-behind-0@nodeB"] == pytest.approx(1800.0, abs=1.0)
    starts = [s.start for s in read_spans(r, run_id)]
    assert len(starts) == 2 and all(abs(t - broker_now) < 5 for t in starts), starts
    lines = read_logs(r, run_id)
    assert [x.host for x in lines] and all(abs(x.ts - broker_now) < 5 for x in lines)

    out = tmp_path / "trace.json"
    done = invoke(workspace, "runs", "trace", "skewed", "-o", str(out), "--json")
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["hosts"] == 2
    doc = json.loads(out.read_text())
    slices = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    hosts = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    assert {"nodeA", "nodeB"} <= hosts and len({e["pid"] for e in slices}) == 2
    assert max(e["ts"] for e in slices) < 5e6  # side by side, not 5,400 s apart


def test_a_run_log_is_a_ring_that_counts_what_it_dropped(
        workspace: Config, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:
    assert run_logs.MAX_LINES == 100_000  # what the issue asks; a smaller ring tests the cap
    monkeypatch.setattr(run_logs, "MAX_LINES", 1000)
    run_id = "c10c000000000002"
    known_run(workspace, run_id, "chatty")
    r = redis.Redis.from_url(redis_server.url)
    with r.pipeline(transaction=False) as pipe:
        append_logs(pipe, run_id, [LogLine(1e9 + i, "info", "w@h", "h", f"line {i}")
                                   for i in range(3000)])
        pipe.execute()
    kept, dropped = log_counts(r, run_id)
    assert 1000 <= kept < 1200 and kept + dropped == 3000  # trimmed by whole stream nodes
    lines = read_logs(r, run_id)
    assert lines[0].message == f"line {dropped}" and lines[-1].message == "line 2999"

    shown = invoke(workspace, "runs", "logs", "chatty", "--tail", "2")
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.splitlines()[-1].endswith("line 2999")
    assert shown.stderr.strip() == (f"({dropped:,} older lines were dropped; the log keeps "
                                    f"the last {kept:,})")
    _, note = dashboard_logs(r, run_id)
    assert note.endswith(f"of {kept:,} lines kept for the run; {dropped:,} older lines "
                         "dropped by the cap")


def test_the_dashboards_worker_tally_reads_only_new_spans_and_matches_a_full_read(
        redis_server: RedisServer) -> None:
    """The run page keeps a tally per run between requests; whatever arrives in between
    (new batches, a re-sent attempt, the same final span twice, the stream recreated when the
    run is removed and run again), its rows are those of a full read."""
    run_id = "c10c000000000003"
    r = redis.Redis.from_url(redis_server.url)

    def ship(*spans: tuple[str, str, int, int, int]) -> None:
        with r.pipeline(transaction=False) as pipe:
            append_spans(pipe, run_id, [Span(stage, run_id, it, b, 1000, worker, 1e9 + it,
                                             0.5, attempt)
                                        for stage, worker, it, b, attempt in spans])
            pipe.execute()

    def same(tally: WorkerTally) -> list[WorkerRow]:
        rows = tally.table(r)
        assert rows == worker_table(r, run_id)
        return rows

    tally = WorkerTally(run_id)
    assert same(tally) == []
    ship(("sample", "a@h", 1, 0, 0), ("evaluate", "a@h", 1, 0, 0), ("evaluate", "b@h", 1, 1, 0))
    assert [(w.worker, w.batches, w.busy_s) for w in same(tally)] == [("a@h", 1, 1.0),
                                                                     ("b@h", 1, 0.5)]
    ship(("evaluate", "b@h", 1, 1, 0), ("fused", "a@h", 2, 0, 0), ("fused", "a@h", 2, 1, 1))
    assert [(w.batches, w.samples) for w in same(tally)] == [(3, 3000), (1, 1000)]
    r.delete(keys.run_spans(run_id))  # removed, then run again: a new stream
    ship(("fused", "c@h", 1, 0, 0))
    assert [w.worker for w in same(tally)] == ["c@h"]
