"""Live job states, for real: `jobs list`/`show` and the dashboard's Jobs page ask the hosts.

Jobs run on this machine and over a real sshd; each test waits for the job's own end
(the ``exit_code`` file its script writes), then asks mainboard once. No monitor pass
runs until a test counts what a later one records: a state change is one receipt,
whoever saw it first. A host that is gone is a stopped sshd (refused) and a port that
accepts and never answers (the time budget).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from mainboard.board import Board
from mainboard.bridges.jobstate import JobState
from mainboard.cli import cli
from mainboard.config import load_config
from mainboard.jobs.job import Job
from mainboard.jobs.live import SharedSweep, Sweep
from mainboard.jobs.monitor import LOG_FILE
from mainboard.jobs.store import JobStore
from tests.support.chromium import Tab, drive
from tests.support.dashboard import start_dashboard, stop_dashboard
from tests.support.jobs_workspace import make_workspace, wait_running, wait_until
from tests.support.services import SshServer, free_port, start_sshd
from tests.support.workspace import run_cli

pytestmark = pytest.mark.live
GATED = "while [ ! -e gate ]; do sleep 0.1; done; echo hello"


def _topics(config: Path, job_id: str) -> Counter[str]:
    """How many receipt lines of each topic the job has (parsed without mainboard)."""
    path = config.parent / ".mainboard" / "jobs" / f"{job_id}.ndjson"
    return Counter(json.loads(line)["topic"] for line in path.read_text().splitlines())


def _submit(config: Path, host: str, *cmd: str) -> str:
    done = run_cli(config, "submit", "--on", host, "--", *cmd)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _ended(config: Path, job_id: str) -> None:
    """Until the job's script wrote its exit code (its own end event; the sshd is this machine)."""
    job_dir = JobStore(config.parent / ".mainboard").load(job_id).submitted.job_dir
    exit_file = Path(job_dir) / "exit_code"
    wait_until(exit_file.exists, f"job {job_id} ended", timeout=60)


def _rows(listing: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["id"]: row for row in listing["jobs"]}


def test_a_one_second_job_is_finished_in_list_and_show_with_no_monitor_pass(
        tmp_path: Path, sshd_server: SshServer) -> None:
    config = make_workspace(tmp_path, sshd=sshd_server)
    one_second = ("sh", "-c", "echo hello; sleep 1")
    listed = {host: _submit(config, host, *one_second) for host in ("local", "edge")}
    shown = {host: _submit(config, host, *one_second) for host in ("local", "edge")}
    everyone = [*listed.values(), *shown.values()]
    for job_id in everyone:
        _ended(config, job_id)
    submitted_at = {j: json.loads((config.parent / ".mainboard" / "jobs" / f"{j}.ndjson")
                                  .read_text().splitlines()[0])["ts"] for j in everyone}
    before = time.time()
    cached = json.loads(run_cli(config, "jobs", "list", "--cached", "--json").stdout)
    after = time.time()
    assert cached["cached"] is True and cached["unreachable_hosts"] == {}
    for job_id, row in _rows(cached).items():  # the receipts' state, with its age
        assert (row["state"], row["final"], row["stale"]) == ("pending", False, False)
        assert before - submitted_at[job_id] - 0.001 <= row["state_age_s"] \
            <= after - submitted_at[job_id] + 0.001
    assert all(_topics(config, j)["job.finished"] == 0 for j in everyone)  # nothing asked
    table = run_cli(config, "jobs", "list", "--cached")
    assert "AGE" in table.stdout.splitlines()[0] and "pending" in table.stdout

    for host, job_id in shown.items():  # `jobs show` asks that job's host, that job only
        out = run_cli(config, "jobs", "show", job_id[-6:], "--json")
        data = json.loads(out.stdout)
        assert (data["state"], data["exit_code"], data["stale"], out.stderr) == (
            "completed", 0, False, ""), host
        text = run_cli(config, "jobs", "show", job_id).stdout
        assert "state:     completed (" in text
    assert all(_topics(config, j)["job.finished"] == 0 for j in listed.values())
    out = run_cli(config, "jobs", "list", "--json")
    assert out.returncode == 0 and out.stderr == ""
    rows = _rows(json.loads(out.stdout))
    assert {j: (rows[j]["state"], rows[j]["exit_code"]) for j in everyone} == {
        j: ("completed", 0) for j in everyone}
    human = run_cli(config, "jobs", "list").stdout
    assert all(f"{j}" in human for j in everyone) and human.count("completed") == 4
    assert not (config.parent / ".mainboard" / LOG_FILE).exists()  # no monitor pass ran

    # The monitor announces each once, and records no second verdict.
    report = json.loads(run_cli(config, "monitor", "--json").stdout)
    assert sorted(e["id"] for e in report["finished"]) == sorted(everyone)
    again = json.loads(run_cli(config, "monitor", "--json").stdout)
    assert (again["finished"], again["changed"]) == ([], False)
    for job_id in everyone:
        assert _topics(config, job_id)["job.finished"] == 1, job_id


