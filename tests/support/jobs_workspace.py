"""A test workspace for jobs and monitor tests: a real mainboard.toml declaring every host kind.

Hosts (each only when its service is given): ``scratch`` (local, root outside the
workspace so data and results really travel), ``edge`` (ssh to a real sshd), ``hpc``
(SLURM) and ``pbs`` (the PBS wrappers over the same SLURM). Their roots are separate
directories under the test's tmp dir.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from mainboard.board import Board
from mainboard.bridges.jobstate import JobState
from mainboard.jobs.job import Job
from tests.support.boards import TomlValue, ssh_host, write_config
from tests.support.services import SlurmCluster, SshServer
from tests.support.sim_provider import SimulatedProviderServer
from tests.support.waiting import poll
from tests.support.workspace import toml_tables

SCRATCH_MEM = "min(100, attempt * 50)"
HPC_MEM = "min(1.5, attempt * 0.5)"


def make_workspace(tmp: Path, *, sshd: SshServer | None = None,
                   slurm: SlurmCluster | None = None,
                   extra_hosts: dict[str, dict[str, TomlValue]] | None = None,
                   extra: str = "") -> Path:
    """Write ``tmp/ws/mainboard.toml`` (plus a data file) and return the config path."""
    ws = tmp / "ws"
    (ws / "in").mkdir(parents=True, exist_ok=True)
    (ws / "in" / "d.txt").write_text("hello\n")
    hosts: dict[str, dict[str, TomlValue]] = {
        "scratch": {"kind": "local", "root": str(tmp / "scratch-root")}}
    tables: dict[str, dict[str, TomlValue]] = {"hosts.scratch.defaults": {"mem-gb": SCRATCH_MEM}}
    if sshd is not None:
        hosts["edge"] = ssh_host(sshd, sshd.known_hosts(tmp / "known_hosts"),
                                 root=str(tmp / "edge-root"))
    if slurm is not None:
        hosts["hpc"] = {"kind": "slurm", "partition": slurm.partition,
                        "root": str(tmp / "hpc-root")}
        hosts["pbs"] = {"kind": "pbs", "queue": slurm.partition, "root": str(tmp / "pbs-root")}
        tables["hosts.hpc.env"] = tables["hosts.pbs.env"] = {"SLURM_CONF": str(slurm.conf)}
        tables["hosts.hpc.defaults"] = {"mem-gb": HPC_MEM}
        tables["hosts.hpc.queues.debug"] = {"max-walltime": "1h", "mem-ceiling-gb": 1.2}
        tables["hosts.hpc.queues.short"] = {"max-walltime": "10m", "mem-ceiling-gb": 1.2}
    hosts.update(extra_hosts or {})
    return write_config(ws, hosts, toml_tables(tables) + extra)


def provider_workspace(tmp: Path, sim: SimulatedProviderServer, key_env: str,
                       tables: dict[str, dict[str, TomlValue]] | None = None,
                       **gpu: TomlValue) -> Path:
    """:func:`make_workspace` plus a ``gpu`` host rented from the simulated provider ``sim``
    (its API key read from ``$key_env``): a 1 USD/h ceiling unless ``gpu`` says otherwise."""
    host: dict[str, TomlValue] = {"kind": "provider", "provider": "sim", "gpu": "SIM RTX 4090",
                                  "max_usd_hr": 1.0, **gpu}
    return make_workspace(tmp, extra_hosts={"gpu": host}, extra=toml_tables({
        "providers.sim": {"kind": "simulated", "api_url": sim.url, "api_key_env": key_env},
        **(tables or {})}))


def wait_until(predicate: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Poll ``predicate`` until true (tests/support/waiting.py); AssertionError naming
    ``what`` after ``timeout``."""
    poll(predicate, timeout, what, every=0.1)


def wait_running(job: Job, timeout: float = 60.0) -> None:
    """Until the host says the job runs (SLURM only lets a running job's end time move)."""
    wait_until(lambda: job.status() is JobState.RUNNING, f"job {job.id} running", timeout)


def job_files(board: Board) -> list[Path]:
    """The job receipt files of the workspace."""
    folder = board.config.state_dir / "jobs"
    return sorted(folder.glob("*.ndjson")) if folder.is_dir() else []
