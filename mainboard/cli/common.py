"""What every verb repeats: the workspace's config or Board, ``--json`` and its output,
streamed output that ends cleanly on Ctrl-C or a closed pipe.

Imports of the rooms below stay inside the functions so ``mainboard --help`` loads
none of them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from mainboard.redact import redact_text

if TYPE_CHECKING:
    from mainboard.board import Board
    from mainboard.config import Config

F = TypeVar("F", bound=Callable[..., Any])


def warn(text: str) -> None:
    """One warning line on stderr, through the one redaction (a warning may quote a broker
    URL or a provider's answer, and so a credential)."""
    click.echo(f"mainboard: warning: {redact_text(str(text))}", err=True)


def config_path(ctx: click.Context) -> str | None:
    """``--config`` (or ``$MAINBOARD_CONFIG``) as the group stored it; None: search upwards."""
    return (ctx.obj or {}).get("config_path")


def load(ctx: click.Context) -> Config:
    """The workspace's mainboard.toml, loaded and checked."""
    from mainboard.config import load_config

    return load_config(config_path(ctx))


@contextmanager
def board(ctx: click.Context) -> Iterator[Board]:
    """A Board for the workspace, closed (its connections let go) when the verb ends."""
    from mainboard.board import Board

    with Board(config_path(ctx)) as opened:
        yield opened


def json_option(help: str = "Machine-readable output.") -> Callable[[F], F]:
    """The ``--json`` flag, passed to the verb as ``as_json``."""
    return click.option("--json", "as_json", is_flag=True, help=help)


def echo(message: object = "", *, err: bool = False, nl: bool = True) -> None:
    """``click.echo`` through the one redaction: every line a verb prints (results, a job's
    own log, a host's error) shows no broker password or provider key."""
    click.echo(redact_text(str(message)), err=err, nl=nl)


def echo_json(value: Any, **options: Any) -> None:
    """One JSON document on stdout, redacted; NaN is refused (it is not JSON)."""
    echo(json.dumps(value, allow_nan=False, **options))


@contextmanager
def streaming() -> Iterator[None]:
    """Around output that streams until something ends: Ctrl-C exits 130 without a traceback,
    and a reader that went away (``| head``) exits 141 quietly, as in a shell pipeline."""
    import os
    import sys

    try:
        yield
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(141)



_AT_ONCE: list[bool] = []  # set by a verb whose work is all done when it returns


def leave_at_once() -> None:
    """This verb leaves nothing that Python's teardown would finish: once it returns (or
    fails), :func:`end` ends the process without freeing every module's objects one by one
    (0.1-0.5 s of ``integrate``'s ~800 modules, measured; docs/performance.md "Startup")."""
    _AT_ONCE.append(True)


def end(code: object) -> None:
    """Exit with ``code`` (a ``SystemExit`` code) as Python would, but at once where the verb
    asked (:func:`leave_at_once`): its non-daemon threads joined, atexit handlers run
    (logging's flush, external processes released) and the streams flushed first, so only
    the teardown is skipped; else a plain ``sys.exit``."""
    import sys
    import threading

    from mainboard.names import release_gc  # inside, as every import here: test_jobs holds
    # this module's top-level imports to a light list (mainboard --help)

    release_gc()  # what the verb loaded frozen: the exit's collection does not walk it
    if not _AT_ONCE:
        sys.exit(code)
    for thread in threading.enumerate():
        if not thread.daemon and thread is not threading.current_thread():
            thread.join()
    if code is not None and not isinstance(code, int):  # sys.exit("text"): shown, exit 1
        print(code, file=sys.stderr)
        code = 1
    _exit_now(code or 0)


def _exit_now(code: int) -> NoReturn:
    """Atexit handlers run, the streams flushed (with what those printed), the process ended.
    Apart from :func:`end` because coverage's own atexit handler stops measuring: the lines
    after it would show as missed in every process (pyproject.toml's ``exclude_also``)."""
    import atexit
    import os
    import sys

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader that went away, a closed stream
            pass
    os._exit(code)