def test_a_host_that_does_not_answer_is_one_line_and_its_jobs_are_stale(tmp_path: Path) -> None:
    server = start_sshd(tmp_path / "sshd-far", port=free_port())
    config = make_workspace(tmp_path, sshd=server)
    with Board(config) as board:
        far = board.on("edge").submit("sleep 60", name="far")
        wait_running(far)  # recorded: running
    near = _submit(config, "scratch", "true")
    _ended(config, near)
    server.stop()
    silent = socket.create_server(("127.0.0.1", server.port), reuse_port=False)
    try:  # the port accepts and never says a word: only the time budget ends the wait
        hung = run_cli(config, "jobs", "list", "--timeout", "0.5", "--json")
        assert hung.returncode == 0, hung.stderr
        data = json.loads(hung.stdout)
        assert data["unreachable_hosts"] == {"edge": "no answer within 0.5s"}
        rows = _rows(data)
        assert (rows[far.id]["state"], rows[far.id]["stale"]) == ("running", True)
        assert (rows[near]["state"], rows[near]["stale"]) == ("completed", False)
        assert hung.stderr.startswith("mainboard: warning: host edge did not answer "
                                      "(no answer within 0.5s); its 1 unfinished job(s)")
        assert len(hung.stderr.splitlines()) == 1 and "--cached" in hung.stderr
        silent.close()
        refused = run_cli(config, "jobs", "list")  # now the port is closed: refused
        assert refused.returncode == 0 and len(refused.stderr.splitlines()) == 1
        assert "host edge did not answer (" in refused.stderr
        assert "Traceback" not in refused.stderr
        far_row = next(line for line in refused.stdout.splitlines() if far.id in line)
        assert "running" in far_row and "stale" in far_row
        shown = json.loads(run_cli(config, "jobs", "show", far.id, "--json").stdout)
        assert (shown["state"], shown["stale"]) == ("running", True)
        _the_page_marks_it_stale(config, far.id)
        assert _topics(config, far.id) == Counter({"job.submitted": 1, "job.cost": 1,
                                                   "job.state": 1})
    finally:
        silent.close()
        server = start_sshd(server.dir, port=server.port)  # same keys, same port
    try:
        with Board(config) as board:
            assert Job(board, far.id).cancel() is JobState.CANCELLED
        back = json.loads(run_cli(config, "jobs", "list", "--json").stdout)
        assert back["unreachable_hosts"] == {} and _rows(back)[far.id]["state"] == "cancelled"
    finally:
        server.stop()


def _the_page_marks_it_stale(config: Path, job_id: str) -> None:
    """The dashboard's Jobs page (its JSON and the page in Chromium) with edge refusing."""
    dash = start_dashboard(load_config(config))
    try:
        api = dash.api("/api/jobs")
        assert list(api["unreachable_hosts"]) == ["edge"]
        assert (_rows(api)[job_id]["state"], _rows(api)[job_id]["stale"]) == ("running", True)

        async def look(tab: Tab) -> tuple[str, str]:
            row = await tab.wait_until(f"(r => r && r.dataset.stale === 'true' && r.textContent)"
                                       f"(document.querySelector('tr[data-job=\"{job_id}\"]'))", 20)
            note = await tab.wait_until("(p => p && p.textContent)"
                                        "(document.querySelector('p.stale-host'))", 5)
            return row, note

        row, note = drive(dash.page("/jobs"), look)
        assert "running" in row and "stale" in row
        assert note.startswith("host edge did not answer (") and "marked stale" in note
    finally:
        stop_dashboard(dash)


