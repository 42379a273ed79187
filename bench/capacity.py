"""Coordinator capacity: sustained batches/s with 1, 4, 16, 64 and 256 simulated workers.

A simulated worker is one thread of a real `celery worker --pool=threads` process of
mainboard's app; its "evaluation" is ``bench_targets:sleepy``, a fixed sleep per batch (the
GIL released), so a slot costs no CPU while it evaluates. The coordinator is the real one,
in this process, on the real embedded Redis. Prints per fleet size (nothing is asserted):

- sustained batches/s and the ideal (workers / batch cost);
- CPU milliseconds per batch of the coordinator (this process), of Redis (INFO used_cpu),
  and of the worker processes (their rusage): on 2 cores they share the machine, so the
  model in docs/performance.md is built from these per-batch CPU costs, not from the
  wall rate alone: one coordinator keeps at most 1 / (its CPU s per batch) batches/s busy,
  i.e. ``cost_s / coordinator_cpu_s_per_batch`` workers of batch cost ``cost_s``.

    .venv/bin/python bench/capacity.py [--cost-ms 20] [--sizes 1,4,16,64,256] [--seconds 8]

``--simulate`` replaces the Celery workers by the simulated fleet of ``bench/sim_fleet.py``
(one process, W slots, precomputed results, no evaluation: its CPU charged apart, see its
docstring), so the 2 cores hold the coordinator and Redis rather than 256 workers' Celery
overhead; the coordinator is told the fleet is there (``runner.require_fleet`` answers W:
the simulated slots do not answer Celery's control broadcast). It prints the same columns,
the simulated fleet's CPU in the worker column, and the model's prediction beside the rate
(``cap/model``: the measured ceiling 1 / c over the model's; ``rate/model``: the wall rate
over the model's batches/s for that fleet, min(W / cost, 1 / c)).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import redis

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from bench_integrate import bench_workspace  # noqa: E402

import mainboard  # noqa: E402
from mainboard.errors import UserError  # noqa: E402
from mainboard.tasks import BATCH_QUEUE, runner  # noqa: E402
from mainboard.tasks.workers import worker_env  # noqa: E402

THREADS_PER_PROCESS = 64
REQUIRE_FLEET = runner.require_fleet
#: docs/performance.md's model: one coordinator's CPU per batch after bundling (64 workers)
MODEL_COORD_MS = 0.368


def spec(workers: int, batches: int, cost_ms: float) -> dict[str, Any]:
    """A run of ``batches`` tiny batches, iterations 4 x the fleet wide."""
    per_it = max(4 * workers, 8)
    batches = max(batches - batches % per_it, per_it)
    return {"name": f"capacity-{workers}", "seed": 5, "domain": {"continuous": 1},
            "integrand": {"kind": "python", "target": "bench_targets:sleepy",
                          "params": {"ms": cost_ms}},
            "sampler": {"kind": "naive"}, "stop": {"max_samples": batches * 64},
            "batching": {"batch_size": 64, "batches_per_iteration": per_it, "fuse": True}}


def predicted(workers: int, cost_ms: float) -> float:
    """The model's batches/s for ``workers`` of batch cost ``cost_ms``: what they ask for,
    held to one coordinator's 1 / c."""
    return min(workers / (cost_ms / 1000), 1e3 / MODEL_COORD_MS)


def simulated_spec(workers: int, batches: int) -> dict[str, Any]:
    """The run of ``spec`` with a cheap built-in integrand: the simulated fleet computes one
    batch per iteration (its template) and waits ``cost_ms`` per batch itself."""
    out = spec(workers, batches, 0.0)
    out["name"] = f"capacity-sim-{workers}"
    out["integrand"] = {"kind": "genz.gaussian", "a": [5.0], "u": [0.5]}
    return out


def start_simulated(workers: int, url: str, cost_ms: float, logs: Path
                    ) -> list[subprocess.Popen[bytes]]:
    """The simulated fleet: one process holding ``workers`` slots."""
    logs.mkdir(parents=True, exist_ok=True)
    with open(logs / "sim.log", "wb") as out:
        return [subprocess.Popen([sys.executable, str(BENCH / "sim_fleet.py"), url,
                                  str(workers), str(cost_ms)], stdout=out,
                                 stderr=subprocess.STDOUT, start_new_session=True)]


def start(workers: int, url: str, logs: Path) -> list[subprocess.Popen[bytes]]:
    """Worker processes holding ``workers`` thread slots in all."""
    env = {**worker_env(url),
           "PYTHONPATH": os.pathsep.join([str(BENCH), os.environ.get("PYTHONPATH", "")])}
    logs.mkdir(parents=True, exist_ok=True)
    procs, left, i = [], workers, 0
    while left > 0:
        slots = min(left, THREADS_PER_PROCESS)
        with open(logs / f"w{i}.log", "wb") as out:
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "mainboard.tasks.app", "worker",
                 f"--concurrency={slots}", "--pool=threads", "-Q", BATCH_QUEUE,
                 "-n", f"cap{workers}-{i}@%h", "--without-mingle", "--without-gossip",
                 "--loglevel=WARNING"], env=env, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True))
        left, i = left - slots, i + 1
    return procs


