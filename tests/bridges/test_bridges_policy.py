"""Job parameters and queue policy: every refusal happens before any traffic.

Hosts come from real mainboard.toml text. Bridges sit on ``NoTraffic``, a transport
that fails the test if a single command or file would leave this machine, so each
refusal below is proven to happen before any ssh, sbatch or qsub.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mainboard.bridges import bridge_for
from mainboard.bridges.base import Bridge
from mainboard.bridges.jobspec import JobSpec, check_policy, describe_params, resolve
from mainboard.config import Config, loads_config
from mainboard.errors import ExpressionError, QueuePolicyError, UserError
from tests.support.bridge_helpers import NoTraffic

TOML = """
[hosts.hpc]
kind = "slurm"
login = "ssh"
host = "login.hpc.example"
partition = "short"
account = "proj7"

[hosts.hpc.defaults]
walltime = "30m"
mem-gb = "min(100, attempt * 50)"
cpus = 4

[hosts.hpc.queues.short]
max-walltime = "1h"
mem-ceiling-gb = 64

[hosts.hpc.queues.long]
max-walltime = "2d"
mem-ceiling-gb = 256
max-gpus = 0

[hosts.hpc.queues.gpu]
max-walltime = "12h"
mem-ceiling-gb = 128
max-gpus = 4
max-nodes = 2

[hosts.cluster]
kind = "pbs"
queue = "workq"
"""


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return loads_config(TOML, tmp_path / "mainboard.toml")


def silent(config: Config, name: str = "hpc") -> Bridge:
    """The host's bridge on NoTraffic: any command or copy fails the test."""
    return bridge_for(name, config.host(name), NoTraffic(name), root="/scratch/mb")


def test_unknown_parameter_lists_every_valid_one_with_its_default() -> None:
    with pytest.raises(UserError) as caught:
        JobSpec.from_params(command="true", walltme="1h")
    message = str(caught.value)
    assert "unknown job parameter 'walltme' (did you mean walltime?)" in message
    assert message.endswith(describe_params())
    for shown in ("command (required)", "walltime (default: None)", "nodes (default: 1)",
                  "attempt (default: 1)", "retire_signal (default: 'INT')",
                  "env (default: {})"):
        assert shown in message


@pytest.mark.parametrize(("params", "expected"), [
    ({"walltime": "soon"}, r"job parameter walltime: not a duration; valid: \"HH:MM:SS\""),
    ({"walltime": 0}, "job parameter walltime: must be greater than zero"),
    ({"mem_gb": -1}, "job parameter mem_gb: Input should be greater than 0 .got -1"),
    ({"cpus": 1.5}, "job parameter cpus: "),
    ({"queue": "a b"}, "job parameter queue: must be one word .* .got 'a b'.; expected SLURM "
                       "partition or PBS queue"),
    ({"env": {"1BAD": "x"}}, "environment variable name '1BAD' is not valid"),
    ({"command": "  "}, "job parameter command: empty command"),
    ({"command": []}, "job parameter command: an argv list must be non-empty"),
    ({"extra": ["--mem=1G\n#SBATCH -p x"]}, "job parameter extra: .*one non-empty line"),
    ({"extra": ["mem=1G"]}, "an extra scheduler option starts with -"),
    ({"retire_signal": "KILL"}, "retire_signal: Input should be 'TERM', 'INT', 'HUP', "
                                "'USR1' or 'USR2'"),
    ({"attempt": 0}, "job parameter attempt: Input should be greater than or equal to 1"),
])
def test_bad_parameter_values_name_the_parameter_and_what_is_valid(
        params: dict[str, object], expected: str) -> None:
    with pytest.raises(UserError, match=expected):
        JobSpec.from_params({"command": "true", **params})


def test_defaults_come_from_the_host_and_escalate_with_the_attempt(config: Config) -> None:
    hpc = config.host("hpc")
    first = resolve(JobSpec(command="fit"), hpc)
    assert (first.walltime, first.mem_gb, first.cpus, first.queue, first.account) == (
        1800, 50.0, 4, "short", "proj7")
    second = resolve(JobSpec(command="fit", attempt=2), hpc)
    assert second.mem_gb == 100.0 and second.walltime == 1800
    assert resolve(JobSpec(command="fit", attempt=9), hpc).mem_gb == 100.0  # min(100, ...)
    explicit = resolve(JobSpec(command="fit", attempt=2, mem_gb=8, queue="long"), hpc)
    assert (explicit.mem_gb, explicit.queue) == (8, "long")
    assert resolve(second, hpc) == second  # idempotent
    pbs = resolve(JobSpec(command="x"), config.host("cluster"))
    assert (pbs.queue, pbs.walltime, pbs.mem_gb) == ("workq", None, None)


