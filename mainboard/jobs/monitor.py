"""One durable monitor pass: probe every job still owed an outcome, pull, record, announce.

Safe from cron every minute and concurrently: a pass holds ``.mainboard/monitor.lock``
(a second one waits up to ``lock_wait`` seconds, then reports ``busy`` and does
nothing). Everything it knows comes from receipts: the jobs' own lines say which are
still owed an outcome, and ``monitor.ndjson`` (one ``monitor.pass`` line per pass that
had news) says which verdicts were already announced, so a job is announced once even
across crashed, concurrent or restarted passes. Jobs are probed through each cluster's
one listing of the tick (``share``: the broker's where the caller has one, else the
workspace state's; hosts in parallel); a host that cannot be reached is one entry in
``unreachable_hosts`` and its jobs are simply asked again next pass.

A pass may be scoped to some job ids (``only``, what ``batch watch`` does): it probes,
pulls and announces those alone, so every other job is still announced by the next
plain pass. Rentals follow all jobs either way: a provider host's job rental is
released only when no job on it, in scope or not, is still owed an outcome (so its
outputs are pulled first), and every pass tries again until it is (a provider API that
was down does not leave it running). Only rentals the jobs own (``owner = "jobs"``)
are ever released here: a fleet worker's rental on the same host is never touched.
Every pass also writes the verdicts study ledgers lack (``mainboard.jobs.verdicts``) and
a ``job.cost`` observation of each running job in scope (``mainboard.jobs.costs``); the
report's ``spend`` is what those jobs have cost so far, per job and in total.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mainboard.bridges.jobstate import JobState
from mainboard.bridges.poller import Share
from mainboard.bridges.providers import adapter_for
from mainboard.bridges.providers.lifecycle import JOBS, destroy_rental, rental_receipts
from mainboard.config import Config
from mainboard.errors import HostError, MainboardError, ReceiptError, first_line
from mainboard.hosts.leases import leased_hosts, rentals_locked
from mainboard.jobs.costs import spend
from mainboard.jobs.job import pull_view, store_of
from mainboard.jobs.live import groups_of, probe
from mainboard.jobs.store import JobStore, JobView
from mainboard.jobs.verdicts import record_verdicts
from mainboard.locks import flocked
from mainboard.receipts import MonitorPass, Receipts, RentalCreated, RentalDestroyed

if TYPE_CHECKING:
    from mainboard.hosts.access import Hosts

LOCK_FILE = "monitor.lock"
LOG_FILE = "monitor.ndjson"
Release = Callable[[Config, Mapping[str, float]], tuple[list[str], list[str]]]


def monitor_log(state_dir: Path) -> Receipts:
    """The monitor's own receipts: one ``monitor.pass`` line per pass that had news."""
    return Receipts(Path(state_dir) / LOG_FILE)


def release_rentals(config: Config, hosts: Mapping[str, float], *,
                    now: float | None = None) -> tuple[list[str], list[str]]:
    """Destroy the job rentals of ``hosts`` (host -> when its last job was submitted) that
    ran that work: owned by the jobs and created before it. A rental made later (for new
    work) is not this pass's to end, nor ever one a fleet worker owns.

    All under ``rentals.lock``: a host a submit holds a lease on (``mainboard.hosts.leases``,
    unexpired at ``now``), or that got a job since the pass looked, keeps its rentals.

    Returns (destroyed rental ids, errors). Does nothing when the provider layer is not
    installed; a rental that cannot be destroyed is an error line, not a failed pass,
    and is tried again next pass. A rental recorded before owners were (no owner) may be
    a fleet worker's: it is named in an error line, never destroyed here.
    """
    if not hosts:
        return [], []
    log = rental_receipts(config.state_dir)
    problems: list[ReceiptError] = []
    live: dict[tuple[str, str], tuple[float, RentalCreated]] = {}
    for ts, payload in log.read_timed(errors=problems):
        if isinstance(payload, RentalCreated):
            live[(payload.provider, payload.rental_id)] = (ts, payload)
        elif isinstance(payload, RentalDestroyed):
            live.pop((payload.provider, payload.rental_id), None)
    errors = [str(p) for p in problems]
    ending = [(t, r) for t, r in live.values() if r.host in hosts and t <= hosts[r.host]]
    if not ending:
        return [], errors
    with rentals_locked(config.state_dir):  # no submit chooses a rental or takes a lease now
        spared = leased_hosts(config.state_dir, now) | _busy_since(config, hosts)
        done = _destroy(config, [r for _t, r in ending if r.host not in spared], log, errors)
    return done, errors


