"""Where a Celery worker's CPU goes on the 8-d gaussian, against the local driver's.

Issue 30, part 3. Starts 2 warm local workers (prefork, one pool child each) with
``bench/profhook`` on their PYTHONPATH, so each worker's parent and pool child profile
themselves under cProfile on CPU time; runs a warm-up (the kernels loaded), resets the
profiles, runs ``mainboard.integrate`` on the 8-d gaussian, stops the workers and prints:
the processes' own CPU seconds (unprofiled rusage, parent and children apart, in a second
run without the profiler), the pool children's time per part (the stages as in
profile_gauss.py, then what a task costs beyond them: loading the run, encoding and storing
the results, telemetry, Celery's tracing), the local driver's same parts over the same
budget, and the parents' top functions.

    .venv/bin/python bench/profile_worker.py [--budget 1e7] [--top 15]
"""

from __future__ import annotations

import argparse
import os
import pstats
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import psutil

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from bench_integrate import REPO, bench_workspace, gauss_spec, start_fleet  # noqa: E402
from profile_gauss import _cum, profile  # noqa: E402

import mainboard  # noqa: E402
from mainboard.integrators import kernels  # noqa: E402
from mainboard.integrators.driver import integrate_local  # noqa: E402

#: (label, file ending, function): cumulative seconds in a pool child, outermost first.
CHILD_PARTS = [
    ("stage: materialize (RNG, map)", "integrators/stages.py", "materialize"),
    ("stage: evaluate", "integrators/stages.py", "evaluate"),
    ("  of which integrand", "genz.py", "gaussian"),
    ("  of which grid training", "samplers.py", "training"),
    ("encode results (codec.dumps)", "tasks/codec.py", "dumps"),
    ("BatchResult.to_dict", "integrators/stages.py", "to_dict"),
    ("store (script round trip)", "tasks/bundles.py", "store_bundle"),
    ("load run + sampler", "tasks/context.py", "load"),
    ("hold (pause check)", "tasks/context.py", "hold"),
    ("telemetry", "tasks/telemetry.py", "span"),
    ("telemetry enter", "tasks/telemetry.py", "enter"),
    ("run_stage (whole task body)", "tasks/stages.py", "run_stage"),
]


def _minflt(pid: int) -> int:
    """Minor page faults of a process so far (/proc/PID/stat, field 10)."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[7])


def worker_cpu(procs: list[psutil.Process]) -> tuple[float, float, int]:
    """(parents', pool children's) user + system CPU seconds so far, and the children's
    minor page faults."""
    parent = child = 0.0
    faults = 0
    for p in procs:
        try:
            t = p.cpu_times()
            parent += t.user + t.system
            for c in p.children(recursive=True):
                tc = c.cpu_times()
                child += tc.user + tc.system
                faults += _minflt(c.pid)
        except (psutil.NoSuchProcess, FileNotFoundError):
            pass
    return parent, child, faults


def run_workers(budget: int, profile_dir: Path | None, config: object, url: str,
                root: Path) -> tuple[float, float, float, int]:
    """(wall s, parents' CPU s, children's CPU s, children's minor page faults) of one
    timed run on 2 warm workers."""
    env = {kernels.ENV: "1"}
    if profile_dir is not None:
        path = os.pathsep.join([str(BENCH / "profhook"), str(BENCH), str(REPO),
                                os.environ.get("PYTHONPATH", "")])
        env.update({"MAINBOARD_PROFILE_DIR": str(profile_dir), "PYTHONPATH": path})
    fleet = start_fleet(2, url, root / f"logs-{'prof' if profile_dir else 'plain'}", env=env)
    try:
        procs = [psutil.Process(p.pid) for p in fleet.procs]
        warm = max(budget // 10, 4 * kernels.LOAD_AFTER_ROWS)
        mainboard.integrate(gauss_spec(warm, name="warm"), workers=0, config=config)
        if profile_dir is not None:
            (profile_dir / "reset").touch()
        p0, c0, f0 = worker_cpu(procs)
        began = time.perf_counter()
        mainboard.integrate(gauss_spec(budget, name="profiled"), workers=0, config=config)
        wall = time.perf_counter() - began
        p1, c1, f1 = worker_cpu(procs)
        return wall, p1 - p0, c1 - c0, f1 - f0
    finally:
        fleet.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=1e7)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--save", type=Path, help="copy the workers' .prof files here")
    args = parser.parse_args()
    budget = int(args.budget)
    print(f"load average {os.getloadavg()[0]:.2f} (at start); {budget:,} samples")
    with bench_workspace("profw") as (config, url, root), \
            tempfile.TemporaryDirectory(prefix="mb-prof-") as tmp:
        wall, parent, child, faults = run_workers(budget, None, config, url, root)
        print(f"unprofiled, 2 workers: wall {wall:.2f} s, parents {parent:.2f} CPU s, "
              f"pool children {child:.2f} CPU s ({budget / (parent + child) / 1e6:.1f} M "
              f"samples per CPU s), children's minor page faults {faults:,}")
        kernels.preload()
        spec = gauss_spec(budget, name="plain-local")
        integrate_local(gauss_spec(budget // 10, name="warm-local", batches=1))
        f0, c0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.process_time()
        integrate_local(spec)
        print(f"unprofiled, local driver: {time.process_time() - c0:.2f} CPU s, minor page "
              f"faults {resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0:,}")
        run_workers(budget, Path(tmp), config, url, root)
        children = [str(p) for p in Path(tmp).glob("child-*.prof")]
        parents = [str(p) for p in Path(tmp).glob("parent-*.prof")]
        if args.save:
            args.save.mkdir(parents=True, exist_ok=True)
            for name in children + parents:
                shutil.copy(name, args.save)
        kids = pstats.Stats(*children)
        total = kids.total_tt  # type: ignore[attr-defined]
        print(f"\npool children, profiled ({len(children)} files): {total:.3f} CPU s")
        for label, end, name in CHILD_PARTS:
            sec = _cum(kids, end, name)
            print(f"  {label:34s} {sec:7.3f} s {sec / total:6.1%}")
        kids.sort_stats("tottime").print_stats(args.top)
        if parents:
            dads = pstats.Stats(*parents)
            print(f"\nprefork parents, profiled: {dads.total_tt:.3f} CPU s")  # type: ignore[attr-defined]
            dads.sort_stats("tottime").print_stats(args.top)
    kernels.preload()
    local = profile(budget, "1")
    print(f"\nlocal driver, profiled, same budget: {local['total']:.3f} CPU s")
    for part, sec in local.items():
        print(f"  {part:34s} {sec:7.3f} s")
    print(f"load average {os.getloadavg()[0]:.2f} (at end)")


if __name__ == "__main__":
    main()
