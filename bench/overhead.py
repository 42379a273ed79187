"""Per-batch overhead: samples/s and batches/s by batch size, fused and chained, beside bare
Celery round trips on the same Redis.

Everything is real and on this machine: the embedded broker (a private redis-server in a
temporary workspace), two warm `celery worker` processes of mainboard's app, and, as the
peer, two warm workers of a one-task Celery app (``bench/peer_app.py``) on the same Redis.
Prints one table (nothing is asserted):

- per batch size (1k, 2k, 10k, 50k, 200k samples of the 4-d gaussian) and stage form
  (fused: one task per batch after sampling; chained: sample -> materialize -> evaluate ->
  accumulate): samples/s, batches/s, and the time per batch beyond the evaluation itself;
- bare Celery: sequential round trips (``delay().get()``) and the throughput of a burst of
  no-op tasks on two workers: the floor any Celery-based dispatch pays per task.

Each row runs with the next iteration sent ahead (the coordinator's default) and without
(``MAINBOARD_PIPELINE=0``), alternating, best of ``--repeat``. Targets of issue 30
(2k-sample batches >= 2,000 batches/s for the whole call on 2 workers and >= 0.75x the
samples/s of 200k-sample batches) are printed as ratios next to the figures, with the load
at the start and the end.

    .venv/bin/python bench/overhead.py [--samples 4000000] [--sizes 1000,2000,10000,50000,200000]
        [--forms fused,chained] [--repeat 2]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from bench_integrate import bench_workspace, start_fleet  # noqa: E402

import mainboard  # noqa: E402

D = 4
SIZES = (1_000, 2_000, 10_000, 50_000, 200_000)


def spec(size: int, total: int, *, fuse: bool) -> dict[str, Any]:
    """The 4-d gaussian in batches of ``size``, 20 batches per iteration."""
    per_it = 20
    total = max(total - total % (size * per_it), size * per_it)
    return {"name": f"overhead-{size}-{'fused' if fuse else 'chained'}", "seed": 11,
            "domain": {"continuous": D},
            "integrand": {"kind": "genz.gaussian", "a": [5.0] * D, "u": [0.5] * D},
            "sampler": {"kind": "naive"}, "stop": {"max_samples": total},
            "batching": {"batch_size": size, "batches_per_iteration": per_it, "fuse": fuse}}


def run_pair(size: int, total: int, fuse: bool, config: Any, repeat: int
             ) -> dict[bool, tuple[float, float, int, int]]:
    """Per pipeline setting (``MAINBOARD_PIPELINE``: the next iteration sent ahead, or not):
    (wall s of the whole call, wall s of the run's iterations, samples, batches), each the
    best of ``repeat`` runs, the two settings alternating so that load hits both alike."""
    best: dict[bool, list[float]] = {True: [float("inf")] * 2, False: [float("inf")] * 2}
    counts: dict[bool, tuple[int, int]] = {}
    run = spec(size, total, fuse=fuse)
    try:
        for _ in range(repeat):
            for pipelined in (True, False):
                os.environ["MAINBOARD_PIPELINE"] = "1" if pipelined else "0"
                began = time.perf_counter()
                res = mainboard.integrate(run, workers=0, config=config)
                wall = time.perf_counter() - began
                best[pipelined] = [min(best[pipelined][0], wall),
                                   min(best[pipelined][1], res.wall_s)]
                counts[pipelined] = (res.samples, res.samples // size)
    finally:
        os.environ.pop("MAINBOARD_PIPELINE", None)
    return {p: (best[p][0], best[p][1], *counts[p]) for p in (True, False)}


def peer(url: str, logs: Path) -> tuple[float, float]:
    """(sequential round trip s, burst tasks/s) of bare Celery with two warm workers."""
    env = {**os.environ, "PEER_BROKER": url,
           "PYTHONPATH": os.pathsep.join([str(BENCH), os.environ.get("PYTHONPATH", "")])}
    logs.mkdir(parents=True, exist_ok=True)
    procs = [subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "peer_app", "worker", "--concurrency=1",
         "--pool=prefork", "-n", f"peer{i}@%h", "--without-mingle", "--without-gossip",
         "-Q", "peer", "--loglevel=WARNING"], env=env, stdout=open(logs / f"peer{i}.log", "wb"),
        stderr=subprocess.STDOUT, start_new_session=True) for i in range(2)]
    os.environ["PEER_BROKER"] = url
    import peer_app

    try:
        peer_app.noop.apply_async(queue="peer").get(timeout=120)  # both ready enough
        for _ in range(20):
            peer_app.noop.apply_async(queue="peer").get(timeout=30)
        n = 300
        began = time.perf_counter()
        for _ in range(n):
            peer_app.noop.apply_async(queue="peer").get(timeout=30)
        rtt = (time.perf_counter() - began) / n
        burst = 2000
        began = time.perf_counter()
        pending = [peer_app.noop.apply_async(queue="peer") for _ in range(burst)]
        for p in pending:
            p.get(timeout=120)
        rate = burst / (time.perf_counter() - began)
        return rtt, rate
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=4_000_000)
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--forms", default="fused,chained")
    parser.add_argument("--repeat", type=int, default=2, help="runs per row and setting (best)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    forms = [f == "fused" for f in args.forms.split(",")]
    with bench_workspace("overhead") as (config, url, root):
        report(sizes, forms, args.samples, args.repeat, config, url, root)


def load() -> str:
    """The 1-minute load average, for the figures printed beside it."""
    return f"{os.getloadavg()[0]:.1f}"


def report(sizes: list[int], forms: list[bool], samples: int, repeat: int, config: Any,
           url: str, root: Path) -> None:
    print(f"cores: {len(os.sched_getaffinity(0))}, load average {load()}; "
          f"4-d gaussian, naive sampler, 2 local workers, up to {samples:,} samples per row")
    rtt, burst = peer(url, root / "peer-logs")
    print(f"bare Celery on the same Redis: round trip {1e3 * rtt:.2f} ms (sequential), "
          f"burst of no-op tasks on 2 workers {burst:,.0f} tasks/s")
    fleet = start_fleet(2, url, root / "logs")
    rows: dict[tuple[int, bool, bool], tuple[float, float, float, float]] = {}
    try:
        mainboard.integrate(spec(10_000, 400_000, fuse=True), workers=0, config=config)
        print(f"{'batch':>8} {'form':>8} {'ahead':>6} {'samples/s':>12} {'batches/s':>10} "
              f"{'ms/batch':>9} {'run batches/s':>13}  (ahead: the next iteration sent "
              "before this one is merged; run: the iterations only, without the call's "
              "set-up)")
        for size in sizes:
            for fuse in forms:
                # Enough batches to measure the per-batch cost: at least 400, at most `samples`.
                total = min(samples, max(400 * size, 40 * size))
                for pipelined, (wall, loop, n, batches) in run_pair(
                        size, total, fuse, config, repeat).items():
                    rows[size, fuse, pipelined] = (n / wall, batches / wall, n / loop,
                                                   batches / loop)
                    print(f"{size:>8,} {'fused' if fuse else 'chained':>8} "
                          f"{'yes' if pipelined else 'no':>6} {n / wall:>12,.0f} "
                          f"{batches / wall:>10,.0f} {1e3 * wall / batches:>9.2f} "
                          f"{batches / loop:>13,.0f}")
    finally:
        fleet.stop()
    print(f"load average at the end {load()}")
    for pipelined in (True, False):
        if (2_000, True, pipelined) not in rows or (200_000, True, pipelined) not in rows:
            continue
        small, big = rows[2_000, True, pipelined], rows[200_000, True, pipelined]
        print(f"{'ahead' if pipelined else 'not ahead'}: 2k batches {small[1]:,.0f} batches/s "
              f"whole call (target >= 2,000: ratio {small[1] / 2000:.2f}); samples/s vs 200k "
              f"batches {small[0] / big[0]:.2f} (target >= 0.75); the iterations only: "
              f"{small[3]:,.0f} batches/s, vs 200k {small[2] / big[2]:.2f}; per bare Celery "
              f"burst task {small[1] / burst:.2f} (1.0 = one batch costs one no-op task)")
    if (2_000, True, True) in rows:
        on, off = rows[2_000, True, True], rows[2_000, True, False]
        print(f"2k batches, ahead / not ahead: whole call {on[1] / off[1]:.2f}x, iterations "
              f"{on[3] / off[3]:.2f}x")


if __name__ == "__main__":
    main()
