"""What a run is checked for before anything of it starts: its import roots set, its
evaluator class imported, its deadline resolved (``tasks.runner.integrate`` calls it); and
the embedded broker started early, on a thread, once a run passed.

Apart from the runner so that ``mainboard integrate`` can check a run first, then start the
embedded broker on a thread (:func:`start_in_background`), and only then import
the runner (Celery, the coordinator, the run's stores): Redis boots while those load, and a
run refused here still starts nothing. Calling it twice is harmless.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import threading

import redis
from redis.utils import get_lib_version

from mainboard.config import Config
from mainboard.config.brokerurl import BROKER_URL_ENV
from mainboard.errors import MainboardError
from mainboard.integrators.gammaboard_python import check_evaluator
from mainboard.integrators.spec import RunSpec
from mainboard.services.broker import EmbeddedBroker
from mainboard.tasks.goal import start_deadline
from mainboard.tasks.paths import use_import_roots


def preflight(spec: RunSpec, run_file: str | os.PathLike[str] | None, config: Config
              ) -> str | None:
    """Refuse ``spec`` (a user error, one line) while no broker, worker or receipt exists
    yet; else its ``[stop] deadline`` as an absolute UTC time (None without one)."""
    use_import_roots(run_file, config.root)  # a module next to the run file, or in the workspace
    where = None if run_file is None else str(run_file)
    check_evaluator(spec, where)  # an integrand that cannot be imported or built
    return start_deadline(spec, where)  # in the past: refused


def uses_embedded(config: Config, broker_url: str | None = None) -> bool:
    """Whether a run goes to the embedded broker: no URL handed in, none in
    ``$MAINBOARD_BROKER_URL``, no ``[broker] url``."""
    return not (broker_url or os.environ.get(BROKER_URL_ENV, "").strip() or config.broker.url)


def start_in_background(config: Config) -> threading.Thread | None:
    """The embedded broker started on a daemon thread where a run will use it (None: it
    will not), so redis-server boots while the caller goes on (``mainboard integrate``
    imports the runner meanwhile). A failure is left to the session's own start
    (``services.broker.resolve_broker_url``), which waits on the same lock and reports it
    in one line; join the thread before the process ends (a start cut short leaves no
    record of the server)."""
    if not uses_embedded(config):
        return None
    broker = EmbeddedBroker(config.state_dir, tls=config.broker.tls)
    # What the thread would import, imported here first (3 ms): two threads importing at once
    # broke the caller's `import celery` (KeyError 'celery.local' in importlib, seen once in
    # a full suite run) while this thread's first client read redis-py's version
    # (importlib.metadata -> email.parser) and resolved a host name (the idna codec).
    importlib.import_module("encodings.idna")
    get_lib_version()

    def start() -> None:
        with contextlib.suppress(MainboardError, OSError, redis.RedisError):
            broker.up()

    thread = threading.Thread(target=start, name="broker-start", daemon=True)
    thread.start()
    return thread


__all__ = ["preflight", "start_in_background", "uses_embedded"]
