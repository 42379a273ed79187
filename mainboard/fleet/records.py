"""The fleet's durable memory: which workers were started where, which are gone.

Every fleet change is a receipt in ``.mainboard/fleet.ndjson`` (topics ``worker.tunnel``,
``worker.started``, ``worker.stopped`` in ``mainboard.receipts``), so ``fleet status`` and
``fleet down`` work from a new process, and the keeper that holds the tunnels rebuilds
its picture after a restart. Nothing here holds a credential: broker URLs live only in
0600 files on the hosts and in the workspace's broker secret.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from mainboard.errors import UserError
from mainboard.ids import safe_word
from mainboard.locks import flocked
from mainboard.receipts import (
    FleetScale,
    Receipts,
    WorkerLost,
    WorkerRoles,
    WorkerStarted,
    WorkerStopped,
    WorkerSubmitting,
    WorkerTunnel,
)

FLEET_FILE = "fleet.ndjson"
OWNER_FILE = "fleet-owner"
POOLS_LOCK = "fleet-pools.lock"
TAG_PREFIX = "mbf-"
HOST_QUEUE_PREFIX = "mainboard.host."
_QUEUE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,199}$")


def fleet_receipts(state_dir: Path) -> Receipts:
    """The fleet's receipts log under a workspace state directory."""
    return Receipts(Path(state_dir) / FLEET_FILE)


def fleet_owner(state_dir: Path) -> str:
    """This workspace's fleet owner id (made once, kept in the state directory): every
    allocation carries it in its tag, so a restarted controller tells its own from others'."""
    path = Path(state_dir) / OWNER_FILE
    try:
        found = path.read_text().strip()
    except FileNotFoundError:
        found = ""
    if re.fullmatch(r"[0-9a-f]{8}", found):
        return found
    path.parent.mkdir(parents=True, exist_ok=True)
    fresh = secrets.token_hex(4)
    try:
        with open(path, "x") as handle:  # two processes at once: the first one wins
            handle.write(fresh + "\n")
    except FileExistsError:
        return fleet_owner(state_dir)
    return fresh


def owner_prefix(state_dir: Path) -> str:
    """What every tag of this workspace's allocations starts with."""
    return f"{TAG_PREFIX}{fleet_owner(state_dir)}-"


def owner_tag(state_dir: Path, worker_id: str) -> str:
    """``mbf-<owner>-<worker id>``: the SLURM comment, the process job's exported tag, the
    rental's label suffix."""
    return owner_prefix(state_dir) + worker_id


def host_queue(host: str) -> str:
    """The queue only ``host``'s workers consume: route work to one host with it."""
    return HOST_QUEUE_PREFIX + safe_word(host, 120)


def node_prefix(kind: str, host: str) -> str:
    """The Celery node name before ``-<job id>@<machine>`` (``slurm-hpc``): what Flower's
    list shows is the host kind, the host and the scheduler's job id on that machine."""
    return f"{kind}-{safe_word(host)}"


NODE_SUFFIX = "-n"  # before a multi-node allocation's node index in its workers' names


def node_names(worker: WorkerStarted) -> list[str]:
    """The Celery names (before ``@``) of an allocation's workers: ``slurm-hpc-12345``, or
    one per node, ``slurm-hpc-12345-n0``, ``-n1``..., for a ``nodes > 1`` allocation."""
    if worker.nodes <= 1:
        return [worker.node]
    return [f"{worker.node}{NODE_SUFFIX}{i}" for i in range(worker.nodes)]


def check_queue(name: str) -> str:
    """A Celery queue name we accept: one word of letters, digits and ``_.-``."""
    if not _QUEUE.match(name):
        raise UserError(f"--queues: {name!r} is not a queue name; valid: letters, digits, "
                        "'_', '.', '-' (starting with a letter or digit), comma-separated")
    return name


@dataclass
class FleetState:
    """The receipts replayed: started, tunnelled and stopped workers by worker id."""

    started: dict[str, WorkerStarted] = field(default_factory=dict)
    tunnels: dict[str, WorkerTunnel] = field(default_factory=dict)
    stopped: dict[str, WorkerStopped] = field(default_factory=dict)
    lost: dict[str, WorkerLost] = field(default_factory=dict)
    submitting: dict[str, WorkerSubmitting] = field(default_factory=dict)
    scale: list[FleetScale] = field(default_factory=list)
    roles: dict[str, dict[str, bool]] = field(default_factory=dict)  # id -> {queue: consume}

    def live(self, hosts: set[str] | None = None) -> list[WorkerStarted]:
        """Workers started and not yet stopped (optionally only on ``hosts``), oldest first."""
        return [w for i, w in self.started.items() if i not in self.stopped
                and (hosts is None or w.host in hosts)]

    def live_tunnels(self) -> list[WorkerTunnel]:
        """Tunnels to keep: worker not stopped (maybe being started right now), host not lost."""
        return [t for i, t in self.tunnels.items() if i not in self.stopped
                and i not in self.lost]


def pool_events(state: FleetState, name: str) -> list[FleetScale]:
    """The ``fleet.scale`` receipts of pool ``name``, oldest first."""
    return [s for s in state.scale if s.pool == name]


def pool_active(state: FleetState, name: str) -> bool:
    """Started by ``fleet up`` and not stopped by ``fleet down`` since."""
    marks = [s.action for s in pool_events(state, name) if s.action in ("start", "stop")]
    return bool(marks) and marks[-1] == "start"


@contextmanager
def pool_changes(state_dir: Path) -> Iterator[None]:
    """Held by a pool's submission (from its last check that the pool is active to its
    ``worker.started``) and by ``fleet down`` while it stops the pools: a submission lands
    wholly before the stop, so the down sees its worker and stops it, or not at all. (A
    keeper's look that began before the stop submitted after it, and the new allocation was
    left running, seen once in a fresh clone.)"""
    with flocked(Path(state_dir) / POOLS_LOCK):
        yield


def pool_paused(state: FleetState, name: str) -> bool:
    """Paused after failed submissions, and not resumed since (``fleet resume-pool``)."""
    marks = [s.action for s in pool_events(state, name) if s.action in ("pause", "resume")]
    return bool(marks) and marks[-1] == "pause"


def read_fleet(state_dir: Path) -> FleetState:
    """Replay ``fleet.ndjson``; a missing file is an empty fleet."""
    state = FleetState()
    for payload in fleet_receipts(state_dir).read():
        if isinstance(payload, WorkerStarted):
            state.started[payload.worker_id] = payload
        elif isinstance(payload, WorkerTunnel):
            state.tunnels[payload.worker_id] = payload
        elif isinstance(payload, WorkerStopped):
            state.stopped[payload.worker_id] = payload
        elif isinstance(payload, WorkerLost):
            state.lost[payload.worker_id] = payload
        elif isinstance(payload, WorkerSubmitting):
            state.submitting[payload.worker_id] = payload
        elif isinstance(payload, FleetScale):
            state.scale.append(payload)
        elif isinstance(payload, WorkerRoles):
            state.roles.setdefault(payload.worker_id, {}).update(
                dict.fromkeys(payload.queues, payload.consume))
    return state
