"""``python -m mainboard.tasks.worker_main``: a Celery worker of mainboard's app, started
without Celery's command-line program.

Why not ``celery -A mainboard.tasks.app worker``: that program loads every installed
``celery.commands`` plugin before it parses a word (Flower's web app, click-repl with
prompt_toolkit, the amqp shell), about 0.35 s of a worker's 1 s start-up and 0.4 s of its
CPU, paid by every local worker of every run and every fleet worker. This entry builds the
same worker (``app.Worker``, what the ``worker`` subcommand builds) from the options
mainboard's own command lines use, spelled as Celery spells them, so a line in ``ps`` reads
the same and a user can still start a worker either way.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from mainboard.names import WORKER_GC_LIMIT_S, hold_gc, release_gc

if __name__ == "__main__":  # the program, not a module imported: before Celery's imports
    hold_gc(limit=WORKER_GC_LIMIT_S)  # released once the worker is ready

from celery import signals
from celery.utils.nodenames import default_nodename, host_format

from mainboard.tasks.app import get_app

POOLS = ("prefork", "solo", "threads")


def _names(text: str) -> list[str]:
    """A comma-separated option's names (``-Q a,b``), refused when it names none."""
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"{text!r}: give one or more names, comma-separated")
    return names


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        """One line naming the bad option and what is valid, exit 2 (not argparse's usage)."""
        self.exit(2, f"{self.prog}: {message} (see --help)\n")


def parser() -> argparse.ArgumentParser:
    """The options of ``celery worker`` that mainboard's worker commands pass."""
    p = _Parser(
        prog="python -m mainboard.tasks.worker_main",
        description="A Celery worker of mainboard's app (celery -A mainboard.tasks.app worker).")
    p.add_argument("-n", "--hostname", default=None,
                   help="node name; %%h is this machine's name (default: celery@%%h)")
    p.add_argument("-Q", "--queues", type=_names, default=None, help="queues, comma-separated")
    p.add_argument("-I", "--include", type=_names, default=None,
                   help="task modules to import, comma-separated")
    p.add_argument("-c", "--concurrency", type=int, default=None, help="pool processes")
    p.add_argument("-P", "--pool", choices=POOLS, default="prefork")
    p.add_argument("-l", "--loglevel", default="INFO",
                   choices=("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"),
                   type=str.upper)
    p.add_argument("--without-mingle", action="store_true")
    p.add_argument("--without-gossip", action="store_true")
    return p


@signals.worker_ready.connect
@signals.worker_process_init.connect
def _started(**_: Any) -> None:
    """The worker's start is over (the parent ready, or a pool child forked from it while
    held): the collector back on, what the start loaded frozen."""
    release_gc()


def main(argv: Sequence[str] | None = None) -> int:
    """Run one worker until it is told to stop; its exit code is Celery's."""
    options = parser()
    opts = options.parse_args(argv)
    if opts.concurrency is not None and opts.concurrency < 1:
        options.error(f"-c {opts.concurrency}: the pool needs at least 1 process")
    worker = get_app().Worker(
        hostname=host_format(default_nodename(opts.hostname)), queues=opts.queues,
        include=opts.include, concurrency=opts.concurrency, pool_cls=opts.pool,
        loglevel=opts.loglevel, without_mingle=opts.without_mingle,
        without_gossip=opts.without_gossip)
    worker.start()
    return int(worker.exitcode or 0)


if __name__ == "__main__":
    sys.exit(main())
