"""``mainboard trace profile``: py-spy samples of a run's worker processes on its timeline.

Why raw stacks laid as a flame graph: py-spy's ``--format raw`` (collapsed stacks and their
sample counts) is what every py-spy version writes (its speedscope writer panics on some
hosts); each worker's window [start, start + seconds] on the broker clock is shared by its
stacks in proportion to their samples, frames nested as in a flame graph, so the stacks sit
beside the run's spans and merge with `trace merge` (a stack's place inside the window is
its share, not the moment it was sampled). Workers of this machine only for now: a worker
elsewhere is named in one line, not profiled.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from mainboard.errors import UserError
from mainboard.runs.spans import clock_offset, run_workers
from mainboard.runs.trace import COORDINATOR, TraceSpan, chrome_trace

Tree = dict[str, tuple[int, "Tree"]]


def flame(counts: dict[tuple[str, ...], int]) -> Tree:
    """Collapsed stacks -> frame -> (samples, children)."""
    tree: dict[str, Any] = {}
    for stack, n in counts.items():
        level = tree
        for frame in stack:
            seen, children = level.get(frame, (0, {}))
            level[frame] = (seen + n, children)
            level = children
    return tree


def lay(tree: Tree, group: str, track: str, start: float, per_sample: float
        ) -> list[TraceSpan]:
    """Nested slices of ``tree`` from ``start``, ``per_sample`` seconds a sample."""
    out = []
    for frame, (n, children) in sorted(tree.items(), key=lambda kv: -kv[1][0]):
        name, _, where = frame.partition(" (")
        out.append(TraceSpan(group, track, name, start, n * per_sample,
                             {"where": where.rstrip(")"), "samples": n}))
        out += lay(children, group, track, start, per_sample)
        start += n * per_sample
    return out


def read_raw(text: str) -> dict[tuple[str, ...], int]:
    """py-spy's raw format: ``frame;frame;... count`` per line."""
    counts: dict[tuple[str, ...], int] = {}
    for line in text.splitlines():
        stack, _, n = line.rpartition(" ")
        if stack and n.isdigit():
            key = tuple(stack.split(";"))
            counts[key] = counts.get(key, 0) + int(n)
    return counts


def profile_run(r: redis.Redis, run_id: str, seconds: float, rate: int = 100
                ) -> tuple[dict[str, Any], list[str]]:
    """Sample every worker process of the run on this machine for ``seconds``; the trace
    and one line per worker that was not profiled (and why)."""
    beside = Path(sys.executable).parent / "py-spy"  # installed with mainboard's extras
    spy = str(beside) if beside.exists() else shutil.which("py-spy")
    if spy is None:
        raise UserError("py-spy is not installed here; `pip install py-spy`")
    workers = {w: i for w, i in run_workers(r, run_id).items() if w != COORDINATOR}
    if not workers:
        raise UserError(f"run {run_id}: no worker has reported yet; profile it while it runs")
    here, skipped, procs = socket.gethostname(), [], {}
    offset = clock_offset(r)
    with tempfile.TemporaryDirectory(prefix="mb-profile-") as tmp:
        for worker, info in workers.items():
            if info.get("host") != here or not info.get("pid"):
                skipped.append(f"{worker} on {info.get('host')}: not on this machine; "
                               "not profiled")
                continue
            out = Path(tmp) / f"{len(procs)}.txt"
            procs[worker] = (info, out, subprocess.Popen(
                [spy, "record", "-p", str(int(info["pid"])), "-d", str(max(1, round(seconds))),
                 "-r", str(rate), "--idle", "--nonblocking", "--format", "raw", "-o", str(out)],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
        started = time.time() + offset
        spans = []
        for worker, (info, out, proc) in procs.items():
            _, err = proc.communicate(timeout=seconds + 60)
            if proc.returncode != 0 or not out.exists():
                why = (err.strip().splitlines() or ["no output"])[-1]
                if "ptrace" in err.lower() or "permission" in err.lower():
                    why = "this host forbids ptrace (py-spy needs it: run as root or set " \
                          "kernel.yama.ptrace_scope=0)"
                skipped.append(f"{worker}: {why}")
                continue
            counts = read_raw(out.read_text())
            total = sum(counts.values()) or 1
            spans += lay(flame(counts), str(info["host"]), worker, started, seconds / total)
    return chrome_trace(spans, {"run_id": run_id, "profile_seconds": seconds,
                                "profiled": sorted(procs), "skipped": skipped}), skipped


__all__ = ["flame", "lay", "profile_run", "read_raw"]
