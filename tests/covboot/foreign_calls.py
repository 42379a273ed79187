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

paramiko's transport thread (``Transport.run``: key exchange, packet framing, channel
bookkeeping for every ssh command and every tunnel's bytes) runs untraced in the same way,
and the one function of ours it calls, a port forward's handler, runs traced again: the
handler given to ``request_port_forward`` is wrapped to take the thread's tracer back for
its call (``CALLBACKS``).
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

# module -> "Class.method" names, as in redis-py 8.2 and paramiko 5.1 (a name another release
# lacks is left as it is). kombu's redis transport reads its BRPOP replies through
# Redis.parse_response and sends through the connection's send_command.
LEAVES = {
    "redis.client": ("Redis.execute_command", "Redis.parse_response", "Pipeline.execute",
                     "PubSub.execute_command", "PubSub.parse_response"),
    "redis.connection": ("AbstractConnection.send_command", "AbstractConnection.read_response"),
    "paramiko.transport": ("Transport.run",),
}
# module -> ("Class.method", keyword): that argument, a function of ours the method hands on
# to code that LEAVES runs untraced, runs traced.
CALLBACKS = {"paramiko.transport": (("Transport.request_port_forward", "handler"),)}
_parked = threading.local()  # per thread: the tracers put aside, innermost last


def _untraced(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        tracer = sys.gettrace()
        if tracer is None:
            return method(*args, **kwargs)
        stack = _parked.__dict__.setdefault("tracers", [])
        stack.append(tracer)
        sys.settrace(None)
        try:
            return method(*args, **kwargs)
        finally:
            stack.pop()
            sys.settrace(tracer)

    call._mainboard_wrapped = True  # type: ignore[attr-defined]
    return call


def _retraced(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` traced again when it is called where a leaf put the tracer aside."""
    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        stack = _parked.__dict__.get("tracers")
        if sys.gettrace() is not None or not stack:
            return function(*args, **kwargs)
        sys.settrace(stack[-1])
        try:
            return function(*args, **kwargs)
        finally:
            sys.settrace(None)

    return call


def _handing_on(method: Callable[..., Any], keyword: str) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get(keyword) is not None:
            kwargs[keyword] = _retraced(kwargs[keyword])
        return method(*args, **kwargs)

    call._mainboard_wrapped = True  # type: ignore[attr-defined]
    return call


def _replace(module: ModuleType, name: str, wrapper: Callable[[Any], Any]) -> None:
    owner_name, _, method_name = name.partition(".")
    owner = getattr(module, owner_name, None)
    method = getattr(owner, method_name, None) if owner is not None else None
    if method is not None and not getattr(method, "_mainboard_wrapped", False):
        setattr(owner, method_name, wrapper(method))


def wrap(module: ModuleType) -> None:
    """Put ``module``'s leaves behind the untraced wrapper and its callbacks behind the
    traced one (once; a name this release lacks is left)."""
    for name in LEAVES.get(module.__name__, ()):
        _replace(module, name, _untraced)
    for name, keyword in CALLBACKS.get(module.__name__, ()):
        _replace(module, name, functools.partial(_handing_on, keyword=keyword))


def wrap_imported() -> None:
    """The leaves of modules imported before coverage started (a fork server's children)."""
    for name in LEAVES.keys() | CALLBACKS.keys():
        if name in sys.modules:
            wrap(sys.modules[name])
