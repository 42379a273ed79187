"""Write an evaluator, sampler, batch transform or materializer as a child process.

Needs only numpy and the standard library, so it installs into whatever environment a
user's integrand lives in (``pip install ./gammaboard-process``); mainboard's own install
carries it too, and ``mainboard.integrators.process`` re-exports it. A process is a few
lines, the same as under gammaboard, whose helper has these names and call shapes::

    from gammaboard_process import Evaluator, run_evaluator

    class MyEvaluator(Evaluator):
        def eval(self, xs_discrete, xs_continuous):
            return xs_continuous[:, 0]

    run_evaluator(MyEvaluator)

Constructors receive ``discrete_cardinalities``, ``continuous_dims`` and each entry of the
run's ``args`` as keyword arguments (a sampler also ``evaluator_metadata`` when it accepts
it). A sampler restored from a snapshot is built with ``from_snapshot(snapshot=,
discrete_cardinalities=, continuous_dims=, init_args=)``. ``log(msg, level=...)`` sends a
line to the host's log; ``print()`` is captured at info, since stdout carries frames only.
The wire format is "gammaboard-jsonrpc-v2" (docs/process-protocol.md in mainboard).
"""

from gammaboard_process.api import (
    BatchTransform,
    Evaluator,
    MaterializedBatch,
    Materializer,
    SampleBatch,
    Sampler,
    TransformedBatch,
)
from gammaboard_process.roles import (
    run_batch_transform,
    run_evaluator,
    run_materializer,
    run_sampler,
)
from gammaboard_process.stdio import log

__version__ = "0.1.0"

__all__ = [
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
