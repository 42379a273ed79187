"""Jobs anywhere: specs, submit/wait/logs/pull/cancel, the job store and the monitor.

``from mainboard.jobs import Job, submit`` keeps working: they live in
:mod:`mainboard.jobs.job` and load on first use, so importing the package stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mainboard.names import symbol_by_name

if TYPE_CHECKING:
    from mainboard.jobs.job import Job, list_jobs, submit

__all__ = ["Job", "list_jobs", "submit"]


def __getattr__(name: str) -> Any:
    """``Job``, ``list_jobs``, ``submit`` from :mod:`mainboard.jobs.job`, on first use."""
    if name in __all__:
        return symbol_by_name(f"mainboard.jobs.job:{name}")
    raise AttributeError(f"module 'mainboard.jobs' has no attribute {name!r}")
