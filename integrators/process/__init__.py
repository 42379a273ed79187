"""External processes speaking framed JSON-RPC ("gammaboard-jsonrpc-v2", docs/process-protocol.md).

This package root exposes only the process-side helper, which needs nothing but numpy and
the standard library, so ``from mainboard.integrators.process import Evaluator`` works in
whatever environment a user's integrand lives in. The host side lives in the submodules
``client`` (one process), ``pool`` (reuse, restart once), ``adapters`` (evaluator, batch
transform, materializer) and ``sampler``; the worker imports those explicitly.
"""

from mainboard.integrators.process import helper as _helper
from mainboard.integrators.process.helper import *  # noqa: F403 - the process-side API, listed once

__all__ = [name for name in _helper.__all__ if name != "HELPER_MODULES"]
