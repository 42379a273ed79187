"""The fleet's side of a run as the runner sees it (``tasks.runner.FLEET_PREPARE``): a door
that opens the sync only where there is a fleet.

Why apart from :mod:`mainboard.fleet.sync`: that module brings the fleet registry, ssh
(paramiko), the mirror and the keeper's client, about a third of ``mainboard integrate``'s
imports. A workspace whose receipts hold no live fleet worker on the batch queue and whose
mainboard.toml declares no pool has nothing to sync and no standby pool, which two small
reads tell (the fleet receipts, the config); only otherwise is the sync loaded, through
``names.LAZY``.
"""

from __future__ import annotations

from typing import Any

from mainboard.config import Config
from mainboard.fleet.records import read_fleet
from mainboard.names import lazy
from mainboard.receipts import WorkerStarted
from mainboard.tasks import BATCH_QUEUE


def batch_workers(config: Config) -> list[WorkerStarted]:
    """Fleet workers started, not stopped, consuming the batch queue (receipts only)."""
    return [w for w in read_fleet(config.state_dir).live() if BATCH_QUEUE in w.queues]


class FleetPrepare:
    """The fleet's side of a run (``mainboard.tasks.runner.Prepare``): the workspace synced
    to every host whose workers evaluate the run, and the standby pool that starts workers
    on demand. The runner finds it by name (``runner.FLEET_PREPARE``): ``tasks`` never
    imports the fleet."""

    def sync(self, config: Config) -> list[Any]:
        """``fleet.sync.sync_fleet``'s hosts synced; nothing loaded without a fleet."""
        if not config.fleet.pools and not batch_workers(config):
            return []
        return lazy("fleet.sync")(config)

    def standby(self, config: Config) -> str | None:
        """``fleet.sync.standby_pool``; None at once when no pool is declared."""
        if not config.fleet.pools:
            return None
        return lazy("fleet.standby")(config)


PREPARE = FleetPrepare()

__all__ = ["PREPARE", "FleetPrepare", "batch_workers"]
