"""The one registry of code named by a string, ``"package.module:attr"``, imported when first
asked for (Celery's ``concurrency.ALIASES`` + ``symbol_by_name`` is the model).

Why by name: a table of kinds (samplers, integrands, latent batches, parent runs) names code
that builds on the table's own module, and a heavy or optional library (redis-py, Celery,
cryptography, optuna, Flower) costs start-up time that a verb which never touches it should
not pay. Kind tables keep their own ``"module:attr"`` strings and resolve them here;
libraries are named once in :data:`LAZY` and reached with :func:`lazy`. Ground module: stdlib
only, so every room (integrators/ included) may use it.
"""

from __future__ import annotations

import importlib
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


__all__ = ["LAZY", "lazy", "symbol_by_name"]
