"""Multi-node allocations (issue 19, part 5): a pool with ``nodes = 2`` starts one worker
per node of ONE allocation (srun on SLURM, pbsdsh or ssh on PBS), each with its own Celery name
and heartbeat key (``-n<index>``), counted, idled and lost as one allocation.

The live tests run on the session SLURM's partition ``multi``: two slurmds on this one
machine (``slurmd -N``), so a 2-node allocation is real (both nodes share a hostname:
the node index alone keeps the names apart). pbsdsh does not exist here: the PBS fan-out
runs through the PBS wrappers (qsub over SLURM) with a pbsdsh shim on PATH, and its ssh
fan-out through the real ssh to the loopback sshd.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from mainboard.bridges.jobscript import JobPaths
from mainboard.bridges.jobspec import JobSpec
from mainboard.bridges.pbs import PbsBridge
from mainboard.bridges.slurm import SlurmBridge
from mainboard.bridges.transport import LocalTransport
from mainboard.config import PbsHost, SlurmHost, loads_config
from mainboard.errors import ConfigError, UserError
from mainboard.fleet.launch import UpOptions, worker_command, worker_spec
from mainboard.fleet.records import node_names, read_fleet
from mainboard.fleet.scaling import Alloc, PoolView, target
from mainboard.fleet.workers import allocation_entry
from mainboard.receipts import WorkerStarted
from tests.support.fixtures_slurm import slurm_cluster  # noqa: F401 - the session's one SLURM
from tests.support.fleet_helpers import (
    HOST_PYTHON,
    assert_nothing_left,
    cli,
    config,
    nodes_of,
    provisioned_root,  # noqa: F401 - session fixture
    send_tasks,
    status,
    table,
    tear_down,
    up_ok,
    wait_until,
    workspace,
)
from tests.support.services import SlurmCluster, SshServer

HOSTILE = "we'ird $(touch /tmp/pwned) `x`"


def _started(nodes: int) -> WorkerStarted:
    return WorkerStarted(worker_id="a1b2c3", host="hpc", kind="slurm", node="slurm-hpc-77",
                         queues=["q"], concurrency=1, job={"job_id": "77"}, root="/r",
                         python="py", broker_via="direct", secret_path="/s", nodes=nodes)


@pytest.mark.parametrize(("kind", "extra"), [("ssh", 'host = "x"\n'), ("local", ""),
                                             ("provider", 'provider = "p"\n')])
def test_nodes_beyond_one_is_refused_at_load_where_no_scheduler_spans_nodes(
        kind: str, extra: str) -> None:
    provider = '[providers.p]\nkind = "sim"\n' if kind == "provider" else ""
    host = "local" if kind == "local" else "box"
    text = (provider + (f'[hosts.box]\nkind = "{kind}"\n{extra}' if kind != "local" else "")
            + f'[fleet.pools.p]\nhost = "{host}"\nnodes = 2\n')
    with pytest.raises(ConfigError) as caught:
        loads_config(text)
    message = str(caught.value)
    assert "\n" not in message and "fleet.pools.p.nodes" in message, message
    assert "valid: nodes = 1 for local, ssh and provider hosts; nodes >= 1 for slurm and " \
           "pbs hosts" in message


def test_fleet_up_with_nodes_on_an_ssh_host_exits_2_and_starts_nothing(tmp_path: Path) -> None:
    ws = workspace(tmp_path / "ws", table("hosts.box", kind="ssh", host="127.0.0.1"),
                   table("fleet.pools.p", host="box", nodes=3))
    done = cli(ws, "fleet", "up")
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert "fleet.pools.p.nodes: nodes 3 on host 'box' (kind ssh)" in line
    assert not (ws / ".mainboard" / "fleet.ndjson").exists()


def test_each_node_has_its_own_name_and_the_allocation_merges_their_entries() -> None:
    assert node_names(_started(1)) == ["slurm-hpc-77"]
    assert node_names(_started(3)) == ["slurm-hpc-77-n0", "slurm-hpc-77-n1", "slurm-hpc-77-n2"]
    pair = _started(2)
    one = {"beat": "100", "active": "1", "tasks_done": "4", "last_task": "90", "started": "10",
           "node": "slurm-hpc-77-n0@vm"}
    assert allocation_entry({"slurm-hpc-77-n0": one}, pair) == {}  # node 1 has not beat yet
    two = {"beat": "40", "active": "0", "tasks_done": "2", "started": "12",
           "node": "slurm-hpc-77-n1@vm"}
    merged = allocation_entry({"slurm-hpc-77-n0": one, "slurm-hpc-77-n1": two}, pair)
    assert (merged["beat"], merged["active"], merged["tasks_done"]) == ("40.0", "1", "6")
    assert (merged["last_task"], merged["started"]) == ("90.0", "12.0")
    # the autoscaler's unit is the allocation: 8 tasks on 2 nodes x 2 processes = 2 allocations
    pool = loads_config('[hosts.h]\nkind = "slurm"\n[fleet.pools.p]\nhost = "h"\nnodes = 2\n'
                        'workers = 2\nmax-jobs = 5\n').fleet.pools["p"]
    assert target(PoolView("p", pool, [Alloc("a", "running")], queue_depth=8)) == 2


def test_a_per_node_worker_is_named_by_its_node_index_and_its_spec_fans_out() -> None:
    command = worker_command("py", "slurm-hpc", ["q"], 1, "/s", job_suffix=True, per_node=True)
    assert command.endswith('-n slurm-hpc-"$MAINBOARD_JOB_ID"-n"$MAINBOARD_NODE_INDEX"@%h')
    host = SlurmHost(partition="multi")
    spec = worker_spec("hpc", host, UpOptions(nodes=2, walltime=600, retire_before=120),
                       worker_id="w")
    assert spec.per_node and spec.nodes == 2
    assert not worker_spec("hpc", host, UpOptions(), worker_id="w").per_node


def _paths() -> JobPaths:
    return JobPaths("/r/.mainboard/jobs/j1")


def test_slurm_per_node_script_runs_node_sh_under_srun_and_signals_every_step() -> None:
    bridge = SlurmBridge("hpc", SlurmHost(), LocalTransport("hpc"), root="/r")
    spec = JobSpec(command="celery worker", nodes=2, per_node=True, walltime=600,
                   retire_before=120, env={"WHO": HOSTILE})
    script = bridge.render_script(spec, _paths(), "j1")
    assert "#SBATCH --signal=INT@120" in script  # the tasks, not only the batch shell (B:)
    assert 'srun --ntasks-per-node=1 -N "$SLURM_JOB_NUM_NODES" --kill-on-bad-exit=1' in script
    node = script.split("<<'_MB_NODE_SCRIPT_END_'\n", 1)[1].split("\n_MB_NODE_SCRIPT_END_\n")[0]
    assert 'export MAINBOARD_NODE_INDEX="${1:-${SLURM_NODEID:-0}}"' in node
    assert "export WHO='we'\"'\"'ird $(touch /tmp/pwned) `x`'" in node  # quoted, on each node
    assert "export MAINBOARD_RETIRE_AT=$((_mb_t0 + 480))" in node
    single = bridge.render_script(spec.model_copy(update={"nodes": 1}), _paths(), "j1")
    assert "srun" not in single and "--signal=B:INT@120" in single
    plain = bridge.render_script(spec.model_copy(update={"per_node": False}), _paths(), "j1")
    assert "srun" not in plain  # an MPI-style job runs its own srun: untouched


def test_pbs_per_node_script_runs_pbsdsh_once_per_unique_host() -> None:
    bridge = PbsBridge("pbs", PbsHost(), LocalTransport("pbs"), root="/r")
    script = bridge.render_script(JobSpec(command="x", nodes=2, per_node=True), _paths(), "j1")
    assert "#PBS -l select=2" in script
    assert "awk '!_mb_seen[$0]++ {print NR - 1 \":\" $1}'" in script
    assert 'pbsdsh -n "${_mb_x%%:*}" -- /bin/bash "$_mb_dir/node.sh" "$_mb_i" &' in script
    assert "_mb_how=auto" in script  # pbsdsh when on PATH in the job, else ssh
    timed = bridge.render_script(JobSpec(command="x", nodes=2, per_node=True, walltime=600,
                                         retire_before=120), _paths(), "j1")
    assert "MAINBOARD_RETIRE_AT=$((_mb_t0 + 480))" in timed
    assert "sleep 480" not in timed  # no retire watchdog: it would end pbsdsh, tasks and all
    assert "sleep 480" in bridge.render_script(JobSpec(command="x", walltime=600,
                                                       retire_before=120), _paths(), "j1")


def test_pbs_fanout_key_picks_ssh_and_a_bad_value_is_one_line_naming_the_valid_ones() -> None:
    host = loads_config('[hosts.p]\nkind = "pbs"\nfanout = "ssh"\n').hosts["p"]
    bridge = PbsBridge("pbs", host, LocalTransport("pbs"), root="/r")
    script = bridge.render_script(JobSpec(command="x", nodes=2, per_node=True), _paths(), "j1")
    assert "_mb_how=ssh" in script
    assert 'ssh -o BatchMode=yes -- "${_mb_x#*:}"' in script
    assert '"$_mb_dir/node.sh") $_mb_i --until-stdin-eof" <&3 &' in script
    with pytest.raises(ConfigError) as caught:
        loads_config('[hosts.p]\nkind = "pbs"\nfanout = "mpirun"\n')
    message = str(caught.value)
    assert "\n" not in message and "hosts.p.fanout" in message, message
    assert "valid: 'auto', 'pbsdsh' or 'ssh'" in message, message


def test_hosts_without_a_fan_out_refuse_a_per_node_job() -> None:
    from mainboard.bridges.local import LocalBridge
    from mainboard.config import LocalHost

    bridge = LocalBridge("local", LocalHost(), LocalTransport("local"), root="/r")
    with pytest.raises(UserError, match="only slurm and pbs hosts start a command on every"):
        bridge.render_script(JobSpec(command="x", nodes=2, per_node=True), _paths(), "j1")


# -- live: real SLURM with two nodes, the PBS wrappers with a pbsdsh shim ----------------------

SHIM = """#!/bin/bash
# pbsdsh -n INDEX -- PROGRAM ARGS: run here, as a one-machine PBS would on vnode INDEX
[ "$1" = -n ] || exit 64
echo "$2" >> "$MB_SHIM_LOG"; shift 3
env -u MAINBOARD_NODES -u MAINBOARD_JOB_NAME "$@"
"""


@pytest.mark.live
@pytest.mark.timeout(120)
def test_pbs_wrappers_fan_out_through_pbsdsh_one_node_script_per_unique_host(
        tmp_path: Path, slurm_cluster: SlurmCluster) -> None:  # noqa: F811
    shim = tmp_path / "bin" / "pbsdsh"
    shim.parent.mkdir()
    shim.write_text(SHIM)
    shim.chmod(0o755)
    nodefile = tmp_path / "nodefile"
    nodefile.write_text("n1\nn1\nn2\nn2\n")  # two vnodes on each of two hosts
    out = tmp_path / "out"
    host = PbsHost(env={"SLURM_CONF": str(slurm_cluster.conf), "PBS_NODEFILE": str(nodefile),
                        "MB_SHIM_LOG": str(tmp_path / "shim.log"),
                        "PATH": f"{shim.parent}:{os.environ['PATH']}"})
    bridge = PbsBridge("pbs", host, LocalTransport("pbs"), root=str(tmp_path / "root"))
    # the wrappers turn `select=2` into 2 nodes: on partition multi, both slurmds
    began = time.time()
    record = bridge.submit(command=f'echo "$MAINBOARD_NODE_INDEX $MAINBOARD_NODES '
                           f'$MAINBOARD_RETIRE_AT" >> {out}', nodes=2, per_node=True,
                           queue=slurm_cluster.multi, env={"WHO": HOSTILE}, walltime=600,
                           retire_before=120)
    wait_until(lambda: bridge.poll([record])[record.job_id].final, 60, "the PBS job to end")
    assert bridge.poll([record])[record.job_id].state.value == "completed", bridge.logs(record)
    lines = sorted(line.split() for line in out.read_text().splitlines())
    assert [line[:2] for line in lines] == [["0", "2"], ["1", "2"]]
    # every node retires by the same clock: the job's start + walltime - retire_before
    assert all(began + 470 <= int(line[2]) <= time.time() + 480 for line in lines), lines
    assert sorted((tmp_path / "shim.log").read_text().split()) == ["0", "2"]  # first vnodes
    held = subprocess.run(["squeue", "-h", "-t", "all", "-j", record.job_id, "-o", "%D"],
                          env=slurm_cluster.env, capture_output=True, text=True).stdout.strip()
    assert held == "2"  # `-l select=2` through the wrappers: a 2-node allocation


SSH_SHIM = """#!/bin/sh
# the real ssh, reading the test's client config (ssh takes ~ from passwd, not $HOME)
exec /usr/bin/ssh -F "$MB_SSH_CONFIG" "$@"
"""


@pytest.mark.live
@pytest.mark.timeout(120)
def test_pbs_wrappers_fan_out_over_ssh_and_a_failing_node_ends_the_others(
        tmp_path: Path, slurm_cluster: SlurmCluster, sshd_server: SshServer) -> None:  # noqa: F811
    """No pbsdsh on PATH: each unique host of $PBS_NODEFILE gets its share through a real
    ssh to the loopback sshd (node-a, node-b: aliases in an ssh config). The shares run as
    children of sshd, outside the job: only the connection's end can stop them."""
    shim = tmp_path / "bin" / "ssh"
    shim.parent.mkdir()
    shim.write_text(SSH_SHIM)
    shim.chmod(0o755)
    (tmp_path / "ssh_config").write_text(
        f"Host node-a node-b\n  HostName {sshd_server.host}\n  Port {sshd_server.port}\n"
        f"  User {sshd_server.user}\n  IdentityFile {sshd_server.identity}\n"
        f"  IdentitiesOnly yes\n  UserKnownHostsFile {sshd_server.known_hosts()}\n"
        "  StrictHostKeyChecking yes\n")
    nodefile = tmp_path / "nodefile"
    nodefile.write_text("node-a\nnode-a\nnode-b\n")
    out = tmp_path / "out"
    path = ":".join(p for p in os.environ["PATH"].split(":") if not Path(p, "pbsdsh").exists())
    host = PbsHost(env={"SLURM_CONF": str(slurm_cluster.conf), "PBS_NODEFILE": str(nodefile),
                        "MB_SSH_CONFIG": str(tmp_path / "ssh_config"),
                        "PATH": f"{shim.parent}:{path}"})
    bridge = PbsBridge("pbs", host, LocalTransport("pbs"), root=str(tmp_path / "root"))

    def run(command: str) -> tuple[str, list[list[str]]]:
        record = bridge.submit(command=command, nodes=2, per_node=True, env={"WHO": HOSTILE},
                               queue=slurm_cluster.multi)
        wait_until(lambda: bridge.poll([record])[record.job_id].final, 60, "the PBS job")
        state = bridge.poll([record])[record.job_id].state.value
        return state, sorted(line.split(" ", 2) for line in out.read_text().splitlines())

    report = f'echo "$MAINBOARD_NODE_INDEX ${{SSH_CONNECTION:+ssh}} $WHO" >> {out}; '
    state, lines = run(report)
    assert state == "completed", lines
    assert lines == [["0", "ssh", HOSTILE], ["1", "ssh", HOSTILE]]  # one share per host
    out.unlink()
    state, lines = run(report + f'if [ "$MAINBOARD_NODE_INDEX" = 1 ]; then sleep 1; exit 3; '
                       f'fi; echo $$ > {tmp_path}/pid0; sleep 120; echo late >> {out}')
    assert state == "failed" and [line[0] for line in lines] == ["0", "1"], (state, lines)
    pid = int((tmp_path / "pid0").read_text())
    try:
        wait_until(lambda: not Path(f"/proc/{pid}").exists(), 15, "node 0's share to end")
    finally:  # a share left behind is sshd's child: end its group here, not in the suite
        if Path(f"/proc/{pid}").exists():
            os.killpg(os.getpgid(pid), signal.SIGKILL)
    assert "late" not in out.read_text()


