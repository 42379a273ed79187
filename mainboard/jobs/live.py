"""Job states as of now: the jobs still owed an outcome asked about, one listing per cluster.

``jobs list``, ``jobs show`` and the dashboard's Jobs page read through here instead of
waiting for a monitor pass. Nothing here announces or pulls (that stays the monitor's):
a state a host reports is recorded with ``JobStore.observe``, which re-reads the job's
receipts under the store's lock, so whoever sees a change first (this sweep, a ``wait``,
a monitor pass, another dashboard) writes its one receipt and the others write nothing.

Hosts are asked in parallel, each through its cluster's one listing of the tick
(:mod:`mainboard.bridges.poller`: shared with the fleet's workers and keeper, monitor
passes and other listings; jobs it does not hold are asked alone), within a time
budget; a host that fails or does not answer in time is one line in ``unreachable`` and
its jobs keep their last recorded state, marked stale. The threads are daemons, so a
host that hangs past the budget never holds up the caller (nor the process's exit).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mainboard.bridges.poller import Share, file_share, poller_for
from mainboard.errors import MainboardError, ReceiptError, first_line
from mainboard.jobs.job import bridge_of, store_of
from mainboard.jobs.store import JobStore, JobView
from mainboard.redact import redact_text

if TYPE_CHECKING:
    from mainboard.hosts.access import Hosts

log = logging.getLogger("mainboard.jobs")
PROBE_TIMEOUT_S = 10.0  # the longest a listing waits for one host's answer
SILENT = "no answer within"
Group = tuple[str, str]  # (host, root the jobs ran in): one bridge, one query


def groups_of(views: Iterable[JobView], only: Collection[str] | None = None
         ) -> dict[Group, list[JobView]]:
    """The unfinished jobs (of ``only``, ids, when given) grouped by host and root."""
    groups: dict[Group, list[JobView]] = {}
    for view in views:
        if not view.finished and (only is None or view.id in only):
            groups.setdefault((view.host, view.submitted.root), []).append(view)
    return groups


def share_of(board: Hosts, share: Share | None) -> Share:
    """Where the hosts' listings are shared: ``share`` (the broker's, where one runs: the
    CLI's and the dashboard's choice), else the workspace state's (Redis-free)."""
    return share if share is not None else file_share(board.config.state_dir)


def _ask(board: Hosts, store: JobStore, group: Group, views: list[JobView],
         share: Share) -> str | None:
    """Ask one host about its jobs through its cluster's listing of the tick (jobs the
    listing does not hold alone) and record the news; the error, if any."""
    host, root = group
    try:
        statuses = bridge_of(board.on(host), root).poll([v.record() for v in views],
                                                        poller=poller_for(share, host))
    except (MainboardError, OSError) as exc:
        return redact_text(first_line(exc))  # shown on pages and in --json as well
    for view in views:
        store.observe(view.id, statuses[view.submitted.job_id])
    return None


def probe(board: Hosts, store: JobStore, groups: dict[Group, list[JobView]],
          timeout: float | None = PROBE_TIMEOUT_S, share: Share | None = None
          ) -> dict[str, str]:
    """Ask every group's host at once (through ``share``: :func:`share_of`); the hosts
    that failed (or stayed silent past ``timeout`` seconds; None: wait for all) -> one
    line saying why. A silent host's thread still holds its connection: closing ``board``
    waits for its connect timeout."""
    answers: dict[Group, str | None] = {}
    crashed: list[BaseException] = []
    shared = share_of(board, share)

    def ask(group: Group, views: list[JobView]) -> None:
        try:
            answers[group] = _ask(board, store, group, views, shared)
        except BaseException as exc:  # a bug, not a host that is down: raised below
            crashed.append(exc)

    threads = {group: threading.Thread(target=ask, args=(group, views), daemon=True,
                                       name=f"probe-{group[0]}")
               for group, views in groups.items()}
    for thread in threads.values():
        thread.start()
    deadline = None if timeout is None else time.monotonic() + timeout
    for thread in threads.values():
        thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
    if crashed:
        raise crashed[0]
    down: dict[str, str] = {}
    for group, thread in threads.items():
        if thread.is_alive():
            down.setdefault(group[0], f"{SILENT} {timeout:g}s")
        elif (error := answers[group]) is not None:
            down.setdefault(group[0], error)
    return down


