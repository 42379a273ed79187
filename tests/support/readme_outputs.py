"""The README's `compute --agent`, `batch estimate --agent` and `submit --on auto --explain`
outputs, regenerated from a real run on this machine.

    flock /tmp/mainboard-machine.lock .venv/bin/python -m tests.support.readme_outputs

Starts its own sshd, single-node SLURM (with the PBS wrappers over it) and the simulated
provider in a temporary directory, runs the commands as a user would (``python -m
mainboard``) and prints each one with its output, ready to paste. Not collected by pytest
(no ``test_`` prefix); every service it starts is stopped at the end.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from mainboard.board import Board
from mainboard.bridges.jobstate import JobState
from mainboard.hosts.facts import probe_facts
from mainboard.jobs.job import Job
from tests.support.boards import ssh_host, write_config
from tests.support.cliserver import run_mainboard
from tests.support.config_cases import ISSUE_EXAMPLE
from tests.support.services import SlurmCluster, SshServer, start_slurm, start_sshd
from tests.support.sim_provider import SimulatedProviderServer, start_simulated_provider
from tests.support.workspace import toml_tables

KEY_ENV = "MB_README_SIM_KEY"
FLEET = """[defaults]
command = "python3 fit.py"
runtime-s = "20m"

[[jobs]]
name = "fit-box"
target = "box"

[[jobs]]
name = "fit-hpc"
target = "hpc"

[[jobs]]
name = "fit-pbs"
target = "pbs"

[[jobs]]
name = "fit-gpu"
target = "rtx"
"""


def show(config: Path, *args: str, key: str) -> tuple[str, str]:
    """Run ``mainboard ARGS`` in the workspace: (the README block, its stdout)."""
    done = run_mainboard(["--config", str(config), *args], cwd=config.parent, timeout=300,
                         env={**os.environ, KEY_ENV: key, "COLUMNS": "200"})
    shown = " ".join("fleet.toml" if a.endswith("/fleet.toml") else a for a in args)
    return f"$ mainboard {shown}\n{done.stdout}{done.stderr}", done.stdout


def example(tmp: Path, slurm: SlurmCluster, sim: SimulatedProviderServer) -> str:
    """`compute --agent` for the issue-14 example file, plus the simulated provider."""
    ws = tmp / "example"
    ws.mkdir()
    config = ws / "mainboard.toml"
    config.write_text(ISSUE_EXAMPLE + toml_tables({
        "hosts.miyabi-g.env": {"SLURM_CONF": str(slurm.conf)},
        "providers.sim": {"kind": "simulated", "api-url": sim.url, "api-key-env": KEY_ENV},
        "hosts.rent-a100": {"kind": "provider", "provider": "sim", "gpu": "SIM A100 80GB",
                            "max-usd-hr": 2}}))
    with Board(config) as board:
        probe_facts(board, "local")
    return show(config, "compute", "--agent", key=sim.api_key)[0]


def routed(tmp: Path, sshd: SshServer, slurm: SlurmCluster,
           sim: SimulatedProviderServer) -> str:
    """`batch estimate --agent` and `submit --on auto --explain` after five quick jobs."""
    ws = tmp / "ws"
    ws.mkdir()
    (ws / "fit.py").write_text("print('fitted')\n")
    (ws / "fleet.toml").write_text(FLEET)
    known = sshd.known_hosts(tmp / "known_hosts")
    config = write_config(ws, {
        "box": ssh_host(sshd, known, root=str(tmp / "box-root")),
        "hpc": {"kind": "slurm", "partition": slurm.partition, "root": str(tmp / "hpc-root")},
        "pbs": {"kind": "pbs", "queue": slurm.partition, "root": str(tmp / "pbs-root"),
                "usd_hr": 0.05},
        "rtx": {"kind": "provider", "provider": "sim", "gpu": "SIM_RTX_4090", "max_usd_hr": 0.5},
        "old": ssh_host(sshd, known, port=1, connect_timeout=2.0),
    }, toml_tables({
        "hosts.hpc.env": {"SLURM_CONF": str(slurm.conf)},
        "hosts.pbs.env": {"SLURM_CONF": str(slurm.conf)},
        "hosts.hpc.queues.debug": {"max-walltime": "1h", "mem-ceiling-gb": 1.2},
        "providers.sim": {"kind": "simulated", "api_url": sim.url, "api_key_env": KEY_ENV}}))
    os.environ[KEY_ENV] = sim.api_key
    with Board(config) as board:
        for host in ("box", "hpc"):
            probe_facts(board, host)
        for host, count in (("box", 2), ("hpc", 3)):
            for i in range(count):  # one at a time: each timed on its own
                job = board.on(host).submit("true", name=f"quick-{i}", walltime="5m")
                assert job.wait(timeout=120, poll=0.3) is JobState.COMPLETED, host
    estimated, _ = show(config, "batch", "estimate", str(ws / "fleet.toml"), "--agent",
                        key=sim.api_key)
    explained, job_id = show(config, "submit", "--on", "auto", "--explain", "--runtime", "20m",
                             "--walltime", "2h", "--", "python3", "fit.py", key=sim.api_key)
    with Board(config) as board:  # let the routed job end before its host goes away
        Job(board, job_id.strip()).wait(timeout=120, poll=0.3)
    return f"{estimated}\n{explained}"


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="mb-readme-") as name:
        tmp = Path(name)
        sshd = start_sshd(tmp / "sshd")
        slurm = start_slurm(tmp / "slurm")
        sim = start_simulated_provider(tmp / "sim")
        try:
            print(example(tmp, slurm, sim))
            print(routed(tmp, sshd, slurm, sim))
        finally:
            subprocess.run(["scancel", "--full", "--user", "root"], env=slurm.env,
                           capture_output=True, timeout=30)
            sim.stop()
            slurm.stop()
            sshd.stop()


if __name__ == "__main__":
    main()
