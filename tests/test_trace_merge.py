"""One timeline (issue 27 item 5): a two-worker run and a SLURM job merged into one
Perfetto trace, a user span (``mainboard.span``) from inside an integrand on it, and an
unknown item refused before anything is written.

Real redis-server, two real local Celery workers, a real SLURM (tests/fixtures_slurm.py).
"""

from __future__ import annotations

import json
import shlex
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from mainboard.board import Board
from mainboard.bridges.jobstate import JobState
from mainboard.config import Config, load_config
from mainboard.errors import UserError
from mainboard.runs.spans import run_workers
from mainboard.runs.store import RunStore
from mainboard.tasks.runner import integrate
from mainboard.tasks.workers import LocalWorkers
from tests.fixtures_slurm import slurm_cluster  # noqa: F401 - the session's one SLURM
from tests.integration import fleet_iter, slow_spec, spec, subprocess_env
from tests.jobs_workspace import make_workspace, wait_until
from tests.services import RedisServer, SlurmCluster
from tests.workspace import run_cli

pytestmark = pytest.mark.live
JOB_CODE = "import mainboard\nwith mainboard.span('load', part=1):\n    pass\n"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer,
              slurm_cluster: SlurmCluster) -> Config:  # noqa: F811
    path = make_workspace(tmp_path_factory.mktemp("trace"), slurm=slurm_cluster,
                          extra=f'\n[broker]\nurl = "{redis_server.url}"\n')
    return load_config(path)


@pytest.fixture(scope="module")
def fleet(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[LocalWorkers]:
    yield from fleet_iter(2, redis_server, tmp_path_factory.mktemp("fleet"))


def check_perfetto(doc: dict[str, Any]) -> dict[int, str]:
    """The Trace Event Format as Perfetto reads it; returns pid -> machine name."""
    events = doc["traceEvents"]
    assert isinstance(events, list) and events
    meta = [e for e in events if e["ph"] == "M"]
    machines = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]) for e in meta if e["name"] == "thread_name"}
    last: dict[tuple[int, int], float] = {}
    for e in events:
        if e["ph"] == "M":
            continue
        assert e["ph"] in ("X", "i") and isinstance(e["name"], str)
        assert e["pid"] in machines and (e["pid"], e["tid"]) in threads
        assert e["ts"] >= last.get((e["pid"], e["tid"]), 0.0)  # monotonic per track
        last[(e["pid"], e["tid"])] = e["ts"]
        if e["ph"] == "X":
            assert e["dur"] >= 0
    return machines


def test_a_run_and_a_slurm_job_on_one_timeline_with_a_user_span(
        workspace: Config, fleet: LocalWorkers, tmp_path: Path) -> None:
    run = spec(name="spanned", integrand={"kind": "python",
                                          "target": "tests.run_integrands:spanned_gauss"},
               domain={"continuous": 2}, sampler={"kind": "naive"},
               stop={"max_samples": 4000},
               batching={"batch_size": 1000, "batches_per_iteration": 2, "fuse": True})
    result = integrate(run, workers=0, config=workspace)
    with Board(workspace.path) as board:
        job = board.on("hpc").submit(f"{shlex.quote(sys.executable)} -c "
                                     f"{shlex.quote(JOB_CODE)}", name="spanjob")
        assert job.wait(timeout=90, poll=0.3) is JobState.COMPLETED
    out = tmp_path / "merged.json"
    done = run_cli(workspace.path, "trace", "merge", result.run_id, job.id, "-o", str(out),
                   "--json", env=subprocess_env())
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    doc = json.loads(out.read_text())
    machines = check_perfetto(doc)
    assert {socket.gethostname(), "hpc"} <= set(machines.values())  # the workers', the job's
    names = {e["name"] for e in doc["traceEvents"]}
    assert {"fused", "load", "run", "user-gauss"} <= names
    user = [e for e in doc["traceEvents"] if e["name"] == "user-gauss"]
    assert len(user) == 4 and all(e["args"]["rows"] == 1000 for e in user)
    parts = doc["otherData"]["merge"]["parts"]
    assert [(p["kind"], p["id"]) for p in parts] == [("run", result.run_id), ("job", job.id)]
    assert all(isinstance(p["offset_s"], float) and p["source"] for p in parts)
    assert summary["parts"] == parts and doc["otherData"]["merge"]["clock"] == "broker"


