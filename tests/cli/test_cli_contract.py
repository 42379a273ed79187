"""The CLI keeps the Unix contract (issue 17): exit codes that mean something, one line per
error, JSON on stdout, every message ending in a newline.

Every command runs as a real ``python -m mainboard`` process. "Broker down" is a
configured ``[broker] url`` on a free port nobody listens on; live cases use the session's
real redis-server or the workspace's embedded broker. Time bounds are the issue's own
ceilings (10 s, 30 s), never tighter.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mainboard.errors import UserError
from mainboard.tasks.workers import WORKER_MAIN
from tests.support.cliserver import popen_mainboard, run_mainboard
from tests.support.services import RedisServer, free_port, require
from tests.support.workspace import run_cli

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "Zq9contract"
# issue 17: `integrate --workers 0` without a fleet, and a command that needs a broker that is
# down, fail in one line rather than waiting; how long they take is bench/bench_fail_fast.py's
RUN = """name = "contract"
seed = 3
[domain]
continuous = 2
[integrand]
kind = "genz.gaussian"
a = [5.0, 5.0]
u = [0.5, 0.5]
[sampler]
kind = "vegas"
[stop]
max_samples = 20_000
[batching]
batch_size = 10_000
batches_per_iteration = 1
"""


@pytest.fixture(autouse=True)
def _no_broker_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each workspace's mainboard.toml decides the broker, not the caller's environment."""
    monkeypatch.delenv("MAINBOARD_BROKER_URL", raising=False)


def workspace(directory: Path, broker_url: str | None = None) -> Path:
    """A workspace (mainboard.toml and run.toml) whose ``[broker] url`` is ``broker_url``."""
    directory.mkdir(parents=True, exist_ok=True)
    broker = f'[broker]\nurl = "{broker_url}"\n' if broker_url else ""
    (directory / "mainboard.toml").write_text(f'[workspace]\nname = "contract"\n{broker}')
    (directory / "run.toml").write_text(RUN)
    return directory / "mainboard.toml"


