"""External processes speaking framed JSON-RPC ("gammaboard-jsonrpc-v2", docs/process-protocol.md).

This package root re-exports the process-side helper, which is the standalone
``gammaboard_process`` package (numpy and the standard library only), so both
``from gammaboard_process import Evaluator`` and the older
``from mainboard.integrators.process import Evaluator`` work. The host side lives in the
submodules ``client`` (one process), ``pool`` (reuse, restart once), ``adapters``
(evaluator, batch transform, materializer) and ``sampler``; the worker imports those
explicitly.
"""

import gammaboard_process
from gammaboard_process import *  # noqa: F403 - the helper's names, one list: its __all__

__all__ = list(gammaboard_process.__all__)
