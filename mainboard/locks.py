"""One flock helper for every cross-process lock file (stores, monitor, broker, Flower...).

flock is released by the kernel when its holder dies, so a SIGKILLed process never
leaves anything locked; the lock file itself is left in place (empty) on purpose.
"""

from __future__ import annotations

import fcntl
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

POLL = 0.05  # seconds between non-blocking attempts while waiting


@contextmanager
def flocked(path: Path, wait: float | None = None) -> Iterator[bool]:
    """Hold an exclusive flock on ``path`` (True), or yield False after ``wait`` seconds.

    ``wait=None`` blocks until the lock is free. The parent directory is created if
    missing, so a first run needs no setup.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        deadline = None if wait is None else time.monotonic() + wait
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | (0 if deadline is None else fcntl.LOCK_NB))
                break
            except BlockingIOError:
                if deadline is not None and time.monotonic() >= deadline:
                    yield False
                    return
                time.sleep(POLL)
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