def mb(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The real `mainboard` in the workspace of ``config`` (its timeout a hang guard)."""
    return run_cli(config, *args, timeout=120)


def lines(text: str) -> list[str]:
    return text.strip().splitlines()


@pytest.fixture
def down(tmp_path: Path) -> tuple[Path, int]:
    """A workspace whose configured broker is a free port nobody listens on, and the port."""
    port = free_port()
    return workspace(tmp_path / "down", f"redis://:{PASSWORD}@127.0.0.1:{port}/0"), port


@pytest.fixture
def live(tmp_path: Path, redis_server: RedisServer) -> Iterator[Path]:
    """A workspace on the session's real Redis; its fleet is stopped afterwards."""
    config = workspace(tmp_path / "live", redis_server.url)
    yield config
    if (config.parent / ".mainboard" / "fleet.ndjson").exists():
        run_cli(config, "fleet", "down", "--timeout", "10", timeout=120)


@pytest.fixture
def embedded(tmp_path: Path) -> Iterator[Path]:
    """A workspace on its embedded broker (not started); stopped afterwards if it was."""
    require("redis-server")
    config = workspace(tmp_path / "embedded")
    yield config
    from mainboard.services.broker import EmbeddedBroker

    EmbeddedBroker(config.parent / ".mainboard").down()


# ----- 1. submit --wait exits like the job ----------------------------------------------------

def test_submit_wait_exits_with_the_jobs_own_code(tmp_path: Path) -> None:
    config = workspace(tmp_path / "jobs")
    for command, expected in (("exit 7", 7), ("true", 0), ("kill -9 $$", 137)):
        done = mb(config, "submit", "--wait", "--", command)
        assert done.returncode == expected, (command, done.stderr)
        assert len(lines(done.stdout)) == 1  # the id; progress went to stderr
    late = mb(config, "submit", "--walltime", "1", "--wait", "--", "sleep 30")
    assert late.returncode == 124, late.stderr  # timeout: no exit code of its own
    waiting = popen_mainboard(
        ["--config", str(config), "submit", "--wait", "--",
         "sleep 60"], cwd=config.parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    assert waiting.stdout is not None
    job_id = waiting.stdout.readline().strip()
    cancelled = mb(config, "jobs", "cancel", job_id)
    assert cancelled.returncode == 0, cancelled.stderr
    assert waiting.wait(30) == 143  # cancelled: 128 + SIGTERM
    help_text = mb(config, "submit", "--help")
    assert "124 timeout" in help_text.stdout and "143 cancelled" in help_text.stdout


# ----- 2. integrate --workers 0 without a fleet -----------------------------------------------

def _assert_no_fleet(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 2 and done.stdout == "", (done.stdout, done.stderr)
    assert len(lines(done.stderr)) == 1 and "`mainboard fleet up`" in done.stderr, done.stderr


def test_integrate_workers_0_without_a_fleet_fails_fast(embedded: Path,
                                                       live: Path) -> None:
    import mainboard
    from mainboard.config import load_config
    from mainboard.services.broker import EmbeddedBroker

    _assert_no_fleet(mb(embedded, "integrate", "run.toml", "--workers", "0"))
    assert not EmbeddedBroker(embedded.parent / ".mainboard").status().running  # none started
    answering = mb(live, "integrate", "run.toml", "--workers", "0")
    _assert_no_fleet(answering)
    assert "no worker consumes mainboard.batches" in answering.stderr
    for config in (embedded, live):
        with pytest.raises(UserError, match="start one with `mainboard fleet up`"):
            mainboard.integrate(config.parent / "run.toml", workers=0,
                                config=load_config(config))


# ----- 3. a broker that is down: one line, host:port, the fix ---------------------------------

NEEDS_BROKER = [["fleet", "status"], ["fleet", "status", "--json"],
                ["fleet", "up", "--on", "local", "--no-flower"], ["fleet", "down"],
                ["integrate", "run.toml"], ["integrate", "run.toml", "--workers", "0"],
                ["runs", "resume", "contract"], ["flower"]]


def test_every_command_that_needs_the_broker_fails_in_one_line(down: tuple[Path, int],
                                                               embedded: Path) -> None:
    from mainboard.fleet.records import fleet_receipts
    from mainboard.integrators.spec import load_run_file
    from mainboard.receipts import RunCreated, WorkerStarted
    from mainboard.runs.store import RunStore
    from mainboard.services.broker import EmbeddedBroker

    config, port = down
    spec = load_run_file(config.parent / "run.toml")
    RunStore(config.parent / ".mainboard").record(RunCreated(
        run_id=spec.run_id(), name=spec.name, spec=spec.model_dump(mode="json")))
    for args in NEEDS_BROKER:
        done = mb(config, *args)
        assert done.returncode == 1 and done.stdout == "", (args, done.stdout, done.stderr)
        assert len(lines(done.stderr)) == 1, (args, done.stderr)
        assert f"127.0.0.1:{port} ([broker] url of {config})" in done.stderr, done.stderr
        assert "start that Redis" in done.stderr and PASSWORD not in done.stderr
    assert not (config.parent / ".mainboard" / "flower" / "flower.json").exists()
    # The embedded broker the fleet's workers use, started once and then gone.
    state = embedded.parent / ".mainboard"
    broker = EmbeddedBroker(state)
    broker.up()
    embedded_port = broker.down().port
    fleet_receipts(state).append(WorkerStarted(
        worker_id="c0ffee", host="local", kind="local", node="mb-local-c0ffee",
        queues=["mainboard.batches"], concurrency=1, job={"job_id": "gone"}, root=str(state),
        python=sys.executable, broker_via="direct", secret_path=str(state / "none")))
    for args in (["fleet", "status"], ["fleet", "down"]):
        done = mb(embedded, *args)
        assert done.returncode == 1 and len(lines(done.stderr)) == 1, (args, done.stderr)
        assert f"127.0.0.1:{embedded_port} (the embedded broker) is not running" in done.stderr
        assert "`mainboard broker up`" in done.stderr


# ----- 4. status commands exit 3 when what they report is down --------------------------------

def _kill_worker(node: str) -> None:
    """SIGKILL the process group of the fleet worker ``node`` this test started."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                args = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if f"-n {node}@" in args and WORKER_MAIN in args:
                os.killpg(os.getpgid(int(entry.name)), signal.SIGKILL)
                return
    raise AssertionError(f"no process of worker {node}")


def _fleet_status(config: Path, wanted: int, timeout: float = 30.0
                  ) -> subprocess.CompletedProcess[str]:
    """``fleet status`` once it exits ``wanted``."""
    deadline = time.monotonic() + timeout
    while (done := mb(config, "fleet", "status")).returncode != wanted:
        assert time.monotonic() < deadline, (wanted, done.returncode, done.stderr)
        time.sleep(0.5)
    return done


def test_status_commands_exit_3_when_what_they_report_is_down(embedded: Path,
                                                              live: Path) -> None:
    stopped = mb(embedded, "broker", "status", "--json")
    assert stopped.returncode == 3 and json.loads(stopped.stdout)["state"] == "stopped"
    assert mb(embedded, "broker", "status").returncode == 3
    assert mb(embedded, "broker", "up").returncode == 0
    assert mb(embedded, "broker", "status").returncode == 0
    nothing = mb(embedded, "fleet", "status", "--json")  # no worker is expected: fine
    assert nothing.returncode == 0 and json.loads(nothing.stdout) == []

    up = mb(live, "fleet", "up", "--on", "local", "--no-flower", "--json")
    assert up.returncode == 0, up.stderr
    _fleet_status(live, 0)  # starting or online
    _kill_worker(json.loads(up.stdout)["started"][0]["node"])
    table = _fleet_status(live, 3)
    assert "HEARTBEAT" in table.stdout and table.stderr == ""
    listed = mb(live, "fleet", "status", "--json")
    assert listed.returncode == 3 and json.loads(listed.stdout)[0]["online"] is False


# ----- 5. --json on fleet up, fleet down and submit -------------------------------------------

def test_json_of_fleet_up_fleet_down_and_submit(live: Path) -> None:
    up = mb(live, "fleet", "up", "--on", "local", "--no-flower", "--json")
    assert up.returncode == 0, up.stderr
    started = json.loads(up.stdout)
    assert set(started) == {"started", "failed", "kept", "flower_url", "flower_error"}
    assert started["failed"] == {} and started["flower_url"] is None
    worker = started["started"][0]
    assert set(worker) == {"host", "worker_id", "node", "job_id", "queues", "concurrency",
                           "broker_via", "rental_id", "nodes"} and worker["host"] == "local"
    assert worker["nodes"] == 1
    down_ = mb(live, "fleet", "down", "--timeout", "3", "--json")
    assert down_.returncode == 0, down_.stderr
    stopped = json.loads(down_.stdout)
    assert set(stopped) == {"workers", "rentals_destroyed"}
    (gone,) = stopped["workers"]  # drained, or cancelled if it was not listening yet
    assert gone["worker_id"] == worker["worker_id"] and gone["outcome"] in {"completed",
                                                                            "cancelled"}
    nothing = json.loads(mb(live, "fleet", "down", "--json").stdout)
    assert nothing == {"workers": [], "rentals_destroyed": []}
    queued = json.loads(mb(live, "submit", "--json", "--", "true").stdout)
    assert queued["host"] == "local" and queued["final"] is False and queued["id"]
    waited = mb(live, "submit", "--json", "--wait", "--", "exit 5")
    assert waited.returncode == 5
    outcome = json.loads(waited.stdout)
    assert (outcome["state"], outcome["final"], outcome["exit_code"]) == ("failed", True, 5)
    for verb in (["fleet", "up"], ["fleet", "down"], ["submit"]):
        assert "--json" in mb(live, *verb, "--help").stdout


# ----- 6. every message ends with a newline ---------------------------------------------------

def test_every_message_ends_with_a_newline(embedded: Path, down: tuple[Path, int]) -> None:
    outputs = [mb(embedded, *args) for args in (
        ["broker", "down"], ["broker", "status"], ["broker", "status", "--json"],
        ["flower", "status"], ["flower", "stop"], ["fleet", "status"], ["fleet", "down"],
        ["fleet", "down", "--json"], ["runs", "list"], ["submit", "--", "true"])]
    outputs += [mb(down[0], "fleet", "status")]
    assert outputs[0].stdout == "broker was not running\n"
    for done in outputs:
        for text in (done.stdout, done.stderr):
            assert text == "" or text.endswith("\n"), (done.args, text)


# ----- usage errors are one line -------------------------------------------------------------

@pytest.mark.parametrize(("args", "names"), [
    (("runs", "logs", "some-run", "--level", "bad"), ("--level", "'bad'", "'warn'")),
    (("runs", "logs"), ("runs logs", "RUN")),
    (("runs", "list", "--bogus"), ("runs list", "--bogus")),
    # the top-level group's own options and verbs (parsed before any verb runs)
    (("--bogus",), ("mainboard: error", "--bogus", "--config", "--debug")),
    (("--config",), ("mainboard: error", "--config", "requires an argument")),
    (("nosuchverb",), ("mainboard: error", "'nosuchverb'", "jobs", "fleet", "monitor")),
    (("jbos",), ("'jbos'", "Did you mean 'jobs'")),
    (("jobs", "nosuch"), ("mainboard jobs: error", "'nosuch'", "show", "logs")),
    # a missing required argument or option, in two verb groups
    (("jobs", "show"), ("mainboard jobs show", "Missing argument 'JOB'")),
    (("batch", "watch"), ("mainboard batch watch", "Missing argument 'ID'")),
    (("jobs", "trace", "some-job"), ("mainboard jobs trace", "'-o' / '--output'")),
    # a bad choice or out-of-range value, in different verb groups
    (("runs", "export", "some-run", "--format", "xml"), ("--format", "'xml'", "'hwu'", "'json'")),
    (("jobs", "logs", "some-job", "--tail", "0"), ("mainboard jobs logs", "--tail", "0", "1")),
    (("batch", "watch", "b1", "--interval", "0.01"), ("batch watch", "--interval", "0.01",
                                                        "0.05")),
    (("fleet", "up", "--jobs", "many"), ("mainboard fleet up", "--jobs", "'many'", "integer")),
    (("submit", "--on", "auto", "--runtime", "soon", "--", "true"),
     ("mainboard submit", "--runtime", "not a duration (got 'soon')", '"90s"')),
])
def test_a_usage_error_is_one_line_naming_the_option_and_value(tmp_path: Path,
                                                               args: tuple[str, ...],
                                                               names: tuple[str, ...]) -> None:
    config = workspace(tmp_path / "usage")
    done = mb(config, *args)
    assert done.returncode == 2 and done.stdout == "", (done.stdout, done.stderr)
    assert len(lines(done.stderr)) == 1, done.stderr  # not click's usage block
    assert all(name in done.stderr for name in names), done.stderr


def test_bare_mainboard_prints_the_help_with_every_verb(tmp_path: Path) -> None:
    """Not one error line: the help, as asked (click's exit code for it); `mainboard
    --config X` alone is a usage error, one line."""
    env = {k: v for k, v in os.environ.items() if k != "MAINBOARD_CONFIG"}
    done = run_mainboard([], cwd=tmp_path, env=env, timeout=120)
    shown = done.stdout + done.stderr  # click 8.2 on: stderr and exit 2, as a usage error
    assert done.returncode in (0, 2) and "" in (done.stdout, done.stderr)
    assert shown.startswith("Usage: mainboard [OPTIONS] COMMAND [ARGS]...")
    assert {"integrate", "jobs", "fleet", "study"} <= {
        line.split()[0] for line in shown.split("Commands:")[1].splitlines() if line}
    alone = mb(workspace(tmp_path / "alone"))
    assert (alone.returncode, alone.stdout, alone.stderr) == (
        2, "", "mainboard: error: Missing command.\n")
