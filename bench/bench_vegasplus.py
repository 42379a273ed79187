"""VEGAS+ (``beta``) against the vegas package, and its cost against classic VEGAS.

1. Ridge: the 4-d diagonal ridge of 100 narrow Gaussians (built-in ``ridge``, the vegas
   package's VEGAS+ showcase). mainboard (beta = 0.75) and vegas.Integrator (defaults: beta =
   0.75, neval_frac = 0.75) get the same total budget in the same number of iterations, every
   iteration in the result (no warm-up thrown away on either side). Over R seeds: the median
   reported error and the RMS of (estimate - exact); ratio mainboard / vegas.
2. Speed: the 8-d Genz gaussian of bench_vegas.py, time of mainboard with beta = 0.75
   against beta = 0 (classic VEGAS, today's code path), same budget, median of R; printed
   next to vegas.Integrator's own figures (defaults, VEGAS+ on) on the same integrand and
   budget in the same run: wall and CPU time and reported error.

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
from typing import Any

import numpy as np
import vegas

from mainboard.integrators import genz
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


def gauss_times(budget: int, repeat: int) -> dict[Any, tuple[float, float, float, float]]:
    """Per beta (0.75, 0) and for the vegas package: median wall time, CPU time (user +
    system), user time and reported error of the 8-d gaussian. mainboard's runs alternate
    A B V B A V ..., so a busy machine or a cold allocator after the previous run
    (whichever runs first in a pair is slower) weighs on both alike. CPU time is the figure to read on a shared machine: wall time
    there mostly measures the neighbours, and page faults (system time) move between the
    two sides with the allocator's mood."""
    runs: dict[Any, list[tuple[float, float, float, float]]] = {0.75: [], 0.0: [],
                                                                "vegas": []}
    for seed in range(1, repeat + 1):
        pair: tuple[Any, ...] = (0.75, 0.0) if seed % 2 else (0.0, 0.75)
        for side in (*pair, "vegas"):  # the package last: after it, either side in turn
            before = os.times()
            if side == "vegas":
                error = gauss_vegas(budget, seed)
            else:
                error = float(integrate_local(spec(GAUSS, 8, budget, seed, side)).error)
            after = os.times()
            user, system = after.user - before.user, after.system - before.system
            runs[side].append((after.elapsed - before.elapsed, user + system, user, error))
    return {beta: tuple(statistics.median(r[i] for r in rows) for i in range(4))
            for beta, rows in runs.items()}  # type: ignore[misc]


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
    (wp, cp, up, ep), (wc, cc, uc, ec) = times[0.75], times[0.0]
    wv, cv, uv, ev = times["vegas"]
    for side, (w, c, u, e) in times.items():
        name = "vegas pkg " if side == "vegas" else f"beta={side:<5}"
        print(f"gauss-8d {name} wall {w:.3f} s cpu {c:.3f} s (user {u:.3f} s) "
              f"error {e:.3e}")
    print(f"gauss-8d budget {args.gauss_budget:.3g} in {ITERATIONS} iterations; "
          f"mainboard beta=0.75 / vegas package: cpu {cp / cv:.3f}, wall {wp / wv:.3f}, "
          f"error {ep / ev:.3f}")
    print(f"gauss-8d cpu ratio beta=0.75/beta=0 = {cp / cc:.3f}  (target <= 1.10); "
          f"wall {wp / wc:.3f}, user {up / uc:.3f}; cost at equal error (cpu * error^2) = "
          f"{cp * ep ** 2 / (cc * ec ** 2):.3f}")


if __name__ == "__main__":
    main()
