"""Workspace modules imported fresh: an edit between two runs reaches the second one.

A worker process (and a coordinator that runs several integrations) lives longer than
one run, and Python imports a module once. A ``kind = "python"`` integrand whose module
lives in the workspace (next to the run file or in the workspace root, see
:mod:`mainboard.tasks.paths`) would keep the first version forever, even after the mirror
brought the edited file to a fleet host. So every module loaded from an import root is
remembered with its file's (mtime, size); before a run is built, :func:`refresh` forgets
them all once one file changed (one may hold names imported from another), and a target
module that the run's roots now find in another file, and
:func:`changed` (a few ``stat`` calls) tells the worker's run cache to build again.
Modules outside the roots (mainboard, numpy, site-packages) are never touched.
Pure standard library.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import os
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

Stamp = tuple[int, int]
_SEEN: dict[str, tuple[str, Stamp]] = {}  # module name -> (file, stamp at import)


def _stamp(path: str) -> Stamp | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def _user_module(name: str, path: str, prefixes: Sequence[str]) -> bool:
    """A module of the user's under one of ``prefixes``: never mainboard itself, nor an
    installed package (a virtualenv inside the workspace stays out)."""
    if name == "mainboard" or name.startswith("mainboard.") or "-packages" + os.sep in path:
        return False
    real = os.path.realpath(path)
    return any(real.startswith(p) for p in prefixes)


def python_targets(spec: Mapping[str, Any]) -> list[str]:
    """The ``module:function`` targets of a run-file dict (every ``kind = "python"`` table
    and every histogram whose ``of`` is a function)."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, Mapping):
            if node.get("kind") == "python" and isinstance(node.get("target"), str):
                found.append(node["target"])
            if ":" in str(node.get("of", "")) and "bins" in node:  # a histogram's observable
                found.append(str(node["of"]))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(spec)
    return found


def _forget(name: str) -> None:
    """Drop ``name`` and its submodules, so the next import reads the files again."""
    for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
        sys.modules.pop(key, None)
        _SEEN.pop(key, None)


def changed() -> bool:
    """True when a remembered workspace module's file moved on since it was imported."""
    return any(_stamp(path) != stamp for path, stamp in list(_SEEN.values()))


def refresh(targets: Iterable[str], roots: Sequence[str]) -> None:
    """Before building a run: forget every workspace module once one file changed, and
    target modules that ``roots`` (the run's import roots, first wins) find elsewhere now."""
    if changed():  # all of them: an unchanged module may hold names from an edited one
        for name in list(_SEEN):
            _forget(name)
    for target in targets:
        top = target.partition(":")[0].partition(".")[0]
        loaded = getattr(sys.modules.get(top), "__file__", None)
        if loaded is None or not roots or top == "mainboard":
            continue
        spec = importlib.machinery.PathFinder.find_spec(top, list(roots))
        if spec is not None and spec.origin and os.path.realpath(spec.origin) \
                != os.path.realpath(loaded):
            _forget(top)
    importlib.invalidate_caches()


def remember(roots: Sequence[str], before: Iterable[str] = ()) -> None:
    """Stamp the modules loaded since ``before`` (names in sys.modules then) whose files
    lie under ``roots``: what a run's build imported from the workspace."""
    prefixes = [os.path.realpath(r).rstrip(os.sep) + os.sep for r in roots]
    if not prefixes:
        return
    old = set(before)
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if name in _SEEN or name in old or not isinstance(path, str) \
                or not _user_module(name, path, prefixes):
            continue
        stamp = _stamp(path)
        if stamp is not None:
            _SEEN[name] = (path, stamp)


@contextlib.contextmanager
def fresh(spec: Mapping[str, Any], roots: Sequence[str]) -> Iterator[None]:
    """Around building a run from ``spec`` (a run-file dict): :func:`refresh` before, and
    :func:`remember` what the build imported from ``roots`` after. Modules loaded before
    (the caller's own, a test suite's) are never stamped, so never forgotten."""
    refresh(python_targets(spec), roots)
    before = set(sys.modules)
    yield
    remember(roots, before)


__all__ = ["changed", "fresh", "python_targets", "refresh", "remember"]
