"""Pools (issue 19): `[fleet.pools.NAME]` declarations, what `fleet up` starts for each
(a target count, never a pile), and refusals in one line before any traffic."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mainboard.config import loads_config
from mainboard.errors import ConfigError, UserError
from mainboard.fleet.launch import UpOptions, worker_spec
from mainboard.fleet.pools import plan_pools
from mainboard.receipts import WorkerStarted
from tests.support.fleet_helpers import cli, processes_matching, workspace

POOLS = """
[hosts.hpc]
kind = "slurm"
partition = "debug"

[fleet.pools.cpu]
host = "hpc"
queues = ["mainboard.batches"]
workers = 4
cpus = 4
mem-gb = 8
walltime = "3m"
retire-before = "1m"
jobs = 2

[fleet.pools.gpu]
host = "hpc"
queues = ["gpu"]
gpus = 1
nodes = 2
max-jobs = 4
backlog = 2
idle-timeout = "5m"
"""


def test_pools_declare_host_queues_workers_resources_and_counts() -> None:
    config = loads_config(POOLS)
    plans = {p.name: p for p in plan_pools(config, UpOptions())}
    cpu, gpu = plans["cpu"], plans["gpu"]
    assert (cpu.host, cpu.target, cpu.options.concurrency, cpu.options.queues) == \
        ("hpc", 2, 4, ("mainboard.batches",))
    spec = worker_spec("hpc", config.host("hpc"), cpu.options, worker_id="w")
    assert (spec.cpus, spec.mem_gb, spec.walltime, spec.nodes) == (4, 8.0, 180, 1)
    assert gpu.target == 0  # autoscaled: min_jobs; no GPU allocation before GPU work
    spec = worker_spec("hpc", config.host("hpc"), gpu.options, worker_id="w")
    assert (spec.gpus, spec.nodes) == (1, 2) and gpu.options.idle_timeout == 300
    assert [p.name for p in plan_pools(config, UpOptions(), pools=["gpu"], jobs=3)] == ["gpu"]
    assert plan_pools(config, UpOptions(), pools=["gpu"], jobs=3)[0].target == 3


def test_a_repeated_on_means_that_many_allocations_and_only_what_is_missing_starts() -> None:
    config = loads_config(POOLS)
    (plan,) = plan_pools(config, UpOptions(), hosts=["hpc", "hpc"])
    assert (plan.name, plan.target, plan.declared) == ("hpc", 2, False)
    (plan,) = plan_pools(config, UpOptions(), hosts=["hpc"], jobs=5)
    assert plan.target == 5
    mine = WorkerStarted(worker_id="a", host="hpc", kind="slurm", node="mb-hpc-a", queues=[],
                         concurrency=1, job={}, root="/r", python="p", broker_via="direct",
                         secret_path="/s")
    pooled = mine.model_copy(update={"worker_id": "b", "pool": "cpu"})
    assert plan.members([mine, pooled]) == [mine]  # the cpu pool's worker is not counted here
    (cpu,) = plan_pools(config, UpOptions(), pools=["cpu"])
    assert cpu.members([mine, pooled]) == [pooled]


@pytest.mark.parametrize(("kwargs", "expect"), [
    ({"hosts": ["hpc", "hpc"], "jobs": 3}, "--on HOST repeated and --jobs together"),
    ({"hosts": ["hpc"], "pools": ["cpu"]}, "--on and --pool together"),
    ({"pools": ["nope"]}, "--pool 'nope' is not declared in no mainboard.toml; declared "
                          "pools: cpu, gpu"),
    ({"pools": ["cpu"], "jobs": -1}, "--jobs -1: valid: an integer >= 0"),
])
def test_bad_pool_requests_are_refused_in_one_line(kwargs: dict, expect: str) -> None:
    with pytest.raises(UserError, match=re.escape(expect)):
        plan_pools(loads_config(POOLS), UpOptions(), **kwargs)


@pytest.mark.parametrize(("text", "expect"), [
    ('[fleet.pools.p]\nhost = "local"\nmax-job = 2\n',
     "unknown key 'max-job' in fleet.pools.p (did you mean max-jobs?)"),
    ('[fleet.pools.p]\nhost = "gone"\n', "fleet.pools.p.host: host 'gone' is not declared"),
    ('[fleet.pools.p]\nhost = "local"\nmin-jobs = 3\nmax-jobs = 2\n',
     "min-jobs 3 is above max-jobs 2"),
    ('[fleet.pools.p]\nhost = "local"\nqueues = ["a b"]\n', "fleet.pools.p.queues"),
])
def test_bad_pool_declarations_name_the_key(text: str, expect: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(expect)) as caught:
        loads_config(text)
    if "unknown key" in expect:
        assert "valid: host (required), queues" in str(caught.value)


def test_fleet_up_with_an_unknown_pool_exits_2_and_starts_nothing(tmp_path: Path) -> None:
    ws = workspace(tmp_path / "ws", '[fleet.pools.cpu]\nhost = "local"\n')
    done = cli(ws, "fleet", "up", "--pool", "gpu")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        f"mainboard: error: --pool 'gpu' is not declared in {ws / 'mainboard.toml'}; "
        "declared pools: cpu"]
    assert not (ws / ".mainboard" / "fleet.ndjson").exists()
    assert not processes_matching(str(ws))


def test_gpu_pools_pin_one_device_per_worker_process_never_shared() -> None:
    from mainboard.tasks.fleet import GPU_ENV, pinned_device

    assert [pinned_device("2,3", i) for i in range(2)] == ["2", "3"]  # as SLURM set them
    with pytest.raises(RuntimeError, match="worker process 2 has no GPU of its own"):
        pinned_device("2,3", 2)
    assert pinned_device("", 0) == ""
    config = loads_config(POOLS)
    (gpu,) = plan_pools(config, UpOptions(), pools=["gpu"])
    assert worker_spec("hpc", config.host("hpc"), gpu.options, worker_id="w").env[GPU_ENV] == "1"
    with pytest.raises(ConfigError, match="workers 2 would share 1 GPU"):
        loads_config('[fleet.pools.g]\nhost = "local"\ngpus = 1\nworkers = 2\n')
