"""Calls into other projects that never call back into ours, made untraced under coverage.

The tracing cost ``foreign_imports`` avoids at import is paid again at run time: on CPython
3.11, while a thread has a trace function every frame of it runs unspecialized, measured or
not. redis-py is pure Python here (no hiredis): each command packs its arguments, takes a
connection from the pool and parses the reply in Python, in every coordinator, worker,
keeper and CLI command, and it calls nothing of ours while it does. The methods in
``LEAVES`` run with the thread's tracer put aside and put back when they return, so no line
of ours is lost; a method that could call a function of ours (a pub/sub handler, a
transaction's callable) is not listed. ``MAINBOARD_COVERAGE_TRACE_FOREIGN_CALLS=1`` turns it
off, to compare the per-file figures of a whole run with and without it.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

# module -> "Class.method" names; redis-py 5 to 8. kombu's redis transport reads its BRPOP
# replies through Redis.parse_response and sends through the connection's send_command.
LEAVES = {
    "redis.client": ("Redis.execute_command", "Redis.parse_response", "Pipeline.execute",
                     "PubSub.execute_command", "PubSub.parse_response"),
    "redis.connection": ("AbstractConnection.send_command", "AbstractConnection.read_response"),
}


def _untraced(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        tracer = sys.gettrace()
        if tracer is None:
            return method(*args, **kwargs)
        sys.settrace(None)
        try:
            return method(*args, **kwargs)
        finally:
            sys.settrace(tracer)

    call._mainboard_untraced = True  # type: ignore[attr-defined]
    return call


def wrap(module: ModuleType) -> None:
    """Put ``module``'s leaves behind the untraced wrapper (once; a missing name is left)."""
    for name in LEAVES.get(module.__name__, ()):
        owner_name, _, method_name = name.partition(".")
        owner = getattr(module, owner_name, None)
        method = getattr(owner, method_name, None) if owner is not None else None
        if method is not None and not getattr(method, "_mainboard_untraced", False):
            setattr(owner, method_name, _untraced(method))


def wrap_imported() -> None:
    """The leaves of modules imported before coverage started (a fork server's children)."""
    for name in LEAVES:
        if name in sys.modules:
            wrap(sys.modules[name])
