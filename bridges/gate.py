"""A scheduler's politeness limits on submissions, for every process of this user.

Why: an autoscaler, a study and a user at a terminal may all submit to one cluster at
once; sites throttle or ban accounts that flood slurmctld. ``[hosts.X]
max_submits_per_minute`` (default 30) is kept by a small log of submission times per login
host under flock, shared by every workspace of this user on this machine (the limit is
the site's, not the workspace's): a submission past it waits for the oldest to age out,
saying so in one line on stderr. ``max_jobs`` (the site's cap on queued plus running jobs)
refuses a submission in one line, counted by the bridge's ``count_command``.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

from mainboard.config import HostConfig
from mainboard.errors import JobCapReached
from mainboard.locks import flocked

GATES_ENV = "MAINBOARD_SUBMIT_GATES"  # where the logs live (tests isolate it)
WINDOW_S = 60.0


RATE_ENV = "MAINBOARD_SUBMITS_PER_MINUTE"  # the default where a host sets no limit of its own


def gate_dir() -> Path:
    """``$MAINBOARD_SUBMIT_GATES``, else ``~/.cache/mainboard/submit-gates``."""
    return Path(os.environ.get(GATES_ENV) or "~/.cache/mainboard/submit-gates").expanduser()


def gate_file(kind: str, login: str | None) -> Path:
    """The log of one login host's submissions (``local``: this machine's scheduler)."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{kind}-{login or 'local'}")
    return gate_dir() / f"{name}.log"


def wait_turn(path: Path, per_minute: int, host: str) -> float:
    """Block until a submission fits ``per_minute`` in the last minute, then record it;
    the seconds waited (one stderr line when there is a wait)."""
    waited, said = 0.0, False
    while True:
        with flocked(path.with_suffix(".lock")):
            now = time.time()
            try:
                times = [float(t) for t in path.read_text().split()]
            except (OSError, ValueError):
                times = []
            recent = sorted(t for t in times if now - t < WINDOW_S)
            if len(recent) < per_minute:
                path.write_text("".join(f"{t!r}\n" for t in [*recent, now]))
                return waited
            pause = recent[-per_minute] + WINDOW_S - now
        if not said:
            print(f"mainboard: host {host!r}: max_submits_per_minute {per_minute} reached; "
                  f"waiting {pause:.0f} s before the next submission", file=sys.stderr)
            said = True
        time.sleep(max(0.05, pause))
        waited += max(0.05, pause)


def enforce(name: str, kind: str, host: HostConfig, count: Callable[[], int] | None) -> None:
    """``max_jobs`` (``count``: this user's jobs queued or running there), then
    ``max_submits_per_minute``, of host ``name``; hosts without them pass."""
    gate = host.submit_gate()
    if gate is None:
        return
    limit = gate.max_jobs
    if limit is not None and count is not None and (found := count()) >= limit:
        raise JobCapReached(f"host {name!r}: max_jobs {limit} reached ({found} jobs queued or "
                        f"running); wait for some to end, or raise [hosts.{name}] max_jobs "
                        "if the site allows more")
    per_minute = gate.per_minute
    if per_minute and not gate.per_minute_given:
        per_minute = int(os.environ.get(RATE_ENV) or per_minute)  # a site's (or CI's) default
    if per_minute:
        wait_turn(gate_file(kind, gate.address), per_minute, name)


__all__ = ["GATES_ENV", "RATE_ENV", "enforce", "gate_file", "wait_turn"]
