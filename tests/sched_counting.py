"""Scheduler commands counted: wrappers on PATH that log each call, then run the real one;
and N fleet workers asking their allocation's end in one tick (the test and the bench)."""

from __future__ import annotations

import shutil
import stat
import threading
from collections import Counter
from pathlib import Path

import redis

from mainboard.bridges.poller import RedisShare, Rows, run_listing
from mainboard.bridges.slurm import SlurmBridge

COMMANDS = ("squeue", "sbatch", "scontrol", "sacct", "scancel", "qstat", "qsub", "qdel")
ASKING = ("squeue", "sacct", "scontrol", "qstat")  # the commands that ask, not act


def counting_path(directory: Path, log: Path, path: str) -> str:
    """A PATH whose scheduler commands (``COMMANDS``) append their name to ``log`` first."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in COMMANDS:
        real = shutil.which(name, path=path)
        assert real, f"{name} is not on PATH: is SLURM installed (scripts/bootstrap test)?"
        wrapper = directory / name
        wrapper.write_text(f'#!/bin/sh\necho {name} >> "{log}"\nexec "{real}" "$@"\n')
        wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return f"{directory}:{path}"


def counts(log: Path) -> Counter[str]:
    """Calls per command so far."""
    return Counter(log.read_text().split()) if log.exists() else Counter()


def asked(log: Path) -> int:
    """Scheduler questions so far (``ASKING``: squeue, sacct, scontrol, qstat)."""
    found = counts(log)
    return sum(found[name] for name in ASKING)


def one_by_one(job_ids: list[str]) -> Rows:
    """Before: each worker asks squeue for its own job (``end_command``, one id)."""
    out: Rows = {}
    for job_id in job_ids:
        found = run_listing((*SlurmBridge.end_command, job_id), SlurmBridge.parse_listing)
        out.update(found or {})
    return out


def workers_tick(url: str, cluster: str, workers: int, tick: float) -> list[Rows]:
    """After: ``workers`` processes' threads (each its own Redis client) ask the shared
    listing at once; what each got."""
    got: list[Rows] = [{} for _ in range(workers)]

    def ask(i: int) -> None:
        with redis.Redis.from_url(url) as client:
            found = RedisShare(client).get(cluster, tick, lambda: run_listing(
                SlurmBridge.listing_command, SlurmBridge.parse_listing))
            got[i] = found.rows if found is not None else {}

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return got
