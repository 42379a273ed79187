"""The one registry of code named by a string, ``"package.module:attr"``, imported when first
asked for (Celery's ``concurrency.ALIASES`` + ``symbol_by_name`` is the model).

Why by name: a table of kinds (samplers, integrands, latent batches, parent runs) names code
that builds on the table's own module, and a heavy or optional library (redis-py, Celery,
cryptography, optuna, Flower) costs start-up time that a verb which never touches it should
not pay. Kind tables keep their own ``"module:attr"`` strings and resolve them here;
libraries are named once in :data:`LAZY` and reached with :func:`lazy`. And how a process of
ours loads its code: :func:`hold_gc` keeps the garbage collector off while it imports,
:func:`release_gc` gives it back with what was loaded frozen. Ground module: stdlib only, so
every room (integrators/ included) may use it.
"""

from __future__ import annotations

import gc
import importlib
import os
import signal
import threading
from typing import Any

# name -> "module:attr" ("module" alone: the module itself). What is here is imported on
# first use only, so `mainboard --help`, `runs list` and a worker's boot do not pay for it.
LAZY: dict[str, str] = {
    "redis": "redis",                                   # ~0.3 s; only when a client is made
    "redis.Sentinel": "redis.sentinel:Sentinel",
    "celery.app": "mainboard.tasks.app:make_app",       # Celery + kombu: only where one is sent
    "cryptography.serialization": "cryptography.hazmat.primitives.serialization",
    "cryptography.x509": "cryptography.x509",           # TLS material: `[broker] tls` only
    "cryptography.oid": "cryptography.x509.oid",
    "cryptography.hashes": "cryptography.hazmat.primitives.hashes",
    "cryptography.ec": "cryptography.hazmat.primitives.asymmetric.ec",
    "flower.monitor": "flower.views.monitor",           # Flower's own process only
    "tornado.web": "tornado.web",
    "fleet.sync": "mainboard.fleet.sync:sync_fleet",    # paramiko, the mirror: a fleet only
    "fleet.standby": "mainboard.fleet.sync:standby_pool",
    "paramiko": "paramiko",                             # ~0.25 s: ssh hosts only, not a quoted word
    "numba.stratified": "mainboard.integrators.grid_kernel:stratified_slice",  # numba: optional
    "numba.training": "mainboard.integrators.grid_kernel:training_sums",
    "numba.columns": "mainboard.integrators.genz_kernel:column_sums",
}


def symbol_by_name(target: str) -> Any:
    """The object ``target`` names (``"mainboard.parents.scan:drive"``), its module imported;
    ``"package.module"`` without ``:attr`` is the module itself."""
    module, _, attr = target.partition(":")
    loaded = importlib.import_module(module)
    return getattr(loaded, attr) if attr else loaded


def lazy(name: str) -> Any:
    """What :data:`LAZY` names ``name``, imported on this first use (then Python's cache)."""
    return symbol_by_name(LAZY[name])


# ----- the garbage collector while a process of ours starts -----------------------------
#
# Held off while the process imports, then given back with everything loaded so far frozen.
# Why: CPython's collector walks the objects imports create again and again as the heap
# grows, and once more at exit: about a third of a Celery worker's start-up CPU
# (docs/performance.md "Garbage collection at start-up"), and the test suite starts
# hundreds. Frozen objects (``gc.freeze``) are never walked again, the exit's collection
# included, and a forked pool child does not write to their pages. Only a process that
# called hold_gc is changed by release_gc: a program importing mainboard as a library keeps
# its settings, a collector turned off on purpose stays off, and a hold with a limit ends
# after ``limit`` seconds at the latest, so nothing long-lived runs without a collector.

#: ``MAINBOARD_GC_HOLD=0`` leaves the collector as Python sets it (to compare, or to rule
#: this out).
GC_HOLD_ENV = "MAINBOARD_GC_HOLD"
#: Seconds a held command keeps the collector off at most (its start-up takes one or two).
COMMAND_GC_LIMIT_S = 10.0
#: The same for a worker, released when ready: a loaded machine's worker may take longer.
WORKER_GC_LIMIT_S = 60.0

_GC_LOCK = threading.Lock()
# one entry while held: the limit's event (or None) and the pid that held (a forked child's
# copy of the entry names its parent)
_GC_HELD: list[tuple[threading.Event | None, int]] = []


def _new_gc_lock_in_child() -> None:
    """A fork taken while another thread held the lock would leave the child's copy taken."""
    global _GC_LOCK
    _GC_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_new_gc_lock_in_child)


def _gc_limit(cancelled: threading.Event, limit: float) -> None:
    """The limit's thread: :func:`release_gc` once ``limit`` seconds have passed."""
    if not cancelled.wait(limit):
        release_gc()


def hold_gc(limit: float | None = COMMAND_GC_LIMIT_S) -> None:
    """Collector off until :func:`release_gc` (or ``limit`` seconds, when given: a daemon
    thread releases it). A process that forks while held (a worker's pool) releases in the
    child too: the limit's thread does not survive a fork."""
    with _GC_LOCK:
        if _GC_HELD or not gc.isenabled() or os.environ.get(GC_HOLD_ENV) == "0":
            return
        gc.disable()
        cancelled = None
        if limit is not None:
            cancelled = threading.Event()
            limiter = threading.Thread(target=_gc_limit, args=(cancelled, limit),
                                       name="gc-hold-limit", daemon=True)
            # started with every signal blocked, which it keeps: a Ctrl-C the kernel handed
            # to it would leave the main thread asleep in a blocking call (seen: a `mainboard
            # run` in its wait did not stop)
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
            try:
                limiter.start()
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        _GC_HELD.append((cancelled, os.getpid()))


def release_gc() -> None:
    """Everything alive now frozen, the collector on again; nothing if not held. In a
    forked child of a held process the parent's limit is not touched (its thread is not
    there, its event's lock may be)."""
    with _GC_LOCK:
        if not _GC_HELD:
            return
        cancelled, holder = _GC_HELD.pop()
        if cancelled is not None and holder == os.getpid():
            cancelled.set()
        gc.freeze()
        gc.enable()


def gc_held() -> bool:
    """Whether this process holds the collector off now."""
    return bool(_GC_HELD)


__all__ = ["COMMAND_GC_LIMIT_S", "GC_HOLD_ENV", "LAZY", "WORKER_GC_LIMIT_S", "gc_held", "hold_gc",
           "lazy", "release_gc", "symbol_by_name"]