def _pair_workspace(tmp: Path, slurm: SlurmCluster, root: Path) -> Path:
    return workspace(tmp / "ws", table(
        "hosts.cluster", kind="slurm", partition=slurm.multi, root=str(root),
        python=HOST_PYTHON, env={"SLURM_CONF": str(slurm.conf)}),
        table("fleet.pools.pair", host="cluster", nodes=2, queues=["pairq"]))


def _both_online(ws: Path) -> list[dict]:
    return wait_until(lambda: (r := status(ws)) and len(r) == 2
                      and all(x["online"] for x in r) and r, 90, "both nodes' workers online")


_LIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED",
         "RESIZING", "SIGNALING", "STAGE_OUT"}  # an allocation that has not ended


def _squeue_state(slurm: SlurmCluster, job_id: str) -> str:
    return subprocess.run(["squeue", "-h", "-t", "all", "-o", "%T", "-j", job_id],
                          env=slurm.env, capture_output=True, text=True).stdout.strip()


@pytest.mark.live
@pytest.mark.timeout(240)
def test_a_two_node_pool_runs_one_worker_per_node_and_fleet_down_stops_both(
        tmp_path: Path, slurm_cluster: SlurmCluster, provisioned_root: Path) -> None:  # noqa: F811
    ws = _pair_workspace(tmp_path, slurm_cluster, provisioned_root)
    lines = up_ok(ws, "--pool", "pair", "--no-flower")
    rows: list[dict] = []
    try:
        assert any("2 nodes: one worker each" in line for line in lines), lines
        rows = _both_online(ws)
        (job_id,) = {r["job_id"] for r in rows}
        assert len({r["worker_id"] for r in rows}) == 1  # one allocation
        names = sorted(r["node"].partition("@")[0] for r in rows)
        assert names == [f"slurm-cluster-{job_id}-n0", f"slurm-cluster-{job_id}-n1"]
        assert sorted(r["node_index"] for r in rows) == [0, 1]
        nodelist = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%D %N"],
                                  env=slurm_cluster.env, capture_output=True, text=True).stdout
        assert nodelist.split()[0] == "2", nodelist  # one job holding both slurmds
        results = send_tasks(ws, "pairq", 8, sleep_s=0.5)
        try:
            ran = [r.get(timeout=60) for r in results]
        finally:
            results[0].app.close()
        assert {r["node_index"] for r in ran} == {"0", "1"}  # both nodes took tasks
        assert {r["job_id"] for r in ran} == {job_id}
        pools = json.loads(cli(ws, "fleet", "status", "--pools", "--json").stdout)
        assert (pools[0]["running"], pools[0]["pending"], pools[0]["lost"]) == (1, 0, 0)
        done = wait_until(lambda: (r := status(ws)) and sum(x["tasks_done"] or 0 for x in r)
                          >= 8 and r, 30, "both heartbeat keys counting tasks")
        assert all((x["tasks_done"] or 0) >= 1 for x in done)
    finally:
        down = tear_down(ws)
    assert down.returncode == 0, down.stderr
    assert _squeue_state(slurm_cluster, job_id) == "COMPLETED"  # drained, not killed
    assert_nothing_left(ws, nodes_of(rows))