def test_concurrent_readers_share_one_sweep(tmp_path: Path) -> None:
    config = make_workspace(tmp_path)
    job_id = _submit(config, "local", "true")
    _ended(config, job_id)
    with Board(config) as board:
        opened: list[int] = []

        def hosts() -> Board:  # called once per sweep
            opened.append(1)
            return board

        shared = SharedSweep(hosts, max_age=60.0)
        start = threading.Barrier(8)
        seen: list[Sweep] = []

        def reader() -> None:
            start.wait()
            seen.append(shared.get())

        readers = [threading.Thread(target=reader) for _ in range(8)]
        for thread in readers:
            thread.start()
        for thread in readers:
            thread.join()
        shared.kick()  # the last sweep is fresh: no second one
    assert len(opened) == 1 and len({id(s) for s in seen}) == 1 and len(seen) == 8
    assert [v.state for v in seen[0].views] == [JobState.COMPLETED]
    assert _topics(config, job_id)["job.finished"] == 1


def test_the_open_jobs_page_shows_the_job_finish_with_no_monitor_pass(tmp_path: Path) -> None:
    config = make_workspace(tmp_path)
    root = tmp_path / "scratch-root"
    job_id = _submit(config, "scratch", "sh", "-c", GATED)
    dash = start_dashboard(load_config(config))
    try:
        row = f"document.querySelector('tr[data-job=\"{job_id}\"]')"

        async def look(tab: Tab) -> tuple[str, str]:
            first = await tab.wait_until(f"(r => r && r.dataset.state === 'running' && "
                                         f"r.textContent)({row})", 20)
            (root / "gate").touch()  # the job ends now; the page is not reloaded
            done = await tab.wait_until(f"(r => r && r.dataset.state === 'completed' && "
                                        f"r.textContent)({row})", 20)
            return first, done

        first, done = drive(dash.page("/jobs"), look)
        assert "running" in first and "completed" in done and "stale" not in done
        api = dash.api("/api/jobs")
        mine = _rows(api)[job_id]
        assert (mine["state"], mine["exit_code"], mine["stale"]) == ("completed", 0, False)
        assert api["unreachable_hosts"] == {} and api["version"] == \
            dash.api("/api/jobs-version")["version"]
    finally:
        stop_dashboard(dash)
    assert not (config.parent / ".mainboard" / LOG_FILE).exists()  # no monitor pass ran
    report = json.loads(run_cli(config, "monitor", "--json").stdout)
    assert [e["id"] for e in report["finished"]] == [job_id]
    assert _topics(config, job_id)["job.finished"] == 1


def test_bad_input_is_one_line_exit_2_and_records_nothing(tmp_path: Path) -> None:
    config = make_workspace(tmp_path)
    with Board(config) as board:
        job = board.on("scratch").submit("sleep 30", name="kept")
        receipts = board.config.state_dir / "jobs" / f"{job.id}.ndjson"
        before = receipts.read_bytes()
        for args, said in (
                (("jobs", "list", "--timeout", "0"), "'--timeout': 0.0 is not in the range x>=0.1"),
                (("jobs", "show", "nosuch"), "no job 'nosuch' in "),
                (("jobs", "show", "nosuch", "--cached"), "no job 'nosuch' in "),
                (("jobs", "show", job.id, "--timeout", "-1"), "'--timeout': -1.0 is not in")):
            result = CliRunner().invoke(cli, ["--config", str(config), *args])
            assert result.exit_code == 2, (args, result.output)
            assert len(result.stderr.splitlines()) == 1 and said in result.stderr, result.stderr
            assert result.stdout == ""
        assert receipts.read_bytes() == before  # no host was asked, nothing recorded
        assert job.cancel() is JobState.CANCELLED
