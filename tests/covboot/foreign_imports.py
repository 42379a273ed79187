"""Other projects' modules imported untraced: coverage's cost where it measures nothing.

On CPython 3.11 coverage traces with ``sys.settrace``, which runs every frame of the thread
unspecialized, whether or not its file is measured. A new process of ours spends much of its
life importing Celery, kombu, redis-py, pydantic and numpy (a worker's start: ~0.1 s of its
~0.25 s of tracing overhead): those modules' bodies measure nothing of ours, so the thread's
trace function is put aside while one of them executes and put back after, and a module of
ours that such an import pulls in is traced again while it executes. The lines of ours that
run are counted as before; only other projects' import-time frames are not traced.

Per thread (``sys.settrace`` is per thread; coverage's other threads keep their tracer), and
balanced: put aside and put back in the same frame, so coverage's own stack of frames stays
matched. Only ``SourceFileLoader``-style loaders (``_LoaderBasics``) are wrapped: pytest's
rewriting loader for test modules and runpy's ``__main__`` keep whatever state they meet.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from importlib import _bootstrap_external  # type: ignore[attr-defined]
from types import ModuleType
from typing import Any

OURS = ("mainboard", "gammaboard_process")  # the package names of the wheel on fleet hosts


def install(root: str, bodies: bool = True,
            after: Callable[[ModuleType], None] | None = None) -> None:
    """Wrap the source loader's ``exec_module`` for this process (and its forks): other
    projects' module bodies untraced (unless not ``bodies``); ``after`` sees each module once
    it has executed."""
    loader = _bootstrap_external._LoaderBasics
    original = loader.exec_module
    if getattr(original, "_mainboard_coverage", False):
        return
    venv = os.path.join(root, ".venv") + os.sep
    root = root.rstrip(os.sep) + os.sep
    put_aside = threading.local()

    def ours(module: ModuleType) -> bool:
        if module.__name__.partition(".")[0] in OURS:
            return True
        path = getattr(module, "__file__", None) or ""
        return path.startswith(root) and not path.startswith(venv)

    def exec_module(self: Any, module: ModuleType) -> None:
        try:
            return run(self, module) if bodies else original(self, module)
        finally:
            if after is not None:
                after(module)

    def run(self: Any, module: ModuleType) -> None:
        tracer = sys.gettrace()
        if tracer is not None and not ours(module):
            stack = put_aside.__dict__.setdefault("tracers", [])
            stack.append(tracer)
            sys.settrace(None)
            try:
                return original(self, module)
            finally:
                stack.pop()
                sys.settrace(tracer)
        stack = put_aside.__dict__.get("tracers")
        if tracer is None and stack and ours(module):
            sys.settrace(stack[-1])
            try:
                return original(self, module)
            finally:
                sys.settrace(None)
        return original(self, module)

    exec_module._mainboard_coverage = True  # type: ignore[attr-defined]
    loader.exec_module = exec_module
