"""`mainboard jobs pull|trace|list --cached` and `mainboard monitor` as a user reads them: the
pulled files, the phases written, how old a recorded state is, a monitor pass that finds
another one running, an unreadable receipt line named in a warning.

Jobs run on a local host (``scratch`` of tests/support/jobs_workspace.py).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from mainboard.jobs.monitor import LOCK_FILE
from mainboard.locks import flocked
from tests.support.jobs_workspace import make_workspace
from tests.support.workspace import run_cli


def test_a_finished_job_is_pulled_traced_and_listed_with_the_age_of_its_state(
        tmp_path: Path) -> None:
    config = make_workspace(tmp_path)
    ws = config.parent
    sent = run_cli(config, "submit", "--on", "scratch", "--name", "hello", "--fetch", "out.txt",
                   "--wait", "--", "echo hi > out.txt")
    assert sent.returncode == 0, sent.stderr
    job = sent.stdout.strip()
    (ws / "out.txt").unlink()
    pulled = run_cli(config, "jobs", "pull", job)
    assert (pulled.returncode, pulled.stdout) == (0, "pulled: out.txt\n"), pulled.stderr
    assert (ws / "out.txt").read_text() == "hi\n"
    traced = run_cli(config, "jobs", "trace", job, "-o", "trace.json")
    assert traced.returncode == 0, traced.stderr
    phases = json.loads((ws / "trace.json").read_text())["traceEvents"]
    said = traced.stdout.removeprefix("wrote trace.json: ").rstrip("\n").split(", ")
    assert [p.rsplit(" ", 1)[0] for p in said] == [e["name"] for e in phases if e.get("ph") == "X"]
    # Its receipts as they would read three hours on: the state is that old.
    receipts = ws / ".mainboard" / "jobs" / f"{job}.ndjson"
    lines = [json.loads(line) for line in receipts.read_text().splitlines()]
    receipts.write_text("".join(json.dumps({**line, "ts": line["ts"] - 3 * 3600 - 60}) + "\n"
                                for line in lines))
    listed = run_cli(config, "jobs", "list", "--cached")
    assert listed.returncode == 0, listed.stderr
    row = listed.stdout.splitlines()[1].split()
    assert row[:5] == [job, "scratch", "completed", "0", "3h"] and row[-1] == "hello"


def test_monitor_reports_a_pass_already_running_and_an_unreadable_line(tmp_path: Path) -> None:
    config = make_workspace(tmp_path)
    state = config.parent / ".mainboard"
    with flocked(state / LOCK_FILE):
        busy = run_cli(config, "monitor", "--lock-wait", "0")
    assert (busy.returncode, busy.stderr) == (0, "")
    assert busy.stdout == "busy: another monitor pass is running; nothing done\n"
    broken = state / "jobs" / f"{time.strftime('%Y%m%d-%H%M%S')}-broken-abcdef.ndjson"
    broken.parent.mkdir()
    broken.write_text("not json\n")
    done = run_cli(config, "monitor")
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        f"mainboard: warning: {broken}:1: not a JSON receipt line (Expecting value: line 1 "
        "column 1 (char 0))", f"mainboard: warning: {broken}: no job.submitted line; job skipped"]
    assert done.stdout == "0 job(s) still running or queued; no change\n"
