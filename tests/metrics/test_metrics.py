"""Live tier: the workspace's Prometheus series on Flower's ``/metrics`` (issue 19, part 7).

A real fleet (`fleet up`: the embedded Redis, a local pool worker, Flower, the keeper), a
pool nobody consumes holding real Celery messages, a pool on a host that refuses
connections, and an integration run executed by real Celery workers. Every scrape is
plain HTTP with (and without) Flower's basic auth, parsed by prometheus_client's parser,
and each number is checked against its source: the broker, the fleet's receipts, the run.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from mainboard.cli import cli as main
from mainboard.config import load_config
from mainboard.fleet.records import read_fleet
from mainboard.services.broker import EmbeddedBroker
from mainboard.services.flower import USER, Flower
from mainboard.tasks.runner import integrate, load_spec
from mainboard.tasks.workers import LocalWorkers
from tests.support.fleet_helpers import cli, config, table, tear_down, wait_until, workspace
from tests.support.integration import ready, slow_spec, subprocess_env
from tests.support.scrape import Samples, fetch, parse, value
from tests.support.services import free_port

pytestmark = [pytest.mark.live, pytest.mark.timeout(240)]

WAITING = 5
POOLS = """
[fleet.pools.steady]
host = "local"
queues = ["mtr.steady"]
jobs = 1

[fleet.pools.waiting]
host = "local"
queues = ["mtr.waiting"]
jobs = 0

[fleet.pools.doomed]
host = "gone"
queues = ["mtr.doomed"]
jobs = 1
"""
def _send(ws: Path, queue: str, n: int) -> None:
    """``n`` real Celery messages to ``queue`` (nobody consumes it)."""
    from mainboard.fleet.workers import broker_route
    from mainboard.tasks.app import make_app
    from mainboard.tasks.fleet import PROBE_TASK

    route = broker_route(config(ws), start=False)
    assert route is not None
    app = make_app(broker_url=route.url)
    try:
        for _ in range(n):
            app.send_task(PROBE_TASK, kwargs={}, queue=queue)
    finally:
        app.close()


class Background:
    """An integration run's coordinator in a thread (its batches go to real workers)."""

    def __init__(self, run: dict[str, Any], ws: Path) -> None:
        self.error: BaseException | None = None
        self.result: Any = None
        self.thread = threading.Thread(target=self._go, args=(run, ws), daemon=True)
        self.thread.start()

    def _go(self, run: dict[str, Any], ws: Path) -> None:
        try:
            self.result = integrate(run, workers=0, config=load_config(ws / "mainboard.toml"))
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