def test_a_batch_and_a_study_merge_as_their_jobs(workspace: Config, tmp_path: Path) -> None:
    """`trace merge batch:ID` / a bare study id: one part per job it dispatched, each naming
    where it came from, each with the user span its job recorded."""
    from mainboard.batch.run import dispatch, start
    from mainboard.jobs.job import Job

    command = json.dumps(f"{shlex.quote(sys.executable)} -c {shlex.quote(JOB_CODE)}")
    jobs = "".join(f'[[jobs]]\nname = "{n}"\ncommand = {command}\n' for n in ("a", "b"))
    batch_file = tmp_path / "fleet.toml"
    batch_file.write_text(f'name = "traced"\n[defaults]\ntarget = "scratch"\n{jobs}')
    study_file = tmp_path / "study.toml"
    study_file.write_text('[study]\nname = "tracedstudy"\n[defaults]\ntarget = "scratch"\n'
                          f'[[jobs]]\nname = "s"\ncommand = {command}\nparams = {{ k = 1 }}\n')
    with Board(workspace.path) as board:
        batch_id = start(board, batch_file)
        sent = [p.job for p in dispatch(board, batch_id)]
        studied = run_cli(workspace.path, "study", "run", str(study_file), "--json",
                          env=subprocess_env())
        assert studied.returncode == 0, studied.stderr
        sent += [j["job"] for j in json.loads(studied.stdout)["jobs"]]
        assert len(sent) == 3
        for job in sent:
            assert Job(board, job).wait(timeout=60, poll=0.2) is JobState.COMPLETED
    out = tmp_path / "groups.json"
    done = run_cli(workspace.path, "trace", "merge", f"batch:{batch_id}", "tracedstudy",
                   "-o", str(out), "--json", env=subprocess_env())
    assert done.returncode == 0, done.stderr
    doc = json.loads(out.read_text())
    check_perfetto(doc)
    parts = doc["otherData"]["merge"]["parts"]
    assert [(p["kind"], p["id"], p["of"]) for p in parts] == [
        ("job", sent[0], f"batch {batch_id}"), ("job", sent[1], f"batch {batch_id}"),
        ("job", sent[2], "study tracedstudy")]
    loads = [e for e in doc["traceEvents"] if e["name"] == "load"]
    assert sorted(e["args"]["job"] for e in loads) == sorted(sent)


def test_merging_an_unknown_item_is_one_line_exit_2_and_no_file(
        workspace: Config, tmp_path: Path) -> None:
    out = tmp_path / "never.json"
    done = run_cli(workspace.path, "trace", "merge", "no-such-run-or-job", "-o", str(out),
                   env=subprocess_env())
    assert done.returncode == 2 and not out.exists()
    assert done.stderr.strip().count("\n") == 0 and "'no-such-run-or-job'" in done.stderr
    assert done.stdout == ""


def test_a_profile_of_running_workers_shows_the_integrands_stacks(
        workspace: Config, fleet: LocalWorkers, redis_server: RedisServer,
        tmp_path: Path) -> None:
    run = slow_spec(0.2, name="profiled", stop={"max_samples": 10_000_000})
    done: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: done.update(
        result=integrate(run, workers=0, config=workspace)), daemon=True)
    thread.start()
    r = redis.Redis.from_url(redis_server.url)
    store = RunStore(workspace.state_dir)

    def both_working() -> bool:
        try:
            run_id = store.find("profiled").run_id
        except UserError:
            return False
        done["run_id"] = run_id
        return len([w for w in run_workers(r, run_id) if w != "coordinator"]) == 2

    wait_until(both_working, "both workers shipped spans of the run")
    out = tmp_path / "profile.json"
    got = run_cli(workspace.path, "trace", "profile", "profiled", "--seconds", "1", "-o",
                  str(out), "--json", env=subprocess_env())
    stopped = run_cli(workspace.path, "runs", "stop", done["run_id"], env=subprocess_env())
    thread.join(120)
    assert got.returncode == 0, got.stderr
    assert stopped.returncode == 0, stopped.stderr
    assert len(json.loads(got.stdout)["profiled"]) == 2
    doc = json.loads(out.read_text())
    check_perfetto(doc)
    assert "slow_gauss" in {e["name"] for e in doc["traceEvents"]}
    merged = tmp_path / "merged.json"
    both = run_cli(workspace.path, "trace", "merge", done["run_id"], str(out), "-o",
                   str(merged), env=subprocess_env())
    assert both.returncode == 0, both.stderr
    names = {e["name"] for e in json.loads(merged.read_text())["traceEvents"]}
    assert {"slow_gauss", "fused"} <= names
