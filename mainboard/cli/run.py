"""`mainboard run [--on HOST] -- CMD...`: run a command here or on a host, streaming its output."""

from __future__ import annotations

import os
import sys

import click

from mainboard.cli import common


def exit_code(returncode: int) -> int:
    """A shell-style exit code: a local command killed by signal N (returncode -N) -> 128+N."""
    return returncode if returncode >= 0 else 128 - returncode


@click.command("run", context_settings={"ignore_unknown_options": True,
                                        "allow_interspersed_args": False})
@click.option("--on", "host", default="local", show_default=True, metavar="HOST",
              help="Host from mainboard.toml to run on.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None,
              metavar="SECONDS", help="Kill the command after this many seconds (exit 124).")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_context
def run(ctx: click.Context, host: str, timeout: float | None, command: tuple[str, ...]) -> None:
    """Run CMD on HOST in its workspace root, printing output as it arrives.

    Exits with CMD's exit code. One argument is shell text run as-is
    (`mainboard run -- 'make && ./a.out | tee log'`); several are an argument list,
    each quoted (`mainboard run --on gpu -- python3 -c 'print(1)'`). CMD gets no stdin;
    Ctrl-C stops it on the host too. With [deps] python or [python.deps] declared, CMD
    runs inside that environment, built on first use (a "built"/"reused" line on stderr).
    """
    from mainboard.errors import CommandTimeout, first_line

    with common.board(ctx) as board:
        handle = board.on(host)
        shell_text = command[0] if len(command) == 1 else list(command)
        built = handle.environment(stream=True)
        if built is not None:
            common.echo(f"mainboard: env {'built' if built.installed else 'reused'}: {host} "
                        f"{built.key} python {built.python_version}", err=True)
        try:
            result = handle.run(shell_text, stream=True, timeout=timeout)
        except CommandTimeout as exc:
            common.echo(f"mainboard: {first_line(exc.args[0], limit=10_000)}", err=True)
            sys.exit(exc.returncode)
        except KeyboardInterrupt:  # the command was stopped too (local group / remote group)
            sys.exit(130)
        except BrokenPipeError:  # `mainboard run ... | head`: the reader left; so do we, quietly
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(141)
    sys.exit(exit_code(result.returncode))
