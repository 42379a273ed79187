"""Integrands that live in the workspace, on local workers (issue 11, part 6).

A ``kind = "python"`` module next to the run file (importing a helper from the workspace
root) runs without PYTHONPATH: the coordinator publishes where the run's files are and
each worker maps that onto its copy of the workspace (``tasks.paths``). An edited
workspace module is imported afresh (``tasks.modules``). A fleet host that cannot be
synced refuses the run in one line, before anything starts. Process integrands in the
workspace, and edits between runs on a long-lived worker: tests/fleet/test_fleet_integrate.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import mainboard
from mainboard.fleet.records import fleet_receipts
from mainboard.receipts import WorkerStarted
from mainboard.runs.store import RunStore
from mainboard.tasks import modules
from mainboard.tasks.paths import localize
from tests.support.batch_helpers import invoke
from tests.support.integration import start_fleet, write_workspace
from tests.support.services import RedisServer, free_port
from tests.support.workspace_integrands import assert_close, write_files

TAG = "wsint_local"


def test_localize_moves_workspace_paths_into_the_workers_copy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MAINBOARD_WORKSPACE", raising=False)
    ws = tmp_path / "w s'$(x)"
    record = {"workspace": str(ws), "cwd": "/elsewhere",
              "roots": [str(ws / "runs dir"), str(ws), "/outside"]}
    spec = {"integrand": {"kind": "process", "command": ["py", f"{ws}/procs/e.py", "rel.py"]},
            "sampler": {"kind": "process", "command": ["s"], "cwd": "sub",
                        "materializer": {"kind": "process", "command": [f"{ws}x/m"]}},
            "transforms": [{"kind": "process", "command": ["t"], "cwd": f"{ws}/tr"}],
            "stop": {"max_samples": 10}}
    moved, roots = localize(spec, record, here="/host/root")
    assert roots == ["/host/root/runs dir", "/host/root", "/outside"]
    assert moved["integrand"] == {"kind": "process", "cwd": "/host/root",  # cwd was outside
                                  "command": ["py", "/host/root/procs/e.py", "rel.py"]}
    assert moved["sampler"]["cwd"] == "/host/root/sub"
    assert moved["sampler"]["materializer"]["command"] == [f"{ws}x/m"]  # not inside: kept
    assert moved["transforms"][0]["cwd"] == "/host/root/tr" and moved["stop"] == spec["stop"]
    # a fleet worker rooted in the workspace itself: the coordinator's cwd stays its cwd
    same, _ = localize(spec, record, here=str(ws))
    assert same["integrand"]["cwd"] == "/elsewhere"
    assert same["integrand"]["command"][1] == f"{ws}/procs/e.py"
    # any other worker: the spec as it is, the roots that exist on its machine
    (ws / "runs dir").mkdir(parents=True)
    assert localize(spec, record) == (spec, [str(ws / "runs dir"), str(ws)])
    assert localize(spec, None) == (spec, [])


def test_an_edited_workspace_module_is_imported_afresh(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    (tmp_path / "wsint_fresh.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    roots, spec = [str(tmp_path)], {"integrand": {"kind": "python", "target": "wsint_fresh:f"}}
    (tmp_path / "wsint_before.py").write_text("")
    importlib.import_module("wsint_before")  # loaded before any build: never stamped
    with modules.fresh(spec, roots):
        assert importlib.import_module("wsint_fresh").VALUE == 1
    assert not modules.changed()
    (tmp_path / "wsint_fresh.py").write_text("VALUE = 22\n")  # other size: seen at once
    assert modules.changed()
    with modules.fresh(spec, roots):
        assert importlib.import_module("wsint_fresh").VALUE == 22
    assert not modules.changed()
    assert "wsint_fresh" in modules._SEEN and "wsint_before" not in modules._SEEN


def test_a_module_next_to_the_run_file_runs_on_a_worker_without_it_on_its_path(
        tmp_path: Path, redis_server: RedisServer) -> None:
    ws = tmp_path / "ws"
    config = write_workspace(ws, redis_server)
    py_run, _ = write_files(ws, TAG, sys.executable, ["unused.py"])
    # a worker started before the run, whose import path holds neither the workspace nor
    # the run file's folder (only the repo: the pytest cwd)
    worker = start_fleet(1, redis_server, tmp_path / "logs")
    try:
        assert_close(mainboard.integrate(py_run, workers=0, config=config), 1.0)
        # an edit between runs on a long-lived worker: tests/fleet/test_fleet_integrate.py (the
        # same worker code, over sshd) and test_an_edited_workspace_module_is_imported_afresh
    finally:
        worker.stop()


def test_a_fleet_host_that_cannot_be_synced_refuses_the_run_in_one_line(
        tmp_path: Path, redis_server: RedisServer) -> None:
    ws = tmp_path / "ws"
    write_workspace(ws, redis_server)
    with (ws / "mainboard.toml").open("a") as out:  # a port nobody listens on
        out.write(f'\n[hosts.gone]\nkind = "ssh"\nhost = "127.0.0.1"\nport = {free_port()}\n'
                  'user = "nobody"\nroot = "/tmp/mb-gone"\n')
    py_run, _ = write_files(ws, "wsint_gone", sys.executable, ["x.py"])
    fleet_receipts(ws / ".mainboard").append(WorkerStarted(  # started, never beat: counts
        worker_id="dead01", host="gone", kind="ssh", node="mb-gone-dead01",
        queues=["mainboard.batches"], concurrency=1, job={"job_id": "1"}, root="/tmp/mb-gone",
        python="python3", broker_via="direct", secret_path="/tmp/mb-gone/s"))
    done = invoke(ws / "mainboard.toml", "integrate", str(py_run), "--workers", "1", "--json")
    assert done.exit_code == 1 and done.stdout == "", (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "fleet host 'gone': cannot sync the workspace into /tmp/mb-gone" in lines[0]
    assert "connection refused" in lines[0] and "mainboard fleet down --on gone" in lines[0]
    assert list(RunStore(ws / ".mainboard").all()) == [], "a run was recorded"
