"""Scheduler commands counted: wrappers on PATH that log each call, then run the real one;
and N fleet workers asking their allocation's end in one tick (the test and the bench)."""

from __future__ import annotations

import shutil
import stat
import threading
from collections import Counter
from pathlib import Path

import redis

from mainboard.bridges.slurm import SlurmBridge, parse_ends
from mainboard.tasks.schedpoll import run_listing, shared_listing

COMMANDS = ("squeue", "sbatch", "scontrol")


def counting_path(directory: Path, log: Path, path: str) -> str:
    """A PATH whose ``squeue``/``sbatch``/``scontrol`` append their name to ``log`` first."""
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


def one_by_one(job_ids: list[str]) -> dict[str, str]:
    """Before: each worker asks squeue for its own job (``squeue -h -j ID -o %e``)."""
    out = {}
    for job_id in job_ids:
        found = run_listing(("squeue", "-h", "-j", job_id, "-o", "%i|%e"), parse_ends)
        out.update(found or {})
    return out


def workers_tick(url: str, cluster: str, workers: int, tick: float) -> list[dict[str, str]]:
    """After: ``workers`` processes' threads (each its own Redis client) ask the shared
    listing at once; what each got."""
    got: list[dict[str, str]] = [{} for _ in range(workers)]

    def ask(i: int) -> None:
        with redis.Redis.from_url(url) as client:
            got[i] = shared_listing(client, cluster, tick, lambda: run_listing(
                SlurmBridge.ends_command, parse_ends))

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return got
