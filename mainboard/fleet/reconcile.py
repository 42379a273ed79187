"""The reconciler: after a controller was killed, the fleet record is made true again.

A submission is written as a ``worker.submitting`` receipt (its owner tag, the process
submitting it and everything its ``worker.started`` will hold but the job id) before the
scheduler or provider is asked, and every allocation carries the tag
``mbf-<owner>-<worker id>`` (the SLURM ``--comment``, the PBS job name, the process
job's exported ``MAINBOARD_JOB_TAG``, the rental's label). A controller SIGKILLed between the two
receipts leaves an allocation nobody recorded. Run before the keeper's autoscaler acts
again (and by ``fleet status`` when no keeper runs), ``reconcile`` asks each host and
provider for the allocations carrying this workspace's owner prefix and

- adopts one whose submission was recorded (its ``worker.started`` is written from the
  draft, with the job id the scheduler gives): the autoscaler then counts it and
  submits nothing twice;
- cleans one nobody recorded, or whose worker was already stopped (cancelled, rental
  destroyed): it would hold a node or cost money for no one;
- closes a recorded submission that never reached the scheduler (``worker.stopped``).

A submission whose process still runs (``fleet up`` right now) is in flight: left alone.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from mainboard.bridges import bridge_for
from mainboard.bridges.base import Bridge, JobRecord
from mainboard.bridges.poller import Poller, Share
from mainboard.bridges.providers.lifecycle import destroy_rental, rental_receipts
from mainboard.config import Config, ProviderHost
from mainboard.daemon import pid_alive
from mainboard.errors import MainboardError
from mainboard.fleet.launch import adopted
from mainboard.fleet.records import FleetState, fleet_receipts, owner_prefix, read_fleet
from mainboard.fleet.workers import bridge_of, host_transport, scheduler_share
from mainboard.hosts.rentals import adapter
from mainboard.locks import flocked
from mainboard.receipts import FleetScale, WorkerStopped, WorkerSubmitting
from mainboard.statedir import fleet_dir

log = logging.getLogger("mainboard.fleet.reconcile")
RENTAL_LABEL = "mainboard-"


@dataclass
class Reconciled:
    """What one pass found: adopted worker ids, cleaned allocations, closed submissions,
    and hosts that could not be asked (one line each)."""

    adopted: list[str] = field(default_factory=list)
    cleaned: list[str] = field(default_factory=list)
    closed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def open_intents(state: FleetState) -> dict[str, WorkerSubmitting]:
    """Recorded submissions with neither a start nor a stop, whose submitter is dead."""
    return {i: s for i, s in state.submitting.items()
            if i not in state.started and i not in state.stopped and not pid_alive(s.pid)}


class Reconciler:
    """One pass over every host that could hold this workspace's allocations."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.receipts = fleet_receipts(config.state_dir)
        self.prefix = owner_prefix(config.state_dir)
        self._share: Share | None = None
        self.refresh()
        self.done = Reconciled()

    def refresh(self) -> None:
        """Read the fleet record again. Called after each listing: a submission racing the
        pass (``fleet up`` beside the keeper) writes its receipt before asking the host, so
        a record read after the listing knows every allocation the listing shows."""
        self.state = read_fleet(self.config.state_dir)
        self.intents = open_intents(self.state)
        self.began = time.time()  # a listing for this record is taken after it

    def known(self, worker_id: str) -> bool:
        """Recorded as live, or being submitted right now: not ours to touch."""
        state = self.state
        live = worker_id in state.started and worker_id not in state.stopped
        flight = worker_id in state.submitting and worker_id not in self.intents \
            and worker_id not in state.started and worker_id not in state.stopped
        return live or flight

    def elsewhere(self, worker_id: str, host: str) -> bool:
        """Recorded on another host (two hosts may share one root and its job directories)."""
        for record in (self.state.started, self.state.submitting, self.state.stopped):
            found = record.get(worker_id)
            if found is not None:
                return found.host != host
        return False

    def places(self) -> dict[tuple[str, str | None], None]:
        """(host, root) pairs to list: where the records put workers, and each pool's host."""
        out: dict[tuple[str, str | None], None] = {}
        for worker in self.state.started.values():
            if not worker.rental:
                out[(worker.host, worker.root)] = None
        for intent in self.intents.values():
            if intent.draft and not intent.draft.get("rental"):
                out[(intent.host, intent.draft.get("root"))] = None
        for pool in self.config.fleet.pools.values():
            if not any(h == pool.host for h, _ in out):
                out[(pool.host, None)] = None
        return {k: v for k, v in out.items() if (k[0] in self.config.hosts or k[0] == "local")
                and not isinstance(self.config.host(k[0]), ProviderHost)}

    def run(self) -> Reconciled:
        for host, root in self.places():
            try:
                self.on_host(host, root)
            except MainboardError as exc:
                self.done.errors.append(f"host {host!r}: {exc}")
        self.rentals()
        for worker_id, intent in self.intents.items():
            if worker_id not in self.done.adopted and not self.unasked(intent):
                self.close(intent)
        return self.done

    def unasked(self, intent: WorkerSubmitting) -> bool:
        """Its host could not be asked: the submission may exist, keep it open."""
        return any(e.startswith(f"host {intent.host!r}") for e in self.done.errors)

    def bridge(self, host: str, root: str | None) -> Bridge:
        config = self.config.host(host)
        if root is None and config.kind == "local":  # as `Launcher.target` makes it
            root = str(self.config.root / Path(config.root or ".").expanduser())
        return bridge_for(host, config, host_transport(self.config, host),
                          container=self.config.container_of(config), root=root)

    def poller(self, host: str, bridge: Bridge) -> Poller | None:
        """The host's cluster listing, shared with workers, monitor and ``jobs list``
        (None: the host has no scheduler listing)."""
        if bridge.listing_command is None:
            return None
        if self._share is None:
            self._share = scheduler_share(self.config)
        return Poller(self._share, host)

    def on_host(self, host: str, root: str | None) -> None:
        bridge = self.bridge(host, root)
        # a listing taken since this pass began: every recorded submission is in it
        found = bridge.tagged(self.prefix, self.poller(host, bridge), since=self.began)
        if found is None:
            self.done.errors.append(f"host {host!r}: a {bridge.kind} host cannot be listed "
                                    "by owner tag; its records are kept as they are")
            return
        self.settle(bridge, found)

    def settle(self, bridge: Bridge, found: dict[str, str]) -> None:
        """Adopt, or clean, what one host lists under the owner prefix."""
        self.refresh()
        for tag, job_id in found.items():
            worker_id = tag[len(self.prefix):]
            if self.known(worker_id) or self.elsewhere(worker_id, bridge.name):
                continue
            intent = self.intents.get(worker_id)
            job = intent.draft.get("job") if intent else None
            if intent is not None and job:
                self.adopt(intent, JobRecord.model_validate({**job, "job_id": job_id}))
                continue
            why = "its worker was stopped" if worker_id in self.state.stopped \
                else "no receipt knows it"
            log.info("cancelling %s job %s (tag %s): %s", bridge.name, job_id, tag, why)
            bridge.cancel([job_id])
            self.done.cleaned.append(f"{bridge.name}: job {job_id} ({why})")

    def adopt(self, intent: WorkerSubmitting, record: JobRecord) -> None:
        started = adopted(intent.draft, record)
        self.receipts.append(started)
        if intent.pool:
            self.receipts.append(FleetScale(
                pool=intent.pool, action="adopt", worker_ids=[intent.worker_id], count=1,
                reason=f"found {record.kind} job {record.job_id} on {intent.host} by its owner "
                       "tag after a controller restart"))
        log.info("adopted worker %s: job %s on %s", intent.worker_id, record.job_id,
                 intent.host)
        self.done.adopted.append(intent.worker_id)

    def close(self, intent: WorkerSubmitting) -> None:
        self.receipts.append(WorkerStopped(
            worker_id=intent.worker_id, host=intent.host, state="never_started",
            reason="its submission never reached the host (the controller was killed first)"))
        self.done.closed.append(intent.worker_id)

    def provider_hosts(self) -> dict[str, ProviderHost]:
        return {n: h for n, h in self.config.hosts.items() if isinstance(h, ProviderHost)}

    def rentals(self) -> None:
        """Rentals labelled with the owner prefix: adopt the recorded one, destroy the rest."""
        seen: set[str] = set()
        for name, host in self.provider_hosts().items():
            if host.provider in seen:
                continue
            seen.add(host.provider)
            try:
                market = adapter(self.config, host)
                listed = market.list_rentals(RENTAL_LABEL)
            except MainboardError as exc:
                self.done.errors.append(f"host {name!r}: {exc}")
                continue
            self.refresh()
            for rental in listed:
                label = rental.label or ""
                _, mark, worker_id = label.rpartition(f"-{self.prefix}")
                if not mark or self.known(worker_id):
                    continue
                intent = self.intents.get(worker_id)
                if intent is not None and self.adopt_rented(intent, rental.id):
                    continue
                why = "its worker was stopped" if worker_id in self.state.stopped \
                    else "its worker never started"
                try:
                    destroy_rental(market, rental_receipts(self.config.state_dir), rental.id,
                                   reason=f"reconciled after a controller restart: {why}")
                    self.done.cleaned.append(f"{host.provider}: rental {rental.id} ({why})")
                except MainboardError as exc:
                    self.done.errors.append(f"host {name!r}: rental {rental.id}: {exc}")

    def adopt_rented(self, intent: WorkerSubmitting, rental_id: str) -> bool:
        """A recorded rental whose worker job runs: adopted (False: nothing to adopt)."""
        draft = intent.draft
        if not draft.get("job") or (draft.get("rental") or {}).get("rental_id") != rental_id:
            return False
        probe = adopted(draft, JobRecord.model_validate({**draft["job"], "job_id": "x"}))
        try:
            bridge = bridge_of(self.config, probe)
            found = bridge.tagged(self.prefix, self.poller(intent.host, bridge),
                                  since=self.began) or {}
        except MainboardError as exc:
            self.done.errors.append(f"host {intent.host!r}: rental {rental_id}: {exc}")
            return True  # cannot tell: keep it (and the submission) as they are
        job_id = found.get(intent.tag)
        if job_id is None:
            return False
        self.adopt(intent, JobRecord.model_validate({**draft["job"], "job_id": job_id}))
        return True


def reconcile(config: Config) -> Reconciled:
    """One reconciling pass (one at a time per workspace: the keeper and ``fleet status``
    may both start one)."""
    with flocked(fleet_dir(config.state_dir) / "reconcile.lock"):
        return Reconciler(config).run()


def worth_reconciling(config: Config, state: FleetState) -> bool:
    """Pools to keep, or submissions left open: a pass may find something."""
    return bool(config.fleet.pools) or bool(open_intents(state))


def describe(done: Reconciled) -> Iterable[str]:
    """One line per finding (the keeper logs them; ``fleet status`` prints them on stderr)."""
    for worker_id in done.adopted:
        yield f"fleet: adopted worker {worker_id} (found by its owner tag after a restart)"
    for what in done.cleaned:
        yield f"fleet: cleaned {what}"
    for worker_id in done.closed:
        yield f"fleet: submission of worker {worker_id} never reached its host; closed"
    for why in done.errors:
        yield f"fleet: not reconciled: {why}"


__all__ = ["Reconciled", "describe", "open_intents", "reconcile", "worth_reconciling"]
