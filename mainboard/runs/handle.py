"""``mainboard.run(RUN)``: one run of the workspace as a Python object (what ``mainboard
runs ...`` does, for notebooks and scripts).

Why a handle apart from the result: ``mainboard.integrate`` returns numbers, while logs,
timeline, workers and control need the run's receipts and its broker; the handle finds
both from the workspace's config, by id, id prefix or name, as the CLI does.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cached_property

import redis

from mainboard.config import Config, load_config
from mainboard.errors import BrokerError
from mainboard.runs import control
from mainboard.runs.logs import LogLine, follow_logs, read_logs
from mainboard.runs.store import RunHistory, RunStore
from mainboard.runs.timeline import Event, timeline
from mainboard.runs.workers import WorkerRow, worker_table


class Run:
    """A run by id, unique id prefix or name (``UnknownRun`` lists the candidates)."""

    def __init__(self, what: str, config: Config | str | None = None) -> None:
        self.config = config if isinstance(config, Config) else load_config(config)
        self.store = RunStore(self.config.state_dir)
        self.run_id = self.store.find(what).run_id

    @property
    def history(self) -> RunHistory:
        """The run's receipts as they are now."""
        found = self.store.history(self.run_id)
        assert found is not None
        return found

    @property
    def status(self) -> str:
        """finished, failed, stopped, paused or unfinished (running or interrupted)."""
        return self.history.status

    @cached_property
    def redis(self) -> redis.Redis | None:
        """The broker the run lives on (None: the embedded broker is not running)."""
        return control.connect(self.config)

    def _r(self) -> redis.Redis:
        if self.redis is None:
            raise BrokerError("the embedded broker is not running, and run logs, spans and "
                              "workers live in it; start it with `mainboard broker up`")
        return self.redis

    def logs(self, level: str | None = None, limit: int | None = None) -> list[LogLine]:
        """What the run's workers logged, merged in time order (``level``: trace..error)."""
        return read_logs(self._r(), self.run_id, level=level, limit=limit)

    def follow(self, level: str | None = None) -> Iterator[LogLine]:
        """Log lines as they come, until the run is no longer driven."""
        r = self._r()
        return follow_logs(r, self.run_id, level=level, live=lambda: control.live(r, self.run_id))

    def timeline(self) -> list[Event]:
        """Dispatch, completion, re-sends, adaptation and snapshot of each iteration."""
        return timeline(self.store, self.run_id)

    def workers(self) -> list[WorkerRow]:
        """One row per worker that ran a stage of the run."""
        return worker_table(self._r(), self.run_id)

    def pause(self, wait_s: float = control.WAIT_S) -> control.Outcome:
        """Pause at the next batch boundary (``resume`` continues, same numbers)."""
        return control.request(self.redis, self.store, self.history, "pause", wait_s=wait_s)

    def stop(self, wait_s: float = control.WAIT_S) -> control.Outcome:
        """Stop at the next batch boundary; the run ends with its partial result."""
        return control.request(self.redis, self.store, self.history, "stop", wait_s=wait_s)

    def __repr__(self) -> str:
        return f"<Run {self.run_id} {self.history.created.name!r} {self.status}>"


def run(what: str, config: Config | str | None = None) -> Run:
    """The run ``what`` of the workspace (``config``: a Config or a mainboard.toml path)."""
    return Run(what, config)


__all__ = ["Run", "run"]
