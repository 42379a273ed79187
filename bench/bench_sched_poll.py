"""Scheduler commands per minute from one workspace on one cluster (issue 29, item 3).

A real single-node SLURM and Redis (tests/support/services.py), ``JOBS`` held jobs submitted
through mainboard (so monitor passes and ``jobs list`` ask about them), every scheduler
command counted by wrappers on PATH (squeue, sacct, scontrol, qstat: the asking ones).
One minute of callers, spread over the controller's ticks (bridges/poller.TICK_S):
``WORKERS`` fleet workers asking their allocation's end, the keeper's autoscaler looking
at its allocations every 5 s (``LOOKS`` a tick) and its reconcile's listing by owner
tag, ``CALLERS`` monitor passes and as many ``jobs list`` calls. Before: each asks for
itself (the per-call paths, kept callable: ``PerCall``); main: the workers share a listing
of their own, the others ask per call (the code before this change); after: all through
the cluster's one listing a tick in the broker. The same minute for a PBS host through the
slurm-wlm-torque ``qstat`` wrappers over the same SLURM (its workers retire by the
script's clock: they ask no end; the keeper looks at their allocations all the same). Counts, not times.

    .venv/bin/python bench/bench_sched_poll.py [--workers 50] [--jobs 200] [--callers 1]
        [--looks 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mainboard.board import Board  # noqa: E402
from mainboard.bridges.gate import GATES_ENV, RATE_ENV  # noqa: E402
from mainboard.bridges.poller import TICK_S  # noqa: E402
from mainboard.fleet.autoscale import SCALE_TICK_S  # noqa: E402
from tests.support.jobs_workspace import make_workspace  # noqa: E402
from tests.support.sched_counting import Minute, asked, counting_path  # noqa: E402
from tests.support.services import start_redis, start_slurm  # noqa: E402

HOLD = {"hpc": "--hold", "pbs": "-h"}


def minute(board: Board, host: str, workers: list[str], url: str, log: Path,
           callers: int, looks: int) -> dict[str, int]:
    """Scheduler questions in one minute, before and after, with ``callers`` monitor passes
    and as many ``jobs list`` calls, the keeper looking ``looks`` times a tick."""
    scene = Minute(board, host, workers, url, monitors=callers, listings=callers,
                   looks=looks, ends=host == "hpc")
    counted = {}
    for name, run in (("before", scene.per_call), ("main", lambda: scene.per_call(True)),
                      ("after", scene.shared)):
        mark = asked(log)
        run()
        counted[name] = asked(log) - mark
    return counted


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=50)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--callers", type=int, default=1,
                        help="monitor passes and jobs-list calls in the minute (each)")
    parser.add_argument("--looks", type=int, default=int(TICK_S / SCALE_TICK_S),
                        help="the keeper's looks at its allocations a tick (0: no keeper "
                             "running; default: its 5 s tick)")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args()
    report: dict[str, Any] = {"workers": args.workers, "jobs": args.jobs,
                              "callers": args.callers, "looks": args.looks}
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        cluster, server = start_slurm(base / "slurm"), start_redis(base / "redis")
        log = base / "calls"
        os.environ["SLURM_CONF"] = cluster.env["SLURM_CONF"]
        os.environ["PATH"] = counting_path(base / "bin", log, os.environ["PATH"])
        os.environ[GATES_ENV], os.environ[RATE_ENV] = str(base / "gates"), "100000"
        try:
            board = Board(make_workspace(base, slurm=cluster))
            for host in ("hpc", "pbs"):
                ids = [board.on(host).submit("true", name="held", sync=False,
                                             extra=[HOLD[host]]).view().submitted.job_id
                       for _ in range(args.jobs)]
                workers = ids[:args.workers]
                report[host] = minute(board, host, workers, server.url, log, args.callers,
                                      args.looks)
                subprocess.run(["scancel", "--user", str(os.getuid())], check=False)
            board.close()
        finally:
            subprocess.run(["scancel", "--user", str(os.getuid())], check=False)
            server.stop()
            cluster.stop()
    if args.json:
        print(json.dumps(report))
        return 0
    for host, what in (("hpc", "SLURM (squeue, sacct, scontrol)"), ("pbs", "PBS (qstat)")):
        row = report[host]
        ratio = row["before"] / max(1, row["after"])
        workers = f"{args.workers} workers" + ("" if host == "hpc" else " (asking no end)")
        print(f"{what}: {workers} + keeper ({args.looks * 60 // int(TICK_S)} looks) "
              f"+ {args.callers} monitor pass(es) + "
              f"{args.callers} jobs list, {args.jobs} held jobs: scheduler commands per "
              f"minute {row['before']} before (each asks for itself), {row['main']} with "
              f"only the workers sharing (main before this change), {row['after']} after "
              f"({ratio:.1f}x fewer than before)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
