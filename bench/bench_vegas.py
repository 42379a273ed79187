"""mainboard's local driver against the vegas package on the 8-d Genz gaussian (a=5, u=0.5).

Same integrand code, same sample budget, same iterations (10) and damping (alpha = 0.5), one
process each. Prints wall times, final errors and their ratios (mainboard / vegas), plus the
cost at equal error, wall * error^2 (Monte Carlo error ~ 1/sqrt(samples), so time to reach a
given error scales with it). Nothing is asserted: run it and read the numbers.

    .venv/bin/python bench/bench_vegas.py [BUDGET] [--repeat N]

BUDGET defaults to 1e6 samples. Each side is run N times (default 3); the best wall time and
the median error are reported.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import vegas

from mainboard.integrators import genz
from mainboard.integrators.driver import integrate_local

D, A, U, ITERATIONS = 8, 5.0, 0.5, 10


def run_mainboard(budget: int, seed: int) -> tuple[float, float, float]:
    """(wall seconds, estimate, error) of integrate_local with the VEGAS sampler."""
    per_iteration = budget // ITERATIONS
    spec = {"name": "bench-vegas", "seed": seed, "domain": {"continuous": D},
            "integrand": {"kind": "genz.gaussian", "a": [A] * D, "u": [U] * D},
            "sampler": {"kind": "vegas", "bins": 64, "alpha": 0.5},
            "stop": {"max_samples": per_iteration * ITERATIONS},
            "batching": {"batch_size": min(per_iteration, 100_000),
                         "batches_per_iteration": max(1, per_iteration // 100_000)}}
    began = time.perf_counter()
    result = integrate_local(spec)
    return time.perf_counter() - began, result.estimate, result.error


def run_vegas(budget: int, seed: int) -> tuple[float, float, float]:
    """(wall seconds, estimate, error) of vegas.Integrator with a batch integrand (its own
    random stream: ``seed`` only labels the repetition)."""
    a, u = np.full(D, A), np.full(D, U)
    integ = vegas.Integrator(D * [[0.0, 1.0]], alpha=0.5)

    @vegas.lbatchintegrand
    def f(x: np.ndarray) -> np.ndarray:
        return genz.gaussian(x, a, u)

    began = time.perf_counter()
    result = integ(f, nitn=ITERATIONS, neval=budget // ITERATIONS)
    return time.perf_counter() - began, result.mean, result.sdev


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("budget", nargs="?", type=float, default=1e6)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    budget = int(args.budget)
    exact = genz.exact_gaussian(np.full(D, A), np.full(D, U))
    rows = {}
    for name, fn in (("mainboard", run_mainboard), ("vegas", run_vegas)):
        runs = [fn(budget, seed) for seed in range(1, args.repeat + 1)]
        wall = min(r[0] for r in runs)
        error = statistics.median(r[2] for r in runs)
        pulls = ", ".join(f"{(r[1] - exact) / r[2]:+.2f}" for r in runs)
        rows[name] = (wall, error)
        print(f"{name:10s} wall {wall:7.3f} s  error {error:.3e}  "
              f"rel {error / exact:.2e}  pulls [{pulls}]")
    (tm, em), (tv, ev) = rows["mainboard"], rows["vegas"]
    print(f"budget {budget:.3g} samples in {ITERATIONS} iterations, exact {exact:.10e}")
    print(f"wall-time ratio  mainboard/vegas = {tm / tv:.3f}")
    print(f"error ratio      mainboard/vegas = {em / ev:.3f}")
    print(f"cost at equal error (wall * error^2) mainboard/vegas = "
          f"{tm * em ** 2 / (tv * ev ** 2):.3f}")


if __name__ == "__main__":
    main()