def _busy_since(config: Config, hosts: Mapping[str, float]) -> set[str]:
    """Hosts of ``hosts`` that got work since the pass looked: a job owed, or one submitted
    later than the pass knew (its submit dropped its lease after recording it)."""
    views, _ = JobStore(config.state_dir).scan()
    return {v.host for v in views if v.host in hosts
            and (_owed(v) or v.submitted.submitted_at > hosts[v.host])}


def _destroy(config: Config, rentals: list[RentalCreated], log: Receipts,
             errors: list[str]) -> list[str]:
    """Destroy each job-owned rental of ``rentals``; the ids destroyed, problems to ``errors``."""
    done: list[str] = []
    for rental in rentals:
        if rental.owner is None:
            errors.append(f"rental {rental.rental_id} ({rental.provider}, host {rental.host}) "
                          "was recorded without an owner (before owners were recorded) and may "
                          "be a fleet worker's, so the monitor leaves it; it may still cost "
                          "money: end it with `mainboard fleet down` once its work is done")
            continue
        if rental.owner != JOBS:
            continue
        provider = config.providers.get(rental.provider)
        try:
            if provider is None:
                raise MainboardError(f"provider {rental.provider!r} is not in mainboard.toml "
                                     f"(declared: {', '.join(config.providers) or 'none'})")
            destroy_rental(adapter_for(rental.provider, provider), log, rental.rental_id,
                           f"monitor: every job on host {rental.host} is done")
            done.append(rental.rental_id)
        except MainboardError as exc:
            errors.append(f"rental {rental.rental_id} ({rental.provider}, host {rental.host}) "
                          f"was not destroyed and may still cost money (tried again next "
                          f"pass): {exc}")
    return done


def _entry(view: JobView) -> dict[str, Any]:
    """How one announced job appears in the report."""
    s = view.submitted
    return {"id": s.id, "name": s.name, "host": s.host, "state": view.state.value,
            "exit_code": view.exit_code, "reason": view.reason,
            "pulled": None if view.pulled is None else view.pulled.paths}


def _announced(log: Receipts, errors: list[str]) -> tuple[set[str], MonitorPass | None]:
    """Every job id a past pass announced, and the last pass with news."""
    seen: set[str] = set()
    last: MonitorPass | None = None
    problems: list[Any] = []
    for payload in log.read(MonitorPass.topic, errors=problems):
        assert isinstance(payload, MonitorPass)
        seen.update(payload.announced)
        last = payload
    errors += [str(p) for p in problems]
    return seen, last


def monitor_pass(board: Hosts, *, only: Collection[str] | None = None, lock_wait: float = 30.0,
                 release: Release = release_rentals, share: Share | None = None
                 ) -> dict[str, Any]:
    """One pass; returns ``{"running", "finished", "failed", "unreachable_hosts", "changed", ...}``.

    ``finished`` are jobs that completed (exit 0), ``failed`` every other outcome
    (failed, timeout, cancelled, preempted), each announced in exactly one pass.
    ``errors`` lists unreadable receipt lines (``file:line``) and rentals not destroyed.
    With ``only`` (job ids), just those jobs are probed, pulled, announced and counted
    in ``running``; the others are left for a plain pass.
    """
    state_dir = board.config.state_dir
    with flocked(state_dir / LOCK_FILE, lock_wait) as held:
        if not held:
            return {"running": None, "finished": [], "failed": [], "unreachable_hosts": [],
                    "host_errors": {}, "pulled": [], "released": [], "errors": [],
                    "changed": False, "busy": True, "spend": None}
        return _sweep(board, None if only is None else frozenset(only), release, share)


def _owed(view: JobView) -> bool:
    """Still owed an outcome: no verdict yet, or results to pull that have not come back."""
    return not view.finished or bool(view.submitted.fetch and view.pulled is None)


