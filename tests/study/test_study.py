"""Studies: content-addressed run ids, data checked and shipped, and a ledger in which the
monitor records each job's verdict exactly once; jobs on a local host, a real sshd and the
PBS wrappers over the real SLURM.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mainboard.batch.run import start
from mainboard.board import Board
from mainboard.errors import ConfigError
from mainboard.jobs.job import Job, submit
from mainboard.jobs.monitor import monitor_pass
from mainboard.statedir import RUN_ID_ENV, STUDY_ENV
from mainboard.study.spec import load_study
from tests.support.batch_helpers import fleet_file, invoke, raw_receipts
from tests.support.jobs_workspace import make_workspace, wait_until
from tests.support.services import SlurmCluster, SshServer, free_port

STUDY = """
[study]
name = "sweep"
[defaults]
target = "scratch"
walltime = "5m"
[[jobs]]
name = "ok"
command = 'test "$(cat in/d.txt)" = hello && echo "$MAINBOARD_PARAM_SEED" > seed.txt'
data = ["in/d.txt"]
params = { seed = 1 }
[[jobs]]
name = "bad"
target = "edge"
command = "test \\"$MAINBOARD_PARAM_NOTE\\" = \\"a'; touch pwned\\" && exit 3"
params = { note = "a'; touch pwned" }
[[jobs]]
name = "queued"
target = "pbs"
command = '[ "$MAINBOARD_ATTEMPT" -gt 1 ] || sleep 60'
[[jobs]]
name = "gone"
command = 'rm -rf "$MAINBOARD_JOB_DIR"'
[[jobs]]
name = "twin"
target = "edge"
command = 'test "$(cat in/d.txt)" = hello && echo "$MAINBOARD_PARAM_SEED" > seed.txt'
data = ["in/d.txt"]
params = { seed = 1 }
"""


def _ledger(ws: Path) -> list[dict[str, object]]:
    return raw_receipts(ws / ".mainboard" / "studies" / "sweep.ndjson")


def test_a_study_runs_each_experiment_once_and_its_ledger_holds_each_verdict_once(
        tmp_path: Path, sshd_server: SshServer, slurm_cluster: SlurmCluster) -> None:
    config = make_workspace(tmp_path, sshd=sshd_server, slurm=slurm_cluster)
    ws = config.parent
    path = fleet_file(ws, STUDY, "study.toml")
    first = invoke(config, "study", "run", str(path), "--json")
    assert first.exit_code == 0, first.output
    report = json.loads(first.stdout)
    actions = {j["name"]: (j["action"], j["job"]) for j in report["jobs"]}
    assert report["study"] == "sweep" and report["failed"] == 0
    assert [a for a, _job in actions.values()] == ["submitted"] * 4 + ["skipped"]
    ids = {j["name"]: j["run_id"] for j in report["jobs"]}
    assert ids["twin"] == ids["ok"] and len(set(ids.values())) == 4  # same experiment, one id
    assert report["jobs"][-1]["why"] == f"in flight as job {actions['ok'][1]}"
    assert (tmp_path / "scratch-root" / "in" / "d.txt").read_text() == "hello\n"  # shipped
    with Board(config) as board:
        queued = Job(board, actions["queued"][1])
        wait_until(lambda: queued.status().value in ("pending", "running"), "pbs job queued")
        queued.cancel()

        def all_judged() -> bool:
            monitor_pass(board)
            return sum(ln["topic"] == "study.verdict" for ln in _ledger(ws)) == 4

        wait_until(all_judged, "four verdicts in the ledger")
        for _ in range(2):  # later passes write nothing more
            monitor_pass(board)
    lines = _ledger(ws)
    verdicts = {ln["payload"]["job"]: ln["payload"] for ln in lines
                if ln["topic"] == "study.verdict"}
    assert len(verdicts) == 4 == sum(ln["topic"] == "study.verdict" for ln in lines)
    by_name = {name: verdicts[job] for name, (_a, job) in actions.items() if job in verdicts}
    assert {n: (v["verdict"], v["exit_code"]) for n, v in by_name.items()} == {
        "ok": ("completed", 0), "bad": ("failed", 3), "queued": ("cancelled", by_name[
            "queued"]["exit_code"]), "gone": ("lost", None)}
    assert (tmp_path / "scratch-root" / "seed.txt").read_text() == "1\n"  # params exported
    assert not list(tmp_path.rglob("pwned"))  # a hostile parameter stays a literal value
    shown = invoke(config, "study", "show", "sweep", "--json")
    summary = json.loads(shown.stdout)
    assert summary["counts"] == {"completed": 1, "failed": 1, "lost": 1, "cancelled": 1,
                                 "in-flight": 0} and summary["complete"]
    table = invoke(config, "study", "show", "sweep").stdout.splitlines()
    assert table[0].split() == ["run_id", "name", "target", "job", "attempts", "verdict",
                                "exit_code"]
    assert table[-1] == "study sweep: 4 runs: 1 completed, 1 failed, 1 lost, 1 cancelled"
    # Again: the completed run is skipped, the others run again as their next attempt.
    again = json.loads(invoke(config, "study", "run", str(path), "--json").stdout)
    assert {j["name"]: j["action"] for j in again["jobs"]} == {
        "ok": "skipped", "bad": "submitted", "queued": "submitted", "gone": "submitted",
        "twin": "skipped"}
    assert again["jobs"][1]["why"].startswith("attempt 2: last job ")
    # A changed input is a new experiment; one submitted by an interrupted run is adopted.
    (ws / "in" / "d.txt").write_text("hello\n\n")
    with Board(config) as board:
        changed = {r.job.name: r.run_id for r in load_study(path, board.config).runs}
        assert changed["ok"] != ids["ok"] and changed["bad"] == ids["bad"]
        crashed = submit(board, "scratch", "true", name="ok",
                         env={STUDY_ENV: "sweep", RUN_ID_ENV: changed["ok"]})
    third = json.loads(invoke(config, "study", "run", str(path), "--json").stdout)
    assert third["jobs"][0]["action"] == "adopted" and third["jobs"][0]["job"] == crashed.id
    assert third["jobs"][4]["action"] == "skipped"  # twin: the adopted job is in flight


def test_bad_study_input_is_one_line_and_starts_nothing(tmp_path: Path) -> None:
    config = make_workspace(tmp_path)
    ws = config.parent
    cases = {
        "name": ('[study]\nname = "../x"\n[[jobs]]\ntarget = "scratch"\ncommand = "true"\n',
                 ":2: study.name: a study name is its id and names its ledger file (got '../x'); valid: letters"),
        "data": ('[[jobs]]\ntarget = "scratch"\ncommand = "true"\ndata = ["in/none.txt"]\n',
                 ":4: jobs[1].data: "),
        "params": ('[[jobs]]\ntarget = "scratch"\ncommand = "true"\nparams = { a = [1] }\n',
                   ":4: jobs[1].params.a"),
        "key": ('[study]\nnme = "x"\n[[jobs]]\ntarget = "scratch"\ncommand = "true"\n',
                ":2: study.nme: unknown key"),
    }
    for case, (text, expected) in cases.items():
        path = fleet_file(ws, text, f"{case}.toml")
        done = invoke(config, "study", "run", str(path))
        assert done.exit_code == 2, (case, done.output)
        assert done.stderr.startswith(f"mainboard: error: {path}") and expected in done.stderr, \
            (case, done.stderr)
        assert len(done.stderr.splitlines()) == 1
    assert not (ws / ".mainboard" / "jobs").exists()
    missing = invoke(config, "study", "show", "nope")
    assert missing.exit_code == 2 and missing.stderr.startswith("mainboard: error: no study "
                                                                "'nope' in ")
    with Board(config) as board, pytest.raises(ConfigError, match="declares a \\[study\\]"):
        start(board, fleet_file(ws, '[study]\n[[jobs]]\ntarget = "scratch"\ncommand = "x"\n'))


def test_an_unreachable_target_fails_only_its_own_jobs(tmp_path: Path) -> None:
    config = make_workspace(tmp_path, extra_hosts={"dead": {
        "kind": "ssh", "host": "127.0.0.1", "port": free_port(), "user": "root",
        "known_hosts": str(tmp_path / "kh"), "connect_timeout": 2.0}})
    path = fleet_file(config.parent, '[study]\nname = "s"\n[[jobs]]\ntarget = "dead"\n'
                                     'command = "true"\n[[jobs]]\ntarget = "scratch"\n'
                                     'command = "true"\n', "s.toml")
    done = invoke(config, "study", "run", str(path))
    assert done.exit_code == 1 and done.stdout == "s\n"
    failed, sent = done.stderr.splitlines()
    assert failed.startswith("failed dead-1 (r-") and "cannot reach 127.0.0.1" in failed
    assert sent.startswith("submitted scratch-2 (r-")
    shown = json.loads(invoke(config, "study", "show", "s", "--json").stdout)
    assert [r["name"] for r in shown["runs"]] == ["scratch-2"]  # the failed one is owed a run


def test_a_batch_file_with_a_study_table_runs_as_that_study(tmp_path: Path) -> None:
    """`batch run` on a fleet.toml with `[study]`: run ids and a ledger, the same study
    `study run` then sees (its one run is in flight or done: skipped, never run twice)."""
    config = make_workspace(tmp_path)
    path = fleet_file(config.parent, '[study]\nname = "viabatch"\n[[jobs]]\ntarget = "scratch"'
                                     '\ncommand = "true"\nparams = { k = 1 }\n', "fleet.toml")
    done = invoke(config, "batch", "run", str(path))
    assert done.exit_code == 0 and done.stdout == "viabatch\n", done.output
    notice, sent = done.stderr.splitlines()
    assert notice == (f"mainboard: {path} declares [study]: running it as a study (see "
                      "`mainboard study show ID`)") and sent.startswith("submitted scratch-1 (r-")
    assert not (config.parent / ".mainboard" / "batches").exists()  # a study, not a batch
    (entry,) = json.loads(invoke(config, "study", "show", "viabatch", "--json").stdout)["runs"]
    again = json.loads(invoke(config, "study", "run", str(path), "--json").stdout)
    assert [(j["run_id"], j["action"]) for j in again["jobs"]] == [(entry["run_id"], "skipped")]
