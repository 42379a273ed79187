"""The suite's fork server gives what a new interpreter gives: exit code, stdout, stderr,
the request's working directory and environment (tests/support/cliserver.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cliserver import ROOT, popen_mainboard, run_mainboard

GAUSS = Path(__file__).resolve().parents[2] / "examples" / "gauss-8d.toml"


def _fresh(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mainboard", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("case", ["help", "bad-key", "env-url", "no-verb"])
def test_a_forked_call_prints_and_exits_as_a_new_interpreter(tmp_path: Path, case: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAINBOARD_")}
    (tmp_path / "mainboard.toml").write_text('[workspace]\nname = "fork"\n')
    args = {"help": ["--help"], "no-verb": ["no-such-verb"],
            "bad-key": ["config", "check"],
            "env-url": ["integrate", str(GAUSS), "--workers", "1"]}[case]
    if case == "bad-key":
        (tmp_path / "mainboard.toml").write_text('[workspace]\nname = "fork"\nbogus = 1\n')
    if case == "env-url":
        env["MAINBOARD_BROKER_URL"] = "redis//:Zq9@127.0.0.1:1/0"
    forked = run_mainboard(args, cwd=tmp_path, env=env, timeout=120)
    fresh = _fresh(args, tmp_path, env)
    assert (forked.returncode, forked.stdout, forked.stderr) == \
        (fresh.returncode, fresh.stdout, fresh.stderr)
    assert forked.returncode == {"help": 0, "no-verb": 2, "bad-key": 2, "env-url": 2}[case]
    assert "Zq9" not in forked.stdout + forked.stderr
    if case == "env-url":  # the request's environment reached the command
        assert "environment: MAINBOARD_BROKER_URL: " in forked.stderr


def test_a_call_past_its_timeout_is_killed_as_subprocess_run_does(tmp_path: Path) -> None:
    (tmp_path / "mainboard.toml").write_text("[workspace]\n")
    with pytest.raises(subprocess.TimeoutExpired):
        run_mainboard(["run", "--", "sleep", "20"], cwd=tmp_path, timeout=2)


def _fresh_popen(args: list[str], **kwargs: object) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "mainboard", *args], **kwargs)  # type: ignore[call-overload]


def test_a_served_popen_streams_and_ends_by_its_signal_as_a_new_process(tmp_path: Path) -> None:
    (tmp_path / "mainboard.toml").write_text("[workspace]\n")
    seen = []
    for start in (popen_mainboard, _fresh_popen):
        proc = start(["run", "--", "sh", "-c", "echo started; exec sleep 60"], cwd=tmp_path,
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                     start_new_session=True)
        assert proc.stdout is not None and proc.stdout.readline() == "started\n"
        assert os.getsid(proc.pid) == proc.pid and proc.poll() is None
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=0.01)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        seen.append((proc.returncode, out, err.splitlines()[-1:]))
    assert seen[0] == seen[1]
    assert seen[0][0] != 0


def test_a_served_command_sees_the_sys_path_a_new_interpreter_builds(tmp_path: Path) -> None:
    added = os.pathsep.join([str(tmp_path / "lib"), "rel"])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (added, os.environ.get("PYTHONPATH")) if p)}
    show = "import json, sys; print(json.dumps(sys.path[1:]))"
    fresh = subprocess.run([sys.executable, "-c", show], cwd=tmp_path, env=env,
                           capture_output=True, text=True, check=True)
    served = subprocess.run(
        [sys.executable, "-c", "import json, os; from tests.support import cliserver as c; "
         f"os.chdir({str(tmp_path)!r}); print(json.dumps(c._request_path({env!r})[1:]))"],
        cwd=ROOT, capture_output=True, text=True, check=True)
    assert json.loads(served.stdout) == json.loads(fresh.stdout)
    assert json.loads(served.stdout)[:2] == [str(tmp_path / "lib"), str(tmp_path / "rel")]