def test_flower_metrics_match_queues_pools_allocations_and_a_running_integration(
        tmp_path: Path) -> None:
    ws = workspace(tmp_path / "ws", table("hosts.gone", kind="ssh", host="127.0.0.1",
                                          port=free_port(), user="nobody"), POOLS)
    state = ws / ".mainboard"
    outputs: list[str] = []
    workers: LocalWorkers | None = None
    try:
        EmbeddedBroker(state).up()  # the batch worker starts while `fleet up` runs
        workers = LocalWorkers(1, EmbeddedBroker(state).url(), tmp_path / "workers",
                               prefix="mtr",
                               env={"PYTHONPATH": subprocess_env()["PYTHONPATH"]}).start()
        up = cli(ws, "fleet", "up")
        outputs += [up.stdout, up.stderr]
        assert up.returncode == 1 and "host 'gone'" in up.stderr, up.stderr  # doomed failed
        flower = Flower(state).status()
        assert flower.running and flower.url, up.stdout
        password = Path(flower.secret_file).read_text().strip()
        metrics_url = f"{flower.url}metrics"

        code, body = fetch(metrics_url)  # Prometheus without the credential
        assert code == 401 and "mainboard_" not in body
        code, body = fetch(metrics_url, (USER, "wrong-" + password))
        assert code == 401 and "mainboard_" not in body

        def scrape() -> Samples:
            code, text = fetch(metrics_url, (USER, password))
            assert code == 200, text
            outputs.append(text)
            return parse(text)

        _send(ws, "mtr.waiting", WAITING)
        # Flower's own series, on the same target, exist once its event consumer counted a
        # worker's first event (its heartbeat), which may come after our collector sees it.
        samples = wait_until(lambda: (s := scrape()) and value(
            s, "mainboard_workers", pool="steady", state="idle") == 1
            and "flower_events_total" in {n for n, _ in s} and s, 60,
            "the steady pool's worker online and idle, and an event counted by Flower")
        assert value(samples, "mainboard_queue_depth", queue="mtr.waiting") == WAITING
        assert value(samples, "mainboard_broker_up") == 1
        for pool in ("steady", "waiting", "doomed"):
            counts = {st: value(samples, "mainboard_workers", pool=pool, state=st)
                      for st in ("queued", "starting", "busy", "idle", "lost", "unknown")}
            assert None not in counts.values(), (pool, counts)  # zeros are series too
            assert sum(counts.values()) == (1 if pool == "steady" else 0), (pool, counts)
        fleet = read_fleet(state)
        assert value(samples, "mainboard_allocations_submitted_total", pool="steady") == 1 \
            == len([w for w in fleet.started.values() if w.pool == "steady"])
        assert value(samples, "mainboard_allocations_submitted_total", pool="waiting") == 0
        failed = value(samples, "mainboard_allocations_failed_total", pool="doomed")
        recorded = [e for e in read_fleet(state).scale
                    if e.pool == "doomed" and e.action == "submit_failed"]
        assert failed is not None and 1 <= failed <= len(recorded)  # the keeper retries too
        assert value(samples, "mainboard_allocations_failed_total", pool="steady") == 0
        assert value(samples, "mainboard_spend_usd_per_hour", pool="steady") is None  # owned

        # an integration: batches/s > 0 while its coordinator holds it, gone once finished
        wait_until(lambda: ready(workers, tmp_path / "workers"), 60, "the batch worker ready")
        run = slow_spec(0.1, name="metrics-run", stop={"max_samples": None,
                                                       "max_iterations": 8},
                        batching={"batch_size": 1000, "batches_per_iteration": 4})
        run_id = load_spec(run).run_id()
        job = Background(run, ws)
        live = wait_until(lambda: (s := scrape()) and (value(
            s, "mainboard_run_batches_per_second", run=run_id) or 0) > 0 and s, 60,
            "batches/s > 0 for the running integration")
        assert job.thread.is_alive() or job.result is not None
        assert value(live, "mainboard_run_iteration", run=run_id) is not None
        job.thread.join(120)
        assert job.error is None and job.result is not None, job.error
        assert value(live, "mainboard_run_samples_total", run=run_id) <= job.result.samples
        wait_until(lambda: value(scrape(), "mainboard_run_batches_per_second",
                                 run=run_id) is None, 30, "the finished run's series gone")

        # the same numbers without Flower, once (in process: the CLI's own test is below)
        shown = CliRunner().invoke(main, ["--config", str(ws / "mainboard.toml"), "metrics",
                                          "--json"])
        outputs.append(shown.output)
        assert shown.exit_code == 0, shown.output
        data = json.loads(shown.output)
        assert data["queues"]["mtr.waiting"] == WAITING
        assert data["allocations_submitted"]["steady"] == 1
        assert data["workers"]["steady"]["idle"] == 1

        secrets = [password, EmbeddedBroker(state).secret_path.read_text().strip()]
        logs = [(state / "flower" / "flower.log").read_text(errors="replace")]
        for secret in secrets:
            assert all(secret not in text for text in outputs + logs)
    finally:
        if workers is not None:
            workers.stop()
        tear_down(ws, "--force")


def test_metrics_without_a_broker_or_with_a_damaged_record_say_so(tmp_path: Path) -> None:
    ws = workspace(tmp_path / "ws", POOLS.replace('host = "gone"', 'host = "local"'))
    done = cli(ws, "metrics")
    assert done.returncode == 0, done.stderr
    samples = parse(done.stdout)
    assert value(samples, "mainboard_broker_up") == 0
    assert value(samples, "mainboard_collector_up", section="queues") == 0
    assert value(samples, "mainboard_workers", pool="steady", state="idle") == 0
    assert not (ws / ".mainboard" / "redis").exists()  # a scrape never starts the broker

    (ws / ".mainboard").mkdir(exist_ok=True)
    (ws / ".mainboard" / "fleet.ndjson").write_text("not json\n{}\n")  # a damaged record
    damaged = CliRunner().invoke(main, ["--config", str(ws / "mainboard.toml"), "metrics"])
    assert damaged.exit_code == 1
    samples = parse(damaged.stdout)
    assert value(samples, "mainboard_collector_up", section="fleet") == 0
    assert value(samples, "mainboard_collector_up", section="allocations") == 0
    errors = damaged.stderr.strip().splitlines()
    assert len(errors) == 2 and all("fleet.ndjson:1" in e for e in errors), errors