@pytest.mark.live
@pytest.mark.timeout(240)
def test_one_node_worker_killed_ends_the_whole_allocation_which_is_replaced_whole(
        tmp_path: Path, slurm_cluster: SlurmCluster, provisioned_root: Path) -> None:  # noqa: F811
    from mainboard.fleet.autoscale import SCALE_TICK_ENV
    from mainboard.fleet.workers import broker_route, registry_entries

    ws = _pair_workspace(tmp_path, slurm_cluster, provisioned_root)
    up_ok(ws, "--pool", "pair", "--no-flower", env={SCALE_TICK_ENV: "0.5"})  # the keeper's
    rows: list[dict] = []
    try:
        rows = _both_online(ws)
        job_id = rows[0]["job_id"]
        route = broker_route(config(ws), start=False)
        assert route is not None
        entries = registry_entries(route, [f"slurm-cluster-{job_id}-n1"])
        os.kill(int(entries[f"slurm-cluster-{job_id}-n1"]["pid"]), signal.SIGKILL)
        wait_until(lambda: _squeue_state(slurm_cluster, job_id) == "FAILED", 60,
                   "srun --kill-on-bad-exit to end the allocation")
        # the pool (jobs = 1) gets a whole new allocation: two workers again, a new job
        fresh = wait_until(lambda: (r := status(ws)) and len(r) == 2 and all(
            x["online"] and x["job_id"] != job_id for x in r) and r, 90, "the replacement")
        assert len({x["job_id"] for x in fresh}) == 1
        fleet = wait_until(lambda: (f := read_fleet(ws / ".mainboard")).stopped and f, 60,
                           "the lost allocation's stop receipt")
        (gone,) = [w for w in fleet.started.values() if w.job["job_id"] == job_id]
        assert fleet.stopped[gone.worker_id].state == "failed"  # recorded as one loss
        assert not Path(gone.secret_path).exists()  # its broker URL file went with it
        assert [w.nodes for w in fleet.live()] == [2]  # one allocation replaced it
        rows += fresh
    finally:
        tear_down(ws)
    assert_nothing_left(ws, nodes_of(rows))


