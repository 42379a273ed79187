"""What histograms and moments cost the batch pipeline: the same run with and without them.

Run from the repository root:

    .venv/bin/python bench/bench_observables.py [--repeat 5] [--samples 400000]

A 4-d Genz Gaussian through the in-process driver (the stage code every worker runs), plain
and with two 50-bin histograms (a coordinate, a Python function of the point) and moments
up to 4, interleaved so load affects both sides alike. Prints the median wall time of each
and the ratio with / without.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mainboard.integrators.driver import integrate_local  # noqa: E402

BASE = {"name": "bench-obs", "seed": 1, "domain": {"continuous": 4},
        "integrand": {"kind": "genz.gaussian", "a": [4.0] * 4, "u": [0.45] * 4},
        "sampler": {"kind": "vegas", "bins": 64}, "batching": {"batch_size": 50_000,
                                                              "batches_per_iteration": 4}}
OBSERVABLES = {"moments": 4, "histograms": [
    {"name": "x0", "of": "x0", "bins": 50, "range": [0.0, 1.0]},
    {"name": "r", "of": "bench_observables:radius", "bins": 50, "range": [0.0, 2.0]}]}


def radius(x: np.ndarray) -> np.ndarray:
    """|x|: an observable that is a Python function of the point."""
    return np.sqrt(np.einsum("ij,ij->i", x, x))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--samples", type=int, default=400_000)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    plain = {**BASE, "stop": {"max_samples": args.samples}}
    with_obs = {**plain, "accumulator": OBSERVABLES}
    times: dict[str, list[float]] = {"plain": [], "observables": []}
    for _ in range(args.repeat):
        for label, spec in (("plain", plain), ("observables", with_obs)):
            began = time.perf_counter()
            integrate_local(spec)
            times[label].append(time.perf_counter() - began)
    base, obs = (statistics.median(times[k]) for k in ("plain", "observables"))
    print(f"samples {args.samples:,}  repeat {args.repeat}")
    print(f"plain        {base:.3f} s (median)")
    print(f"observables  {obs:.3f} s (median)")
    print(f"ratio with/without {obs / base:.2f}")


if __name__ == "__main__":
    main()