def test_attempt_two_is_refused_where_attempt_one_fits(config: Config) -> None:
    bridge = silent(config)
    assert bridge.prepare(command="fit", attempt=1).mem_gb == 50.0  # fits short (64 GB)
    with pytest.raises(QueuePolicyError) as caught:
        bridge.submit(command="fit", attempt=2, name="fit")
    assert str(caught.value) == (
        "host 'hpc': queue 'short' refuses job 'fit' (attempt 2): mem-gb 100 is over "
        "mem-ceiling-gb 64; queues that would fit: long (max-walltime 2-00:00:00, "
        "mem-ceiling-gb 256, max-gpus 0), gpu (max-walltime 12:00:00, mem-ceiling-gb 128, "
        "max-gpus 4, max-nodes 2)")


def test_walltime_over_the_queue_limit(config: Config) -> None:
    with pytest.raises(QueuePolicyError) as caught:
        silent(config).submit(command="fit", walltime="3h", name="fit")
    message = str(caught.value)
    assert "queue 'short' refuses job 'fit' (attempt 1): walltime 3:00:00 is over " \
           "max-walltime 1:00:00; queues that would fit: long (" in message
    assert "gpu (max-walltime 12:00:00" in message


def test_memory_and_gpus_over_limits_are_reported_together(config: Config) -> None:
    with pytest.raises(QueuePolicyError) as caught:
        silent(config).submit(command="x", queue="long", walltime="1h", mem_gb=300, gpus=1)
    assert "mem-gb 300 is over mem-ceiling-gb 256; gpus 1 is over max-gpus 0; " \
           "no declared queue fits this job; ask for less" in str(caught.value)


def test_unknown_queue_lists_declared_queues_and_those_that_fit(config: Config) -> None:
    with pytest.raises(QueuePolicyError) as caught:
        silent(config).submit(command="x", queue="gpuu", gpus=2, nodes=2, name="train")
    message = str(caught.value)
    assert message.startswith("host 'hpc': unknown queue 'gpuu' for job 'train'; declared "
                              "queues: short (max-walltime 1:00:00, mem-ceiling-gb 64), long (")
    assert message.endswith("; queues that would fit: short (max-walltime 1:00:00, "
                            "mem-ceiling-gb 64), gpu (max-walltime 12:00:00, "
                            "mem-ceiling-gb 128, max-gpus 4, max-nodes 2)")  # short: no gpu cap


def test_hosts_without_queues_and_jobs_without_a_queue_are_not_checked(config: Config) -> None:
    check_policy(JobSpec(command="x", walltime=10**6, mem_gb=10**4), config.host("cluster"),
                 "cluster")
    spec = JobSpec(command="x", walltime=10**6)
    check_policy(spec, config.host("hpc").model_copy(update={"partition": None}), "hpc")


def test_bad_parameters_and_bad_expressions_also_refuse_before_traffic(tmp_path: Path) -> None:
    bridge = silent(loads_config(TOML, tmp_path / "mainboard.toml"))
    with pytest.raises(UserError, match="unknown job parameter 'gpu'"):
        bridge.submit(command="x", gpu=1)
    broken = loads_config(TOML.replace('cpus = 4', 'cpus = "walltime_s / 0 + 1"'),
                          tmp_path / "mainboard.toml")
    with pytest.raises(ExpressionError):
        silent(broken).submit(command="x")


def test_a_queue_the_host_itself_names_goes_unchecked(tmp_path: Path) -> None:
    """Issue 14's example: `[defaults] queue = "debug-g"` beside a declared `short-g` only.
    The default queue is the user's word (the scheduler judges it); a queue a job names
    that the host names nowhere is still a typo, refused before any traffic."""
    from tests.support.config_cases import ISSUE_EXAMPLE

    config = loads_config(ISSUE_EXAMPLE, tmp_path / "mainboard.toml")
    bridge = silent(config, "miyabi-g")
    spec = bridge.prepare(command="python train.py", walltime="10h", attempt=3)
    assert (spec.queue, spec.mem_gb, spec.account) == ("debug-g", 100.0, "xg25g007")
    assert bridge.prepare(command="x", queue="short-g", walltime="1h").queue == "short-g"
    with pytest.raises(QueuePolicyError, match="queue 'short-g' refuses job 'job' .attempt 1.: walltime 10:00:00 is over"):
        bridge.prepare(command="x", queue="short-g", walltime="10h")
    with pytest.raises(QueuePolicyError, match="unknown queue 'debug-gg'"):
        bridge.prepare(command="x", queue="debug-gg")
    pbs = loads_config('[hosts.c]\nkind = "pbs"\nqueue = "workq"\n'
                       '[hosts.c.queues.big]\nmax-walltime = "1h"\nmem-ceiling-gb = 8\n')
    assert silent(pbs, "c").prepare(command="x", walltime="5h").queue == "workq"


def test_a_kind_no_row_declares_is_one_line_naming_the_host_and_the_valid_kinds() -> None:
    """A worker's kind comes back from receipts: one of another version is refused by name."""
    from mainboard.bridges import bridge_class
    from mainboard.config.hostkinds import HOST_TABLE

    with pytest.raises(UserError) as refused:
        bridge_class("lsf", "big")
    assert str(refused.value) == (f"host 'big': no bridge for kind 'lsf'; valid kinds: "
                                  f"{', '.join(HOST_TABLE)}")
    with pytest.raises(UserError, match="^no bridge for kind 'lsf'"):
        bridge_class("lsf")
