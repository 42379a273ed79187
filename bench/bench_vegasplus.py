"""VEGAS+ (``beta``) against the vegas package, and its cost against classic VEGAS.

1. Ridge: the 4-d diagonal ridge of 100 narrow Gaussians (built-in ``ridge``, the vegas
   package's VEGAS+ showcase). mainboard (beta = 0.75) and vegas.Integrator (defaults: beta =
   0.75, neval_frac = 0.75) get the same total budget in the same number of iterations, every
   iteration in the result (no warm-up thrown away on either side). Over R seeds: the median
   reported error and the RMS of (estimate - exact); ratio mainboard / vegas.
2. Speed: the 8-d Genz gaussian of bench_vegas.py, time of mainboard with beta = 0.75
   against beta = 0 (classic VEGAS, today's code path), same budget, median of R; also
   VEGAS+ on numpy alone (MAINBOARD_KERNELS=0: what a host without numba runs, the same
   numbers), and vegas.Integrator's own figures (defaults, VEGAS+ on) on the same integrand
   and budget in the same run: wall and CPU time and reported error. Last, the once-per-
   process cost of loading the compiled draw (integrators/kernels.py), left out of the
   timed runs by a warm-up.

    .venv/bin/python bench/bench_vegasplus.py [--ridge-budget 4e5] [--gauss-budget 2e6]
                                              [--repeat 10] [--ridge-repeat 20]

Targets (issue 11): ridge error ratio <= 1.25; gaussian time ratio <= 1.10 (read the CPU
ratio on a shared machine; on a quiet one wall and CPU agree).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import numpy as np
import vegas

from mainboard.integrators import genz, kernels
from mainboard.integrators.driver import integrate_local
from mainboard.integrators.integrands import make_integrand, ridge
from mainboard.integrators.spec import RidgeSpec

ITERATIONS = 10
RIDGE_DIM = 4


def spec(integrand: dict[str, Any], dim: int, budget: int, seed: int, beta: float
         ) -> dict[str, Any]:
    """A local run: ``budget`` samples in ITERATIONS iterations of 4 batches."""
    per = budget // ITERATIONS
    size = max(1, per // 4)
    return {"name": "bench-vegasplus", "seed": seed, "domain": {"continuous": dim},
            "integrand": integrand, "sampler": {"kind": "vegas", "beta": beta},
            "stop": {"max_samples": size * 4 * ITERATIONS},
            "batching": {"batch_size": size, "batches_per_iteration": 4}}


def ridge_mainboard(budget: int, seed: int) -> tuple[float, float]:
    """(estimate, reported error) of the local driver with VEGAS+."""
    r = integrate_local(spec({"kind": "ridge"}, RIDGE_DIM, budget, seed, 0.75))
    return float(r.estimate), float(r.error)


def ridge_vegas(budget: int, seed: int) -> tuple[float, float]:
    """(estimate, reported error) of vegas.Integrator with its defaults (VEGAS+ on)."""
    model = RidgeSpec(kind="ridge")
    centres = np.linspace(model.low, model.high, model.peaks)
    np.random.seed(seed)  # vegas draws from gvar.RNG = numpy's global stream

    @vegas.lbatchintegrand
    def f(x: np.ndarray) -> np.ndarray:
        return ridge(np.ascontiguousarray(x), centres, model.sigma)

    integ = vegas.Integrator(RIDGE_DIM * [[0.0, 1.0]])
    result = integ(f, nitn=ITERATIONS, neval=budget // ITERATIONS)
    return float(result.mean), float(result.sdev)


def ridge_figures(budget: int, repeat: int) -> dict[str, tuple[float, float]]:
    """Per side: (median reported error, RMS actual error) over ``repeat`` seeds."""
    exact = make_integrand(RidgeSpec(kind="ridge"), RIDGE_DIM).exact
    out = {}
    for name, fn in (("mainboard", ridge_mainboard), ("vegas", ridge_vegas)):
        runs = [fn(budget, seed) for seed in range(1, repeat + 1)]
        reported = statistics.median(r[1] for r in runs)
        rms = math.sqrt(statistics.fmean((r[0] - exact) ** 2 for r in runs))
        out[name] = (reported, rms)
        print(f"ridge {name:10s} reported error {reported:.3e}  rms error {rms:.3e}")
    return out


GAUSS = {"kind": "genz.gaussian", "a": [5.0] * 8, "u": [0.5] * 8}


def gauss_vegas(budget: int, seed: int) -> float:
    """Reported error of vegas.Integrator (defaults) on the 8-d gaussian."""
    a, u = np.array(GAUSS["a"]), np.array(GAUSS["u"])
    np.random.seed(seed)

    @vegas.lbatchintegrand
    def f(x: np.ndarray) -> np.ndarray:
        return genz.gaussian(np.ascontiguousarray(x), a, u)

    integ = vegas.Integrator(8 * [[0.0, 1.0]])
    return float(integ(f, nitn=ITERATIONS, neval=budget // ITERATIONS).sdev)


#: The gaussian's sides: (label, beta, MAINBOARD_KERNELS), and the vegas package.
SIDES = (("vegas+", 0.75, "1"), ("classic", 0.0, "1"), ("vegas+ numpy", 0.75, "0"))


def gauss_times(budget: int, repeat: int) -> dict[str, tuple[float, float, float]]:
    """Per side: median wall time, CPU time (user + system) and reported error of the 8-d
    gaussian. Every side runs once per seed, in an order that rotates with the seed (the
    package last), so a busy spell or a cold allocator after the previous run weighs on
    every side alike. CPU time is the figure to read on a shared machine: wall time there
    mostly measures the neighbours."""
    runs: dict[str, list[tuple[float, float, float]]] = {name: [] for name, *_ in SIDES}
    runs["vegas"] = []
    assert kernels.preload(), "numba did not load"  # a once-per-process cost, timed apart
    for _, beta, switch in SIDES:  # warm-up
        os.environ[kernels.ENV] = switch
        integrate_local(spec(GAUSS, 8, budget // 10, 99, beta))
    for seed in range(1, repeat + 1):
        order = SIDES[seed % len(SIDES):] + SIDES[:seed % len(SIDES)]
        for name, beta, switch in (*order, ("vegas", 0.0, "1")):
            os.environ[kernels.ENV] = switch
            wall, cpu = time.perf_counter(), time.process_time()
            if name == "vegas":
                error = gauss_vegas(budget, seed)
            else:
                error = float(integrate_local(spec(GAUSS, 8, budget, seed, beta)).error)
            runs[name].append((time.perf_counter() - wall, time.process_time() - cpu, error))
    os.environ.pop(kernels.ENV, None)
    return {name: tuple(statistics.median(r[i] for r in rows) for i in range(3))
            for name, rows in runs.items()}  # type: ignore[misc]


def kernel_load_seconds() -> float:
    """Wall time a fresh process spends loading the compiled VEGAS+ draw (numba and the
    cached machine code), once per process (after numpy drew LOAD_AFTER_ROWS rows)."""
    code = ("import time; t = time.perf_counter(); "
            "from mainboard.integrators.kernels import preload; "
            "assert preload(), 'numba did not load'; "
            "print(time.perf_counter() - t)")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)  # cache
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True)
    return float(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ridge-budget", type=float, default=4e5)
    parser.add_argument("--gauss-budget", type=float, default=2e6)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--ridge-repeat", type=int, default=20)
    args = parser.parse_args()
    figures = ridge_figures(int(args.ridge_budget), args.ridge_repeat)
    (rep_m, rms_m), (rep_v, rms_v) = figures["mainboard"], figures["vegas"]
    print(f"ridge budget {args.ridge_budget:.3g} in {ITERATIONS} iterations")
    print(f"ridge reported-error ratio mainboard/vegas = {rep_m / rep_v:.3f}  (target <= 1.25)")
    print(f"ridge rms-error ratio      mainboard/vegas = {rms_m / rms_v:.3f}")
    times = gauss_times(int(args.gauss_budget), args.repeat)
    for name, (wall, cpu, error) in times.items():
        print(f"gauss-8d {name:13s} wall {wall:.3f} s cpu {cpu:.3f} s error {error:.3e}")
    (wp, cp, ep), (wc, cc, ec) = times["vegas+"], times["classic"]
    wv, cv, ev = times["vegas"]
    cn = times["vegas+ numpy"][1]
    print(f"gauss-8d budget {args.gauss_budget:.3g} in {ITERATIONS} iterations; "
          f"mainboard vegas+ / vegas package: cpu {cp / cv:.3f}, wall {wp / wv:.3f}, "
          f"error {ep / ev:.3f}")
    print(f"gauss-8d cpu ratio vegas+/classic = {cp / cc:.3f}  (target <= 1.10); "
          f"wall {wp / wc:.3f}; cost at equal error (cpu * error^2) = "
          f"{cp * ep ** 2 / (cc * ec ** 2):.3f}")
    print(f"gauss-8d cpu ratio vegas+ without kernels (MAINBOARD_KERNELS=0)/classic = "
          f"{cn / cc:.3f}")
    print(f"kernel load, once per process: {kernel_load_seconds():.2f} s")


if __name__ == "__main__":
    main()
