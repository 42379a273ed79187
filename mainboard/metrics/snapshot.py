"""What one scrape exposes, as plain data (light: Flower imports it at start, the
sources are read by :mod:`mainboard.metrics.gather` at the first scrape)."""

from __future__ import annotations

from dataclasses import dataclass, field

# Worker states of `mainboard_workers`: `fleet status`'s states, with "online" split by
# whether the worker has a task in hand (busy) or not (idle), so that they add up.
WORKER_STATES = ("queued", "starting", "busy", "idle", "stalled", "lost", "unknown")
SECTIONS = ("queues", "fleet", "allocations", "runs")
BROKER_SECTIONS = ("queues", "runs")  # read from the broker: unread while it is down


@dataclass(frozen=True)
class RunRate:
    """A run a coordinator holds right now: throughput and progress."""

    batches_per_s: float
    samples: int
    iteration: int


@dataclass
class Snapshot:
    """Everything one scrape exposes; plain data, so tests and ``--json`` read it too."""

    broker_up: bool = False
    queues: dict[str, int] = field(default_factory=dict)
    workers: dict[tuple[str, str], int] = field(default_factory=dict)  # (pool, state) -> n
    paused: dict[str, bool] = field(default_factory=dict)
    submitted: dict[str, int] = field(default_factory=dict)
    failed: dict[str, int] = field(default_factory=dict)
    usd_hr: dict[str, float] = field(default_factory=dict)   # provider pools only
    spent_usd: dict[str, float] = field(default_factory=dict)
    runs: dict[str, RunRate] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)     # section -> one line

    def to_dict(self) -> dict[str, object]:
        """JSON-ready (``mainboard metrics --json``)."""
        workers: dict[str, dict[str, int]] = {}
        for (pool, state), n in sorted(self.workers.items()):
            workers.setdefault(pool, {})[state] = n
        return {"broker_up": self.broker_up, "queues": self.queues, "workers": workers,
                "paused": self.paused, "allocations_submitted": self.submitted,
                "allocations_failed": self.failed, "spend_usd_per_hour": self.usd_hr,
                "spend_usd": self.spent_usd,
                "runs": {r: vars(v) for r, v in self.runs.items()}, "errors": self.errors}


__all__ = ["BROKER_SECTIONS", "SECTIONS", "WORKER_STATES", "RunRate", "Snapshot"]
