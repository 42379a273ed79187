"""Time from `fleet up` to the first task executed, per host kind, in parts; cold and warm.

Run from the repository root (root, like the tests: it makes network namespaces):

    .venv/bin/python bench/bench_fleet.py [--kinds local,ssh,netns,slurm,pbs,provider]

Each kind gets a fresh workspace and a fresh host root. "cold": the first `fleet up`
there (new ssh connection; the uv environment built from nothing — for the namespaced
and rented hosts, which have no route to an index, the env is preset in the shared root
instead); "warm": `fleet down`, then `fleet up` again (env cached, connection pooled), --warm
times, median per part.
Parts: rent, connect (+ root), provision, route (tunnel), submit, queue wait (submitted
-> job RUNNING), worker boot (RUNNING -> Celery ready), first task (ready -> result).
Baselines on the same services: the `ssh` binary starting a worker by hand (and `ssh
true` against paramiko's connect), and a plain `sbatch --wrap 'celery worker ...'`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.*

from mainboard.bridges.ssh import close_all  # noqa: E402
from mainboard.fleet.control import fleet_down, fleet_up  # noqa: E402
from mainboard.fleet.launch import UpOptions  # noqa: E402
from mainboard.fleet.records import host_queue  # noqa: E402
from mainboard.fleet.workers import bridge_of, broker_route, job_of, registry_entries  # noqa: E402
from mainboard.tasks.app import make_app  # noqa: E402
from mainboard.tasks.fleet import PROBE_TASK  # noqa: E402
from tests.support.fleet_helpers import HOST_PYTHON, config, ssh_host, table, workspace  # noqa: E402

PARTS = ("rent", "connect", "provision", "route", "submit", "tunnel", "queue", "boot", "task")
KINDS = ("local", "ssh", "netns", "slurm", "pbs", "provider")


def first_task(ws: Path, host: str) -> dict[str, float]:
    """`fleet up` one host, then the first probe on its queue; seconds per part."""
    cfg = config(ws)
    timings: dict[str, dict[str, float]] = {}
    t0 = time.perf_counter()
    report = fleet_up(cfg, [host], UpOptions(), flower=False, timings=timings)
    t_up = time.perf_counter()
    if report.failed:
        raise SystemExit(f"fleet up {host} failed: {report.failed[host]}")
    worker = report.started[0]
    route = broker_route(cfg, start=False)
    assert route is not None
    app = make_app(broker_url=route.url)
    result = app.send_task(PROBE_TASK, queue=host_queue(host))
    running: list[float] = []

    def watch() -> None:  # when does the scheduler say RUNNING?
        bridge = bridge_of(cfg, worker)
        while not running:
            if bridge.poll([job_of(worker)])[worker.job["job_id"]].state.value != "pending":
                running.append(time.perf_counter())
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    result.get(timeout=600)
    t_first = time.perf_counter()
    watcher.join(30)
    app.close()
    ready_wall = float(registry_entries(route, [worker.node])[worker.node]["started"])
    t_ready = ready_wall - (time.time() - time.perf_counter())  # wall clock -> perf clock
    t_running = min(running[0] if running else t_up, t_ready)
    parts = dict(timings.get(host, {}))
    parts.update(queue=max(0.0, t_running - t_up), boot=max(0.0, t_ready - t_running),
                 task=max(0.0, t_first - t_ready), total=t_first - t0)
    return parts


def run_kind(ws: Path, host: str, warm: int) -> dict[str, dict[str, float]]:
    """One cold run, then ``warm`` warm ones (their median per part)."""
    out = {"cold": first_task(ws, host)}
    fleet_down(config(ws), [host], timeout=30)
    close_all()
    runs = []
    for _ in range(warm):
        runs.append(first_task(ws, host))
        fleet_down(config(ws), [host], timeout=30)
    out[f"warm x{warm}"] = {part: statistics.median(r[part] for r in runs) for part in runs[0]}
    return out


def _probe_queue(url: str, queue: str) -> float:
    """Seconds until a probe sent now to ``queue`` comes back."""
    app = make_app(broker_url=url)
    start = time.perf_counter()
    app.send_task(PROBE_TASK, queue=queue).get(timeout=600)
    app.close()
    return time.perf_counter() - start


def _celery(python: str, queue: str, node: str) -> str:
    return (f"exec {python} -m celery -A mainboard.tasks.app worker -Q {queue} -c 1 "
            f"-n {node}@%h --without-mingle --without-gossip -I mainboard.tasks.fleet")


def ssh_baseline(ws: Path, server: Any, root: Path, python: str) -> dict[str, float]:
    """The `ssh` binary: `ssh true`, and starting a worker by hand to its first task."""
    argv = ["ssh", "-i", str(server.identity), "-p", str(server.port), "-o", "BatchMode=yes",
            "-o", f"UserKnownHostsFile={server.known_hosts()}", f"{server.user}@{server.host}"]
    start = time.perf_counter()
    subprocess.run([*argv, "true"], check=True)
    connect = time.perf_counter() - start
    route = broker_route(config(ws), start=True)
    assert route is not None
    script = (f"read -r U; export MAINBOARD_BROKER_URL=\"$U\"; cd {root}; "
              f"({_celery(python, 'bench.ssh', 'bench-ssh')}) > bench-ssh.log 2>&1 "
              "< /dev/null & echo $!")
    start = time.perf_counter()
    pid = subprocess.run([*argv, script], input=route.url + "\n", capture_output=True,
                         text=True, check=True).stdout.strip()
    total = time.perf_counter() - start + _probe_queue(route.url, "bench.ssh")
    subprocess.run([*argv, f"kill -TERM {pid}"], check=False)
    return {"connect": connect, "total": total}


def sbatch_baseline(ws: Path, slurm: Any, root: Path, python: str) -> dict[str, float]:
    """A plain `sbatch --wrap 'celery worker ...'` (the URL in its environment) to first task."""
    route = broker_route(config(ws), start=True)
    assert route is not None
    env = {**slurm.env, "MAINBOARD_BROKER_URL": route.url}
    start = time.perf_counter()
    job = subprocess.run(["sbatch", "--parsable", "--chdir", str(root), "-o",
                          str(root / "bench-sbatch.log"),
                          "--wrap", _celery(python, "bench.sbatch", "bench-sbatch")],
                         env=env, capture_output=True, text=True, check=True).stdout.strip()
    total = time.perf_counter() - start + _probe_queue(route.url, "bench.sbatch")
    subprocess.run(["scancel", job], env=slurm.env, check=False)
    return {"total": total}


def _median(times: int, run: Any, *args: Any) -> dict[str, float]:
    """``run(*args)`` ``times`` times; the median of each part."""
    runs = [run(*args) for _ in range(times)]
    return {part: statistics.median(r[part] for r in runs) for part in runs[0]}


def _row(label: str, parts: dict[str, float]) -> str:
    cells = "".join(f"{parts[p]:8.2f}" if p in parts else f"{'-':>8}" for p in PARTS)
    return f"{label:<22}{cells}{parts['total']:9.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma-separated: " +
                        ", ".join(KINDS))
    parser.add_argument("--warm", type=int, default=3, help="warm runs per kind (median)")
    args = parser.parse_args()
    kinds = [k for k in args.kinds.split(",") if k]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # so the services get cleaned up
    from mainboard.bridges.project import local_project
    from mainboard.bridges.provision import provision
    from mainboard.bridges.transport import LocalTransport
    from mainboard.services.broker import EmbeddedBroker
    from tests.support.netns import free_subnet_index, make_netns_host
    from tests.support.services import start_slurm, start_sshd
    from tests.support.sim_provider import start_simulated_provider

    base = Path(tempfile.mkdtemp(prefix="mb-bench-fleet-"))
    shared = base / "shared-root"  # preset env for hosts without a route to an index
    provision(LocalTransport("bench"), root=str(shared), python=HOST_PYTHON,
              project=local_project(base / "wheels"))
    sshd = start_sshd(base / "sshd")
    stops: list[Any] = [sshd]
    rows: list[tuple[str, dict[str, float]]] = []
    baselines: list[tuple[str, dict[str, float]]] = []
    try:
        slurm = start_slurm(base / "slurm") if {"slurm", "pbs"} & set(kinds) else None
        stops += [slurm] if slurm else []
        for kind in kinds:
            root = base / f"root-{kind}"
            batch = {"root": str(root), "python": HOST_PYTHON,
                     "env": {"SLURM_CONF": str(slurm.conf)} if slurm else {}}
            if kind == "local":
                tables = [table("hosts.local", kind="local", root=str(root))]
            elif kind == "ssh":
                tables = [ssh_host("ssh", sshd, root)]
            elif kind == "netns":
                ns = make_netns_host("bench", free_subnet_index(), base / "ns")
                stops.append(ns)
                tables = [ssh_host("netns", ns.ssh, shared, env={"UV_OFFLINE": "1"})]
            elif kind in ("slurm", "pbs"):
                tables = [table(f"hosts.{kind}", kind=kind, **batch)]
            else:
                sim = start_simulated_provider(base / "sim")
                stops.append(sim)
                os.environ["MB_BENCH_SIM_KEY"] = sim.api_key
                tables = [table("providers.sim", kind="simulated", api_url=sim.url,
                                api_key_env="MB_BENCH_SIM_KEY"),
                          table("hosts.provider", kind="provider", provider="sim",
                                max_usd_hr=1.0, root=str(shared), python=HOST_PYTHON,
                                env={"UV_OFFLINE": "1"})]
            ws = workspace(base / f"ws-{kind}", *tables)
            try:
                for when, parts in run_kind(ws, kind, args.warm).items():
                    rows.append((f"{kind} {when}", parts))
                python = str(Path(shared) / ".mainboard" / "envs")
                env_python = next(Path(python).glob("*/bin/python"))
                if kind == "ssh":
                    baselines.append(("ssh binary", _median(
                        args.warm, ssh_baseline, ws, sshd, shared, str(env_python))))
                if kind == "slurm" and slurm is not None:
                    baselines.append(("plain sbatch --wrap", _median(
                        args.warm, sbatch_baseline, ws, slurm, shared, str(env_python))))
            finally:
                EmbeddedBroker(ws / ".mainboard").down()
    finally:
        for item in reversed(stops):
            (item.cleanup if hasattr(item, "cleanup") else item.stop)()
        shutil.rmtree(base, ignore_errors=True)
    print(f"\nseconds from `fleet up` to first task ({os.cpu_count()} cores)")
    print(f"{'':<22}" + "".join(f"{p:>8}" for p in PARTS) + f"{'total':>9}")
    for label, parts in rows:
        print(_row(label, parts))
    print("\nbaselines (same services)")
    for label, parts in baselines:
        extra_text = f", connect {parts['connect']:.2f}" if "connect" in parts else ""
        print(f"{label:<22} to first task {parts['total']:.2f}{extra_text}")


if __name__ == "__main__":
    main()
