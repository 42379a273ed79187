"""Local batch workers: Celery worker subprocesses that a run starts and stops itself.

Why subprocesses and not threads: a worker is what a user would start by hand
(``celery -A mainboard.tasks.app worker -Q mainboard.batches --concurrency=1``, which
:mod:`mainboard.tasks.worker_main` starts without Celery's command-line program), one
process per core with real isolation, so the local case exercises exactly the code a
fleet runs. The broker URL (with its password) reaches them through the environment,
never the command line, where ``ps`` would show it. Each worker gets its own process
group (so stopping it stops its pool child too) and, on Linux, dies with its parent.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # not imported at run time: the CLI starts workers before it needs Celery
    import redis
    from celery import Celery

import redis as redis_lib

from mainboard.config.brokerurl import BROKER_URL_ENV
from mainboard.daemon import die_with_parent
from mainboard.errors import IntegrationFailed, UserError
from mainboard.services.acl import WORKER
from mainboard.tasks import BATCH_QUEUE
from mainboard.tasks.paths import pythonpath

log = logging.getLogger(__name__)

WORKER_MAIN = "mainboard.tasks.worker_main"  # `python -m` this: tasks/worker_main.py
STOP_TIMEOUT_S = 15.0
FLEET_WAIT_S = 5.0  # how long `workers=0` asks for a fleet worker before giving up


def worker_argv(python: str, queues: Sequence[str], concurrency: int,
                include: Sequence[str] = ()) -> list[str]:
    """The worker command line every worker of ours runs, local or on the fleet, before its
    node name (no secrets in it: the broker URL comes in the environment): ``celery worker``'s
    options through :mod:`mainboard.tasks.worker_main`, the same worker without Celery's
    command-line program and its plugins (0.4 s of CPU less a start).

    Without ``include`` no ``-I``: the app includes mainboard's task modules itself, so a
    local worker is the one a user, the systemd unit or compose starts with ``celery -A
    mainboard.tasks.app worker``.
    """
    argv = [python, "-m", WORKER_MAIN,
            "-Q", ",".join(queues), "-c", str(concurrency), "--pool=prefork",
            "--without-mingle", "--without-gossip", "--loglevel=INFO"]
    return argv + ["-I", ",".join(include)] if include else argv


def worker_command(node: str, queue: str = BATCH_QUEUE, concurrency: int = 1,
                   python: str = sys.executable) -> list[str]:
    """The command line of one local worker, named ``node``."""
    return [*worker_argv(python, [queue], concurrency), "-n", node]


def worker_env(broker_url: str) -> dict[str, str]:
    """Environment of a local worker: the broker URL, and the caller's import path (the run's
    import roots from ``tasks.paths.use_import_roots``, the current directory, then the
    caller's own PYTHONPATH), so a user's integrand module is found without setting it."""
    path = pythonpath(os.getcwd(), inherited=os.environ.get("PYTHONPATH"))
    return {**os.environ, BROKER_URL_ENV: broker_url, "PYTHONPATH": path}


class LocalWorkers:
    """``count`` batch workers on this machine, logs under ``log_dir``."""

    def __init__(self, count: int, broker_url: str, log_dir: Path, *,
                 queue: str = BATCH_QUEUE, prefix: str = "local",
                 env: Mapping[str, str] | None = None, python: str = sys.executable) -> None:
        self.count, self.broker_url, self.queue = count, broker_url, queue
        self.python = python  # the workspace's declared environment's, where it has one
        self.extra_env = dict(env or {})
        self.log_dir = Path(log_dir)
        tag = uuid.uuid4().hex[:8]
        self.nodes = [f"{prefix}-{tag}-{i}@%h" for i in range(count)]
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> LocalWorkers:
        """Launch every worker (they connect and start consuming on their own)."""
        for index in range(len(self.nodes)):
            self.launch(index)
        return self

    def log_of(self, index: int) -> Path:
        """Worker ``index``'s log file."""
        return self.log_dir / f"{self.nodes[index].split('@')[0]}.log"

    def launch(self, index: int) -> subprocess.Popen[bytes]:
        """Start worker ``index``; again after it died (a supervisor's restart), under the
        same node name and log, so it is the same worker to everyone watching."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        env = {**worker_env(self.broker_url), **self.extra_env}
        with open(self.log_of(index), "ab") as out:
            proc = subprocess.Popen(
                worker_command(self.nodes[index], self.queue, python=self.python),
                stdin=subprocess.DEVNULL,
                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                preexec_fn=die_with_parent if sys.platform == "linux" else None)
        if index < len(self.procs):
            self.procs[index] = proc
        else:
            self.procs.append(proc)
        return proc

    def stop(self, timeout: float = STOP_TIMEOUT_S, *, wait: bool = True) -> None:
        """Warm shutdown (finish the task in hand), then SIGKILL whatever is left.

        ``wait=False`` (a run that finished: nothing in hand is still needed) returns once
        every worker is told; a daemon thread reaps them and kills stragglers, and should
        this process exit first, each worker finishes its warm shutdown by itself (and its
        parent-death signal is SIGTERM again), so the command's exit does not wait on theirs.
        """
        for proc in self.procs:
            warm_stop(proc)
        if not wait:
            procs, self.procs = self.procs, []
            threading.Thread(target=_reap, args=(procs, timeout), name="reap-local-workers",
                             daemon=True).start()
            return
        _reap(self.procs, timeout)
        self.procs.clear()

    def exited(self) -> int:
        """How many of the workers have exited (a death the coordinator acts on)."""
        return sum(proc.poll() is not None for proc in self.procs)

    def check(self) -> None:
        """Raise when every local worker has exited (e.g. a broken install): nothing would run."""
        codes = [proc.poll() for proc in self.procs]
        if codes and all(code is not None for code in codes):
            raise IntegrationFailed(f"all {len(codes)} local workers exited (exit codes "
                                    f"{codes}); see their logs in {self.log_dir}")

    def __enter__(self) -> LocalWorkers:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def warm_stop(proc: subprocess.Popen[bytes]) -> None:
    """Celery's warm shutdown of one worker: TERM to its main process only, which lets the
    task in hand end and then stops its pool children itself (a TERM to the whole process
    group killed the child holding the task: ``WorkerLostError`` in the worker's log)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)


def _reap(procs: list[subprocess.Popen[bytes]], timeout: float) -> None:
    """Wait for signalled workers until ``timeout``, then SIGKILL each one left."""
    deadline = time.monotonic() + timeout
    for proc in procs:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


def listeners(r: redis.Redis) -> int | None:
    """How many other clients of the broker hold a pub/sub subscription: at most that many
    Celery workers can answer a broadcast (remote control rides on one); None when unsure
    (CLIENT LIST refused by an ACL, say). The embedded broker's worker user is not asked:
    its ACL refuses CLIENT (a coordinator a worker runs connects as that user), and each
    refusal would land in the broker's ACL log as a denial."""
    if r.connection_pool.connection_kwargs.get("username") == WORKER:
        return None
    try:
        me, clients = r.client_id(), r.client_list()
    except redis_lib.RedisError:
        return None
    return sum(1 for c in clients if str(c.get("id")) != str(me) and
               int(c.get("sub") or 0) + int(c.get("psub") or 0) + int(c.get("ssub") or 0))


def nobody_listens(r: redis.Redis) -> bool:
    """True when no other client of the broker holds a pub/sub subscription, so no Celery
    worker could answer a broadcast: asking would only wait out its timeout. False when
    unsure."""
    return listeners(r) == 0


def fleet_size(app: Celery, queue: str = BATCH_QUEUE, timeout: float = 1.0,
               r: redis.Redis | None = None) -> int:
    """How many running workers consume ``queue`` (asks them over the broker). With the
    broker's client ``r``: 0 at once when no worker could be listening, and the broadcast
    ends once every listener answered (a broadcast otherwise always waits out ``timeout``:
    1 s of every run's start); a listener that is no worker (Flower, say) or does not
    answer costs the timeout, as before."""
    heard = listeners(r) if r is not None else None
    if heard == 0:
        return 0
    replies = app.control.inspect(timeout=timeout, limit=heard).active_queues() or {}
    return sum(any(q.get("name") == queue for q in queues) for queues in replies.values())


def no_fleet(why: str) -> UserError:
    """``workers=0`` (``--workers 0``) asked for the fleet only, and there is none: how to start one."""
    return UserError(f"workers=0 (--workers 0) uses the running fleet only, and {why}: start "
                     "one with `mainboard fleet up`, or leave workers out to start local ones")


def require_fleet(app: Celery, broker: str, queue: str = BATCH_QUEUE,
                  wait_s: float = FLEET_WAIT_S,
                  standby: Callable[[], str | None] | None = None,
                  r: redis.Redis | None = None) -> int:
    """How many fleet workers consume ``queue``, asked until one answers within ``wait_s``
    (a worker busy starting may miss one broadcast); :func:`no_fleet` when none does,
    unless ``standby()`` names what will start one (an autoscaled pool at zero): 0 then."""
    deadline = time.monotonic() + wait_s
    while not (count := fleet_size(app, queue, r=r)):
        if time.monotonic() >= deadline:
            pool = standby() if standby is not None else None
            if pool is None:
                raise no_fleet(f"no worker consumes {queue} on the broker at {broker}")
            log.warning("no worker consumes %s yet: %s starts one for this run's batches",
                        queue, pool)
            return 0
        if r is not None:  # no broadcast waited: a pause before asking again
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
    return count


__all__ = ["LocalWorkers", "fleet_size", "listeners", "no_fleet", "require_fleet", "warm_stop",
           "worker_argv", "worker_command", "worker_env"]
