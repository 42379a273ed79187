"""Mainboard's metrics on Flower's ``/metrics``: one scrape target, one credential.

A Prometheus that scrapes Flower already has its address and its basic auth (user
``mainboard``, ``password_file: .mainboard/flower.secret``); the workspace's series join
Flower's own ``flower_*`` ones there. The generated ``flowerconfig.py`` (executed by
Flower at start) calls :func:`install` before it puts ``/metrics`` behind basic auth, so
the endpoint answers 401 without the password exactly as before.

Flower renders ``/metrics`` on its event loop; gathering asks Redis and, for worker
states, the hosts' schedulers, so the handler here renders in a worker thread and the
loop (Flower's pages, its event capture) never waits on a slow host.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import prometheus_client
from flower.views.monitor import Metrics

from mainboard.config import Config, load_config
from mainboard.metrics.exposition import WorkspaceCollector

log = logging.getLogger("mainboard.metrics")
# What generate_latest writes (newer clients name 1.0.0 "latest"; 0.0.4 is what every
# Prometheus, 2.x and 3.x alike, reads without a fallback_scrape_protocol).
TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8"
_pool = ThreadPoolExecutor(1, thread_name_prefix="mainboard-metrics")  # one scrape at a time


def workspace(state_dir: Path, config_path: str | None) -> Config:
    """The workspace whose state is ``state_dir`` (its config file when it has one)."""
    if config_path:
        return load_config(config_path)
    return Config(path=None, root=Path(state_dir).parent)


def install(state_dir: str, config_path: str | None = None) -> None:
    """Inside the Flower process: register the workspace's collector with the registry
    Flower serves, and serve ``/metrics`` off the event loop."""

    collector = WorkspaceCollector(workspace(Path(state_dir), config_path))
    prometheus_client.REGISTRY.register(collector)

    async def get(self: Any) -> None:
        self.application.purge_offline_worker_metrics()
        body = await asyncio.get_running_loop().run_in_executor(
            _pool, prometheus_client.generate_latest)
        self.set_header("Content-Type", TEXT_FORMAT)
        self.write(body)

    Metrics.get = get  # type: ignore[method-assign]  # guarded right after (basic auth)


__all__ = ["install", "workspace"]
