"""The process-side Python helper: write an evaluator, sampler, transform or materializer.

Needs only numpy and the standard library. A process is a few lines::

    import numpy as np
    from mainboard.integrators.process import Evaluator, run_evaluator

    class Sin(Evaluator):
        def eval(self, xs_discrete, xs_continuous):
            return np.sin(xs_continuous[:, 0])

    run_evaluator(Sin)

Constructors receive ``discrete_cardinalities``, ``continuous_dims`` and each entry of the
run's ``args`` as keyword arguments (a sampler also ``evaluator_metadata`` when it accepts
it). A sampler restored from a snapshot is built with ``from_snapshot(snapshot=,
discrete_cardinalities=, continuous_dims=, init_args=)``. ``log(msg, level=...)`` sends a
line to the host's log; ``print()`` is captured at info, since stdout carries frames only.
The wire format is gammaboard's "gammaboard-jsonrpc-v2", so the same file runs under both.
"""

from mainboard.integrators.process.helper_api import (
    BatchTransform,
    Evaluator,
    MaterializedBatch,
    Materializer,
    SampleBatch,
    Sampler,
    TransformedBatch,
)
from mainboard.integrators.process.helper_io import log
from mainboard.integrators.process.helper_roles import (
    run_batch_transform,
    run_evaluator,
    run_materializer,
    run_sampler,
)

HELPER_MODULES = ("__init__", "helper", "helper_api", "helper_io", "helper_roles", "wire")
"""The files a process needs (all stdlib + numpy): copy them to run without mainboard installed."""

__all__ = [
    "HELPER_MODULES",
    "BatchTransform",
    "Evaluator",
    "MaterializedBatch",
    "Materializer",
    "SampleBatch",
    "Sampler",
    "TransformedBatch",
    "log",
    "run_batch_transform",
    "run_evaluator",
    "run_materializer",
    "run_sampler",
]