def test_the_exposition_parses_back_with_hostile_names_and_states_that_add_up() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from mainboard.metrics.exposition import StaticCollector
    from mainboard.metrics.snapshot import RunRate, Snapshot

    hostile = 'p"o\\ol\nx{a="b"}'
    snap = Snapshot(broker_up=True, queues={"q.a": 3}, workers={(hostile, "idle"): 2,
                                                                   (hostile, "busy"): 1},
                    submitted={hostile: 4}, failed={hostile: 1}, usd_hr={"gpu": 3.6},
                    spent_usd={"gpu": 0.25}, runs={"r1": RunRate(2.5, 1000, 3)},
                    errors={"fleet": "host 'hpc': cannot reach"})
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StaticCollector(snap))
    samples = parse(generate_latest(registry).decode())
    assert value(samples, "mainboard_workers", pool=hostile, state="idle") == 2
    assert value(samples, "mainboard_allocations_submitted_total", pool=hostile) == 4
    assert value(samples, "mainboard_allocations_failed_total", pool=hostile) == 1
    assert value(samples, "mainboard_queue_depth", queue="q.a") == 3
    assert value(samples, "mainboard_spend_usd_per_hour", pool="gpu") == 3.6
    assert value(samples, "mainboard_spend_usd_total", pool="gpu") == 0.25
    assert value(samples, "mainboard_run_batches_per_second", run="r1") == 2.5
    assert value(samples, "mainboard_run_samples_total", run="r1") == 1000
    assert value(samples, "mainboard_collector_up", section="fleet") == 0
    assert value(samples, "mainboard_collector_up", section="queues") == 1


def test_batches_per_second_counts_final_stages_over_the_window(
        redis_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Spans written at known Redis times: 30 finished batches (plus their other stages)
    over the last 10 s is 3 batches/s; a run without a coordinator holding it is absent."""
    import redis

    from mainboard import keys
    from mainboard.metrics import gather

    r = redis.Redis.from_url(redis_server.url)
    run_id, idle_run = "mtr-rate", "mtr-idle"
    seconds, micros = r.time()
    now_ms = seconds * 1000 + micros // 1000
    try:
        r.zadd(keys.runs_index(), {run_id: 1.0, idle_run: 2.0})
        r.set(keys.run_lease(run_id), "here:1:t", ex=60)
        r.hset(keys.run_state(run_id), mapping={"samples": 4000, "iteration": 2})
        for i in range(30):  # one every 1/3 s, the first 10 s ago
            at = now_ms - 10_000 + i * 333
            r.xadd(keys.run_spans(run_id), {"s": "sample", "w": "w1"}, id=f"{at}-0")
            r.xadd(keys.run_spans(run_id), {"s": "accumulate", "w": "w1"}, id=f"{at}-1")
        r.xadd(keys.run_spans(idle_run), {"s": "fused"})
        rates = gather.run_rates(r)
        seconds, micros = r.time()  # the read's own clock falls between the two looks
        later_ms = seconds * 1000 + micros // 1000
        assert set(rates) == {run_id}
        rate = rates[run_id]
        # 30 batches over the window from the first span to the read, the Redis clock's
        assert 30 / ((later_ms - now_ms + 10_000) / 1000) <= rate.batches_per_s <= 3.0, rate
        assert (rate.samples, rate.iteration) == (4000, 2)
        monkeypatch.setattr(gather, "MAX_SPANS_READ", 20)  # a fast run: the window shrinks
        capped = gather.run_rates(r)[run_id].batches_per_s
        assert 2.7 <= capped <= 3.4, capped  # 10 finals over the last ~3.3 s
    finally:
        r.delete(keys.run_spans(run_id), keys.run_spans(idle_run), keys.run_lease(run_id),
                 keys.run_state(run_id))
        r.zrem(keys.runs_index(), run_id, idle_run)
        r.close()