@dataclass(frozen=True)
class Sweep:
    """Every job as its receipts say right after the hosts were asked (or not: ``cached``)."""

    views: list[JobView]
    errors: list[ReceiptError]
    at: float                                 # when the hosts were asked (epoch s)
    unreachable: dict[str, str] = field(default_factory=dict)  # host -> why
    fresh: frozenset[str] = frozenset()       # unfinished jobs a host answered for
    cached: bool = False                      # receipts only, no host asked

    @property
    def late(self) -> bool:
        """A host was still being asked when the time budget ran out."""
        return any(why.startswith(SILENT) for why in self.unreachable.values())

    def stale(self, view: JobView) -> bool:
        """Owed an outcome, on a host that was asked and did not answer."""
        return not view.finished and view.host in self.unreachable

    def age(self, view: JobView, now: float | None = None) -> float:
        """Seconds since the state was last known true: since this sweep's answer for a
        job a host confirmed, else since the receipt that recorded it."""
        now = time.time() if now is None else now
        known = self.at if view.id in self.fresh and not view.finished else view.since
        return max(0.0, now - known)

    def entry(self, view: JobView, now: float | None = None) -> dict[str, Any]:
        """The job as ``jobs list/show --json`` and the dashboard give it, with its freshness."""
        return {**view.as_json(), "stale": self.stale(view),
                "state_age_s": round(self.age(view, now), 3), "state_since": view.since}


def cached(store: JobStore) -> Sweep:
    """Every job from its receipts alone (``--cached``): no host is asked."""
    views, errors = store.scan()
    return Sweep(views, errors, time.time(), cached=True)


def sweep(board: Hosts, *, only: Collection[str] | None = None, host: str | None = None,
          timeout: float | None = PROBE_TIMEOUT_S, share: Share | None = None) -> Sweep:
    """Ask the hosts about every job still owed an outcome (of ``only`` ids, on ``host``,
    when given; each scheduler through its cluster's listing of the tick in ``share``),
    record the news, and return every job as its receipts now say."""
    store = store_of(board)
    views, _ = store.scan()
    groups = groups_of((v for v in views if host is None or v.host == host), only)
    at = time.time()
    down = probe(board, store, groups, timeout, share) if groups else {}
    views, errors = store.scan()
    fresh = frozenset(v.id for (h, _root), vs in groups.items() if h not in down for v in vs)
    return Sweep(views, errors, at, down, fresh)


class SharedSweep:
    """One sweep shared by many readers (the dashboard's page requests): a reader gets the
    last sweep while it is younger than ``max_age`` seconds, else runs one, or waits for the
    one already running and shares it; never two at a time."""

    def __init__(self, board: Callable[[], Hosts], max_age: float = 2.0,
                 timeout: float = PROBE_TIMEOUT_S, share: Share | None = None) -> None:
        self._board, self.max_age, self.timeout = board, max_age, timeout
        self.share = share
        self._running = threading.Lock()  # held for the length of one sweep
        self._last: tuple[float, Sweep] | None = None

    def latest(self) -> Sweep | None:
        """The last sweep, however old (None before the first)."""
        last = self._last
        return None if last is None else last[1]

    def _fresh(self) -> Sweep | None:
        last = self._last
        return last[1] if last and time.monotonic() - last[0] < self.max_age else None

    def _run(self) -> Sweep:
        """One sweep; the caller holds ``_running``."""
        started = time.monotonic()
        result = sweep(self._board(), timeout=self.timeout, share=self.share)
        self._last = (started, result)
        return result

    def get(self) -> Sweep:
        """A sweep no older than ``max_age`` (waiting for one that is running)."""
        if (fresh := self._fresh()) is not None:
            return fresh
        with self._running:
            return self._fresh() or self._run()

    def kick(self) -> None:
        """Start a sweep in the background unless the last is fresh or one is running."""
        if self._fresh() is not None or not self._running.acquire(blocking=False):
            return

        def run() -> None:
            try:
                self._run()
            except (MainboardError, OSError) as exc:  # the next reader tries again
                log.warning("job sweep failed: %s", first_line(exc))
            finally:
                self._running.release()

        threading.Thread(target=run, daemon=True, name="jobs-sweep").start()


__all__ = ["PROBE_TIMEOUT_S", "SharedSweep", "Sweep", "cached", "groups_of", "probe", "share_of",
           "sweep"]
