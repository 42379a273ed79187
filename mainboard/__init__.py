"""mainboard: batch work and distributed Monte Carlo integration on every machine you can reach."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["Board", "Result", "__version__", "integrate", "run", "span"]

if TYPE_CHECKING:
    from mainboard.board import Board
    from mainboard.runs.handle import run
    from mainboard.runs.userspans import span
    from mainboard.tasks.runner import Result, integrate


def __getattr__(name: str) -> Any:
    """Import Board on first use, so `import mainboard` (and the CLI) stays light."""
    if name == "Board":
        from mainboard.board import Board

        return Board
    if name == "span":  # user code's spans: a no-op outside a run's worker or a job
        from mainboard.runs.userspans import span

        return span
    if name == "run":  # a run of the workspace: logs, timeline, workers, pause, stop
        from mainboard.runs.handle import run

        return run
    if name == "integrate":  # numpy and Celery load only when integrating
        from mainboard.tasks import runner  # the one way into a run (the fleet's hosts synced)

        return runner.integrate
    if name == "Result":
        from mainboard.tasks import runner

        return runner.Result
    raise AttributeError(f"module 'mainboard' has no attribute {name!r}")
