"""Every Redis key mainboard writes, defined once (the rq habit).

Why one module: the coordinator, the tasks and the CLI must agree byte for byte on
where a run lives, and a Redis shared with other users must see nothing of ours
outside ``PREFIX``. Celery's own keys (queues, results, unacked) live under
``CELERY_PREFIX`` through kombu's ``global_keyprefix`` (see ``mainboard.tasks.app``).

Layout (the Redis type of each key is in its builder's docstring)::

    mainboard:runs                                  zset   run id -> creation time
    mainboard:run:<run>                             string run definition (codec bytes)
    mainboard:run:<run>:state                       hash   status, iteration, samples, ...
    mainboard:run:<run>:snapshot:<k>                string snapshot after iteration k
    mainboard:run:<run>:it:<k>:results              hash   batch index -> BatchResult
    mainboard:run:<run>:it:<k>:done                 list   batch indices, pushed on merge
    mainboard:run:<run>:it:<k>:outstanding          zset   batch index -> deadline (unix s)
    mainboard:run:<run>:it:<k>:holders              hash   batch index -> worker hostname
    mainboard:run:<run>:lease                       string coordinator holding the run (TTL)
    mainboard:run:<run>:inbox                       string JSON: the lease holder takes appends
    mainboard:run:<run>:append-lock                 string `runs append` vs the run's end (TTL)
    mainboard:run:<run>:logs                        stream lines workers logged about the run
    mainboard:run:<run>:spans                       stream one entry per stage of each batch
    mainboard:run:<run>:workers                     hash   worker -> host, kind, job id, clock
    mainboard:run:<run>:forecast                    hash   run / fleet parts of the forecast
    mainboard:run:<run>:it:<k>:sampler              string sampler snapshot batches of k use
    mainboard:run:<run>:it:<k>:errors               hash   batch index -> error record
    mainboard:run:<run>:it:<k>:progress             hash   "<batch>:<attempt>" -> stages done
    mainboard:run:<run>:it:<k>:claim:<i>:<a>        string holder of attempt a (short TTL)
    mainboard:workers                               zset   worker hostname -> last beat
    mainboard:worker:<hostname>                     hash   pid, host, started, current batch
    mainboard:timeneed:<task id>                    hash   a refused task's put-backs
    mainboard:celery:...                            Celery/kombu keys (queues, results)
"""

from __future__ import annotations

import re

PREFIX = "mainboard:"
CELERY_PREFIX = f"{PREFIX}celery:"

_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_WORKER = re.compile(r"^[^\s:*?\[\]]{1,255}$")


def _run(run_id: str) -> str:
    """Validated run id: content-derived ids are hex, names stay glob- and colon-free."""
    if not isinstance(run_id, str) or not _RUN_ID.match(run_id):
        raise ValueError(f"invalid run id {run_id!r}: expected 1-128 characters of "
                         "letters, digits, '.', '_' or '-', starting with a letter or digit")
    return run_id


def _iteration(iteration: int) -> int:
    """Validated iteration number (a non-negative int, never a bool or a float)."""
    if type(iteration) is not int or iteration < 0:
        raise ValueError(f"invalid iteration {iteration!r}: expected an int >= 0")
    return iteration


RUN_STATUSES = ("running", "paused", "stopped", "finished", "failed")
RUN_CONTROLS = ("pause", "stop")


def runs_index() -> str:
    """zset of every run id, scored by creation time (unix seconds): `runs list`."""
    return f"{PREFIX}runs"


def run_definition(run_id: str) -> str:
    """string: the immutable, validated run definition, as codec bytes."""
    return f"{PREFIX}run:{_run(run_id)}"


def run_places(run_id: str) -> str:
    """string: where the run's files are as its coordinator sees them (JSON; workers map it)."""
    return f"{PREFIX}run:{_run(run_id)}:places"


def run_state(run_id: str) -> str:
    """hash: the run's live state (status, current iteration, samples, coordinator).

    ``status`` is one of ``RUN_STATUSES``; ``control`` (``pause`` or ``stop``) is a request
    the coordinator honours at the next batch boundary (``mainboard runs pause|stop``).
    ``outstanding`` (batches of the current iteration not yet merged) and ``queue`` (where
    they are sent) are the run's demand, which the fleet's autoscaler adds to queue depth.
    """
    return f"{PREFIX}run:{_run(run_id)}:state"


def run_snapshot(run_id: str, iteration: int) -> str:
    """string: sampler and accumulator state after iteration ``iteration`` (resume, clone)."""
    return f"{PREFIX}run:{_run(run_id)}:snapshot:{_iteration(iteration)}"


def run_logs(run_id: str) -> str:
    """stream (capped near 100k entries): every line a worker logged about the run."""
    return f"{PREFIX}run:{_run(run_id)}:logs"


def run_spans(run_id: str) -> str:
    """stream (capped): one entry per stage of each batch (stage, worker, start, duration)."""
    return f"{PREFIX}run:{_run(run_id)}:spans"


def run_workers(run_id: str) -> str:
    """hash: worker name -> JSON {host, kind, job_id, offset}: who worked on the run."""
    return f"{PREFIX}run:{_run(run_id)}:workers"


