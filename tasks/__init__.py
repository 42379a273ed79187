"""mainboard.tasks: the Celery app, the binary codec and thin tasks over the pure stages.

Importing this package is cheap and connects nowhere: the app (``mainboard.tasks.app``)
is built on first use, and the task objects below are looked up lazily, so
``mainboard.tasks.sample`` or ``mainboard.tasks.integrate.delay(run_dict)`` only then
read mainboard.toml and reach the broker.

Queues (why two: a long-running coordinator must never occupy a batch worker's slot):

- ``mainboard.batches``: the per-batch stage tasks. Start batch workers with
  ``celery -A mainboard.tasks.app worker -Q mainboard.batches --concurrency=1``
  (one process per core; ``mainboard integrate`` starts such workers itself when no
  fleet is up).
- ``mainboard.coordinator``: :mod:`mainboard.tasks.integrate`, which runs a whole
  integration from a pipeline. Start one worker for it with
  ``celery -A mainboard.tasks.app worker -Q mainboard.coordinator --concurrency=2``.
"""

from __future__ import annotations

import importlib
from typing import Any

from mainboard.names import symbol_by_name

BATCH_QUEUE = "mainboard.batches"
COORDINATOR_QUEUE = "mainboard.coordinator"
TASK_MODULES = ("mainboard.tasks.stages", "mainboard.tasks.raster", "mainboard.tasks.integrate")
STAGE_TASKS = ("sample", "materialize", "transform", "evaluate", "accumulate", "fused",
               "bundle", "raster")
STAGE_PREFIX = "mainboard.stages."
INTEGRATE_TASK = "mainboard.integrate"  # a whole run as one task (tasks/integrate.py)
# Names kept working after a rename (see CHANGELOG.md): old attribute -> stage task.
STAGE_ALIASES = {"materialise": "materialize"}
# Fleet worker settings the launcher needs too, here so it need not import Celery for them.
HEARTBEAT_S = 5.0  # a worker's heartbeat period (mainboard.tasks.fleet)
GPU_ENV = "MAINBOARD_GPU_PIN"  # set for GPU pools: one device per worker process
RETIRE_ENV = "MAINBOARD_RETIRE_BEFORE"  # seconds before the allocation ends (SLURM workers)
WALLTIME_ENV = "MAINBOARD_WALLTIME"  # seconds: a worker's allocation, for its time left
POOL_ENV = "MAINBOARD_FLEET_POOL"  # the [fleet.pools.NAME] a worker belongs to
# Celery's conf key holding mainboard's one-string broker URL when kombu's differs (Sentinel).
BROKER_URL_CONF = "mainboard_broker_url"


def broker_url_of(conf: Any) -> str:
    """The broker URL as mainboard spells it (``sentinel://...?master=`` whole, not kombu's
    split form): for mainboard's own Redis clients and for handing on to a coordinator."""
    return str(conf.get(BROKER_URL_CONF) or conf.broker_url)

__all__ = ["BATCH_QUEUE", "COORDINATOR_QUEUE", "INTEGRATE_TASK", "STAGE_TASKS", "TASK_MODULES", "task"]


def task(name: str) -> Any:
    """The stage task ``name`` bound to the process-wide app (built on first use)."""
    if name not in STAGE_TASKS:
        raise AttributeError(f"no stage task {name!r}; valid: {', '.join(STAGE_TASKS)}")
    importlib.import_module("mainboard.tasks.stages")
    return symbol_by_name("mainboard.tasks.app:get_app")().tasks[STAGE_PREFIX + name]


def __getattr__(name: str) -> Any:
    """Lazy ``mainboard.tasks.<stage>`` task objects and the ``integrate`` module-task."""
    if name in STAGE_TASKS:
        return task(name)
    if name in STAGE_ALIASES:
        return task(STAGE_ALIASES[name])
    if name in ("integrate", "stages", "app", "codec"):
        return importlib.import_module(f"mainboard.tasks.{name}")
    raise AttributeError(f"module 'mainboard.tasks' has no attribute {name!r}")
