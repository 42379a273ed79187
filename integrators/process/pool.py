"""Long-lived processes per (worker pid, run, role, command), restarted once after a crash.

Why a pool: starting an interpreter per batch costs far more than the batch itself, so a
worker keeps one process per run and role and reuses it. A crash is logged and the process
restarted once within the same call; a second crash fails the batch with the command, the
exit code and the stderr tail. Keys carry the pid, so a forked Celery child never talks
to (or signals) a process its parent started.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mainboard.errors import ConfigError, ProcessCrashed, ProcessError, ProcessRemoteError
from mainboard.integrators.process.client import LOG, ProcessClient
from mainboard.integrators.process.wire import (
    DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_SHUTDOWN_GRACE,
    DEFAULT_TERMINATE_GRACE,
)

SPEC_KEYS = ("command", "cwd", "env", "args", "request_timeout", "shutdown_grace",
             "terminate_grace")


@dataclass(frozen=True)
class ProcessSpec:
    """How to run one process: ``command`` (argv list), ``cwd``, ``env``, ``args`` and timings."""

    command: tuple[str, ...]
    cwd: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    args: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    shutdown_grace: float = DEFAULT_SHUTDOWN_GRACE
    terminate_grace: float = DEFAULT_TERMINATE_GRACE

    @classmethod
    def from_config(cls, data: Mapping[str, Any], *, where: str = "process",
                    extra_keys: tuple[str, ...] = ("kind",), base: str | Path | None = None,
                    ) -> ProcessSpec:
        """Validate a run-file table; every bad value is a ConfigError naming key and value."""
        def fail(key: str, msg: str, value: Any = None, valid: str | None = None) -> ConfigError:
            return ConfigError(msg, key=f"{where}.{key}", value=value, valid=valid)

        for key in data:
            if key not in SPEC_KEYS and key not in extra_keys:
                raise fail(key, "unknown key", valid=", ".join((*SPEC_KEYS, *extra_keys)))
        command = data.get("command")
        if (not isinstance(command, list | tuple) or not command
                or not all(isinstance(c, str) and c for c in command)):
            raise fail("command", "must be a non-empty list of strings (argv, no shell)",
                       command, '["python3", "my_evaluator.py"]')
        cwd = data.get("cwd")
        if cwd is not None and not isinstance(cwd, str):
            raise fail("cwd", "must be a directory path string", cwd)
        if cwd is not None and base is not None:
            cwd = str(Path(base) / cwd)
        env = data.get("env", {})
        if not isinstance(env, Mapping) or not all(isinstance(k, str) and isinstance(v, str)
                                                   for k, v in env.items()):
            raise fail("env", "must be a table of string values", env)
        args = data.get("args", {})
        if not isinstance(args, Mapping):
            raise fail("args", "must be a table (passed unchanged to the process)", args)
        try:
            json.dumps(args, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise fail("args", f"must be JSON-representable ({exc})", args) from None
        timings = {}
        for key, default, low in (("request_timeout", DEFAULT_REQUEST_TIMEOUT, 0.0),
                                  ("shutdown_grace", DEFAULT_SHUTDOWN_GRACE, -1.0),
                                  ("terminate_grace", DEFAULT_TERMINATE_GRACE, -1.0)):
            value = data.get(key, default)
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= low:
                raise fail(key, "must be a number of seconds "
                           + ("> 0" if low == 0 else ">= 0"), value)
            timings[key] = float(value)
        return cls(tuple(command), cwd, tuple(sorted(env.items())), dict(args), **timings)

    def client(self, role: str, logger: logging.Logger = LOG, run_id: str = "") -> ProcessClient:
        """A fresh, unstarted client for this spec (``run_id`` tags its log records)."""
        return ProcessClient(self.command, role=role, cwd=self.cwd, env=dict(self.env),
                             request_timeout=self.request_timeout,
                             shutdown_grace=self.shutdown_grace,
                             terminate_grace=self.terminate_grace, logger=logger, run_id=run_id)


class ManagedProcess:
    """A process that is (re)started on demand and initialized with fixed parameters."""

    def __init__(self, spec: ProcessSpec, role: str, init_params: Mapping[str, Any],
                 logger: logging.Logger = LOG, run_id: str = "") -> None:
        self.spec, self.role, self.logger, self.run_id = spec, role, logger, run_id
        self.init_params = dict(init_params)
        self.metadata: dict[str, Any] = {}
        self.starts = 0
        self._client: ProcessClient | None = None
        self._lock = threading.Lock()

    @property
    def client(self) -> ProcessClient | None:
        """The live client, if any (None before the first call and after a failure)."""
        return self._client

    def _ensure(self) -> ProcessClient:
        client = self._client
        if client is not None and client.alive:
            return client
        if client is not None:
            rc = client.returncode
            self._client = None
            raise ProcessCrashed(f"exited with code {rc} between requests", client.label,
                                 client.stderr_tail(), rc)
        client = self.spec.client(self.role, self.logger, self.run_id)
        self._client = client
        self.starts += 1
        client.start()
        try:
            result = client.initialize({**self.init_params, "args": dict(self.spec.args)})
        except ProcessRemoteError:
            self._discard()
            raise
        meta = result.get("metadata")
        self.metadata = dict(meta) if isinstance(meta, Mapping) else {}
        self.logger.info("started the %s process `%s` (pid %s)", self.role, client.label,
                         client.pid, extra={"process_run": self.run_id})
        return client

    def _discard(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            client.kill()
            client.close()

    def call(self, method: str, params: Mapping[str, Any], binary: bytes | memoryview = b"",
             ) -> tuple[dict[str, Any], bytearray]:
        """One request; after a crash, log it, restart once and retry, else raise with details."""
        with self._lock:
            for attempt in (1, 2):
                try:
                    return self._ensure().request(method, params, binary)
                except ProcessCrashed as exc:
                    self._discard()
                    if attempt == 2:
                        raise ProcessCrashed(f"crashed again after one restart: {exc.message}",
                                             exc.command, exc.stderr_tail, exc.returncode
                                             ) from None
                    self.logger.warning("%s process `%s` crashed (%s); restarting it once. "
                                        "stderr tail:\n%s", self.role, exc.command,
                                        exc.message, exc.stderr_tail)
                except ProcessRemoteError:
                    raise
                except ProcessError:
                    self._discard()
                    raise
        raise AssertionError("unreachable")

    def start(self) -> dict[str, Any]:
        """Start and initialize now (restart once on a crash); returns the process metadata."""
        with self._lock:
            for attempt in (1, 2):
                try:
                    self._ensure()
                    return self.metadata
                except ProcessCrashed:
                    self._discard()
                    if attempt == 2:
                        raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        """Shut the process down (close stdin, grace, SIGTERM, SIGKILL)."""
        with self._lock:
            client, self._client = self._client, None
            if client is not None:
                client.close()

    def forget_after_fork(self) -> None:
        """In a forked child: drop the client without signalling the parent's process."""
        if self._client is not None:
            self._client.forget_after_fork()
        self._client = None
        self._lock = threading.Lock()


