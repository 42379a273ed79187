"""The `mainboard` command: a click group whose verbs live one per module.

User errors exit 2 with one line; tracebacks only with ``--debug``. Whatever an error
prints (its line, its traceback) goes through :func:`mainboard.redact.redact_text` first,
so a broker URL quoted by us, by redis-py or by kombu never shows its password.
"""

from __future__ import annotations

import sys
import traceback
from typing import NoReturn

import click

from mainboard.cli import common
from mainboard.errors import BrokerError, MainboardError, first_line
from mainboard.names import hold_gc, symbol_by_name
from mainboard.redact import install_log_redaction, redact_text

# Connection failures of the broker client libraries, by class name so that this module
# imports neither (kombu belongs to tasks/; redis-py costs every verb ~0.2 s at start-up).
_BROKER_ERRORS = frozenset({"redis.exceptions.ConnectionError", "redis.exceptions.TimeoutError",
                            "kombu.exceptions.OperationalError"})
# Every verb, imported when it is asked for (`mainboard integrate` loads no other verb's
# module: ~0.1 s of a run's start-up); `runs` brings the modules that add their subcommands
# (logs, pause, stop, remove, trace; tasks, append) to it.
VERBS: dict[str, str] = {
    name: f"mainboard.cli.{name}:{name}" for name in (
        "run", "facts", "compute", "broker", "config", "integrate", "runs", "flower", "submit",
        "jobs", "monitor", "fleet", "batch", "study", "dashboard", "metrics", "up", "env",
        "trace")}
VERB_EXTRAS: dict[str, tuple[str, ...]] = {"runs": ("mainboard.cli.runctl",
                                                   "mainboard.cli.runtasks")}
# Bare `mainboard` (click >= 8.2 raises this to print the help), never one error line.
_NO_ARGS_IS_HELP: type[Exception] | tuple[()] = getattr(click.exceptions, "NoArgsIsHelpError", ())


def _as_mainboard_error(exc: Exception) -> MainboardError | None:
    """Ours as it is; a broker connection failure as a BrokerError; anything else None (a bug)."""
    if isinstance(exc, MainboardError):
        return exc
    if any(f"{cls.__module__}.{cls.__qualname__}" in _BROKER_ERRORS for cls in type(exc).__mro__):
        return BrokerError(f"broker connection failed: {first_line(exc)}")
    return None


def _usage_exit(exc: click.exceptions.UsageError) -> NoReturn:
    """One line (not click's usage block): the command, the option, the value, the valid
    ones as click names them; exit 2 like every other bad input."""
    ctx = exc.ctx
    where = ctx.command_path if ctx is not None else "mainboard"
    message = exc.format_message()
    if ctx is not None and "Did you mean" not in message:
        valid: list[str] = []
        if message.startswith("No such command") and isinstance(ctx.command, click.Group):
            valid = ctx.command.list_commands(ctx)
        elif message.startswith("No such option"):
            valid = [o for p in ctx.command.get_params(ctx) if isinstance(p, click.Option)
                     for o in p.opts]
        if valid:
            message += f" Valid: {', '.join(valid)}."
    click.echo(f"{where}: error: {redact_text(message)}", err=True)
    sys.exit(2)


class _Group(click.Group):
    """Turns errors into one redacted line and their exit code; --debug adds the traceback,
    redacted too. A bug (not a MainboardError) still shows its traceback, redacted."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """The group's own options (``mainboard --bogus``) fail in one line too."""
        try:
            return super().parse_args(ctx, args)
        except _NO_ARGS_IS_HELP:
            raise  # bare `mainboard`: click prints the help, as asked
        except click.exceptions.UsageError as exc:
            _usage_exit(exc)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *VERBS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The verb's module imported on first use (:data:`VERBS`)."""
        if cmd_name not in self.commands and cmd_name in VERBS:
            for module in VERB_EXTRAS.get(cmd_name, ()):
                symbol_by_name(module)
            self.add_command(symbol_by_name(VERBS[cmd_name]), cmd_name)
        return super().get_command(ctx, cmd_name)

    def resolve_command(self, ctx: click.Context, args: list[str]
                        ) -> tuple[str | None, click.Command | None, list[str]]:
        """An unknown verb's suggestions drawn from every verb, loaded or not."""
        try:
            return super().resolve_command(ctx, args)
        except click.exceptions.NoSuchCommand as exc:
            raise click.exceptions.NoSuchCommand(
                exc.command_name, possibilities=self.list_commands(ctx), ctx=ctx) from None

    def invoke(self, ctx: click.Context):  # type: ignore[override]
        try:
            return super().invoke(ctx)
        except click.exceptions.UsageError as exc:
            _usage_exit(exc)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except Exception as exc:
            error = _as_mainboard_error(exc)
            if error is None or (ctx.obj and ctx.obj.get("debug")):
                click.echo(redact_text("".join(traceback.format_exception(exc))), err=True,
                           nl=False)
            if error is not None:
                click.echo(f"mainboard: error: {redact_text(str(error))}", err=True)
            sys.exit(1 if error is None else error.exit_code)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              envvar="MAINBOARD_CONFIG", help="Path to mainboard.toml (default: search upwards).")
@click.version_option(package_name="mainboard")
@click.pass_context
def cli(ctx: click.Context, debug: bool, config_path: str | None) -> None:
    """mainboard: batch work and Monte Carlo integration on every machine you can reach."""
    install_log_redaction()  # warnings logged by the coordinator or the libraries it drives
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug
    ctx.obj["config_path"] = config_path


def main() -> None:
    """Console-script entry point."""
    hold_gc()  # a verb's imports walked by no collection; released as it ends at the latest
    try:
        cli(prog_name="mainboard")
    except SystemExit as done:  # click's standalone mode always ends with one
        common.end(done.code)
