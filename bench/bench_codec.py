"""Encode+decode cost of float64 arrays: mainboard codec vs JSON lists vs pickle.

Run: ``.venv/bin/python bench/bench_codec.py [--repeat N]``. Prints best-of-N times and
ratios measured in this run. Pickle is a local reference only (the fastest thing
Python has); it never travels on mainboard's wire. JSON is what Celery would use by
default, with arrays as lists.
"""

from __future__ import annotations

import argparse
import json
import pickle
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from mainboard.tasks import codec


def _json_round_trip(arr: np.ndarray) -> tuple[int, np.ndarray]:
    blob = json.dumps({"x": arr.tolist()}).encode()
    return len(blob), np.asarray(json.loads(blob)["x"], dtype=np.float64)


def _codec_round_trip(arr: np.ndarray) -> tuple[int, np.ndarray]:
    blob = codec.dumps({"x": arr})
    return len(blob), codec.loads(blob)["x"]


def _pickle_round_trip(arr: np.ndarray) -> tuple[int, np.ndarray]:
    blob = pickle.dumps({"x": arr}, protocol=pickle.HIGHEST_PROTOCOL)
    return len(blob), pickle.loads(blob)["x"]  # local reference only, never on the wire


METHODS: dict[str, Callable[[np.ndarray], tuple[int, np.ndarray]]] = {
    "mainboard codec": _codec_round_trip,
    "json list": _json_round_trip,
    "pickle (local ref)": _pickle_round_trip,
}


def best_time(fn: Callable[[np.ndarray], Any], arr: np.ndarray, repeat: int) -> tuple[float, int]:
    """Best wall time of ``repeat`` round trips (s) and the encoded size (bytes)."""
    best, size = float("inf"), 0
    for _ in range(repeat):
        start = time.perf_counter()
        size, out = fn(arr)
        best = min(best, time.perf_counter() - start)
        if not np.array_equal(out, arr):
            raise AssertionError(f"{fn.__name__} changed the data")
    return best, size


def main() -> None:
    """Print one table per array size, with ratios to the mainboard codec."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="round trips per method (best kept)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    for n in (100_000, 1_000_000):
        arr = rng.standard_normal(n)
        results = {name: best_time(fn, arr, args.repeat) for name, fn in METHODS.items()}
        ours = results["mainboard codec"][0]
        print(f"\n{n:,} float64 ({arr.nbytes / 1e6:.1f} MB raw), encode+decode, best of "
              f"{args.repeat}")
        print(f"  {'method':<20} {'ms':>9} {'MB':>8} {'x codec':>9}")
        for name, (seconds, size) in results.items():
            print(f"  {name:<20} {seconds * 1e3:9.2f} {size / 1e6:8.2f} {seconds / ours:9.2f}")


if __name__ == "__main__":
    main()
