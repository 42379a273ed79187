"""How good a run's forecast is: its time to target after the third iteration against the
time the run really took from there, on fixed local workers (nothing scales, so the real
time is what the forecast forecasts).

Run from the repository root:

    .venv/bin/python bench/bench_forecast.py [--repeat 3] [--workers 2] [--delay 0.2]
                                             [--samplers naive,vegas]

A slow integrand (``delay`` s per batch of 1000 points, 6 batches an iteration) with a
relative-error target about 25 iterations away. Prints, per sampler and seed, the forecast
``time_to_target_s`` and ``samples_to_target`` after iteration 3, the real remaining time
and samples, and the relative error of each; then the median |error| per sampler. The
issue's goal is within 30% after the third iteration. A bench never asserts.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mainboard.config import load_config  # noqa: E402
from mainboard.runs.control import connect  # noqa: E402
from mainboard.runs.forecast import read_forecast  # noqa: E402
from mainboard.services.broker import EmbeddedBroker  # noqa: E402
from mainboard.tasks.coordinator import Progress  # noqa: E402
from mainboard.tasks.runner import integrate  # noqa: E402
from tests.support.fleet_helpers import workspace  # noqa: E402

SLOW = '''import time

import numpy as np


def slow(x, delay=0.2):
    time.sleep(delay)
    return np.exp(-25.0 * ((x - 0.5) ** 2).sum(axis=1))
'''
TARGET = {"naive": 0.0045, "vegas": 0.0002}  # ~25 iterations of 6000 points each


def run_toml(sampler: str, seed: int, delay: float) -> str:
    return (f'name = "fc-{sampler}-{seed}"\nseed = {seed}\n[domain]\ncontinuous = 2\n'
            f'[integrand]\nkind = "python"\ntarget = "slowgoal:slow"\n'
            f'params = {{ delay = {delay} }}\n[sampler]\nkind = "{sampler}"\n'
            f"[batching]\nbatch_size = 1000\nbatches_per_iteration = 6\n"
            f"[stop]\nrelative_error = {TARGET[sampler]}\nmax_iterations = 400\n")


def one(ws: Path, sampler: str, seed: int, delay: float, workers: int) -> dict[str, Any]:
    """One run: the forecast after iteration 3 and what really followed."""
    path = ws / f"{sampler}-{seed}.toml"
    path.write_text(run_toml(sampler, seed, delay))
    cfg = load_config(ws / "mainboard.toml")
    seen: dict[str, Any] = {}

    def progress(p: Progress) -> None:
        if p.iteration == 3 and not seen:
            r = connect(cfg)
            assert r is not None
            seen.update(read_forecast(r, p.run_id) or {}, at=time.monotonic(),
                        samples_then=p.samples)

    result = integrate(path, workers, config=cfg, progress=progress, run_file=path)
    real_s = time.monotonic() - seen["at"]
    real_n = result.samples - seen["samples_then"]
    return {"sampler": sampler, "seed": seed, "forecast_s": seen.get("time_to_target_s"),
            "real_s": real_s, "forecast_n": seen.get("samples_to_target"), "real_n": real_n,
            "iterations": result.iterations}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--delay", type=float, default=0.2)
    parser.add_argument("--samplers", default="naive,vegas")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-forecast-") as tmp:
        ws = workspace(Path(tmp) / "ws")
        (ws / "slowgoal.py").write_text(SLOW)
        rows: list[dict[str, Any]] = []
        try:
            for sampler in args.samplers.split(","):
                for seed in range(1, args.repeat + 1):
                    row = one(ws, sampler, seed, args.delay, args.workers)
                    rows.append(row)
                    fs, fn = row["forecast_s"], row["forecast_n"]
                    print(f"{sampler:6} seed {seed}: after iteration 3 forecast "
                          f"{fs:7.1f} s / {fn:>8,} samples; real {row['real_s']:7.1f} s / "
                          f"{row['real_n']:>8,} samples ({row['iterations']} iterations); "
                          f"time error {100 * (fs - row['real_s']) / row['real_s']:+6.1f}%, "
                          f"samples error {100 * (fn - row['real_n']) / row['real_n']:+6.1f}%",
                          flush=True)
        finally:
            EmbeddedBroker(ws / ".mainboard").down()
    for sampler in args.samplers.split(","):
        errs = [abs(r["forecast_s"] - r["real_s"]) / r["real_s"] for r in rows
                if r["sampler"] == sampler]
        print(f"{sampler}: median |time error| after iteration 3: "
              f"{100 * statistics.median(errs):.1f}% over {len(errs)} run(s) "
              f"(goal: within 30%), {args.workers} local worker(s)")


if __name__ == "__main__":
    main()
