"""``on("auto")``: every declared host scored by fit (access, queue policy, facts), price and
time to result, on a real sshd, the real SLURM and its PBS wrappers; the ranking printed
with ``--explain`` and recorded in the chosen job's receipts. Provider offers: see
``tests/routing/test_router_provider.py``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from mainboard.board import Board
from mainboard.bridges.base import new_uid
from mainboard.bridges.jobstate import JobState, JobStatus
from mainboard.bridges.provision import env_receipts, manifest_digest
from mainboard.cli.columns import read_columns
from mainboard.hosts.facts import Facts, save_facts
from mainboard.jobs.job import store_of
from mainboard.jobs.timing import EnvBuild, Setup, setup_samples
from mainboard.receipts import EnvProvisioned, JobSubmitted
from mainboard.routing.router import Candidate
from tests.support.batch_helpers import invoke, raw_receipts
from tests.support.boards import write_config
from tests.support.jobs_workspace import make_workspace
from tests.support.services import SlurmCluster, SshServer, free_port


def _columns(text: str) -> dict[str, dict[str, str | None]]:
    """``--explain`` rows by host (the --agent columns)."""
    rows = read_columns([ln for ln in text.splitlines() if ln and not ln.startswith("mainboard:")])
    return {str(row["host"]): row for row in rows}


def test_auto_ranks_every_host_and_records_the_choice(
        tmp_path: Path, sshd_server: SshServer, slurm_cluster: SlurmCluster) -> None:
    config = make_workspace(tmp_path, sshd=sshd_server, slurm=slurm_cluster, extra_hosts={
        "dead": {"kind": "ssh", "host": "127.0.0.1", "port": free_port(), "user": "root",
                 "known_hosts": str(tmp_path / "kh"), "connect_timeout": 2.0},
        "paid": {"kind": "local", "root": str(tmp_path / "paid-root"), "usd_hr": 2.5}},
        extra='\n[router]\nmax-usd-hr = 2\n')
    with Board(config) as board:
        first = board.on("auto").rank(walltime="2h", mem_gb=1)
        by_host = {c.host: c for c in first.candidates}
        assert first.chosen == "local" and [c.host for c in first.candidates if c.fits] == [
            "local", "scratch", "edge", "pbs"]  # nobody timed: price (all 0), then file order
        assert by_host["hpc"].reason.startswith("queue policy: ") and "max-walltime" in \
            by_host["hpc"].reason
        assert by_host["dead"].reason.startswith("unreachable")
        assert by_host["paid"].reason == "2.5000 USD/h is over [router] max_usd_hr = 2"
        assert all(c.setup.samples == 0 and c.expected_s is None for c in first.candidates)
        # A fast SLURM job, over before anyone polls it, is timed by its script's stamp.
        quick = board.on("hpc").submit("true", name="quick", walltime="5m")
        assert quick.wait(timeout=60, poll=0.5) is JobState.COMPLETED
        assert [len(v) for k, v in setup_samples(board.config.state_dir).items()
                if k == "hpc"] == [1]
    # hpc is now the only timed host: under prefer = "time" it ranks first.
    done = invoke(config, "submit", "--on", "auto", "--explain", "--runtime", "30s",
                  "--walltime", "30m", "--name", "routed", "--", "echo", "routed")
    assert done.exit_code == 0, done.output
    printed = done.stdout.strip()  # hpc is a SLURM host: the id squeue lists
    job_id = store_of(board).resolve(printed)
    rows = _columns(done.stderr)
    assert rows["hpc"]["rank"] == "1" and rows["hpc"]["setup_samples"] == "1"
    assert float(rows["hpc"]["expected_s"] or "nan") == pytest.approx(
        float(rows["hpc"]["setup_p50_s"] or "nan") + 30, abs=0.001)
    assert (rows["dead"]["rank"], rows["dead"]["fits"]) == (None, "no")
    assert rows["paid"]["reason"] == "2.5000 USD/h is over [router] max_usd_hr = 2"
    assert "mainboard: --on auto chose hpc (prefer time)" in done.stderr
    lines = raw_receipts(board.config.state_dir / "jobs" / f"{job_id}.ndjson")
    routed = [ln["payload"] for ln in lines if ln["topic"] == "job.routed"]
    assert lines[0]["payload"]["host"] == "hpc" and len(routed) == 1
    assert lines[0]["payload"]["job_id"] == printed != job_id
    assert routed[0]["chosen"] == "hpc" and routed[0]["asked"]["runtime_s"] == 30
    assert {c["host"]: c["fits"] for c in routed[0]["candidates"]} == {
        "local": True, "scratch": True, "edge": True, "hpc": True, "pbs": True, "dead": False,
        "paid": False}
    with Board(config) as board:
        assert board.on("auto").submit("true", walltime="30m", runtime_s=5).host == "hpc"
    # Nothing fits: one line naming each host and why, exit 2, nothing submitted.
    before = sorted((board.config.state_dir / "jobs").iterdir())
    none = invoke(config, "submit", "--on", "auto", "--gpus", "2", "--", "true")
    assert none.exit_code == 2 and none.stdout == ""
    assert none.stderr.startswith("mainboard: error: no declared host fits this job (local: "
                                  "asks 2 GPUs and no facts say local has any")
    assert sorted((board.config.state_dir / "jobs").iterdir()) == before


def _timed(board: Board, host: str, seconds: float) -> None:
    """A job receipt saying ``host`` started a job ``seconds`` after its submission."""
    store = store_of(board)
    uid = new_uid("timed")
    store.submitted(JobSubmitted(id=uid, host=host, kind="local", job_id=uid, name="timed",
                                 job_dir=f"/tmp/{uid}", root="/tmp", spec={},
                                 submitted_at=time.time() - seconds))
    store.observe(uid, JobStatus(JobState.RUNNING, "running"))


def _facts(memory_total: int, gpus: int) -> Facts:
    """Facts as a probe of a machine with this much memory and these GPUs would report."""
    return Facts.model_validate({
        "schema_version": 1, "hostname": "box", "os": "Debian 12", "system": "Linux",
        "arch": "x86_64", "kernel": "6.1", "cpu_name": "cpu", "cpu_logical": 8,
        "cpu_physical": 4, "cpu_usable": 8, "memory_total": memory_total,
        "memory_available": memory_total, "cgroup_version": 2, "cgroup_memory_limit": None,
        "cgroup_cpu_limit": None, "scratch": [], "infiniband": [], "warnings": [],
        "gpus": [{"name": "NVIDIA A100", "memory_mb": 40960, "uuid": f"GPU-{i}",
                  "driver": "550"} for i in range(gpus)],
        "python": {"path": "/usr/bin/python3", "version": "3.11.2"}, "pythons": []})


def test_prefer_cost_facts_fit_and_bad_router_keys(tmp_path: Path) -> None:
    """Owned hosts with a declared usd_hr; facts decide memory and GPUs; [router] typos."""
    ws = tmp_path / "ws"
    ws.mkdir()
    hosts = {"cheap": {"kind": "local", "root": str(tmp_path / "c"), "usd_hr": 0.2},
             "fast": {"kind": "local", "root": str(tmp_path / "f"), "usd_hr": 0.9}}
    config = write_config(ws, hosts, '\n[router]\nprefer = "cost"\n')
    facts = _facts(memory_total=16_000_000_000, gpus=1)
    with Board(config) as board:
        save_facts(board.config.state_dir, "fast", facts)
        _timed(board, "fast", 1.0)
        _timed(board, "cheap", 20.0)
        cost = board.on("auto").rank(runtime_s=60)
        too_big = board.on("auto").rank(mem_gb=64)
        gpu, two = board.on("auto").rank(gpus=1), board.on("auto").rank(gpus=2)
    assert [c.host for c in cost.candidates] == ["local", "cheap", "fast"]  # 0, 0.2, 0.9 USD/h
    cheap = cost.candidates[1]
    assert cheap.expected_usd == pytest.approx(0.2 * (cheap.setup.p50_s + 60) / 3600)
    reasons = {c.host: c.reason for c in too_big.candidates}
    assert reasons["fast"] == "asks 64 GB, facts show 16.0 GB"
    assert too_big.chosen == "local"  # no facts cached for local: memory not known, not refused
    assert [c.host for c in gpu.candidates if c.fits] == ["fast"]  # facts: 1 GPU; others none
    assert {c.host: c.reason for c in two.candidates}["fast"] == "asks 2 GPUs, facts show 1"
    write_config(ws, hosts, '\n[router]\nprefer = "time"\n')
    with Board(config) as board:
        assert [c.host for c in board.on("auto").rank().candidates][:2] == ["fast", "cheap"]
    write_config(ws, hosts, '\n[router]\nprefr = "time"\n')
    bad = invoke(config, "submit", "--on", "auto", "--", "true")
    assert bad.exit_code == 2 and bad.stderr.strip() == (
        f"mainboard: error: {config}:12: router.prefr: unknown key 'prefr' in router (did you "
        "mean prefer?) (got 'time'); valid: prefer (default: 'time'), max-usd-hr (default: "
        "None)")
    write_config(ws, {**hosts, "auto": {"kind": "local"}})
    reserved = invoke(config, "config", "check")
    assert reserved.exit_code == 2 and 'the host name "auto" is reserved' in reserved.stderr
    write_config(ws, hosts)
    wrong = invoke(config, "submit", "--on", "cheap", "--explain", "--", "true")
    assert wrong.exit_code == 2 and "--explain and --runtime go with --on auto" in wrong.output
    json_out = invoke(config, "submit", "--on", "auto", "--json", "--", "true")
    assert json_out.exit_code == 0, json_out.output
    shown = json.loads(json_out.stdout)
    assert shown["host"] == shown["routing"]["chosen"] == "fast"


def test_a_host_without_the_jobs_env_built_waits_for_its_timed_builds(
        tmp_path: Path, sshd_server: SshServer) -> None:
    """[python.deps] declared: the ssh host's setup includes its timed env builds until an
    env.provisioned receipt shows this set built there; never timed, no number."""
    config = make_workspace(tmp_path, sshd=sshd_server, extra='\n[python.deps]\nsix = "1.16.0"\n')
    with Board(config) as board:
        _timed(board, "edge", 2.0)
        builds = env_receipts(board.config.state_dir)

        def edge() -> Candidate:
            ranked = board.on("auto").rank(runtime_s=60)
            return next(c for c in ranked.candidates if c.host == "edge")

        def build(manifest: str) -> None:
            builds.append(EnvProvisioned(host="edge", kind="ssh", key="k", seconds=10.0,
                                         actions=["env-create"], python_version="3.11.2",
                                         purpose="job", manifest=manifest))

        untimed = edge()
        assert (untimed.env.state, untimed.setup.samples, untimed.setup.p50_s) == (
            "to build", 1, None) and untimed.expected_s is None
        build("another set")
        waits = edge()
        assert waits.env == EnvBuild("to build", Setup(1, 10.0, 10.0))
        assert waits.setup.p50_s == pytest.approx(12.0, abs=0.5)
        assert waits.expected_s == pytest.approx(waits.setup.p50_s + 60)
        build(manifest_digest(board.config, "edge"))
        ready = edge()
        assert ready.env.state == "built" and ready.setup.p50_s == pytest.approx(2.0, abs=0.5)