def run_forecast(run_id: str) -> str:
    """hash: the run's forecast: ``run`` (JSON, the coordinator's: error, samples to target,
    samples/s, deadline, budgets), ``fleet`` (JSON, the keeper's: per-pool rates and
    allocations, time, USD and core-hours to target), ``said`` (the one "cannot meet" line)."""
    return f"{PREFIX}run:{_run(run_id)}:forecast"


def run_pattern(run_id: str) -> str:
    """SCAN pattern matching every key of one run (for deletion), definition excluded."""
    return f"{PREFIX}run:{_run(run_id)}:*"


def _it(run_id: str, iteration: int) -> str:
    return f"{PREFIX}run:{_run(run_id)}:it:{_iteration(iteration)}"


def iteration_results(run_id: str, iteration: int) -> str:
    """hash: batch index -> BatchResult; written with HSETNX so a redelivery never overwrites."""
    return f"{_it(run_id, iteration)}:results"


def iteration_done(run_id: str, iteration: int) -> str:
    """list: batch indices pushed after their HSETNX succeeded; the coordinator BLPOPs it."""
    return f"{_it(run_id, iteration)}:done"


def workers_index() -> str:
    """zset: worker hostname -> time of its last heartbeat (unix s)."""
    return f"{PREFIX}workers"


def worker(hostname: str) -> str:
    """hash: one worker's registration (pid, host, started, batch in hand)."""
    if not isinstance(hostname, str) or not _WORKER.match(hostname):
        raise ValueError(f"invalid worker hostname {hostname!r}: expected 1-255 characters "
                         "without whitespace, ':' or glob characters")
    return f"{PREFIX}worker:{hostname}"


def sched_listing(cluster: str) -> str:
    """hash: ``at`` (Redis time of the listing, s) and ``data`` (JSON ``{job id: field}``):
    one cluster's last batched scheduler listing, shared by every process that asks."""
    return f"{PREFIX}sched:{_safe_cluster(cluster)}"


def sched_lock(cluster: str) -> str:
    """string with a TTL: held by the one process refreshing ``sched_listing(cluster)``."""
    return f"{PREFIX}sched-lock:{_safe_cluster(cluster)}"


def _safe_cluster(cluster: str) -> str:
    if not isinstance(cluster, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}",
                                                        cluster):
        raise ValueError(f"invalid cluster name {cluster!r}: letters, digits, _ . : -")
    return cluster


def worker_roles(worker_id: str) -> str:
    """hash: queue -> "1" (consume) or "0" (do not), set by ``fleet assign``/``unassign``;
    read by the worker at start, so a restarted worker keeps its roles."""
    if not isinstance(worker_id, str) or not _WORKER.match(worker_id):
        raise ValueError(f"invalid worker id {worker_id!r}")
    return f"{PREFIX}worker-roles:{worker_id}"


def _index(name: str, value: int) -> int:
    """Validated batch index or attempt number (a non-negative int)."""
    if type(value) is not int or value < 0:
        raise ValueError(f"invalid {name} {value!r}: expected an int >= 0")
    return value


def run_lease(run_id: str) -> str:
    """string with TTL: "host:pid:token" of the coordinator driving the run right now."""
    return f"{PREFIX}run:{_run(run_id)}:lease"


def run_inbox(run_id: str) -> str:
    """string JSON {token, host, store, open}: the coordinator holding the lease takes tasks
    ``runs append`` records in ``store`` (``mainboard.tasks.appends``); gone when it ends."""
    return f"{PREFIX}run:{_run(run_id)}:inbox"


def run_append_lock(run_id: str) -> str:
    """string with TTL: the holder of the lock an append and the run's end both take, so
    an append is either seen by the live coordinator or finds the run ended."""
    return f"{PREFIX}run:{_run(run_id)}:append-lock"


def iteration_sampler(run_id: str, iteration: int) -> str:
    """string: the sampler snapshot (codec bytes) every batch of ``iteration`` draws from."""
    return f"{_it(run_id, iteration)}:sampler"


def iteration_errors(run_id: str, iteration: int) -> str:
    """hash: batch index -> error record (stage, cause); written with HSETNX, fails the run."""
    return f"{_it(run_id, iteration)}:errors"


def iteration_progress(run_id: str, iteration: int) -> str:
    """hash: "<batch>:<attempt>" -> number of stages that attempt has finished (liveness)."""
    return f"{_it(run_id, iteration)}:progress"


def batch_claim(run_id: str, iteration: int, batch_index: int, attempt: int) -> str:
    """string with a short TTL refreshed by a heartbeat: the worker running that attempt now."""
    return (f"{_it(run_id, iteration)}:claim:{_index('batch index', batch_index)}:"
            f"{_index('attempt', attempt)}")


def time_need(task_id: str) -> str:
    """hash (TTL): a task put back for its time need: first put-back, count, and each
    refusing worker's walltime (``mainboard.tasks.timeneed``)."""
    if not isinstance(task_id, str) or not _WORKER.match(task_id):
        raise ValueError(f"invalid task id {task_id!r}: expected 1-255 characters without "
                         "whitespace, ':' or glob characters")
    return f"{PREFIX}timeneed:{task_id}"


def celery_queue(name: str) -> str:
    """list: the messages waiting in Celery queue ``name`` (kombu keeps each queue as a
    list under its name, behind ``CELERY_PREFIX``)."""
    return f"{CELERY_PREFIX}{name}"
