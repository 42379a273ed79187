"""mainboard.integrators: the pure numerics of Monte Carlo integration (numpy in, numpy out).

No Celery, no Redis, no I/O (except :func:`load_run_file`). The names below load lazily, so
``import mainboard.integrators.process`` (the process-side helper) stays light.

    from mainboard.integrators import load_run_file, integrate_local
    result = integrate_local(load_run_file("RUN.toml"))
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Batch": "domain", "Domain": "domain", "Region": "domain", "validate": "domain",
    "LatentBatch": "seeding", "batch_rng": "seeding",
    "RunSpec": "spec", "load_run_file": "spec", "parse_run": "spec",
    "Integrand": "integrands", "make_integrand": "integrands",
    "register_integrand": "integrands",
    "Sampler": "samplers", "make_sampler": "samplers", "restore_sampler": "samplers",
    "merge_training": "samplers", "register_sampler": "samplers",
    "Partial": "accumulators", "RunAccumulator": "accumulators",
    "Run": "stages", "BatchResult": "stages", "IterationResult": "stages",
    "build_run": "stages", "sample": "stages", "materialize": "stages",
    "transform": "stages", "evaluate": "stages", "process_batch": "stages",
    "merge_results": "stages",
    "RunState": "driver", "RunResult": "driver", "integrate_local": "driver", "step": "driver",
    "to_plain": "plain",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'mainboard.integrators' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"mainboard.integrators.{module}"), name)
    globals()[name] = value
    return value
