"""Where a run's Python integrand modules are imported from: next to the run file, the workspace.

A ``[integrand] kind = "python"`` target such as ``"ridge:ridge"`` names a module the
user keeps next to the run file or in the workspace root. :func:`use_import_roots`
puts those two directories at the front of this process's ``sys.path`` (the coordinator
builds the run here, before any worker starts) and remembers them, so local workers
started afterwards get the same directories on their ``PYTHONPATH``
(:func:`pythonpath`, used by ``tasks.workers.worker_env``). Nobody has to set
``PYTHONPATH`` by hand.

A fleet worker works in its host's synced copy of the workspace (``$MAINBOARD_WORKSPACE``,
the host's root, which the coordinator mirrors before a run). The coordinator publishes
the run's :func:`places` (workspace root, import roots, working directory, all as seen
here) and each fleet worker maps them onto its own copy (:func:`localize`): the import
roots, and the ``cwd`` and absolute workspace paths in ``command`` of every
``kind = "process"`` table. Any other worker (local, or deployed by hand) keeps the spec
as it is and adds the import roots that exist where it runs.
Pure standard library: importing this connects nowhere.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

WORKSPACE_ENV = "MAINBOARD_WORKSPACE"  # a fleet worker's copy of the workspace (its root)

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


def places(run_file: str | os.PathLike[str] | None,
           workspace: str | os.PathLike[str]) -> dict[str, Any]:
    """Where the run's files are, as the coordinator sees them (published to workers)."""
    return {"workspace": str(Path(workspace).resolve()), "cwd": os.getcwd(),
            "roots": import_roots(run_file, workspace)}


class Localized:
    """Maps the coordinator's workspace paths onto this worker's copy at ``here``."""

    def __init__(self, record: Mapping[str, Any], here: str) -> None:
        self.there = str(record["workspace"]).rstrip("/") or "/"
        self.here = here.rstrip("/") or "/"
        self.record = record

    def path(self, path: str) -> str:
        """``path`` inside the coordinator's workspace, moved into this copy (else as is)."""
        if path == self.there:
            return self.here
        if path.startswith(self.there + "/"):
            return self.here + path[len(self.there):]
        return path

    @property
    def cwd(self) -> str:
        """The coordinator's working directory here; its workspace copy when it lay outside
        the workspace on another machine (a relative path means the synced copy there)."""
        cwd = str(self.record.get("cwd") or self.there)
        moved = self.path(cwd)
        return moved if moved != cwd or self.here == self.there else self.here

    @property
    def roots(self) -> list[str]:
        """The run's import roots in this copy (those outside the workspace as they are)."""
        return _unique(self.path(str(r)) for r in self.record.get("roots", []))

    def process_table(self, table: Mapping[str, Any]) -> dict[str, Any]:
        """A ``kind = "process"`` table whose cwd and workspace paths point into this copy."""
        cwd = table.get("cwd")
        base = self.cwd if not isinstance(cwd, str) else \
            self.path(cwd if os.path.isabs(cwd) else os.path.join(self.cwd, cwd))
        command = [self.path(c) if isinstance(c, str) and c.startswith("/") else c
                   for c in table.get("command", [])]
        return {**table, "cwd": base, "command": command}

    def spec(self, spec: Any) -> Any:
        """The run-file dict with every process table localized (other values as they are)."""
        if isinstance(spec, Mapping):
            out = {k: self.spec(v) for k, v in spec.items()}
            if spec.get("kind") == "process" and isinstance(spec.get("command"), list):
                out = self.process_table(out)
            return out
        if isinstance(spec, list):
            return [self.spec(v) for v in spec]
        return spec


def localize(spec: Mapping[str, Any], record: Mapping[str, Any] | None,
             here: str | None = None) -> tuple[Any, list[str]]:
    """(spec with process paths in this copy, import roots here) for a published run.

    Only a fleet worker (``$MAINBOARD_WORKSPACE`` or ``here`` set) moves paths; any other
    worker keeps the spec as it is (its cwd is the coordinator's, or its own when deployed
    by hand) and gets the run's import roots that exist on its machine. A run published
    without places is left as it is, with no extra roots."""
    if not record:
        return spec, []
    here = here or os.environ.get(WORKSPACE_ENV)
    if not here:  # not a fleet worker: a local one, or one deployed by hand elsewhere
        return spec, [r for r in record.get("roots", []) if os.path.isdir(r)]
    found = Localized(record, here)
    return found.spec(spec), found.roots


def add_roots(roots: Iterable[str]) -> None:
    """Put ``roots`` first on this process's ``sys.path`` (a worker, for one run)."""
    wanted = list(roots)
    if sys.path[:len(wanted)] == wanted:
        return
    for root in reversed(wanted):
        if root in sys.path:
            sys.path.remove(root)
        sys.path.insert(0, root)
    importlib.invalidate_caches()


__all__ = ["WORKSPACE_ENV", "Localized", "add_roots", "import_roots", "localize", "places",
           "pythonpath", "remembered", "use_import_roots"]
