"""The one polling loop of the tests: a check asked again until it holds, at a rate its cost bounds.

A check that runs the CLI costs a forked process under coverage (0.1-0.5 s of CPU); asked every
0.3 s it keeps a core busy on a machine whose two cores the suite already fills, and slows the
very processes it waits for. So the pause after each look is at least three times what the
look took: a cheap look (a file, a Redis key) is repeated every ``every`` seconds, a costly
one takes at most a quarter of the time. The timeout bounds only a failure.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

T = TypeVar("T")

COST_FACTOR = 3.0   # pause >= this many times the look's own duration
MAX_PAUSE_S = 3.0   # ... but never longer than this between looks


def poll(check: Callable[[], T], timeout: float, what: str, every: float = 0.3) -> T:
    """``check()``'s first truthy answer; AssertionError naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        started = time.monotonic()
        found = check()
        if found:
            return found
        now = time.monotonic()
        if now > deadline:
            raise AssertionError(f"{what}: not after {timeout}s")
        pause = max(every, min(MAX_PAUSE_S, COST_FACTOR * (now - started)))
        time.sleep(min(pause, max(0.0, deadline - now) + 0.01))


def answered(ask: Callable[[list[str]], Mapping[str, T] | None], names: Sequence[str],
             timeout: float, what: str) -> dict[str, T]:
    """Each node's answer to a Celery broadcast (``ask(nodes)``: an inspect call for those
    nodes), asked again of the nodes that have not answered yet: a worker logs ``ready``
    before its remote-control subscription is in place on Redis, and a broadcast published
    before it reaches nobody (seen once in a fresh clone: one of four workers silent)."""
    got: dict[str, T] = {}

    def everyone() -> bool:
        got.update(ask([n for n in names if n not in got]) or {})
        return all(n in got for n in names)

    poll(everyone, timeout, what)
    return got
