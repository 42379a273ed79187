"""Where the local driver's time goes on the 8-d gaussian, numpy path against kernels.

Issue 30, item 3 ("profile first"). Runs ``integrate_local`` on bench_integrate's 8-d
gaussian (VEGAS+, 10 iterations of 10 batches) under cProfile, once with
``MAINBOARD_KERNELS=0`` and once with the kernels loaded, and prints per part its
CPU seconds and share of the run: drawing the uniforms (numpy's generator, timed apart:
cProfile does not see it), the VEGAS map (the rest of materialize: strata, grid lookup,
Jacobian), the batch's validation, the
integrand, the grid's training sums, the rest of evaluate (weights, partial sums,
per-stratum sums) and everything else (merge, adapt, plan). The floor is the first part
plus the integrand. Profiled times are inflated alike on both sides; read the shares.

    .venv/bin/python bench/profile_gauss.py [--budget 1e7]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_integrate import gauss_spec  # noqa: E402

from mainboard.integrators import kernels  # noqa: E402
from mainboard.integrators.chunking import SLICE_ROWS  # noqa: E402
from mainboard.integrators.driver import integrate_local  # noqa: E402


def _cum(stats: pstats.Stats, file_end: str, name: str) -> float:
    """Cumulative seconds of the functions ``name`` in files ending so."""
    total = 0.0
    for (path, _line, func), (_cc, _nc, _tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        if func == name and path.endswith(file_end):
            total += ct
    return total


def rng_seconds(budget: int, dim: int = 8) -> float:
    """CPU seconds numpy's generator takes for the run's uniforms, in the driver's slices."""
    rng, part = np.random.default_rng(1), np.empty((dim, SLICE_ROWS))
    began = time.process_time()
    for _ in range(budget // SLICE_ROWS):
        rng.random(out=part)
    return time.process_time() - began


def profile(budget: int, switch: str) -> dict[str, float]:
    """Seconds per part of one profiled run with ``MAINBOARD_KERNELS=switch``."""
    os.environ[kernels.ENV] = switch
    spec = gauss_spec(budget, name="profile")
    integrate_local(gauss_spec(budget // 10, name="warm", batches=1))  # same batch size: compiled
    prof = cProfile.Profile(time.process_time)  # CPU seconds: the machine is shared
    prof.enable()
    integrate_local(spec)
    prof.disable()
    st = pstats.Stats(prof)
    total = st.total_tt  # type: ignore[attr-defined]
    rng = rng_seconds(budget)  # a Cython method: cProfile does not see it, timed apart
    materialize = _cum(st, "samplers.py", "materialize")
    validate = _cum(st, "domain.py", "validate")
    evaluate = _cum(st, "integrators/stages.py", "evaluate")
    # numpy's gaussian, or its compiled twin for points by column (kernels.column_values)
    integrand = _cum(st, "genz.py", "gaussian") + _cum(st, "integrators/kernels.py", "values")
    training = _cum(st, "samplers.py", "training")
    return {"draw uniforms (RNG)": rng, "VEGAS map + Jacobian": materialize - rng,
            "validate the batch": validate, "integrand": integrand,
            "grid training sums": training,
            "rest of evaluate": evaluate - integrand - training,
            "other (merge, adapt, plan)": total - materialize - validate - evaluate,
            "total": total}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=1e7)
    args = parser.parse_args()
    budget = int(args.budget)
    before = profile(budget, "0")
    assert kernels.preload(), "numba did not load"
    after = profile(budget, "1")
    print(f"load average {os.getloadavg()[0]:.2f}; {budget:,} samples, profiled")
    print(f"{'part':28s} {'numpy s':>8} {'share':>6} {'kernels s':>10} {'share':>6}")
    for part in before:
        print(f"{part:28s} {before[part]:8.3f} {before[part] / before['total']:6.0%} "
              f"{after[part]:10.3f} {after[part] / after['total']:6.0%}")


if __name__ == "__main__":
    main()
