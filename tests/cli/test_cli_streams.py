"""Issue 17, streams: stdout carries only the result, progress goes to stderr; followed logs;
bars with an ETA on a real terminal and none in a pipe; a run's own Python module found
without PYTHONPATH. Everything runs for real: `mainboard` processes, local/ssh/SLURM jobs,
a pseudo-terminal, the test Redis and real Celery workers.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from mainboard.board import Board
from mainboard.integrators.spec import parse_run
from tests.support.batch_helpers import fleet_file, invoke, plain_workspace
from tests.support.fixtures_slurm import slurm_cluster  # noqa: F401 - the session's one SLURM
from tests.support.jobs_workspace import make_workspace, wait_running
from tests.support.services import RedisServer, SlurmCluster, SshServer
from tests.support.terminal import on_terminal
from tests.support.workspace import run_cli

pytestmark = pytest.mark.live
ETA = re.compile(r"ETA \d+:\d\d:\d\d")
BAR_MARKS = ("\x1b[", "━", "\r")  # what a drawn bar leaves: escapes, bar glyphs, redraws
TALK = ("for i in 1 2 3; do echo line$i; sleep 0.6; done; "
        "printf 'caf\\303'; sleep 0.6; printf '\\251\\n'; echo bye >&2")  # é split in two


def _env(**extra: str) -> dict[str, str]:
    """A `mainboard` subprocess's environment: no PYTHONPATH, no inherited workspace."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "MAINBOARD_CONFIG", "MAINBOARD_BROKER_URL")}
    return {**env, "COLUMNS": "160", **extra}


def _mainboard(config: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "mainboard", "--config", str(config), *args]


def _on_terminal(argv: Sequence[str], cwd: Path, timeout: float = 60) -> tuple[int, str]:
    """Run ``argv`` with stdin, stdout and stderr on a new pseudo-terminal; (exit code, screen)."""
    return on_terminal(argv, _env(TERM="xterm"), cwd, timeout)


# -- batch run and jobs cancel: the result on stdout, the rest on stderr ----------------------

@pytest.fixture
def plain(tmp_path: Path) -> Path:
    """Local host ``scratch``; ssh host ``edge`` on a port nobody listens on."""
    return plain_workspace(tmp_path)


def test_batch_run_prints_only_the_id_on_stdout_and_a_documented_json(plain: Path) -> None:
    fleet = fleet_file(plain.parent, '[defaults]\ntarget = "scratch"\n[[jobs]]\ncommand = "true"\n'
                                     '[[jobs]]\ncommand = "true"\n[[jobs]]\ntarget = "edge"\n'
                                     'command = "true"\n')
    ran = run_cli(plain, "batch", "run", str(fleet))
    assert ran.returncode == 0, ran.stderr
    batch_id = ran.stdout.strip()
    assert ran.stdout == f"{batch_id}\n" and re.fullmatch(r"\d{8}-\d{6}-fleet-[0-9a-f]{6}",
                                                          batch_id)
    lines = ran.stderr.splitlines()
    assert sorted(line.split(" -> ")[0] for line in lines) == [
        "dispatched scratch-1", "dispatched scratch-2", "unreachable edge-3"], lines

    shown = run_cli(plain, "batch", "run", str(fleet), "--json")
    assert shown.returncode == 0, shown.stderr
    got = json.loads(shown.stdout)  # the whole of stdout is the one object
    assert list(got) == ["batch", "name", "jobs", "dispatched", "failed", "events"]
    assert (got["name"], got["jobs"], got["dispatched"], got["failed"]) == ("fleet", 3, 2, 1)
    by_name = {e["name"]: e for e in got["events"]}
    assert set(by_name["scratch-1"]) == {"event", "batch_id", "name", "target", "job", "adopted"}
    assert set(by_name["edge-3"]) == {"event", "batch_id", "name", "target", "outcome", "reason"}
    assert (by_name["edge-3"]["event"], by_name["edge-3"]["outcome"]) == (
        "dispatch_failed", "unreachable")
    assert len(shown.stderr.splitlines()) == 3  # the dispatch lines still go to stderr
    helped = invoke(plain, "batch", "run", "--help").output
    assert '"dispatched": how many reached their target' in " ".join(helped.split())


def test_jobs_cancel_json_has_a_documented_shape(plain: Path) -> None:
    with Board(plain) as board:
        sleeper = board.on("scratch").submit("sleep 60", name="sleeper")
        wait_running(sleeper)
    done = run_cli(plain, "jobs", "cancel", sleeper.id, "--json")
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert list(got.items()) == [("id", sleeper.id), ("host", "scratch"),
                                 ("job_id", sleeper.id), ("state", "cancelled")]
    again = run_cli(plain, "jobs", "cancel", sleeper.id)  # already over: left as it is
    assert (again.returncode, again.stdout) == (0, f"{sleeper.id}: cancelled\n")
    helped = " ".join(invoke(plain, "jobs", "cancel", "--help").output.split())
    assert '{"id": job id, "host": host name, "job_id":' in helped


