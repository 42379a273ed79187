"""Live tier: a run waiting on batches is demand for the pool that consumes its queue.

A real coordinator (``mainboard.integrate``) and one real batch worker on a real Redis.
While the run goes, the autoscaler's look at a pool consuming the batch queue reads the
coordinator's outstanding batches next to the queue depth: batches a worker has taken
(prefetched, in hand, or travelling between stages) are in no queue but still count,
and the pool's target follows them. After the run, no demand is left.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import mainboard
from mainboard.config import Config, load_config
from mainboard.fleet.autoscale import Autoscaler
from mainboard.fleet.records import read_fleet
from mainboard.fleet.scaling import target
from mainboard.tasks import BATCH_QUEUE
from mainboard.tasks.workers import LocalWorkers
from tests.support.integration import fleet_iter, slow_spec
from tests.support.services import RedisServer

pytestmark = [pytest.mark.live, pytest.mark.timeout(120)]
RUN = slow_spec(0.2, stop={"max_samples": 160_000})  # 4 iterations of 4 batches


@pytest.fixture
def fleet(redis_server: RedisServer, tmp_path: Path) -> Iterator[LocalWorkers]:
    yield from fleet_iter(1, redis_server, tmp_path / "fleet")


def _workspace(directory: Path, server: RedisServer) -> Config:
    directory.mkdir(parents=True)
    (directory / "mainboard.toml").write_text(
        f'[workspace]\nname = "demand"\n\n[broker]\nurl = "{server.url}"\n\n'
        f'[fleet.pools.batch]\nhost = "local"\nqueues = ["{BATCH_QUEUE}"]\nmax-jobs = 8\n')
    return load_config(directory / "mainboard.toml")


def test_outstanding_batches_of_a_running_run_count_as_demand(
        tmp_path: Path, redis_server: RedisServer, fleet: LocalWorkers) -> None:
    config = _workspace(tmp_path / "ws", redis_server)
    scaler = Autoscaler(config)
    pool = config.fleet.pools["batch"]
    outcome: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: outcome.update(
        result=mainboard.integrate(RUN, workers=0, config=config)), daemon=True)
    thread.start()
    seen: list[tuple[int, int, int]] = []  # (outstanding, queue depth, target)
    while thread.is_alive():
        view = scaler.look("batch", pool, read_fleet(config.state_dir), redis_server.url).view
        seen.append((view.outstanding, view.queue_depth, target(view)))
        time.sleep(0.05)
    thread.join()
    assert outcome["result"].samples == 160_000
    assert max(o for o, _, _ in seen) == 4  # one iteration's batches
    hidden = [s for s in seen if s[0] > s[1]]
    assert hidden, f"the worker's batches were always in the queue: {seen}"
    assert all(t == min(8, max(o, d)) for o, d, t in seen), seen  # workers = 1 per allocation
    after = scaler.look("batch", pool, read_fleet(config.state_dir), redis_server.url).view
    assert (after.outstanding, target(after)) == (0, 0)
    assert math.isfinite(outcome["result"].estimate)