def cpu_of(procs: list[subprocess.Popen[bytes]]) -> float:
    """User + system CPU seconds of the worker processes and their children so far."""
    total = 0.0
    for p in procs:
        try:
            ps = psutil.Process(p.pid)
            for q in [ps, *ps.children(recursive=True)]:
                t = q.cpu_times()
                total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def redis_cpu(r: redis.Redis) -> float:
    info = r.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def self_cpu() -> float:
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def ready(processes: int, url: str, timeout: float = 300.0) -> None:
    """Until every worker process answers (a loaded machine boots them slowly; the run's
    own wait for a fleet is a few seconds only)."""
    from mainboard.tasks.app import make_app
    from mainboard.tasks.workers import fleet_size

    app = make_app(broker_url=url)
    deadline = time.monotonic() + timeout
    while fleet_size(app) < processes:
        if time.monotonic() > deadline:
            raise SystemExit(f"{processes} worker processes not ready after {timeout:g} s")
    app.close()


def measure(workers: int, cost_ms: float, seconds: float, config: Any, url: str,
            root: Path, simulate: bool = False) -> dict[str, float]:
    make = (lambda n, b, _c: simulated_spec(n, b)) if simulate else spec
    if simulate:
        procs = start_simulated(workers, url, cost_ms, root / f"logs-sim-{workers}")
        runner.require_fleet = lambda *_a, **_k: workers  # the slots answer no broadcast
    else:
        procs = start(workers, url, root / f"logs-{workers}")
    r = redis.Redis.from_url(url)
    try:
        if not simulate:
            ready(len(procs), url)
        warm = make(workers, 8 * workers, cost_ms)
        deadline = time.monotonic() + 180  # a loaded machine starts workers slowly
        while True:
            try:
                mainboard.integrate(warm, workers=0, config=config)  # every slot warm
                break
            except UserError:  # no worker consumes the queue yet
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)
        ideal = workers / (cost_ms / 1000)
        batches = int(max(ideal * seconds, 16 * workers))
        run = make(workers, batches, cost_ms)
        c0, r0, w0 = self_cpu(), redis_cpu(r), cpu_of(procs)
        began = time.perf_counter()
        res = mainboard.integrate(run, workers=0, config=config)
        wall = time.perf_counter() - began
        done = res.samples // 64
        return {"workers": workers, "batches": done, "rate": done / wall, "ideal": ideal,
                "coord_ms": 1e3 * (self_cpu() - c0) / done,
                "redis_ms": 1e3 * (redis_cpu(r) - r0) / done,
                "worker_ms": 1e3 * (cpu_of(procs) - w0) / done}
    finally:
        runner.require_fleet = REQUIRE_FLEET
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cost-ms", type=float, default=20.0)
    parser.add_argument("--sizes", default="1,4,16,64,256")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--simulate", action="store_true",
                        help="simulated fleet (bench/sim_fleet.py): workers' CPU charged apart")
    args = parser.parse_args()
    with bench_workspace("capacity") as (config, url, root):
        kind = "simulated slots (sim_fleet.py)" if args.simulate else "sleep"
        print(f"cores: {len(os.sched_getaffinity(0))}, load average "
              f"{os.getloadavg()[0]:.1f}; batch cost {args.cost_ms:g} ms ({kind}), "
              f"64 samples per batch, fused; model: {1e3 / MODEL_COORD_MS:,.0f} batches/s "
              f"per coordinator (c = {MODEL_COORD_MS} ms)")
        print(f"{'workers':>7} {'batches':>8} {'batches/s':>10} {'ideal':>8} {'ratio':>6} "
              f"{'coord ms/b':>10} {'redis ms/b':>10} {'worker ms/b':>11} "
              f"{'1-coord cap b/s':>15} {'cap/model':>9} {'model b/s':>9} {'rate/model':>10}")
        for n in (int(s) for s in args.sizes.split(",")):
            m = measure(n, args.cost_ms, args.seconds, config, url, root, args.simulate)
            print(f"{n:>7} {m['batches']:>8,.0f} {m['rate']:>10,.0f} {m['ideal']:>8,.0f} "
                  f"{m['rate'] / m['ideal']:>6.2f} {m['coord_ms']:>10.3f} "
                  f"{m['redis_ms']:>10.3f} {m['worker_ms']:>11.3f} "
                  f"{1e3 / m['coord_ms']:>15,.0f} {MODEL_COORD_MS / m['coord_ms']:>9.2f} "
                  f"{predicted(n, args.cost_ms):>9,.0f} "
                  f"{m['rate'] / predicted(n, args.cost_ms):>10.2f}")


if __name__ == "__main__":
    main()