# -- jobs logs --follow ------------------------------------------------------------------------

@pytest.fixture
def board(tmp_path: Path, sshd_server: SshServer,
          slurm_cluster: SlurmCluster) -> Iterator[Board]:  # noqa: F811
    with Board(make_workspace(tmp_path, sshd=sshd_server, slurm=slurm_cluster)) as found:
        yield found


@pytest.mark.parametrize("host", ["scratch", "edge", "hpc"])
def test_follow_streams_a_running_job_until_it_ends(board: Board, host: str) -> None:
    job = board.on(host).submit(TALK, name="talk")
    # Each piece with whether the job had ended when it came (no wall-time bound: a loaded
    # machine may start the job late and coalesce polls, never reorder or end early).
    seen = [(chunk, job.view().finished) for chunk in job.logs(follow=True, interval=0.1)]
    assert "".join(chunk for chunk, _ in seen) == "line1\nline2\nline3\ncafé\n"
    assert job.view().finished  # the iterator ended only once the job's state was final
    assert not seen[0][1] and len(seen) >= 2, seen  # the first piece came while it ran
    assert "".join(job.logs(stream="stderr", follow=True)) == "bye\n"  # a finished job: at once
    assert "".join(job.logs(tail=2, follow=True)) == "line3\ncafé\n"


def test_cli_follow_prints_output_as_it_comes_then_exits_0(board: Board) -> None:
    config = board.config.path
    assert config is not None
    job = board.on("scratch").submit("echo first; sleep 3; echo second; exit 3", name="f")
    proc = subprocess.Popen(_mainboard(config, "jobs", "logs", job.id, "-f", "--interval",
                                       "0.1"), stdout=subprocess.PIPE, text=True, env=_env())
    assert proc.stdout is not None
    assert proc.stdout.readline() == "first\n"
    assert proc.poll() is None and not job.view().finished  # printed while the job ran
    assert proc.stdout.read() == "second\n"
    assert proc.wait(30) == 0  # the job failed (exit 3): following it still succeeded
    assert job.view().exit_code == 3
    assert invoke(config, "jobs", "logs", job.id, "--follow", "--tail", "1").output == "second\n"


# -- bars: an ETA on a terminal, nothing drawn in a pipe -----------------------------------------

def test_batch_watch_draws_jobs_done_with_an_eta_only_on_a_terminal(plain: Path) -> None:
    fleet = fleet_file(plain.parent, '[defaults]\ntarget = "scratch"\n[[jobs]]\ncommand = "true"\n'
                                     '[[jobs]]\ncommand = "sleep 1"\n[[jobs]]\n'
                                     'command = "sleep 2"\n')
    batch_id = run_cli(plain, "batch", "run", str(fleet)).stdout.strip()
    code, screen = _on_terminal(_mainboard(plain, "batch", "watch", batch_id, "--interval",
                                           "0.2"), plain.parent)
    assert code == 0, screen
    assert "of 3 jobs done" in screen and ETA.search(screen), screen
    assert f"batch {batch_id} (fleet): 3 jobs: 3 completed" in screen

    quick = run_cli(plain, "batch", "run", str(fleet_file(
        plain.parent, '[[jobs]]\ntarget = "scratch"\ncommand = "true"\n', "quick.toml")))
    piped = run_cli(plain, "batch", "watch", quick.stdout.strip(), "--interval", "0.2")
    assert piped.returncode == 0, piped.stderr
    for text in (piped.stdout, piped.stderr):
        assert not ETA.search(text) and "ETA -" not in text and "jobs done" not in text, text
        assert not any(mark in text for mark in BAR_MARKS), text


@pytest.fixture
def ridge_ws(tmp_path: Path, redis_server: RedisServer) -> Path:
    """A workspace on the test Redis whose run file imports a module next to it, which
    imports one from the workspace root; the processes run from a third directory."""
    ws = tmp_path / "ws"
    (ws / "runs").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (ws / "mainboard.toml").write_text(f'[workspace]\nname = "streams"\n\n[broker]\n'
                                       f'url = "{redis_server.url}"\n')
    (ws / "shape.py").write_text("WIDTH = 10.0\n")
    (ws / "runs" / "ridge.py").write_text(
        "import numpy as np\nfrom shape import WIDTH\n\n\ndef ridge(x):\n"
        "    return np.exp(-WIDTH * np.sum((x - 0.5) ** 2, axis=1))\n")
    return ws


