"""``mainboard trace profile``: py-spy samples of a run's worker processes on its timeline.

Why raw stacks laid as a flame graph: py-spy's ``--format raw`` (collapsed stacks and their
sample counts) is what every py-spy version writes (its speedscope writer panics on some
hosts); each worker's window [start, start + seconds] on the broker clock is shared by its
stacks in proportion to their samples, frames nested as in a flame graph, so the stacks sit
beside the run's spans and merge with `trace merge` (a stack's place inside the window is
its share, not the moment it was sampled). A fleet worker is sampled on its host through
the host's bridge (inside its allocation on SLURM); a job's whole process tree
(``--subprocesses`` from the pid its script recorded) likewise; ``spy`` says how.
"""

from __future__ import annotations

import posixpath
import re
import shlex
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import redis

from mainboard.bridges.jobstate import JobState
from mainboard.errors import BrokerError, UnknownJob, UnknownRun, UserError
from mainboard.hosts.access import Hosts
from mainboard.jobs.job import Job, bridge_of
from mainboard.runs.spans import clock_offset, run_workers
from mainboard.runs.store import RunStore
from mainboard.runs.trace import COORDINATOR, TraceSpan, chrome_trace
from mainboard.trace.spy import Sampler, Target

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


_PROCESS = re.compile(r'process (\d+):"(.*?)"(?=;)', re.S)


def _process_frame(match: re.Match[str]) -> str:
    """``process 123:"python -c ...(several lines)"`` -> ``process 123 (python)``."""
    program = posixpath.basename((match[2].split() or ["?"])[0])
    return f"process {match[1]} ({program})"


def read_raw(text: str) -> dict[tuple[str, ...], int]:
    """py-spy's raw format: ``frame;frame;... count`` per line; with ``--subprocesses`` a
    stack starts with its process' frames, whose command lines may span lines."""
    counts: dict[tuple[str, ...], int] = {}
    for line in _PROCESS.sub(_process_frame, text).splitlines():
        stack, _, n = line.rpartition(" ")
        if stack and n.isdigit():
            key = tuple(stack.split(";"))
            counts[key] = counts.get(key, 0) + int(n)
    return counts


def run_targets(board: Hosts, r: redis.Redis, run_id: str) -> tuple[list[Target], list[str]]:
    """Every worker process of the run: a fleet worker through its host's bridge (inside
    its allocation), one of this machine directly; the ones that cannot be reached, named."""
    workers = {w: i for w, i in run_workers(r, run_id).items() if w != COORDINATOR}
    if not workers:
        raise UserError(f"run {run_id}: no worker has reported yet; profile it while it runs")
    here, targets, skipped = socket.gethostname(), [], []
    for worker, info in sorted(workers.items()):
        host, pid = str(info.get("host")), str(info.get("pid") or "")
        if not pid.isdigit():
            skipped.append(f"{worker}: it reported no pid; not profiled")
        elif host in board.config.hosts:
            targets.append(Target(worker, host, pid, bridge_of(board.on(host)),
                                  str(info.get("job_id") or "") or None))
        elif host == here:
            targets.append(Target(worker, host, pid))
        else:
            skipped.append(f"{worker} on {host}: not a host of this workspace; not profiled")
    return targets, skipped


def job_target(board: Hosts, job_id: str) -> Target:
    """A running job's process tree, on its host (inside its allocation on a scheduler)."""
    handle = Job(board, job_id)
    state = handle.status()
    view = handle.view()
    if state is not JobState.RUNNING:
        raise UserError(f"job {handle.id} is {state.value}, not running: a profile "
                        "samples a running job")
    child = shlex.quote(f"{view.submitted.job_dir}/child")
    return Target(f"{view.name} ({handle.id})", view.host, f"$(cat {child})",
                  bridge_of(board.on(view.host), view.submitted.root), view.submitted.job_id)


def sample(targets: list[Target], seconds: float, offset: float, rate: int = 100
           ) -> tuple[list[TraceSpan], list[str], list[str]]:
    """Sample every target at once for ``seconds``: spans, profiled tracks, skip lines."""
    sampler = Sampler(seconds, rate)
    started = time.time() + offset
    local = {t.track: (t, sampler.local(t)) for t in targets if t.bridge is None}
    remote = [t for t in targets if t.bridge is not None]
    with ThreadPoolExecutor(max_workers=max(1, len(remote))) as pool:
        answers = dict(zip([t.track for t in remote], pool.map(sampler.remote, remote), strict=True))
        for track, (_, proc) in local.items():
            answers[track] = sampler.finish_local(proc)
    spans, profiled, skipped = [], [], []
    for target in targets:
        raw, why = answers[target.track]
        if raw is None:
            skipped.append(f"{target.track}: {why}")
            continue
        counts = read_raw(raw)
        total = sum(counts.values()) or 1
        spans += lay(flame(counts), target.group, target.track, started, seconds / total)
        profiled.append(target.track)
    return spans, sorted(profiled), skipped


def profile(board: Hosts, r: redis.Redis | None, item: str, seconds: float
            ) -> tuple[dict[str, Any], list[str]]:
    """A running run's workers, or a running job's processes, sampled for ``seconds``: the
    trace and one line per process that was not profiled (and why)."""
    store = RunStore(board.config.state_dir)
    try:
        run_id = store.find(item).run_id
    except UnknownRun:
        run_id = None
    if run_id is not None:
        if r is None:
            raise BrokerError("the embedded broker is not running, and a run's workers are "
                              "known to it; start it with `mainboard broker up`")
        targets, skipped = run_targets(board, r, run_id)
        about: dict[str, Any] = {"run_id": run_id}
    else:
        try:
            targets, skipped = [job_target(board, item)], []
        except UnknownJob:
            raise UserError(f"{item!r}: no run or job of that id or name; see "
                            "`mainboard runs list` and `mainboard jobs list`") from None
        about = {"job": targets[0].track}
    spans, profiled, missed = sample(targets, seconds, clock_offset(r) if r else 0.0)
    skipped += missed
    return chrome_trace(spans, {**about, "profile_seconds": seconds, "profiled": profiled,
                                "skipped": skipped}), skipped


__all__ = ["flame", "job_target", "lay", "profile", "read_raw", "run_targets", "sample"]
