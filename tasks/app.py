"""The Celery app: built from mainboard.toml, hardened, speaking only the mainboard codec.

``make_app()`` returns a fresh app; the module attribute ``app`` is built lazily on
first access so that ``celery -A mainboard.tasks.app worker`` (and Flower) work and a
plain ``import`` never touches a broker. The broker URL comes from, in order: the
``broker_url`` argument, ``$MAINBOARD_BROKER_URL`` (how bridges hand it to remote
workers), ``[broker] url`` of mainboard.toml, else the embedded Redis, which
``mainboard.services.broker.resolve_broker_url`` starts or reuses. Results go to the same Redis.

Workers need no ``-I``: the app includes the stage and integrate task modules, and its
``task_routes`` send stage tasks to ``mainboard.batches`` and whole runs to
``mainboard.coordinator`` (so ``celery -A mainboard.tasks.app worker -Q mainboard.batches``
is a complete batch worker).

Security: task and result messages use the msgpack codec only, and ``accept_content``
and ``result_accept_content`` list nothing else, so a pickled message is refused
(kombu raises ContentDisallowed; the worker logs it, drops the message, carries on).
Celery's event messages are JSON (``event_serializer``); event receivers accept
JSON on their own, so JSON is not needed in ``accept_content``. Remote-control
(ping/inspect, used by Flower) goes through the codec like tasks do.

Logs: once Celery has made a worker's log handlers, each gets mainboard.redact's
``RedactingFilter``, so no worker or task log line shows a broker password.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from celery import Celery
from celery.signals import after_setup_logger, after_setup_task_logger
from kombu import serialization

from mainboard import keys
from mainboard.config import Config, load_config
from mainboard.config.brokerurl import BROKER_URL_ENV, REDIS_URL_FORMS, redis_url_problem
from mainboard.errors import ConfigError, first_line
from mainboard.redact import install_log_redaction, redact_url
from mainboard.redisclient import is_sentinel, kombu_form
from mainboard.services.broker import resolve_broker_url
from mainboard.tasks import (
    BATCH_QUEUE,
    BROKER_URL_CONF,
    COORDINATOR_QUEUE,
    INTEGRATE_TASK,
    STAGE_PREFIX,
    TASK_MODULES,
    codec,
)
from mainboard.tasks.outage import BROKER_ERRORS as BROKER_LOSS

VISIBILITY_TIMEOUT_ENV = "MAINBOARD_VISIBILITY_TIMEOUT"
DEFAULT_VISIBILITY_TIMEOUT = 2 * 3600.0  # must exceed the longest task (seconds)
HEALTH_CHECK_INTERVAL = 25  # seconds between liveness checks of idle Redis connections
RESULT_EXPIRES = 24 * 3600  # Celery results are a convenience; runs keep their own state
# Where each task goes unless the caller names a queue: batch stages never share a queue
# with whole-run coordinator tasks (a coordinator waiting for its batches in a batch
# worker's only slot would deadlock that worker).
TASK_ROUTES: dict[str, dict[str, str]] = {
    STAGE_PREFIX + "*": {"queue": BATCH_QUEUE},
    INTEGRATE_TASK: {"queue": COORDINATOR_QUEUE},
}


def _env_broker_url() -> str | None:
    """``$MAINBOARD_BROKER_URL`` checked for a Redis scheme (never echoing the password)."""
    url = os.environ.get(BROKER_URL_ENV, "").strip()
    if not url:
        return None
    check_broker_url(url, source="environment", key=BROKER_URL_ENV)
    return url


def check_broker_url(url: str, *, source: str, key: str) -> None:
    """Raise ConfigError unless ``url`` is a well-formed redis:// or rediss:// URL, so a typo
    fails here in one line (password hidden), not inside kombu once workers are up."""
    problem = redis_url_problem(url)
    if problem:
        raise ConfigError(problem, file=source, key=key, value=redact_url(url),
                          valid=REDIS_URL_FORMS)


def _env_visibility_timeout() -> float | None:
    """``$MAINBOARD_VISIBILITY_TIMEOUT`` in seconds, validated; None when unset."""
    raw = os.environ.get(VISIBILITY_TIMEOUT_ENV, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise ConfigError("must be a positive number of seconds", file="environment",
                          key=VISIBILITY_TIMEOUT_ENV, value=raw,
                          valid="e.g. 7200 (longer than the longest task)")
    return value


def resolve_url(config: Config | None = None, broker_url: str | None = None) -> str:
    """The broker URL by precedence: argument, environment, mainboard.toml, embedded Redis."""
    if broker_url:
        check_broker_url(broker_url, source="argument", key="broker_url")
        return broker_url
    from_env = _env_broker_url()
    if from_env:
        return from_env

    return resolve_broker_url(config if config is not None else load_config())


def settings(broker_url: str, *, visibility_timeout: float = DEFAULT_VISIBILITY_TIMEOUT
             ) -> dict[str, Any]:
    """The hardened Celery configuration for ``broker_url`` (see ARCHITECTURE.md)."""
    if not visibility_timeout > 0:
        raise ValueError(f"visibility_timeout must be > 0 seconds, got {visibility_timeout!r}")
    transport = {
        "global_keyprefix": keys.CELERY_PREFIX,
        "visibility_timeout": visibility_timeout,
        "health_check_interval": HEALTH_CHECK_INTERVAL,
        "socket_connect_timeout": 10,
        "socket_timeout": 30,  # > brpop_timeout; a vanished broker cannot hang a publish
        "socket_keepalive": True,
    }
    conf: dict[str, Any] = {
        "broker_url": broker_url,
        "result_backend": broker_url,
        "task_serializer": codec.SERIALIZER,
        "result_serializer": codec.SERIALIZER,
        "accept_content": [codec.CONTENT_TYPE],
        "result_accept_content": [codec.CONTENT_TYPE],
        "event_serializer": "json",
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "broker_transport_options": transport,
        "result_backend_transport_options": {"global_keyprefix": keys.CELERY_PREFIX},
        "redis_backend_health_check_interval": HEALTH_CHECK_INTERVAL,
        "redis_socket_keepalive": True,
        "result_backend_always_retry": True,
        "result_backend_max_retries": 10,
        "result_expires": RESULT_EXPIRES,
        "worker_cancel_long_running_tasks_on_connection_loss": True,
        "broker_connection_retry_on_startup": True,
        "broker_channel_error_retry": True,
        "task_track_started": True,
        "worker_send_task_events": True,
        "task_send_sent_event": True,
        "task_routes": TASK_ROUTES,
    }
    if is_sentinel(broker_url):
        # kombu and Celery's result backend ask the sentinels for the master on each
        # connect; mainboard's own clients read the one-string form back (broker_url_of).
        kombu_url, master = kombu_form(broker_url)
        conf.update(broker_url=kombu_url, result_backend=kombu_url,
                    **{BROKER_URL_CONF: broker_url})
        transport["master_name"] = master
        conf["result_backend_transport_options"]["master_name"] = master
        conf["result_backend_max_retries"] = 20  # backoff to 10 s: outlasts a failover
    if urlsplit(broker_url).scheme == "rediss" and "ssl_cert_reqs" not in broker_url:
        # TLS without an explicit choice verifies the server, as a browser would.
        conf["broker_use_ssl"] = {"ssl_cert_reqs": ssl.CERT_REQUIRED}
        conf["redis_backend_use_ssl"] = {"ssl_cert_reqs": ssl.CERT_REQUIRED}
    return conf


def make_app(config: Config | None = None, *, broker_url: str | None = None,
             name: str = "mainboard", visibility_timeout: float | None = None,
             include: Sequence[str] = TASK_MODULES) -> Celery:
    """A new Celery app with the hardened settings; see the module doc for the URL order.

    ``include`` lists the task modules a worker imports at start (by default the stage and
    integrate tasks), so ``celery -A mainboard.tasks.app worker -Q mainboard.batches`` needs
    no ``-I``; merely building the app imports none of them.
    """
    codec.register()
    url = resolve_url(config, broker_url)
    timeout = visibility_timeout if visibility_timeout is not None else (
        _env_visibility_timeout() or DEFAULT_VISIBILITY_TIMEOUT)
    # Every task goes through the time-need check before it starts (mainboard.tasks.timeneed).
    app = Celery(name, include=list(include), set_as_current=False,
                 task_cls="mainboard.tasks.timeneed:TimedTask")
    app.conf.update(settings(url, visibility_timeout=timeout))
    return app


@after_setup_logger.connect
@after_setup_task_logger.connect
def _redact_worker_logs(logger: logging.Logger | None = None, **_: Any) -> None:
    """Worker and task log lines pass through mainboard.redact once Celery made its handlers:
    a task, kombu or redis-py may log a broker URL, or an exception quoting one. A broker
    that went away (a restart, a Sentinel failover) is one line, not Celery's traceback."""
    install_log_redaction(logger)
    for handler in (logger or logging.getLogger()).handlers:
        if not any(isinstance(f, BrokerLossInOneLine) for f in handler.filters):
            handler.filters.insert(0, BrokerLossInOneLine())


class BrokerLossInOneLine(logging.Filter):
    """A record whose exception is a lost broker connection keeps its message and gains the
    cause's first line; the traceback goes: Celery and kombu reconnect on their own."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and isinstance(exc, BROKER_LOSS):
            record.msg, record.args = f"{record.getMessage()} ({first_line(exc)})", None
            record.exc_info, record.exc_text = None, None
        return True


def harden_process() -> None:
    """Refuse every serializer but ours and JSON process-wide, even where accept is unset."""
    serialization.disable_insecure_serializers(allowed=[codec.SERIALIZER, "json"])


_lock = threading.Lock()
_app: Celery | None = None


def get_app() -> Celery:
    """The process-wide app (built once, on first use) that workers and Flower load."""
    global _app
    with _lock:
        if _app is None:
            harden_process()
            _app = make_app()
            _app.set_current()
        return _app


def __getattr__(name: str) -> Any:
    """Lazy module attribute ``app`` (PEP 562), the name ``celery -A`` looks for."""
    if name == "app":
        return get_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["TASK_ROUTES", "get_app", "make_app", "resolve_url", "settings"]
