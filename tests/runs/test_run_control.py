"""Seeing and steering runs (issue 12): logs, pause/resume/stop/remove, names, traces.

Real redis-server, real ``celery worker`` subprocesses (a module fleet of two), real
``mainboard`` subprocesses for the CLI. A paused run resumed gives the numbers of an
uninterrupted run bit for bit; a stopped one ends with its partial result.
"""

from __future__ import annotations

import json
import select
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis

import mainboard
from mainboard.cli.runview import result_text
from mainboard.config import Config, load_config
from mainboard.integrators.driver import RunResult, integrate_local
from mainboard.receipts import IterationDone, RunCreated
from mainboard.runs.logs import LogLine, append_logs, follow_logs, stream_id_order
from mainboard.runs.store import RunStore
from mainboard.tasks.runner import integrate, load_spec, resume
from mainboard.tasks.workers import LocalWorkers
from tests.support.cliserver import popen_mainboard
from tests.support.integration import module_fixtures, slow_spec, spec, subprocess_env
from tests.support.workspace import run_cli

pytestmark = pytest.mark.live
REPO = Path(__file__).resolve().parents[2]
MISBEHAVE = REPO / "tests" / "process_fixtures" / "misbehave.py"

workspace_fixture, fleet_fixture = module_fixtures(2)


def cli(workspace: Config, *args: str) -> Any:
    """The real `mainboard` command in a fresh process."""
    assert workspace.path is not None
    return run_cli(workspace.path, *args, env=subprocess_env(), timeout=60)


def invoke(workspace: Config, *args: str) -> Any:
    """The real `mainboard` command run in this process (faster than a fresh interpreter)."""
    from click.testing import CliRunner

    from mainboard.cli import cli as main

    done = CliRunner().invoke(main, ["--config", str(workspace.path), *args])
    done.returncode = done.exit_code
    return done


def numbers(r: RunResult) -> tuple[Any, ...]:
    return (r.estimate, r.error, r.chi2_dof, r.samples, r.iterations, r.nan_count)


class Background:
    """``integrate`` in a thread (the coordinator), its result or error kept."""

    def __init__(self, run: dict[str, Any], config: Config) -> None:
        self.result: RunResult | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._go, args=(run, config), daemon=True)
        self.thread.start()

    def _go(self, run: dict[str, Any], config: Config) -> None:
        try:
            self.result = integrate(run, workers=0, config=config)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def join(self) -> RunResult:
        self.thread.join(60)
        assert self.error is None, self.error
        assert self.result is not None
        return self.result


def wait_iteration(config: Config, run_id: str, job: Background) -> None:
    """Until the run's first iteration is merged (the coordinator still driving it)."""
    receipts = RunStore(config.state_dir).receipts(run_id)
    deadline = time.monotonic() + 60
    while not any(isinstance(p, IterationDone) for p in receipts.read()):
        assert job.thread.is_alive(), job.error or job.result
        assert time.monotonic() < deadline, "no iteration 1"
        time.sleep(0.02)


def test_process_gblog_lines_reach_runs_logs_with_worker_and_level(
        workspace: Config, fleet: LocalWorkers) -> None:
    run = spec(name="logged", integrand={"kind": "process", "command": [
        sys.executable, str(MISBEHAVE), "logs"]}, domain={"continuous": 2},
        sampler={"kind": "naive"}, stop={"max_samples": 4000},
        batching={"batch_size": 1000, "batches_per_iteration": 2, "fuse": True})
    result = integrate(run, workers=0, config=workspace)
    handle = mainboard.run(result.run_id, workspace)
    deadline = time.monotonic() + 60  # a hang guard: workers ship their lines every 0.2 s
    while len([x for x in handle.logs() if x.message.endswith("message at error")]) < 4:
        assert time.monotonic() < deadline, [x.text() for x in handle.logs()]
        time.sleep(0.1)
    lines = handle.logs()
    errors = [x for x in lines if x.message.endswith("message at error")]
    assert {x.level for x in errors} == {"error"} and len(errors) == 4  # one per batch
    assert {x.worker for x in errors} <= set(_nodes(fleet))
    assert {(x.iteration, x.batch) for x in errors} == {(1, 0), (1, 1), (2, 0), (2, 1)}
    assert [x.ts for x in lines] == sorted(x.ts for x in lines)
    followed = list(follow_logs(handle._r(), result.run_id, level="error", live=lambda: False,
                                block_ms=100, quiet_s=0.2))  # the run is over: drains, ends
    assert [x.id for x in followed] == sorted((x.id for x in errors), key=stream_id_order)

    shown = invoke(workspace, "runs", "logs", "logged", "--level", "warn", "--json")
    assert shown.returncode == 0, shown.stderr
    got = [json.loads(x) for x in shown.stdout.splitlines()]
    assert {g["level"] for g in got} == {"warn", "error"}  # info and below filtered out
    assert any("plain line with secret" in g["message"] for g in got)  # plain stderr
    assert all(g["worker"] and g["host"] for g in got)
    human = invoke(workspace, "runs", "logs", result.run_id[:8], "--tail", "2")
    assert human.returncode == 0 and len(human.stdout.splitlines()) == 2

    unknown = cli(workspace, "runs", "logs", "no-such-run")
    assert unknown.returncode == 2 and unknown.stdout == ""
    assert len(unknown.stderr.strip().splitlines()) == 1 and "no-such-run" in unknown.stderr


