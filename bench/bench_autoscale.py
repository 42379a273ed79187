"""Scale-up latency: work queued -> first task done on a NEW allocation the fleet keeper
submitted for it, next to a worker started by hand (`fleet up --on HOST`) for the same
task, per host kind: local, ssh (loopback sshd), slurm (a real single-node SLURM), and
provider (the LOCAL SIMULATED provider: a rental is a network namespace with its sshd).

Run from the repository root (root needed for slurm and provider):

    .venv/bin/python bench/bench_autoscale.py [--kinds local,ssh,slurm,provider]
                                              [--repeat 3] [--tick 0.5]

Prints, per kind, the median of each and the ratio autoscaled / by hand; the difference
is the keeper's tick plus its look at the pool (both sides pay the same launch: connect,
provision check, tunnel, submit, the scheduler's queue wait, the worker's boot).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mainboard.config import load_config  # noqa: E402
from mainboard.fleet.autoscale import SCALE_TICK_ENV  # noqa: E402
from mainboard.fleet.workers import broker_route  # noqa: E402
from mainboard.services.broker import EmbeddedBroker  # noqa: E402
from mainboard.tasks.app import make_app  # noqa: E402
from mainboard.tasks.fleet import PROBE_TASK  # noqa: E402
from tests.support.fleet_helpers import HOST_PYTHON, ssh_host, table, workspace  # noqa: E402

KINDS = ("local", "ssh", "slurm", "provider")
SIM_KEY = "MB_BENCH_SIM_KEY"


def _cli(ws: Path, *args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "mainboard", "--config",
                           str(ws / "mainboard.toml"), *args], cwd=ws, capture_output=True,
                          text=True)
    if done.returncode:
        raise SystemExit(f"mainboard {' '.join(args)}: {done.stderr.strip()}")


def _first_task(ws: Path, queue: str, start: list[str]) -> float:
    """Seconds from queueing one probe (then running ``start``) to its result."""
    route = broker_route(load_config(ws / "mainboard.toml"), start=False)
    assert route is not None
    app = make_app(broker_url=route.url)
    began = time.perf_counter()
    result = app.send_task(PROBE_TASK, kwargs={}, queue=queue)
    if start:
        _cli(ws, *start)
    result.get(timeout=600)
    took = time.perf_counter() - began
    app.close()
    return took


def once(directory: Path, host: str, tables: list[str]) -> tuple[float, float]:
    """(autoscaled, by hand) for one fresh workspace on ``host``."""
    pool = table("fleet.pools.auto", host=host, queues=["bench.auto"], max_jobs=1,
                 idle_timeout=600)
    ws = workspace(directory, *tables, pool)
    try:
        _cli(ws, "broker", "up")
        hand = _first_task(ws, "bench.hand", ["fleet", "up", "--on", host, "--queues",
                                              "bench.hand", "--no-flower"])
        _cli(ws, "fleet", "down", "--timeout", "10")
        _cli(ws, "fleet", "up", "--pool", "auto", "--no-flower")  # starts nothing: no work
        auto = _first_task(ws, "bench.auto", [])
        return auto, hand
    finally:
        subprocess.run([sys.executable, "-m", "mainboard", "--config",
                        str(ws / "mainboard.toml"), "fleet", "down", "--timeout", "10"],
                       cwd=ws, capture_output=True)
        EmbeddedBroker(ws / ".mainboard").down()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", default=",".join(KINDS), help=", ".join(KINDS))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tick", type=float, default=0.5, help="the keeper's look interval")
    args = parser.parse_args()
    kinds = [k for k in args.kinds.split(",") if k]
    os.environ[SCALE_TICK_ENV] = str(args.tick)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # so the services get cleaned up
    from mainboard.bridges.project import local_project
    from mainboard.bridges.provision import provision
    from mainboard.bridges.transport import LocalTransport
    from tests.support.services import start_slurm, start_sshd
    from tests.support.sim_provider import start_simulated_provider

    base = Path(tempfile.mkdtemp(prefix="mb-bench-autoscale-"))
    root = base / "root"  # one provisioned environment for every host
    provision(LocalTransport("bench"), root=str(root), python=HOST_PYTHON,
              project=local_project(base / "wheels"))
    stops: list[Any] = []
    try:
        for kind in kinds:
            if kind == "local":
                host, tables = "local", [table("hosts.local", kind="local", root=str(root))]
            elif kind == "ssh":
                sshd = start_sshd(base / "sshd")
                stops.append(sshd)
                host, tables = "lo", [ssh_host("lo", sshd, root)]
            elif kind == "slurm":
                slurm = start_slurm(base / "slurm")
                stops.append(slurm)
                host, tables = "hpc", [table("hosts.hpc", kind="slurm", partition="debug",
                                             root=str(root), python=HOST_PYTHON,
                                             env={"SLURM_CONF": str(slurm.conf)})]
            else:
                sim = start_simulated_provider(base / "sim")
                stops.append(sim)
                os.environ[SIM_KEY] = sim.api_key
                host, tables = "gpu", [
                    table("providers.sim", kind="simulated", api_url=sim.url,
                          api_key_env=SIM_KEY),
                    table("hosts.gpu", kind="provider", provider="sim", max_usd_hr=1.0,
                          root=str(root), python=HOST_PYTHON, env={"UV_OFFLINE": "1"})]
            runs = [once(base / f"ws-{kind}-{i}", host, tables) for i in range(args.repeat)]
            auto = statistics.median(a for a, _ in runs)
            hand = statistics.median(h for _, h in runs)
            print(f"{kind:<9} work queued -> first task done on a new allocation: autoscaled "
                  f"{auto:6.2f} s, by hand {hand:6.2f} s, ratio {auto / hand:.2f} "
                  f"(keeper tick {args.tick:g} s, median of {args.repeat})", flush=True)
    finally:
        for service in reversed(stops):
            service.stop()


if __name__ == "__main__":
    main()