class ProcessPool:
    """ManagedProcess objects keyed by (worker pid, run id, role, command, init params)."""

    def __init__(self) -> None:
        self._entries: dict[tuple[Any, ...], ManagedProcess] = {}
        self._lock = threading.Lock()

    def acquire(self, run_id: str, role: str, spec: ProcessSpec,
                init_params: Mapping[str, Any], logger: logging.Logger = LOG) -> ManagedProcess:
        """The process for this run and role in this worker, created (not yet started) if new."""
        digest = json.dumps([dict(init_params), dict(spec.args), spec.cwd, spec.env],
                            sort_keys=True, default=str)
        key = (os.getpid(), str(run_id), role, spec.command, digest)
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                entry = self._entries[key] = ManagedProcess(spec, role, init_params, logger,
                                                            str(run_id))
            return entry

    def __len__(self) -> int:
        return len(self._entries)

    def release(self, run_id: str | None = None) -> None:
        """Shut down the processes of one run (all runs when None) owned by this worker."""
        with self._lock:
            keys = [k for k in self._entries if run_id is None or k[1] == str(run_id)]
            entries = [self._entries.pop(k) for k in keys]
        for entry in entries:
            entry.close()

    def forget_after_fork(self) -> None:
        """In a forked child: drop every entry without touching the parent's processes."""
        for entry in self._entries.values():
            entry.forget_after_fork()
        self._entries.clear()
        self._lock = threading.Lock()


_POOL = ProcessPool()
atexit.register(_POOL.release)
os.register_at_fork(after_in_child=_POOL.forget_after_fork)


def default_pool() -> ProcessPool:
    """The pool of this worker process."""
    return _POOL