@pytest.mark.live
@pytest.mark.timeout(240)
def test_both_nodes_retire_together_before_walltime_and_the_job_completes(
        tmp_path: Path, slurm_cluster: SlurmCluster, provisioned_root: Path) -> None:  # noqa: F811
    ws = workspace(tmp_path / "ws", table(
        "hosts.cluster", kind="slurm", partition=slurm_cluster.multi, root=str(provisioned_root),
        python=HOST_PYTHON, env={"SLURM_CONF": str(slurm_cluster.conf)}),
        # retire 10 s after the start, 9m50s before the walltime: however slowly a loaded
        # machine boots the workers, the allocation ends by retirement, never by its walltime
        table("fleet.pools.pair", host="cluster", nodes=2, queues=["pairq"], walltime="10m",
              **{"retire-before": "590s"}))
    up_ok(ws, "--pool", "pair", "--no-flower")
    (worker,) = read_fleet(ws / ".mainboard").live()
    job_id, job_dir = worker.job["job_id"], Path(worker.job["job_dir"])
    rows = [{"node": f"{name}@?"} for name in node_names(worker)]
    try:
        ended = wait_until(lambda: (s := _squeue_state(slurm_cluster, job_id)) not in _LIVE and s,
                           200, "the allocation to end on its own")
        assert ended == "COMPLETED", ended  # retired, not TIMEOUT at its walltime
        logs = "".join((job_dir / n).read_text() for n in ("stdout", "stderr"))
        # each node's worker decided to retire and shut down warm (a worker may announce its
        # warm shutdown twice: srun signals the step's other task when the first one ends)
        assert logs.count("retiring: allocation") == 2, logs[-3000:]
        assert logs.count("Warm shutdown") >= 2, logs[-3000:]
    finally:
        tear_down(ws)
    assert_nothing_left(ws, nodes_of(rows))
