"""Where a run's Python integrand modules are imported from: next to the run file, the workspace.

A ``[integrand] kind = "python"`` target such as ``"ridge:ridge"`` names a module the
user keeps next to the run file or in the workspace root. :func:`use_import_roots`
puts those two directories at the front of this process's ``sys.path`` (the coordinator
builds the run here, before any worker starts) and remembers them, so local workers
started afterwards get the same directories on their ``PYTHONPATH``
(:func:`pythonpath`, used by ``tasks.workers.worker_env``). Fleet workers get their
host's workspace root (``mainboard.fleet.launch.worker_command``). Nobody has to set
``PYTHONPATH`` by hand. Pure standard library: importing this connects nowhere.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterable
from pathlib import Path

_REMEMBERED: list[str] = []  # import roots of this process, most recent first


def _unique(paths: Iterable[str | None]) -> list[str]:
    """Non-empty paths in order, each once."""
    return list(dict.fromkeys(p for p in paths if p))


def import_roots(run_file: str | os.PathLike[str] | None = None,
                 workspace: str | os.PathLike[str] | None = None) -> list[str]:
    """The absolute directories a run's Python modules come from: the run file's, then the
    workspace root (each once; None leaves one out)."""
    found = [Path(run_file).resolve().parent if run_file is not None else None,
             Path(workspace).resolve() if workspace is not None else None]
    return _unique(str(p) for p in found if p is not None)


def use_import_roots(run_file: str | os.PathLike[str] | None = None,
                     workspace: str | os.PathLike[str] | None = None) -> list[str]:
    """Make the run file's directory and the workspace root importable here and in local
    workers started from now on; returns them. Calling it again is harmless."""
    roots = import_roots(run_file, workspace)
    sys.path[:0] = [r for r in roots if r not in sys.path]
    _REMEMBERED[:0] = [r for r in roots if r not in _REMEMBERED]
    importlib.invalidate_caches()
    return roots


def remembered() -> list[str]:
    """The import roots :func:`use_import_roots` was given in this process."""
    return list(_REMEMBERED)


def pythonpath(*also: str, inherited: str | None = None) -> str:
    """A ``PYTHONPATH`` value: the remembered import roots, then ``also``, then
    ``inherited`` (the caller's own ``PYTHONPATH``), each directory once."""
    tail = (inherited or "").split(os.pathsep)
    return os.pathsep.join(_unique([*_REMEMBERED, *also, *tail]))


__all__ = ["import_roots", "pythonpath", "remembered", "use_import_roots"]