def _nodes(fleet: LocalWorkers) -> list[str]:
    import socket

    return [n.replace("%h", socket.gethostname()) for n in fleet.nodes]


def test_pause_then_resume_gives_the_uninterrupted_numbers(workspace: Config,
                                                           fleet: LocalWorkers) -> None:
    run = slow_spec(0.05, name="pausable", stop={"max_samples": 160_000},
                    batching={"batch_size": 5000, "batches_per_iteration": 4})
    reference = integrate_local({**run, "integrand": {**run["integrand"], "params": {
        "delay": 0.0, "a": 4.0}}})
    job = Background(run, workspace)
    run_id = load_spec(run).run_id()
    wait_iteration(workspace, run_id, job)
    paused = invoke(workspace, "runs", "pause", "pausable", "--json")
    assert paused.returncode == 0, paused.stderr
    answer = json.loads(paused.stdout)
    assert answer["status"] == "paused" and answer["iterations"] >= 1
    partial = job.join()
    assert partial.stop_reason == "paused" and partial.iterations == answer["iterations"]
    stored = [p for p in RunStore(workspace.state_dir).receipts(run_id).read()
              if isinstance(p, IterationDone)]
    assert len(stored) == answer["iterations"]  # what the pause said is what is stored
    assert "paused by the user (`mainboard runs resume`" in result_text(partial)
    listed = {r["run_id"]: r for r in json.loads(invoke(workspace, "runs", "list",
                                                         "--json").stdout)}
    assert listed[run_id]["status"] == "paused"

    again = invoke(workspace, "runs", "pause", run_id)  # nothing drives it now
    assert again.returncode == 2 and "not running" in again.stderr

    final = resume(run_id, workers=0, config=workspace)
    assert numbers(final) == numbers(reference)  # bit for bit
    shown = json.loads(invoke(workspace, "runs", "show", run_id, "--timeline",
                              "--json").stdout)
    kinds = [e["kind"] for e in shown["timeline"]]
    assert shown["status"] == "finished"
    for kind in ("start", "dispatch", "complete", "adapt", "snapshot", "pause", "resume",
                 "finish"):
        assert kind in kinds, kinds
    assert kinds.index("pause") < kinds.index("resume")
    times = [e["time"] for e in shown["timeline"]]
    assert times == sorted(times)


def test_stop_ends_with_a_partial_result_and_remove_waits_for_it(workspace: Config,
                                                                 fleet: LocalWorkers,
                                                                 tmp_path: Path) -> None:
    run = slow_spec(0.05, name="stoppable", stop={"max_samples": 2_000_000},
                    batching={"batch_size": 5000, "batches_per_iteration": 4})
    job = Background(run, workspace)
    run_id = load_spec(run).run_id()
    wait_iteration(workspace, run_id, job)
    refused = invoke(workspace, "runs", "remove", run_id, "--yes")
    assert refused.returncode == 2 and "is running" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1

    follower = follow(workspace, run_id)  # a `runs logs --follow` open while the run stops
    handle = mainboard.run("stoppable", workspace)
    outcome = handle.stop()
    partial = job.join()
    followed, stderr = follower.communicate(timeout=30)  # it ends with the run, by itself
    assert follower.returncode == 0, stderr
    assert "stop requested" in followed and "run stopped after iteration" in followed
    assert "before the follow" not in followed and "INFO  coordinator" in followed  # once
    assert outcome.status == "stopped" and partial.stop_reason == "stopped"
    assert 0 < partial.samples < 2_000_000 and partial.iterations == outcome.iteration
    shown = json.loads(invoke(workspace, "runs", "show", "stoppable", "--json").stdout)
    assert shown["status"] == "stopped"

    trace = tmp_path / "trace.json"
    written = invoke(workspace, "runs", "trace", run_id, "-o", str(trace), "--json")
    assert written.returncode == 0, written.stderr
    doc = json.loads(trace.read_text())
    threads = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    workers = {e["tid"] for e in doc["traceEvents"] if e.get("ph") == "X"
               and e["name"] in ("sample", "fused")}
    assert set(_nodes(fleet)) <= threads and "coordinator" in threads
    assert len(workers) == 2  # one track per worker
    rows = handle.workers()
    assert {r.worker for r in rows} == set(_nodes(fleet))
    assert sum(r.batches for r in rows) >= 4 and all(r.samples_per_s > 0 for r in rows)
    logs = fleet_log(fleet)
    assert "integrate.bundle[run=stoppable it=1 b=0]" in logs  # Celery logs the shadow name

    removed = invoke(workspace, "runs", "remove", run_id, "--yes", "--json")
    assert removed.returncode == 0, removed.stderr
    assert json.loads(removed.stdout)["redis_keys"] >= 3
    assert run_id not in invoke(workspace, "runs", "list", "--json").stdout


