"""Distributed integration (`mainboard.integrate` on local Celery workers) against peers.

Everything runs for real on this machine: the embedded broker (a private redis-server in a
temporary workspace) and warm `celery worker` subprocesses, started before timing, as a
fleet would be. Prints, from one run of this script (nothing is asserted):

1. vs the ``vegas`` package (single process, ``lbatchintegrand``) on the 8-d Genz gaussian
   of examples/gauss-8d.toml, same sample budget: wall-time ratio, error ratio, and the
   cost ratio at equal error, wall * error^2 (target: mainboard with 2 workers <= 1).
2. fused vs chained stages (wall-time ratio).
3. framework overhead: mainboard samples/s over the bare numpy evaluation rate of the
   integrand in one process.
4. an expensive integrand (~50 us/sample, a Python target): speed-up of 2 workers over 1
   (target >= 1.8 on 2 cores).

    .venv/bin/python bench/bench_integrate.py [--budget 10000000]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import vegas

import mainboard
from mainboard.config import load_config
from mainboard.integrators import genz
from mainboard.services.broker import EmbeddedBroker
from mainboard.tasks.workers import LocalWorkers

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
D, A, U = 8, 5.0, 0.5


def gauss_spec(budget: int, *, fuse: bool = True, name: str = "bench-gauss",
               batches: int = 10) -> dict[str, Any]:
    """The 8-d gaussian of examples/gauss-8d.toml with the given budget (10 iterations)."""
    return {"name": name, "seed": 7, "domain": {"continuous": D},
            "integrand": {"kind": "genz.gaussian", "a": [A] * D, "u": [U] * D},
            "sampler": {"kind": "vegas", "bins": 64, "alpha": 0.5},
            "stop": {"max_samples": budget},
            "batching": {"batch_size": budget // 10 // batches,
                         "batches_per_iteration": batches, "fuse": fuse}}


def start_fleet(count: int, url: str, logs: Path,
                env: dict[str, str] | None = None) -> LocalWorkers:
    """Warm workers: started and ready before anything is timed (``env`` added to theirs)."""
    path = os.pathsep.join([str(BENCH), str(REPO), os.environ.get("PYTHONPATH", "")])
    fleet = LocalWorkers(count, url, logs, prefix="bench",
                         env={"PYTHONPATH": path, **(env or {})}).start()
    deadline = time.monotonic() + 120
    names = [logs / f"{n.split('@')[0]}.log" for n in fleet.nodes]
    while not all(p.exists() and " ready." in p.read_text(errors="replace") for p in names):
        if time.monotonic() > deadline:
            fleet.stop()
            raise SystemExit(f"workers not ready after 120 s; see {logs}")
        time.sleep(0.1)
    return fleet


def timed(run: dict[str, Any], config: Any, repeat: int = 1) -> tuple[float, Any]:
    """Best wall time of ``repeat`` runs (the machine is shared; the minimum is the signal)."""
    best, result = float("inf"), None
    for _ in range(repeat):
        began = time.perf_counter()
        result = mainboard.integrate(run, workers=0, config=config)
        best = min(best, time.perf_counter() - began)
    return best, result


def vegas_run(budget: int) -> tuple[float, float, float]:
    """(wall s, estimate, error) of vegas.Integrator, 10 iterations of budget/10."""
    a, u = np.full(D, A), np.full(D, U)
    integ = vegas.Integrator(D * [[0.0, 1.0]], alpha=0.5)

    @vegas.lbatchintegrand
    def f(x: np.ndarray) -> np.ndarray:
        return genz.gaussian(x, a, u)

    began = time.perf_counter()
    result = integ(f, nitn=10, neval=budget // 10)
    return time.perf_counter() - began, result.mean, result.sdev


def numpy_rate(n: int = 1_000_000) -> float:
    """Bare evaluations per second of the gaussian on uniform points, one process."""
    x = np.random.default_rng(1).random((n, D))
    a, u = np.full(D, A), np.full(D, U)
    best = min(_time(lambda: genz.gaussian(x, a, u)) for _ in range(3))
    return n / best


def _time(fn: Any) -> float:
    began = time.perf_counter()
    fn()
    return time.perf_counter() - began


def calibrate_burn(target_us: float = 50.0) -> int:
    """``rounds`` of bench_targets.burn costing about ``target_us`` per sample."""
    sys.path.insert(0, str(BENCH))
    from bench_targets import burn

    x = np.random.default_rng(2).random((4000, D))
    per_round = min(_time(lambda: burn(x, rounds=200)) for _ in range(5)) / 200 / x.shape[0]
    return max(1, round(target_us * 1e-6 / per_round))


def burn_spec(rounds: int, samples: int) -> dict[str, Any]:
    return {"name": "bench-burn", "seed": 3, "domain": {"continuous": D},
            "integrand": {"kind": "python", "target": "bench_targets:burn",
                          "params": {"rounds": rounds, "a": A}},
            "sampler": {"kind": "vegas", "bins": 64}, "stop": {"max_samples": samples},
            "batching": {"batch_size": samples // 20, "batches_per_iteration": 10,
                         "fuse": True}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=10_000_000)
    args = parser.parse_args()
    with bench_workspace("bench") as (config, url, root):
        report(args.budget, config, url, root)


@contextlib.contextmanager
def bench_workspace(name: str) -> Iterator[tuple[Any, str, Path]]:
    """(config, broker URL, root) of a temporary workspace whose embedded broker is up."""
    with tempfile.TemporaryDirectory(prefix=f"mb-{name}-") as tmp:
        root = Path(tmp)
        (root / "mainboard.toml").write_text(f'[workspace]\nname = "{name}"\n')
        config = load_config(root / "mainboard.toml")
        broker = EmbeddedBroker(config.state_dir)
        broker.up()
        try:
            yield config, broker.url(), root
        finally:
            broker.down()


def report(budget: int, config: Any, url: str, root: Path) -> None:
    load = os.getloadavg()[0]
    print(f"cores available: {len(os.sched_getaffinity(0))}, load average {load:.1f}; "
          f"budget {budget:,} samples")
    v_wall, v_est, v_err = min(vegas_run(budget) for _ in range(2))
    print(f"vegas {vegas.__version__} (1 process): {v_wall:.2f} s, {v_est:.10g} ± {v_err:.2g}")
    rounds, samples = calibrate_burn(), 80_000
    two = start_fleet(2, url, root / "logs2")
    try:
        timed(gauss_spec(budget // 10, name="warm-up"), config)  # first-use costs, once
        wall, res = timed(gauss_spec(budget), config, repeat=2)
        print(f"mainboard, 2 workers, fused: {wall:.2f} s, {res.estimate:.10g} ± {res.error:.2g}"
              f"  (exact {res.exact:.10g})")
        print(f"  wall ratio mainboard/vegas       {wall / v_wall:.2f}")
        print(f"  error ratio mainboard/vegas      {res.error / v_err:.2f}")
        print(f"  cost at equal error (wall*err^2) {wall * res.error ** 2 / (v_wall * v_err ** 2):.2f}"
              "  (target <= 1)")
        t_wall, t_res = timed(gauss_spec(budget, batches=40, name="bench-25k"), config, repeat=2)
        print(f"  same run with batch_size {budget // 400:,} (cache-sized batches): {t_wall:.2f} s,"
              f" ± {t_res.error:.2g}; cost at equal error "
              f"{t_wall * t_res.error ** 2 / (v_wall * v_err ** 2):.2f}")
        small = budget // 10
        f_wall, f_res = timed(gauss_spec(small, name="bench-fused"), config, repeat=2)
        c_wall, c_res = timed(gauss_spec(small, fuse=False, name="bench-chained"), config,
                              repeat=2)
        same = (c_res.estimate, c_res.error) == (f_res.estimate, f_res.error)
        print(f"fused vs chained ({small:,} samples, batches of {small // 100:,}): fused "
              f"{f_wall:.2f} s, chained {c_wall:.2f} s, ratio {f_wall / c_wall:.2f} "
              f"(identical numbers: {same})")
        rate, bare = budget / wall, numpy_rate()
        print(f"overhead: mainboard {rate:,.0f} samples/s (2 workers) vs bare numpy "
              f"{bare:,.0f} evaluations/s (1 process): ratio {rate / bare:.2f}")
        timed(burn_spec(rounds, samples // 10), config)
        t2, r2 = timed(burn_spec(rounds, samples), config, repeat=3)
    finally:
        two.stop()
    one = start_fleet(1, url, root / "logs1")
    try:
        timed(burn_spec(rounds, samples // 10), config)
        t1, r1 = timed(burn_spec(rounds, samples), config, repeat=3)
    finally:
        one.stop()
    print(f"expensive integrand ({rounds} rounds, {1e6 * t1 / samples:.0f} us/sample on 1 "
          f"worker, {samples:,} samples): 1 worker {t1:.2f} s, 2 workers {t2:.2f} s, "
          f"speed-up {t1 / t2:.2f} (target >= 1.8; identical: {r1.estimate == r2.estimate})")


if __name__ == "__main__":
    main()
