"""Batches running for real: a 6-job batch over a local host, a real sshd, a real SLURM and
an ssh host nobody answers on, whose ``watch`` is SIGKILLed mid-way and started again;
an interrupted dispatch that adopts instead of resending; watch and a cron'd ``mainboard
monitor`` side by side, each job announced once; the live table on a terminal.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mainboard.batch.run import BATCH_ENV, BATCH_JOB_ENV, dispatch, start, store_of
from mainboard.batch.watch import watch
from mainboard.board import Board
from mainboard.jobs.job import Job, submit
from mainboard.jobs.job import store_of as job_store
from mainboard.jobs.monitor import monitor_pass
from tests.support.batch_helpers import (
    HOSTILE,
    batch_receipts,
    fleet_file,
    invoke,
    plain_workspace,
    raw_receipts,
)
from tests.support.boards import ssh_host
from tests.support.cliserver import popen_mainboard
from tests.support.jobs_workspace import make_workspace, wait_until
from tests.support.services import SlurmCluster, SshServer, free_port
from tests.support.terminal import on_terminal
from tests.support.workspace import run_cli

pytestmark = pytest.mark.live


@pytest.fixture
def plain(tmp_path: Path) -> Path:
    """A workspace with local, ssh and SLURM hosts that are never contacted."""
    return plain_workspace(tmp_path)


def test_interrupted_dispatch_adopts_instead_of_resending(plain: Path) -> None:
    path = fleet_file(plain.parent, f'name = {json.dumps(HOSTILE)}\n[defaults]\n'
                                    'target = "scratch"\n[[jobs]]\nname = "a"\ncommand = "echo a"\n'
                                    '[[jobs]]\nname = "b"\ncommand = "echo b"\n')
    with Board(plain) as board:
        batch_id = start(board, path)
        assert "'" not in batch_id and ";" not in batch_id and " " not in batch_id
        # What a dispatcher killed right after the host accepted "a" leaves behind: the
        # job's own receipts (tagged with the batch), no batch.dispatched line.
        early = submit(board, "scratch", "echo a", name="a",
                       env={BATCH_ENV: batch_id, BATCH_JOB_ENV: "a"})
        written = dispatch(board, batch_id)
        assert [(p.name, p.job if p.name == "a" else "", p.adopted) for p in written] == [
            ("a", early.id, True), ("b", "", False)]
        assert dispatch(board, batch_id) == []  # nothing left to send
        last = watch(board, batch_id, interval=0.2)
        assert [(r.name, r.outcome) for r in last.rows] == [("a", "completed"),
                                                            ("b", "completed")]
        views, _ = job_store(board).scan()
        assert sorted(v.name for v in views) == ["a", "b"]  # "a" ran once
    receipts = batch_receipts(plain.parent, batch_id)
    lines = receipts.read_text().splitlines(keepends=True)
    receipts.write_text("".join([*lines[:2], "{not json\n", *lines[2:]]))
    shown = invoke(plain, "batch", "show", batch_id, "--json")
    assert f"mainboard: warning: {receipts}:3: not a JSON receipt line" in shown.output
    summary = json.loads(shown.output.splitlines()[-1])  # the rest is still read
    assert (summary["name"], summary["outcomes"]) == (HOSTILE, {"completed": 2})


def _monitor_announced(ws: Path) -> Counter[str]:
    """How often each job id was announced in ``monitor.ndjson`` (parsed independently)."""
    lines = raw_receipts(ws / ".mainboard" / "monitor.ndjson")
    return Counter(i for ln in lines if ln["topic"] == "monitor.pass"
                   for i in ln["payload"]["announced"])


def test_a_job_outside_the_batch_is_left_for_a_plain_monitor(plain: Path) -> None:
    path = fleet_file(plain.parent, '[defaults]\ntarget = "scratch"\n[[jobs]]\nname = "a"\n'
                                    'command = "mkdir -p out && echo a > out/a.txt"\n'
                                    'fetch = ["out/a.txt"]\n[[jobs]]\nname = "b"\n'
                                    'command = "while [ ! -e lone.done ]; do sleep 0.1; done"\n')
    with Board(plain) as board:
        batch_id = start(board, path)
        # "lone" is no batch job; it finishes while the batch is watched ("b" waits for it).
        lone = submit(board, "scratch", "while [ ! -e lone.gate ]; do sleep 0.1; done; "
                                        "touch lone.done", name="lone")
        gate = Path(board.on("scratch").root) / "lone.gate"
        last = watch(board, batch_id, interval=0.2, on_step=lambda _step: gate.touch())
        assert [(r.name, r.outcome) for r in last.rows] == [("a", "completed"),
                                                            ("b", "completed")]
        assert (plain.parent / "out" / "a.txt").read_text() == "a\n"
        assert job_store(board).load(lone.id).finished is False  # the watch never asked
        batch_jobs = {r.job for r in last.rows}
    ws = plain.parent
    assert _monitor_announced(ws) == Counter({j: 1 for j in batch_jobs})
    told: Counter[str] = Counter()

    def plain_monitor() -> bool:
        report = json.loads(invoke(plain, "monitor", "--json").output)
        told.update(e["id"] for e in report["finished"] + report["failed"])
        return bool(told[lone.id])

    wait_until(plain_monitor, "lone announced by `mainboard monitor`", 30)
    assert told == Counter({lone.id: 1})
    assert json.loads(invoke(plain, "monitor", "--json").output)["changed"] is False
    assert _monitor_announced(ws) == Counter({j: 1 for j in {*batch_jobs, lone.id}})


def test_watch_and_monitor_side_by_side_announce_each_batch_job_once(plain: Path) -> None:
    path = fleet_file(plain.parent, '[defaults]\ntarget = "scratch"\n[[jobs]]\nname = "a"\n'
                                    'command = "true"\n[[jobs]]\nname = "b"\n'
                                    'command = "while [ ! -e gate ]; do sleep 0.1; done"\n')
    told: Counter[str] = Counter()

    def plain_pass() -> bool:
        report = monitor_pass(board)
        told.update(e["id"] for e in report["finished"] + report["failed"])
        return bool(told)

    with Board(plain) as board:
        batch_id = start(board, path)
        dispatch(board, batch_id)
        a = store_of(board).load(batch_id).dispatched["a"].job
        wait_until(plain_pass, "a announced by the monitor before any watch", 30)
        assert told == Counter({a: 1})
        gate = Path(board.on("scratch").root) / "gate"

        def step(_step: object) -> None:  # a cron'd monitor between the watch's steps
            plain_pass()
            gate.touch()

        last = watch(board, batch_id, interval=0.2, on_step=step)
        plain_pass()
        b = last.view.dispatched["b"].job
    assert [(r.name, r.job, r.outcome) for r in last.rows] == [("a", a, "completed"),
                                                               ("b", b, "completed")]
    assert told[a] == 1 and set(told) <= {a, b} and max(told.values()) == 1
    assert _monitor_announced(plain.parent) == Counter({a: 1, b: 1})
    lines = raw_receipts(batch_receipts(plain.parent, batch_id))
    assert sorted(ln["payload"]["name"] for ln in lines if ln["topic"] == "batch.announced") == [
        "a", "b"]


class _Lines:
    """A subprocess's stdout lines as they come (a reader thread feeds a queue)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc, self.lines, self._q = proc, [], queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._q.put(line)
        self._q.put(None)

    def until(self, predicate: Any, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not predicate(self.lines):
            try:
                line = self._q.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no such output after {timeout}s: {self.lines}") from None
            if line is None:
                raise AssertionError(f"watch ended early: {self.lines}")
            self.lines.append(json.loads(line))


def _watch(config: Path, batch_id: str, log: Path) -> subprocess.Popen[str]:
    with log.open("a") as err:
        return popen_mainboard(
            ["--config", str(config), "batch", "watch",
             batch_id, "--json", "--interval", "0.3"], cwd=config.parent,
            stdout=subprocess.PIPE, stderr=err, text=True, env={**os.environ, "COLUMNS": "200"})


def _outcomes(events: list[dict[str, Any]]) -> list[str]:
    return [e["name"] for e in events if e["event"] == "announced"]


@pytest.fixture
def six(tmp_path: Path, sshd_server: SshServer,
        slurm_cluster: SlurmCluster) -> Iterator[tuple[Path, Path]]:
    """The 6-job fleet: local, ssh, SLURM, a failing hostile job, an ssh host that is down."""
    down = ssh_host(sshd_server, tmp_path / "known_hosts", port=free_port())
    config = make_workspace(tmp_path, sshd=sshd_server, slurm=slurm_cluster,
                            extra_hosts={"down": down})
    argv = ["sh", "-c", "mkdir -p out; printf '%s' \"$1\" > out/hostile.txt; exit 3", "sh",
            f"x'; touch {tmp_path / 'pwned'}; '"]
    fleet = fleet_file(config.parent, f"""
name = "six"
[defaults]
target = "edge"
runtime-s = 5
[[jobs]]
target = "scratch"
command = "mkdir -p out && tr a-z A-Z < in/d.txt > out/scratch.txt"
data = ["in/d.txt"]
fetch = ["out/scratch.txt"]
[[jobs]]
name = {json.dumps(HOSTILE)}
target = "scratch"
command = {json.dumps(argv)}
fetch = ["out/hostile.txt"]
[[jobs]]
command = "mkdir -p out && cat in/d.txt > out/edge.txt"
data = ["in/d.txt"]
fetch = ["out/edge.txt"]
[[jobs]]
name = "gated"
command = "while [ ! -e gate ]; do sleep 0.2; done; mkdir -p out && echo late > out/late.txt"
fetch = ["out/late.txt"]
[[jobs]]
target = "hpc"
command = "mkdir -p out && echo slurm > out/hpc.txt"
walltime = "5m"
fetch = ["out/hpc.txt"]
[[jobs]]
target = "down"
command = "true"
""")
    yield config, fleet


def test_six_job_batch_survives_a_killed_watch(six: tuple[Path, Path], tmp_path: Path) -> None:
    config, fleet = six
    ws = config.parent
    ran = run_cli(config, "batch", "run", str(fleet))
    assert ran.returncode == 0, ran.stderr
    batch_id, dispatched = ran.stdout.strip(), ran.stderr.splitlines()  # the id alone on stdout
    assert ran.stdout == f"{batch_id}\n"
    assert sorted(line.split(" -> ")[0] for line in dispatched) == sorted(
        [f"dispatched {n}" for n in ("scratch-1", HOSTILE, "edge-3", "gated", "hpc-5")]
        + ["unreachable down-6"])
    assert "connection refused" in next(line for line in dispatched if "down-6" in line)

    first = _Lines(_watch(config, batch_id, tmp_path / "watch.err"))
    first.until(lambda seen: {"scratch-1", HOSTILE, "down-6"} <= set(_outcomes(seen)), 90)
    first.proc.send_signal(signal.SIGKILL)  # mid-way: "gated" cannot finish yet
    first.proc.wait(10)
    assert "gated" not in _outcomes(first.lines)

    # Nobody watches: the gate opens, and a plain monitor pass brings the results back.
    (tmp_path / "edge-root" / "gate").write_text("")
    wait_until(lambda: run_cli(config, "monitor", "--json").returncode == 0
               and (ws / "out" / "late.txt").exists(), "late.txt pulled by monitor", 60)

    second = _Lines(_watch(config, batch_id, tmp_path / "watch.err"))
    second.until(lambda seen: seen and seen[-1]["event"] == "summary", 90)
    assert second.proc.wait(10) == 1  # a job failed: the watch says so

    told = _outcomes(first.lines) + _outcomes(second.lines)
    assert sorted(told) == sorted(["scratch-1", HOSTILE, "edge-3", "gated", "hpc-5", "down-6"])
    lines = raw_receipts(batch_receipts(ws, batch_id))
    announced = [ln["payload"]["name"] for ln in lines if ln["topic"] == "batch.announced"]
    assert sorted(announced) == sorted(told)  # each once, nothing lost
    assert [ln["payload"]["outcomes"] for ln in lines if ln["topic"] == "batch.finished"] == [
        {"completed": 4, "failed": 1, "unreachable": 1}]

    result = second.lines[-1]
    rows = {r["name"]: r for r in result["rows"]}
    assert (result["outcomes"], result["ok"]) == ({"completed": 4, "failed": 1,
                                                   "unreachable": 1}, False)
    assert (rows[HOSTILE]["outcome"], rows[HOSTILE]["exit_code"]) == ("failed", 3)
    assert "connection refused" in rows["down-6"]["detail"] and rows["down-6"]["job"] is None
    for name, path, text in (("scratch-1", "out/scratch.txt", "HELLO\n"),
                             (HOSTILE, "out/hostile.txt", f"x'; touch {tmp_path / 'pwned'}; '"),
                             ("edge-3", "out/edge.txt", "hello\n"), ("gated", "out/late.txt",
                                                                      "late\n"),
                             ("hpc-5", "out/hpc.txt", "slurm\n")):
        assert rows[name]["pulled"] == [path] and (ws / path).read_text() == text
    assert not (tmp_path / "pwned").exists()

    again = run_cli(config, "batch", "watch", batch_id[-6:], "--json")  # done: says so, no news
    assert again.returncode == 1
    assert [json.loads(line)["event"] for line in again.stdout.splitlines()] == ["summary"]
    shown = json.loads(invoke(config, "batch", "show", batch_id, "--json").output)
    assert shown["outcomes"] == result["outcomes"] and shown["rows"] == result["rows"]
    listed = json.loads(invoke(config, "batch", "list", "--json").output)
    assert [(b["batch"], b["name"], b["jobs"], b["complete"]) for b in listed] == [
        (batch_id, "six", 6, True)]


def test_watch_on_a_terminal_draws_a_live_table(plain: Path) -> None:
    path = fleet_file(plain.parent, '[defaults]\ntarget = "scratch"\n[[jobs]]\n'
                                    'name = "quick"\ncommand = "true"\n[[jobs]]\nname = "slow"\n'
                                    'command = "sleep 1"\n')
    with Board(plain) as board:
        batch_id = start(board, path)
        assert store_of(board).load(batch_id).undispatched  # watch dispatches what run did not
    code, screen = on_terminal(
        [sys.executable, "-m", "mainboard", "--config", str(plain), "batch", "watch", batch_id,
         "--interval", "0.2"], {**os.environ, "COLUMNS": "120", "TERM": "xterm"}, timeout=30)
    assert code == 0
    assert "JOB" in screen and "TARGET" in screen and "STATE" in screen  # the table
    assert "running" in screen  # drawn while a job ran (announcements never say "running")
    assert "completed: quick on scratch (exit 0)" in screen
    assert f"batch {batch_id} (fleet): 2 jobs: 2 completed" in screen


def test_secret_env_runs_but_is_never_recorded_and_a_changed_fleet_is_refused(
        plain: Path) -> None:
    secret = "hf_" + "q7" * 10
    text = ('[defaults]\ntarget = "scratch"\nenv = { HF_TOKEN = "%s", SEED = "3" }\n'
            '[[jobs]]\nname = "use"\ncommand = \'printf "%%s|%%s" "$HF_TOKEN" "$SEED"\'\n'
            '[[jobs]]\nname = "plain"\ncommand = "echo $SEED"\nenv = { HF_TOKEN = "" }\n')
    path = fleet_file(plain.parent, text % secret)
    with Board(plain) as board:
        batch_id = start(board, path)
        created = raw_receipts(batch_receipts(plain.parent, batch_id))[0]["payload"]["jobs"]
        assert [(j["env"], j["secret_env"]) for j in created] == [
            ({"HF_TOKEN": "***", "SEED": "3"}, ["HF_TOKEN"]),
            ({"HF_TOKEN": "***", "SEED": "3"}, ["HF_TOKEN"])]
        dispatch(board, batch_id)
        last = watch(board, batch_id, interval=0.2)
        assert [(r.name, r.outcome) for r in last.rows] == [("use", "completed"),
                                                            ("plain", "completed")]
        assert Job(board, last.view.dispatched["use"].job).logs() == f"{secret}|3"
        # A batch whose fleet file changed before dispatch cannot get its secrets back.
        later = start(board, path)
        path.write_text(text % "hf_rotated")
        written = dispatch(board, later)
    assert [(p.name, p.outcome) for p in written] == [("use", "refused"), ("plain", "refused")]
    assert f"{path} changed since batch {later} was created" in written[0].reason
    assert "HF_TOKEN" in written[0].reason
    state = plain.parent / ".mainboard"
    for receipt in [*state.rglob("*.ndjson")]:
        assert secret not in receipt.read_text(), receipt
