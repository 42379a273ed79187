"""CPU cost of one fused batch (`process_batch`) per sample, by batch size and by stage.

The 8-d Genz gaussian of examples/gauss-8d.toml with a VEGAS grid trained for three
iterations. Times are this process's CPU time (``time.process_time``), so other load on a
shared machine disturbs them less than wall time; each figure is the median of ``--repeat``
rounds (the load average is printed too). Nothing is asserted.

    .venv/bin/python bench/bench_batch.py [--sizes 25000 100000] [--repeat 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mainboard.integrators import chunking
from mainboard.integrators.spec import load_run_file
from mainboard.integrators.stages import (
    Run,
    build_run,
    evaluate,
    materialize,
    merge_results,
    process_batch,
    sample,
)

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "gauss-8d.toml"


def trained(run: Run) -> Any:
    """A sampler after three adapted iterations (realistic, non-uniform grids)."""
    sampler = run.new_sampler()
    for k in range(3):
        merged = merge_results([process_batch(run, sampler, k, i, 100_000) for i in range(3)])
        sampler.ingest(merged.training)
        sampler.adapt()
    return sampler


def cpu_ns(samples: int, fn: Callable[..., object], *args: Any) -> float:
    """CPU nanoseconds per sample of one call ``fn(*args)``."""
    began = time.process_time()
    fn(*args)
    return (time.process_time() - began) / samples * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[25_000, 100_000])
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    run = build_run(load_run_file(EXAMPLE))
    sampler = trained(run)
    print(f"load average {os.getloadavg()[0]:.1f}; slice rows {chunking.SLICE_ROWS}; "
          f"median of {args.repeat} rounds, CPU ns/sample")
    for n in args.sizes:
        rows: dict[str, list[float]] = {"process_batch": [], "materialize": [], "evaluate": []}
        for r in range(args.repeat):
            rows["process_batch"].append(cpu_ns(n, process_batch, run, sampler, 5, r, n))
            latent = sample(run, sampler, 5, r, n)
            batch = materialize(run, sampler, latent)
            rows["materialize"].append(cpu_ns(n, materialize, run, sampler, latent))
            rows["evaluate"].append(cpu_ns(n, evaluate, run, sampler, latent, batch))
        print(f"n={n:>8,}: " + "  ".join(f"{k} {statistics.median(v):6.1f}"
                                        for k, v in rows.items()))


if __name__ == "__main__":
    main()
