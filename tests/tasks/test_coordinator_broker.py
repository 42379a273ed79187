"""The broker may restart and resumes may race: runs go on, exactly once, or are refused cleanly.

Real processes throughout: `mainboard integrate` on the embedded broker (a real
redis-server with AOF, which the test SIGKILLs and starts again with `mainboard broker
up`), real local Celery workers, real receipts. The reference for every run is the same
run integrated in-process without the sleeping integrand: the numbers must match exactly.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mainboard.config import Config, load_config
from mainboard.receipts import Receipts, RunResumed
from mainboard.services.broker import EmbeddedBroker
from tests.support.integration import module_fixtures, slow_spec, spec, subprocess_env, toml
from tests.support.outage import (
    DELAY,
    RUN,
    numbers,
    reference,
    run_id_of,
    start,
    stderr_until,
    wait_iteration,
)
from tests.support.services import require
from tests.support.workspace import run_cli

pytestmark = pytest.mark.live
workspace_fixture, fleet_fixture = module_fixtures(1)


@pytest.fixture
def embedded(tmp_path: Path) -> Iterator[Path]:
    """A workspace on its own embedded broker (no [broker] url); the broker is stopped after."""
    require("redis-server", "the embedded broker is a real redis-server")
    (tmp_path / "mainboard.toml").write_text('[workspace]\nname = "outage"\n\n[broker]\n'
                                             'outage = "60s"\n')
    (tmp_path / "run.toml").write_text(toml(RUN))
    yield tmp_path
    run_cli(tmp_path / "mainboard.toml", "broker", "down", env=subprocess_env())


def kill_broker(state_dir: Path) -> None:
    """SIGKILL the embedded redis-server, as a crash or an operator's kill -9 would."""
    pid = EmbeddedBroker(state_dir).status().pid
    assert pid, "the embedded broker is not running"
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 60  # a hang guard: the event is the exit
    while EmbeddedBroker(state_dir).status().running:
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_a_broker_killed_and_restarted_mid_run_ends_with_the_undisturbed_numbers(
        embedded: Path) -> None:
    ws, expected = embedded, reference(RUN)
    state_dir = ws / ".mainboard"
    proc = start(ws, "integrate", "run.toml", "--workers", "2", "--json")
    try:
        wait_iteration(state_dir, run_id_of(RUN), proc)
        kill_broker(state_dir)
        seen = stderr_until(proc, "went away")  # the coordinator noticed: now bring it back
        up = run_cli(ws / "mainboard.toml", "broker", "up", env=subprocess_env())
        assert up.returncode == 0, up.stderr
        out, err = proc.communicate(timeout=180)
        err = seen + err
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    got = json.loads(out)
    assert numbers(got) == (expected.estimate, expected.error, 200_000, 5)
    assert "Traceback" not in err
    went = [line for line in err.splitlines() if "went away" in line]
    back = [line for line in err.splitlines() if "is back after" in line]
    assert len(went) >= 1 and len(back) == len(went), err
    password = (state_dir / "broker.secret").read_text().strip()
    assert "127.0.0.1:" in went[0] and password not in err
    logs = run_cli(ws / "mainboard.toml", "runs", "logs", run_id_of(RUN), "--level", "warn",
                   env=subprocess_env())  # the outage is in the run's own log too
    assert logs.returncode == 0, logs.stderr
    assert "went away" in logs.stdout and "was back after" in logs.stdout, logs.stdout
    assert password not in logs.stdout


def test_a_broker_gone_past_the_budget_exits_3_with_the_resume_command_and_loses_nothing(
        embedded: Path) -> None:
    ws, expected = embedded, reference(RUN)
    state_dir, run_id = ws / ".mainboard", run_id_of(RUN)
    toml_file = ws / "mainboard.toml"
    toml_file.write_text(toml_file.read_text().replace('outage = "60s"', 'outage = "3s"'))
    proc = start(ws, "integrate", "run.toml", "--workers", "2", "--json")
    try:
        wait_iteration(state_dir, run_id, proc)
        kill_broker(state_dir)
        out, err = proc.communicate(timeout=120)  # a hang guard: bench/bench_fail_fast.py times it
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 3, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("mainboard: error: run ") and "is unreachable" in last, err
    assert f"`mainboard runs resume {run_id}`" in last and "Traceback" not in err
    assert out == ""

    up = run_cli(ws / "mainboard.toml", "broker", "up", env=subprocess_env())
    assert up.returncode == 0, up.stderr
    resumed = run_cli(ws / "mainboard.toml", "runs", "resume", run_id, "--workers", "2",
                      "--json", env=subprocess_env(), timeout=180)
    assert resumed.returncode == 0, resumed.stderr
    assert numbers(json.loads(resumed.stdout)) == (expected.estimate, expected.error, 200_000, 5)