def _run_file(ws: Path, seed: int, integrand: str = 'kind = "python"\ntarget = "ridge:ridge"'
              ) -> Path:
    """A 2-d run file in ``ws/runs`` (10 iterations of 20,000 samples)."""
    path = ws / "runs" / f"run-{seed}.toml"
    path.write_text(f'name = "ridge"\nseed = {seed}\n[domain]\ncontinuous = 2\n[integrand]\n'
                    f"{integrand}\n[stop]\nmax_samples = 200000\n"
                    "[batching]\nbatch_size = 10000\nbatches_per_iteration = 2\n")
    return path


def test_integrate_finds_the_run_s_own_module_without_pythonpath(ridge_ws: Path) -> None:
    argv = _mainboard(ridge_ws / "mainboard.toml", "integrate", str(_run_file(ridge_ws, 1)),
                      "--workers", "1", "--json")
    done = subprocess.run(argv, cwd=ridge_ws.parent / "elsewhere", capture_output=True,
                          text=True, env=_env(), timeout=90)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout)
    assert (got["samples"], got["iterations"]) == (200_000, 10)
    assert abs(got["estimate"] - 0.29843) < 0.002  # pi/10 erf(sqrt(10)/2)^2: both modules ran


def test_integrate_draws_an_eta_bar_on_a_terminal_and_plain_lines_in_a_pipe(
        ridge_ws: Path) -> None:
    gauss = 'kind = "genz.gaussian"\na = [4.0, 4.0]\nu = [0.45, 0.45]'
    config, elsewhere = ridge_ws / "mainboard.toml", ridge_ws.parent / "elsewhere"
    code, screen = _on_terminal(_mainboard(config, "integrate", str(_run_file(ridge_ws, 2, gauss)),
                                           "--workers", "1"), elsewhere, timeout=90)
    assert code == 0, screen[-3000:]
    assert "of 200,000 samples" in screen and ETA.search(screen), screen[-3000:]
    assert "stopped by max_samples" in screen
    piped = subprocess.run(_mainboard(config, "integrate", str(_run_file(ridge_ws, 3, gauss)),
                                      "--workers", "1", "--json"), cwd=elsewhere,
                           capture_output=True, text=True, env=_env(), timeout=90)
    assert piped.returncode == 0, piped.stderr[-3000:]
    assert json.loads(piped.stdout)["samples"] == 200_000
    assert not ETA.search(piped.stderr) and not any(m in piped.stderr for m in BAR_MARKS)
    assert "ridge: iteration 10: 200,000 samples" in piped.stderr  # plain lines, for a log


def test_the_eta_is_the_nearest_limit_and_the_error_target_is_shown() -> None:
    from mainboard.cli.runview import StopLimits, eta_text
    from mainboard.tasks.coordinator import Progress

    stop = parse_run({"name": "x", "seed": 1, "domain": {"continuous": 1},
                      "integrand": {"kind": "constant", "value": 1.0},
                      "stop": {"max_samples": 100_000, "absolute_error": 0.001}}).stop
    limits = StopLimits.of(stop)
    at = Progress("r", 2, 40_000, 100_000, 0.3, 0.002, 20_000.0, 2.0)
    assert limits.progress(at) == (0.4, 3.0)  # 60k samples left at 20k/s; the error needs 160k
    assert limits.target_text() == " -> 0.001" and eta_text(3725.4) == "ETA 1:02:05"
    closer = Progress("r", 2, 40_000, 100_000, 0.3, 0.0011, 20_000.0, 2.0)
    assert limits.progress(closer)[1] == pytest.approx((40_000 * 1.21 - 40_000) / 20_000)
    assert StopLimits.of({"relative_error": 0.01}).target_text() == " -> 1% rel."


def test_a_fleet_worker_imports_from_its_host_workspace_root(tmp_path: Path) -> None:
    from mainboard.fleet.launch import worker_command

    root = tmp_path / "r o'ot $(x)"
    root.mkdir()
    (root / "ridge.py").write_text("WHERE = 'root'\n")
    python = tmp_path / "python"  # stands in for the worker's python: imports as it would
    python.write_text(f'#!/bin/sh\nexec {sys.executable} -c "import ridge, sys; '
                      f'print(ridge.WHERE, *sys.path[1:3], sep=chr(124))" > "$OUT"\n')
    python.chmod(0o755)
    secret = tmp_path / "1.broker"
    secret.write_text("redis://127.0.0.1:1/0")
    text = worker_command(str(python), "mb-x-1", ["q"], 1, str(secret), root=str(root))
    out = tmp_path / "out"
    for inherited in (None, "/opt/from-a-module"):  # set -u: an unset PYTHONPATH is fine too
        env = {"OUT": str(out), "PATH": "/usr/bin:/bin",
               **({"PYTHONPATH": inherited} if inherited else {})}
        subprocess.run(["/bin/bash", "-c", f"set -u; {text}"], env=env, check=True,
                       cwd=tmp_path)
        where, first, then = out.read_text().rstrip("\n").split("|")
        assert (where, first) == ("root", str(root))  # first on the path, found from elsewhere
        assert then == inherited if inherited else then != str(root)