def _sweep(board: Hosts, only: frozenset[str] | None, release: Release,
           share: Share | None) -> dict[str, Any]:
    store = store_of(board)
    views, _ = store.scan()

    def mine(view: JobView) -> bool:
        return only is None or view.id in only

    groups = groups_of(views, only)
    down = probe(board, store, groups, timeout=None, share=share) if groups else {}
    # The cursor comes from the receipts, including the verdicts this pass just wrote.
    views, problems = store.scan()
    errors = [str(p) for p in problems]
    pulled, tried = _pull_finished(board, [v for v in views if mine(v)], down)
    if pulled:
        views, _ = store.scan()
    views = _observe_costs(store, views, lambda v: mine(v) and v.host not in down)
    errors += record_verdicts(board.config.state_dir, views)  # study ledgers, once each
    log = monitor_log(board.config.state_dir)
    announced, last = _announced(log, errors)
    news = [v for v in views if mine(v) and v.id not in announced and not _owed(v)]
    # Every job counts here, in scope or not: a rental is idle only when all its work is.
    owed = [v for v in views if _owed(v)]
    released, release_errors = release(board.config, _idle_provider_hosts(board, views, owed))
    errors += release_errors
    running = sum(1 for v in views if not v.finished)
    # What the log says stays true of the jobs this pass did not ask about: a host left
    # out of a scoped pass keeps its last known reachability while it still owes work.
    asked = {host for host, _root in groups} | tried
    before = (last.running, last.unreachable_hosts) if last is not None else (0, [])
    unreachable = sorted(set(down) | ({h for h in before[1] if h not in asked}
                                      & {v.host for v in owed}))
    changed = bool(news or pulled or released) or (running, unreachable) != before
    if changed:
        log.append(MonitorPass(running=running, announced=[v.id for v in news],
                               unreachable_hosts=unreachable, pulled=pulled, released=released))
    return {
        "running": sum(1 for v in views if not v.finished and mine(v)),
        "finished": [_entry(v) for v in news if v.state is JobState.COMPLETED],
        "failed": [_entry(v) for v in news if v.state is not JobState.COMPLETED],
        "unreachable_hosts": sorted(down),
        "host_errors": {h: down[h] for h in sorted(down)},
        "pulled": pulled,
        "released": released,
        "errors": errors,
        "changed": changed,
        "busy": False,
        "spend": spend([v for v in views if mine(v)]),
    }


def _observe_costs(store: JobStore, views: list[JobView],
                   seen: Callable[[JobView], bool]) -> list[JobView]:
    """A cost observation of each unfinished job ``seen`` (in scope, its host answered): its
    spend grows with time observed (a verdict's own is written with it, ``JobStore.observe``)."""
    out = []
    for view in views:
        line = store.record_cost(view.id, "pass") if seen(view) and not view.finished else None
        out.append(view if line is None else replace(view, cost=line))
    return out


def _pull_finished(board: Hosts, views: list[JobView],
                   down: dict[str, str]) -> tuple[list[str], set[str]]:
    """Pull every finished job with ``fetch`` paths not pulled yet; the ids pulled, hosts asked."""
    pulled: list[str] = []
    tried: set[str] = set()
    for view in views:
        if not (view.finished and view.submitted.fetch and view.pulled is None):
            continue
        if view.host in down:
            continue
        tried.add(view.host)
        try:
            pull_view(board, view)
            pulled.append(view.id)
        except (HostError, OSError) as exc:
            down.setdefault(view.host, first_line(exc))
    return pulled, tried


def _idle_provider_hosts(board: Hosts, views: list[JobView],
                         owed: list[JobView]) -> dict[str, float]:
    """Provider hosts with jobs, none still owed: host -> when its last job was submitted.

    Asked every pass, not only when a job is announced, so a rental whose destruction
    failed (provider API down) is released by a later pass.
    """
    busy = {v.host for v in owed}
    hosts = board.config.hosts
    last: dict[str, float] = {}
    for view in views:
        host = view.host
        if host not in busy and host in hosts and hosts[host].kind == "provider":
            last[host] = max(last.get(host, 0.0), view.submitted.submitted_at)
    return last
