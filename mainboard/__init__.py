"""mainboard: batch work and distributed Monte Carlo integration on every machine you can reach."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mainboard.names import symbol_by_name

__version__ = "0.1.0"

__all__ = ["Board", "Result", "__version__", "integrate", "run", "span"]

if TYPE_CHECKING:
    from mainboard.board import Board
    from mainboard.runs.handle import run
    from mainboard.runs.userspans import span
    from mainboard.tasks.runner import Result, integrate


# The facade's names, loaded on first use (mainboard.names), so `import mainboard` (and the
# CLI) stays light: numpy and Celery load only when integrating.
_EXPORTS = {
    "Board": "mainboard.board:Board",
    "span": "mainboard.runs.userspans:span",  # user code's spans: a no-op outside a run
    "run": "mainboard.runs.handle:run",  # a run of the workspace: logs, timeline, pause, stop
    "integrate": "mainboard.tasks.runner:integrate",  # the one way into a run
    "Result": "mainboard.tasks.runner:Result",
}


def __getattr__(name: str) -> Any:
    """One of the facade's names, imported on first use."""
    if name in _EXPORTS:
        return symbol_by_name(_EXPORTS[name])
    raise AttributeError(f"module 'mainboard' has no attribute {name!r}")