def test_resume_is_refused_at_once_while_a_live_coordinator_drives_the_run(
        workspace: Config, fleet: object) -> None:
    # 15 x 0.6 s: the resume's own start (a CLI process on a busy machine) must land while
    # the run is still driven (7 iterations were sometimes over before it asked)
    run = slow_spec(DELAY, name="driven", stop={"max_samples": 600_000})
    path = workspace.root / "driven.toml"
    path.write_text(toml(run))
    run_id = run_id_of(run)
    assert workspace.path is not None
    proc = start(workspace.root, "integrate", str(path), "--workers", "0", "--json")
    try:
        wait_iteration(workspace.state_dir, run_id, proc)
        receipts = workspace.state_dir / "runs" / run_id / "receipts.ndjson"
        before = receipts.read_bytes()
        refused = run_cli(workspace.path, "runs", "resume", run_id[:8], "--workers", "0",
                          env=subprocess_env())
        assert refused.returncode == 2, refused.stderr
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1 and "is being coordinated by pid" in lines[0], refused.stderr
        assert receipts.read_bytes().startswith(before)  # nothing written by the refused one
        assert not any(isinstance(p, RunResumed) for p in Receipts(receipts).read())
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    expected = reference(run)
    assert numbers(json.loads(out)) == (expected.estimate, expected.error, 600_000, 15)


def test_two_resumes_racing_for_a_dead_run_drive_it_once(workspace: Config,
                                                         fleet: object) -> None:
    run = slow_spec(DELAY, name="raced", stop={"max_samples": 160_000})
    path = workspace.root / "raced.toml"
    path.write_text(toml(run))
    run_id = run_id_of(run)
    proc = start(workspace.root, "integrate", str(path), "--workers", "0")
    wait_iteration(workspace.state_dir, run_id, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    racers = [start(workspace.root, "runs", "resume", run_id, "--workers", "0", "--json")
              for _ in range(2)]
    results = [(p, *p.communicate(timeout=180)) for p in racers]
    codes = sorted(p.returncode for p, _, _ in results)
    assert codes in ([0, 0], [0, 2]), [err for _, _, err in results]
    expected = reference(run)
    for p, out, err in results:
        if p.returncode == 0:
            assert numbers(json.loads(out)) == (expected.estimate, expected.error, 160_000, 4)
        else:
            assert len(err.strip().splitlines()) == 1 and "coordinated by pid" in err, err
    receipts = Receipts(workspace.state_dir / "runs" / run_id / "receipts.ndjson")
    assert sum(isinstance(p, RunResumed) for p in receipts.read()) == 1


def test_a_run_name_shared_by_two_runs_is_ambiguous_and_id_prefixes_work(
        workspace: Config, fleet: object) -> None:
    assert workspace.path is not None
    ids = []
    for seed in (1, 2):
        run = spec(name="twin", seed=seed, stop={"max_samples": 20_000},
                   batching={"batch_size": 5_000})
        path = workspace.root / f"twin{seed}.toml"
        path.write_text(toml(run))
        done = run_cli(workspace.path, "integrate", str(path), "--workers", "0", "--json",
                       env=subprocess_env(), timeout=120)
        assert done.returncode == 0, done.stderr
        ids.append(json.loads(done.stdout)["run_id"])
    shown = run_cli(workspace.path, "runs", "show", "twin", env=subprocess_env())
    assert shown.returncode == 2
    line = shown.stderr.strip()
    assert "\n" not in line and "matches 2 runs" in line and all(i in line for i in ids), line
    by_prefix = run_cli(workspace.path, "runs", "show", ids[0][:7], "--json",
                        env=subprocess_env())
    assert by_prefix.returncode == 0 and json.loads(by_prefix.stdout)["run_id"] == ids[0]


def test_outage_budget_is_a_duration_in_mainboard_toml(tmp_path: Path) -> None:
    (tmp_path / "mainboard.toml").write_text('[broker]\noutage = "90s"\n')
    assert load_config(tmp_path / "mainboard.toml").broker.outage == 90
    (tmp_path / "mainboard.toml").write_text('[broker]\noutage = "0s"\n')
    bad = run_cli(tmp_path / "mainboard.toml", "config", "check")
    assert bad.returncode == 2 and "broker.outage" in bad.stderr, bad.stderr


def test_outage_gives_up_after_its_budget_with_exit_code_3_and_the_resume_command() -> None:
    """A real client against a port nobody listens on: refused at once, every time."""
    import redis

    from mainboard.errors import BrokerLost
    from mainboard.tasks.outage import Outage, where
    from tests.support.services import free_port

    url = f"redis://:s3cret@127.0.0.1:{free_port()}/0"
    client = redis.Redis.from_url(url, socket_connect_timeout=1)
    slept: list[float] = []
    outage = Outage(client, where(url), "abc123", budget_s=4.0, sleep=slept.append)
    calls = []

    def step() -> None:
        calls.append(1)
        client.ping()

    with pytest.raises(BrokerLost) as lost:
        outage.run(step)
    assert lost.value.exit_code == 3 and "s3cret" not in str(lost.value)
    assert "127.0.0.1:" in str(lost.value) and "`mainboard runs resume abc123`" in str(lost.value)
    assert slept == [0.5, 1.0, 2.0] and calls == [1]  # backoff doubles; budget 4 s respected
