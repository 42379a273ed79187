"""mainboard on the 8-d Genz gaussian against the bare-numpy floor and the vegas package.

Issue 30, item 3. In ONE run of this script (so machine load hits every side alike):

1. the bare-numpy floor: uniforms drawn (numpy's default generator, in slices of
   ``SLICE_ROWS`` rows) and the 8-d gaussian evaluated on them and summed; nothing else.
   Alone in one process, then in 2 processes at once (one per core). RNG and evaluation are
   timed apart too.
2. mainboard's local driver (one process, ``integrate_local``) and ``mainboard.integrate``
   on 2 warm local Celery workers, same budget, same integrand, the run file's defaults
   (VEGAS+ sampler, 10 iterations of 10 batches): before (``MAINBOARD_KERNELS=0``, the numpy
   path) and after (compiled kernels, loaded before timing) — the same numbers both ways,
   which the script checks.
3. the vegas package (one process, its defaults: VEGAS+) on the same budget: its time and
   error, so the ratios give mainboard's cost at equal error, wall * error^2.

Every figure is printed as a ratio against its peer of the same run: mainboard's samples/s
over the floor's (1 process for the local driver, 2 for the workers), and mainboard's time,
error and cost at equal error over vegas'. Wall times are the best of ``--repeat``; CPU
seconds (this process, or the workers' rusage) are given beside them, as the steadier figure
on a shared machine. Nothing is asserted.

    .venv/bin/python bench/bench_floor.py [--budget 4e7] [--repeat 2] [--skip-workers]
                                          [--plain-bundles] [--old-receipts]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import vegas
from redis import Redis

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from bench_integrate import bench_workspace, gauss_spec, start_fleet  # noqa: E402
from capacity import cpu_of  # noqa: E402

import mainboard  # noqa: E402
from mainboard import receipts  # noqa: E402
from mainboard.integrators import genz, kernels  # noqa: E402
from mainboard.integrators.chunking import SLICE_ROWS  # noqa: E402
from mainboard.integrators.driver import integrate_local  # noqa: E402
from mainboard.runs.spans import clock_offset, read_spans  # noqa: E402
from mainboard.tasks import bundles, dispatch, pipeline  # noqa: E402

D, A, U = 8, 5.0, 0.5


def _floor_part(n: int, seed: int, barrier: Any, out: Any) -> None:
    """One floor process: n samples drawn and evaluated slice by slice; puts (wall, cpu,
    rng seconds, evaluation seconds) on ``out``."""
    a, u = np.full(D, A), np.full(D, U)
    rng = np.random.default_rng(seed)
    buffer = np.zeros((SLICE_ROWS, D))  # zeros: the warm-up call below reads it
    genz.gaussian(buffer[:16], a, u)  # first-call costs out of the timing
    if barrier is not None:
        barrier.wait()
    began, cpu0, drawing, evaluating, total = time.perf_counter(), time.process_time(), 0.0, 0.0, 0.0
    for lo in range(0, n, SLICE_ROWS):
        part = buffer[:min(SLICE_ROWS, n - lo)]
        t0 = time.perf_counter()
        rng.random(out=part)
        t1 = time.perf_counter()
        total += float(genz.gaussian(part, a, u).sum())
        drawing, evaluating = drawing + t1 - t0, evaluating + time.perf_counter() - t1
    out.put((time.perf_counter() - began, time.process_time() - cpu0, drawing, evaluating))


def floor(budget: int, processes: int) -> dict[str, float]:
    """Samples/s of the bare floor over ``processes`` processes started together."""
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(processes) if processes > 1 else None
    out = ctx.Queue()
    share = budget // processes
    procs = [ctx.Process(target=_floor_part, args=(share, 1 + i, barrier, out))
             for i in range(processes)]
    for p in procs:
        p.start()
    parts = [out.get() for _ in procs]
    for p in procs:
        p.join()
    wall = max(p[0] for p in parts)
    cpu = sum(p[1] for p in parts)
    return {"rate": share * processes / wall, "wall": wall, "cpu_rate": share * processes / cpu,
            "rng_rate": share * processes / sum(p[2] for p in parts),
            "eval_rate": share * processes / sum(p[3] for p in parts)}


def local(budget: int, repeat: int) -> tuple[float, float, Any]:
    """(best wall s, its CPU s, result) of the local driver in this process, after a
    warm-up at the same batch size (the kernels' first calls load their machine code)."""
    spec = gauss_spec(budget, name="floor-local")
    integrate_local(gauss_spec(budget // 10, name="floor-warm", batches=1))
    best, cpu, result = float("inf"), 0.0, None
    for _ in range(repeat):
        c0, began = time.process_time(), time.perf_counter()
        result = integrate_local(spec)
        wall = time.perf_counter() - began
        if wall < best:
            best, cpu = wall, time.process_time() - c0
    return best, cpu, result


def _plain_plan(indices: Any, size: int, workers: int = 1) -> list[Any]:
    """The coordinator's bundles as cut before they were evened out over the slots: all of
    ``size`` in index order, the last one shorter."""
    ordered = sorted(indices)
    return [bundles.Bundle(tuple(ordered[i:i + size])) for i in range(0, len(ordered), size)]


@contextlib.contextmanager
def as_before(variant: str | None) -> Iterator[None]:
    """The coordinator (this process) as it was before one change, for a row beside the
    current code in the same run: ``plain bundles`` (all of one size, not evened over the
    slots), ``old receipts`` (each iteration's line encoded at once with json, not held
    until the next iteration is out and encoded with orjson)."""
    saved = (dispatch.plan_bundles, pipeline.ReceiptWriter.hold, receipts.encode_line)
    if variant == "plain bundles":
        dispatch.plan_bundles = _plain_plan
    elif variant == "old receipts":
        pipeline.ReceiptWriter.hold = lambda self: None  # type: ignore[method-assign]
        receipts.encode_line = lambda record: (json.dumps(
            record, separators=(",", ":"), allow_nan=False) + "\n").encode()
    try:
        yield
    finally:
        dispatch.plan_bundles, pipeline.ReceiptWriter.hold, receipts.encode_line = saved


def distributed(budget: int, repeat: int, switch: str, config: Any, url: str, root: Path,
                variant: str | None = None) -> tuple[float, float, Any]:
    """(best wall s, the workers' CPU s in it, result) of integrate on 2 warm workers with
    ``MAINBOARD_KERNELS=switch``; a warm-up run first draws enough rows on each worker for
    it to load the kernels (see integrators/kernels.py). ``variant``: the coordinator as
    before one change (:func:`as_before`)."""
    label = f"kernels {switch}" + (f", {variant}" if variant else "")
    fleet = start_fleet(2, url, root / f"logs-{label.replace(' ', '-').replace(',', '')}",
                        env={kernels.ENV: switch})
    try:
        warm = max(budget // 10, 4 * kernels.LOAD_AFTER_ROWS)
        mainboard.integrate(gauss_spec(warm, name=f"warm-{switch}"), workers=0, config=config)
        best, cpu, result, where = float("inf"), 0.0, None, ""
        with as_before(variant):
            for _ in range(repeat):
                c0, began, t0 = cpu_of(fleet.procs), time.perf_counter(), time.time()
                result = mainboard.integrate(gauss_spec(budget, name="floor-workers"),
                                             workers=0, config=config)
                wall = time.perf_counter() - began
                if wall < best:  # read now: the next call of the same run clears its spans
                    best, cpu = wall, cpu_of(fleet.procs) - c0
                    where = where_wall(url, result.run_id, (t0, time.time()))
        print(f"  where the 2 workers' wall went ({label}): {where}")
        return best, cpu, result
    finally:
        fleet.stop()


def where_wall(url: str, run_id: str, window: tuple[float, float]) -> str:
    """How the workers' time in one call splits, from the run's spans (Redis clock): busy in
    a stage, before the first span (the call's set-up and first dispatch), between
    iterations (no worker busy: merge, adapt, record, dispatch, delivery), in an
    iteration's tail (one worker done, the other still busy), and after the last span."""
    r = Redis.from_url(url)
    offset = clock_offset(r)
    began, ended = window[0] + offset, window[1] + offset
    spans: list[Any] = []
    for _ in range(50):  # workers ship spans in the background: wait until none arrive
        seen = len(spans)
        spans = [s for s in read_spans(r, run_id) if began <= s.start <= ended]
        if spans and len(spans) == seen:
            break
        time.sleep(0.2)
    workers = sorted({s.worker for s in spans})
    by_it: dict[int, list[Any]] = {}
    for s in spans:
        by_it.setdefault(s.iteration, []).append(s)
    busy = sum(s.duration for s in spans)
    gaps = tails = 0.0
    last_end = None
    for k in sorted(by_it):
        its = by_it[k]
        lo, hi = min(s.start for s in its), max(s.start + s.duration for s in its)
        if last_end is not None:
            gaps += max(0.0, lo - last_end)
        last_end = hi
        for w in workers:
            mine = [s.start + s.duration for s in its if s.worker == w]
            tails += hi - max(mine) if mine else hi - lo
    first = min(s.start for s in spans)
    slots = len(workers) * (ended - began)
    return (f"{len(spans)} spans, {len(by_it)} iterations on {len(workers)} workers; of "
            f"{len(workers)} x {ended - began:.2f} s: busy {busy / slots:.0%}, before the "
            f"first span {first - began:.3f} s, between iterations {gaps:.3f} s "
            f"({gaps / max(1, len(by_it) - 1) * 1e3:.1f} ms each), tails {tails:.3f} "
            f"worker-s, after the last {ended - (last_end or ended):.3f} s")


def vegas_run(budget: int, repeat: int) -> tuple[float, float, float]:
    """(best wall s, its CPU s, error) of vegas.Integrator (defaults), 10 iterations."""
    a, u = np.full(D, A), np.full(D, U)

    @vegas.lbatchintegrand
    def f(x: np.ndarray) -> np.ndarray:
        return genz.gaussian(x, a, u)

    best, cpu, error = float("inf"), 0.0, 0.0
    for _ in range(repeat):
        integ = vegas.Integrator(D * [[0.0, 1.0]], alpha=0.5)
        c0, began = time.process_time(), time.perf_counter()
        result = integ(f, nitn=10, neval=budget // 10)
        wall = time.perf_counter() - began
        if wall < best:
            best, cpu, error = wall, time.process_time() - c0, result.sdev
    return best, cpu, error


def line(label: str, budget: int, wall: float, cpu: float, peer: dict[str, float],
         peer_name: str) -> None:
    """mainboard's samples/s by wall and by CPU, each over the floor's of the same kind."""
    print(f"  {label:22s} {budget / wall / 1e6:6.2f} M/s wall ({wall:6.2f} s), ratio to "
          f"{peer_name} {budget / wall / peer['rate']:5.2f};  {budget / cpu / 1e6:6.2f} M/s "
          f"per CPU s ({cpu:6.2f} s), ratio {budget / cpu / peer['cpu_rate']:5.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=4e7)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--plain-bundles", action="store_true",
                        help="one more 2-worker row: bundles cut all of one size, as before "
                             "they were evened out over the worker slots (tasks/bundles.py)")
    parser.add_argument("--old-receipts", action="store_true",
                        help="one more 2-worker row: each iteration's receipt line encoded "
                             "at once with json, as before it was held until the next "
                             "iteration is out and encoded with orjson (tasks/pipeline.py)")
    parser.add_argument("--skip-workers", action="store_true",
                        help="the floor, the local driver and vegas only (no broker)")
    args = parser.parse_args()
    budget = int(args.budget)
    print(f"cores {len(os.sched_getaffinity(0))}, load average {os.getloadavg()[0]:.2f} "
          f"(at start); budget {budget:,} samples, 8-d gaussian a={A} u={U}")
    one, two = floor(budget, 1), floor(budget, 2)
    print(f"floor, 1 process:  {one['rate'] / 1e6:6.2f} M samples/s wall, "
          f"{one['cpu_rate'] / 1e6:6.2f} M per CPU s (RNG alone "
          f"{one['rng_rate'] / 1e6:.1f} M/s, evaluation alone {one['eval_rate'] / 1e6:.1f} M/s)")
    print(f"floor, 2 processes: {two['rate'] / 1e6:6.2f} M samples/s wall, "
          f"{two['cpu_rate'] / 1e6:6.2f} M per CPU s (RNG alone "
          f"{two['rng_rate'] / 1e6:.1f} M/s, evaluation alone {two['eval_rate'] / 1e6:.1f} M/s "
          "per process)")
    os.environ[kernels.ENV] = "0"
    before = local(budget, args.repeat)
    os.environ[kernels.ENV] = "1"
    print(f"kernels loaded: {kernels.preload()}")
    after = local(budget, args.repeat)
    same = (after[2].estimate, after[2].error) == (before[2].estimate, before[2].error)
    print(f"local driver (1 process), identical numbers before/after: {same}")
    line("before (numpy path)", budget, before[0], before[1], one, "floor(1)")
    line("after (kernels)", budget, after[0], after[1], one, "floor(1)")
    rows = {"local": after}
    if not args.skip_workers:
        with bench_workspace("floor") as (config, url, root):
            w_before = distributed(budget, args.repeat, "0", config, url, root)
            w_after = distributed(budget, args.repeat, "1", config, url, root)
            others = [(variant, distributed(budget, args.repeat, "1", config, url, root,
                                            variant))
                      for variant, wanted in (("plain bundles", args.plain_bundles),
                                              ("old receipts", args.old_receipts)) if wanted]
        same = (w_after[2].estimate, w_after[2].error) == (w_before[2].estimate,
                                                           w_before[2].error)
        same_local = (w_after[2].estimate, w_after[2].error) == (after[2].estimate,
                                                                 after[2].error)
        print(f"integrate, 2 workers, identical numbers before/after: {same}, "
              f"to the local driver: {same_local}")
        line("before (numpy path)", budget, w_before[0], w_before[1], two, "floor(2)")
        line("after (kernels)", budget, w_after[0], w_after[1], two, "floor(2)")
        for variant, row in others:
            print(f"  {variant}, identical numbers: "
                  f"{(row[2].estimate, row[2].error) == (w_after[2].estimate, w_after[2].error)}")
            line(f"kernels, {variant}", budget, row[0], row[1], two, "floor(2)")
        rows["2 workers"] = w_after
        rows["2 workers, numpy"] = w_before
    v_wall, v_cpu, v_err = vegas_run(budget, args.repeat)
    print(f"vegas {vegas.__version__} (1 process): wall {v_wall:.2f} s, cpu {v_cpu:.2f} s, "
          f"error {v_err:.3e}")
    for name, (wall, _cpu, res) in rows.items():
        print(f"  mainboard {name:18s} time/vegas {wall / v_wall:5.2f}  error/vegas "
              f"{res.error / v_err:5.2f}  at equal error {wall * res.error ** 2 / (v_wall * v_err ** 2):5.2f}")
    print(f"load average {os.getloadavg()[0]:.2f} (at end)")


if __name__ == "__main__":
    main()