def follow(workspace: Config, run_id: str) -> subprocess.Popen[str]:
    """`mainboard runs logs RUN --follow` in a fresh process, once it has printed the line
    that was there when it started (so what comes next reaches it by following)."""
    with redis.Redis.from_url(workspace.broker.url) as r:
        append_logs(r, run_id, [LogLine(time.time(), "info", "tester", "here",
                                        "before the follow")])
    proc = popen_mainboard(["--config",
                            str(workspace.path), "runs", "logs", run_id[:8], "--follow"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=subprocess_env())
    # earlier lines of the run (its "run started") come first, printed at once with the
    # marker: only the first waits on the pipe (later ones may sit in the reader's buffer)
    ready, _, _ = select.select([proc.stdout], [], [], 30)
    seen = [proc.stdout.readline() if ready else ""]  # type: ignore[union-attr]
    while seen[-1] and "before the follow" not in seen[-1]:
        seen.append(proc.stdout.readline())  # type: ignore[union-attr]
    if "before the follow" not in seen[-1]:
        proc.kill()
        raise AssertionError(f"no marker line from the follow: {seen!r} {proc.communicate()}")
    return proc


def fleet_log(fleet: LocalWorkers) -> str:
    return "".join(p.read_text(errors="replace") for p in fleet.log_dir.glob("*.log"))


def test_ambiguous_names_list_the_ids_and_prefixes_work(tmp_path: Path) -> None:
    config = tmp_path / "mainboard.toml"
    config.write_text('[workspace]\nname = "names"\n')
    store = RunStore(tmp_path / ".mainboard")
    for run_id in ("aaaa1111", "aaaa2222"):
        store.record(RunCreated(run_id=run_id, name="twin", spec=spec(name="twin")))
    ws = load_config(config)
    twin = invoke(ws, "runs", "show", "twin")
    assert twin.returncode == 2 and "aaaa1111" in twin.stderr and "aaaa2222" in twin.stderr
    assert len(twin.stderr.strip().splitlines()) == 1
    assert json.loads(invoke(ws, "runs", "show", "aaaa2", "--json").stdout)["run_id"] == \
        "aaaa2222"  # a unique id prefix
    prefix = invoke(ws, "runs", "show", "aaaa")
    assert prefix.returncode == 2 and "ambiguous" in prefix.stderr

    # no broker running: logs say where they live and how to start it, in one line
    down = invoke(ws, "runs", "logs", "aaaa1")
    assert down.returncode == 1 and "mainboard broker up" in down.stderr
    assert len(down.stderr.strip().splitlines()) == 1
    assert invoke(ws, "runs", "pause", "aaaa1").returncode == 2  # nothing can be running
    unasked = invoke(ws, "runs", "remove", "aaaa1")  # no terminal to confirm on, no --yes
    assert unasked.returncode == 2 and "needs confirmation: pass --yes" in unasked.stderr
    assert (tmp_path / ".mainboard" / "runs" / "aaaa1111").exists()
    gone = invoke(ws, "runs", "remove", "aaaa1", "--yes")
    assert gone.returncode == 0 and not (tmp_path / ".mainboard" / "runs" / "aaaa1111").exists()
    assert json.loads(invoke(ws, "runs", "show", "twin", "--json").stdout)["run_id"] == \
        "aaaa2222"  # the name is unique again


def test_jobs_trace_draws_sync_submit_queue_run_and_pull(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from mainboard.board import Board
    from mainboard.bridges.jobstate import JobState
    from mainboard.cli import cli as main

    config = tmp_path / "mainboard.toml"
    config.write_text('[workspace]\nname = "traced"\n')
    with Board(config) as board:
        job = board.on("local").submit("sleep 0.3; echo made > out.txt", fetch=["out.txt"])
        assert job.wait(timeout=30, poll=0.1) is JobState.COMPLETED
        job.pull()
    out = tmp_path / "job-trace.json"
    done = CliRunner().invoke(main, ["--config", str(config), "jobs", "trace", job.id[-6:],
                                     "-o", str(out), "--json"])
    assert done.exit_code == 0, done.output
    phases = json.loads(done.output)["phases"]
    assert list(phases) == ["sync", "submit", "queue wait", "run", "pull"]
    assert phases["run"] > 0 and all(v >= 0 for v in phases.values())  # (the job sleeps 0.3 s)
    doc = json.loads(out.read_text())
    slices = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    assert [e["name"] for e in slices] == list(phases) and len({e["tid"] for e in slices}) == 1
