"""One timeline (issue 27 item 5): a two-worker run and a SLURM job merged into one
Perfetto trace, a user span (``mainboard.span``) from inside an integrand on it, and an
unknown item refused before anything is written.

Real redis-server, two real local Celery workers, a real SLURM (tests/support/fixtures_slurm.py).
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
from tests.support.fixtures_slurm import slurm_cluster  # noqa: F401 - the session's one SLURM
from tests.support.integration import fleet_iter, slow_spec, spec, subprocess_env
from tests.support.jobs_workspace import make_workspace, wait_until
from tests.support.services import RedisServer, SlurmCluster, SshServer
from tests.support.workspace import run_cli

pytestmark = pytest.mark.live
# a job that says when it is busy (a file in its directory: every host's root is on this
# machine here), then stays busy until its directory says stop
BUSY_CODE = ("import os, pathlib\n"
             "d = pathlib.Path(os.environ['MAINBOARD_JOB_DIR'])\n"
             "def busy_marker():\n"
             "    (d / 'busy').touch()\n"
             "    while not (d / 'stop').exists():\n"
             "        sum(range(10000))\n"
             "busy_marker()\n")
JOB_CODE = "import mainboard\nwith mainboard.span('load', part=1):\n    pass\n"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer,
              slurm_cluster: SlurmCluster, sshd_server: SshServer) -> Config:  # noqa: F811
    path = make_workspace(tmp_path_factory.mktemp("trace"), slurm=slurm_cluster,
                          sshd=sshd_server,
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
                                          "target": "tests.support.run_integrands:spanned_gauss"},
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


@pytest.mark.parametrize("host", ["scratch", "edge", "hpc"])
def test_a_profile_of_a_running_job_shows_its_python_stacks(
        workspace: Config, host: str, tmp_path: Path) -> None:
    """Locally, over ssh (py-spy shipped to a host that has none on PATH) and inside a
    SLURM allocation (an srun step beside the job's): the job's process tree sampled."""
    from mainboard.jobs.job import Job

    with Board(workspace.path) as board:
        job = board.on(host).submit(f"{shlex.quote(sys.executable)} -c "
                                    f"{shlex.quote(BUSY_CODE)}", name=f"busy-{host}")
        job_dir = Path(Job(board, job.id).view().submitted.job_dir)
        wait_until(lambda: (job_dir / "busy").exists(), f"the {host} job busy")
        out = tmp_path / "job-profile.json"
        try:
            got = run_cli(workspace.path, "trace", "profile", job.id, "--seconds", "1", "-o",
                          str(out), env=subprocess_env())
        finally:
            (job_dir / "stop").touch()
        assert job.wait(timeout=90, poll=0.3) is JobState.COMPLETED
    assert (got.returncode, got.stderr) == (0, "")  # nothing skipped: no warning line
    doc = json.loads(out.read_text())
    assert doc["otherData"]["profiled"] == [f"busy-{host} ({job.id})"]
    assert got.stdout == f"wrote {out}: {doc['otherData']['spans']} frames of 1 processes\n"
    machines = check_perfetto(doc)
    assert set(machines.values()) == {host}
    frames = {e["name"] for e in doc["traceEvents"] if e["ph"] == "X"}
    assert "busy_marker" in frames
    if host == "edge":  # the shipped copy, under the host's root
        assert (Path(str(workspace.hosts["edge"].root)) / ".mainboard/bin/py-spy").exists()


def test_profiling_a_finished_job_or_an_unknown_item_is_one_line_exit_2(
        workspace: Config, tmp_path: Path) -> None:
    with Board(workspace.path) as board:
        job = board.on("scratch").submit("true", name="quick")
        assert job.wait(timeout=60, poll=0.2) is JobState.COMPLETED
    for item, said in ((job.id, "not running"), ("no-such-thing", "no run or job")):
        done = run_cli(workspace.path, "trace", "profile", item, "--seconds", "1", "-o",
                       str(tmp_path / "p.json"), env=subprocess_env())
        assert done.returncode == 2 and said in done.stderr, done.stderr
        assert done.stderr.strip().count("\n") == 0 and not (tmp_path / "p.json").exists()


def test_a_fleet_workers_profile_goes_through_its_host_and_into_its_allocation(
        workspace: Config, redis_server: RedisServer) -> None:
    """Who is sampled where, from what the run's workers registered (as a SLURM fleet
    worker, an ssh one, one of this machine, one elsewhere and one without a pid do)."""
    from mainboard.runs.spans import register_worker
    from mainboard.trace.profile import run_targets

    r = redis.Redis.from_url(redis_server.url)
    run_id = "profile-targets-run"
    for worker, info in {
            "mb-hpc-1@node1": {"host": "hpc", "pid": 41, "job_id": "7781", "kind": "slurm"},
            "mb-edge-2@edge": {"host": "edge", "pid": 42, "job_id": "u2", "kind": "ssh"},
            "w3@here": {"host": socket.gethostname(), "pid": 43, "job_id": ""},
            "w4@far": {"host": "far-away", "pid": 44, "job_id": ""},
            "w5@here": {"host": socket.gethostname(), "job_id": ""}}.items():
        register_worker(r, run_id, worker, info)
    with Board(workspace.path) as board:
        targets, skipped = run_targets(board, r, run_id)
    by = {t.track: t for t in targets}
    assert sorted(by) == ["mb-edge-2@edge", "mb-hpc-1@node1", "w3@here"]
    hpc, edge, here = by["mb-hpc-1@node1"], by["mb-edge-2@edge"], by["w3@here"]
    assert hpc.bridge is not None and hpc.bridge.name == "hpc" and hpc.pid == "41"
    assert hpc.bridge.inside(str(hpc.job_id), ["py-spy"])[:2] == ["srun", "--overlap"]
    assert "--jobid=7781" in hpc.bridge.inside(str(hpc.job_id), ["py-spy"])
    assert edge.bridge is not None and edge.bridge.inside("u2", ["py-spy"]) == ["py-spy"]
    assert here.bridge is None and here.pid == "43"
    assert skipped == ["w4@far on far-away: not a host of this workspace; not profiled",
                       "w5@here: it reported no pid; not profiled"]
