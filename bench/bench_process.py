"""Protocol overhead of process evaluators, and end-to-end samples/s.

Per batch size (1k, 32k, 256k samples, 2 continuous dims) it times the same function,
sin(x0), in-process and behind the protocol (Python helper, and the C example when gcc is
there); the overhead is the median difference. Then it runs the whole local integration loop
with each. Reference: gammaboard reports ~3.2 ms evaluator adapter overhead at 32,768 samples.

    .venv/bin/python bench/bench_process.py [--reps 30]
"""

from __future__ import annotations

import argparse
import math
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from mainboard.integrators.driver import integrate_local
from mainboard.integrators.integrands import register_integrand
from mainboard.integrators.process.adapters import ProcessEvaluator, process_integrand
from mainboard.integrators.process.pool import ProcessPool

REPO = Path(__file__).resolve().parent.parent
SIZES = (1_000, 32_768, 262_144)


def sin_x0(x: np.ndarray) -> np.ndarray:
    """The in-process twin of examples/process/sin_evaluator.*."""
    return np.sin(x[:, 0])


def median_ms(fn: Callable[[], object], reps: int) -> float:
    fn()  # warm up (process start, page faults)
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def c_evaluator(tmp: Path) -> list[str] | None:
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        return None
    binary = tmp / "sin_evaluator"
    subprocess.run([cc, "-O2", "-o", str(binary), str(REPO / "examples/process/sin_evaluator.c"),
                    "-lm"], check=True)
    return [str(binary)]


def overhead_table(commands: dict[str, list[str]], reps: int) -> None:
    pool = ProcessPool()
    rng = np.random.default_rng(0)
    print(f"{'samples':>8} {'evaluator':>10} {'in-proc ms':>11} {'process ms':>11} "
          f"{'overhead ms':>12} {'process Msamples/s':>19}")
    for n in SIZES:
        x, idx = rng.random((n, 2)), np.zeros((n, 0), dtype=np.int64)
        local = median_ms(lambda x=x: sin_x0(x), reps)
        for name, command in commands.items():
            ev = ProcessEvaluator({"command": command}, 2, pool=pool, run_id="bench")
            remote = median_ms(lambda ev=ev, x=x, idx=idx: ev.evaluate_raw(x, idx), reps)
            print(f"{n:>8} {name:>10} {local:>11.3f} {remote:>11.3f} {remote - local:>12.3f} "
                  f"{n / remote / 1e3:>19.2f}")
    pool.release()


def end_to_end(commands: dict[str, list[str]]) -> None:
    register_integrand("process", process_integrand)
    base = {"name": "bench", "seed": 1, "domain": {"continuous": 2}, "sampler": {"kind": "vegas"},
            "stop": {"max_iterations": 5},
            "batching": {"batch_size": 32_768, "batches_per_iteration": 8}}
    runs = {"in-process": {"kind": "python", "target": "bench.bench_process:sin_x0"}}
    runs.update({name: {"kind": "process", "command": cmd} for name, cmd in commands.items()})
    print("\nend to end: local driver, VEGAS, 5 iterations x 8 batches x 32,768 samples "
          "(process already started)")
    for name, integrand in runs.items():
        if "command" in integrand:  # start it now: the run reuses the pooled process
            ProcessEvaluator({"command": integrand["command"]}, 2).metadata  # noqa: B018
        result = integrate_local({**base, "integrand": {**integrand, "exact": 1 - math.cos(1)}})
        rate = result.samples / result.wall_s
        print(f"{name:>12}: {result.wall_s:6.2f} s  {rate / 1e6:6.2f} Msamples/s  "
              f"estimate {result.estimate:.6f} +- {result.error:.1e}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=30, help="timed batches per size")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    with tempfile.TemporaryDirectory() as tmp:
        commands = {"python": [sys.executable, str(REPO / "examples/process/sin_evaluator.py")]}
        c = c_evaluator(Path(tmp))
        if c is not None:
            commands["c"] = c
        overhead_table(commands, args.reps)
        end_to_end(commands)
    print("\nreference: gammaboard reports ~3.2 ms evaluator adapter overhead at 32,768 samples")


if __name__ == "__main__":
    main()
