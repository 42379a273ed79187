"""`mainboard batch prepare|estimate`: what a fleet.toml's jobs must ship and what they will take.

``estimate`` contacts no target; ``prepare`` asks each target only whether it can be
reached (its ``access`` column, as ``compute`` says it). People get a table; ``--agent`` plain aligned columns (one
row per job, ``-`` where a value is unknown, a total row for ``prepare``); ``--json``
every field. A target nobody has timed has 0 setup samples and no setup or cost.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import click

from mainboard.cli import columns, common

if TYPE_CHECKING:
    from rich.table import Table

    from mainboard.batch.plan import Estimate, Prepared
    from mainboard.batch.spec import BatchSpec
    from mainboard.board import Board

_JSON = common.json_option()
_FLEET = click.argument("fleet", type=click.Path(dir_okay=False))


class _Row(Protocol):
    def as_json(self) -> dict[str, Any]: ...


R = TypeVar("R", bound=_Row)


def _size(n: float) -> str:
    units = ("B", "kB", "MB", "GB", "TB")
    step = 0
    while n >= 1000 and step < len(units) - 1:
        n, step = n / 1000, step + 1
    return f"{n:.0f} B" if step == 0 else f"{n:.1f} {units[step]}"


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}s" if value < 120 else f"{value / 60:.1f}m"


def _usd(value: float | None) -> str:
    return "-" if value is None else f"${value:.4f}"


@click.command("prepare")
@_FLEET
@_JSON
@click.option("--agent", is_flag=True,
              help="Plain aligned columns (job, target, files, raw_bytes, wire_bytes, since, "
                   "access) and a total row; - where unknown (for scripts and LLM agents).")
@click.pass_context
def prepare_cmd(ctx: click.Context, fleet: str, as_json: bool, agent: bool) -> None:
    """Per job, what must ship to its target (nothing runs; each target is only asked
    whether it can be reached: an unreachable one is a row that says so).

    A job's files and bytes are its target's mirror (shared by the jobs on that target)
    plus its own data the mirror does not carry; the total counts each mirror once.
    """
    from mainboard.batch.plan import prepare

    rows = _planned(ctx, fleet, as_json, agent, prepare)
    if rows is None:
        return
    if agent:
        _prepare_agent(rows)
        return
    columns.show(_prepare_table(rows))
    for target, access in dict.fromkeys((r.target, r.access) for r in rows):
        if access.partition(":")[0] not in ("here", "ready"):
            common.warn(f"{target}: {access}")


def _planned(ctx: click.Context, fleet: str, as_json: bool, agent: bool,
             plan: Callable[[Board, BatchSpec], list[R]]) -> list[R] | None:
    """The plan's rows for the fleet file; None once they were printed as JSON."""
    from mainboard.batch.run import load_batch

    if as_json and agent:
        raise click.UsageError("--json and --agent are alternatives; give one")
    with common.board(ctx) as board:
        rows = plan(board, load_batch(fleet, board.config))
    if as_json:
        common.echo_json([r.as_json() for r in rows], default=str)
        return None
    return rows


def _prepare_agent(rows: list[Prepared]) -> None:
    from mainboard.batch.plan import shipped, total
    out: list[list[object]] = []
    for r in rows:
        since = "in-place" if r.in_place else (
            r.last_sync.isoformat(timespec="seconds") if r.last_sync else "never")
        out.append([r.name, r.target, *shipped(r), since, r.access])
    whole = total(rows)
    out.append(["total", f"{whole.targets}-targets", whole.files, whole.raw_bytes,
                whole.wire_bytes, None, None])
    columns.echo(("job", "target", "files", "raw_bytes", "wire_bytes", "since", "access"), out)


def _prepare_table(rows: list[Prepared]) -> Table:
    from rich.text import Text

    table = columns.table("JOB", "TARGET", "ACCESS", "FILES", "RAW", "WIRE", "LAST SYNC",
                          "EXTRA DATA", "POLICY", fold=2)
    for r in rows:
        files = "in place" if r.in_place else str(r.files)
        state = r.access.partition(":")[0]  # the reason follows the table, one line a target
        when = r.last_sync.strftime("%Y-%m-%d %H:%M") if r.last_sync else "never"
        extra = (f"{len(r.extra_files)} files, {_size(r.extra_raw_bytes)} -> "
                 f"{_size(r.extra_wire_bytes)}") if r.extra_files else "-"
        table.add_row(Text(r.name), Text(r.target),
                      Text(state, style="green" if state in ("here", "ready") else "yellow"), files, _size(r.raw_bytes),
                      f"{_size(r.wire_bytes)} {r.codec}", when, extra,
                      Text(r.policy, style="green" if r.policy == "ok" else "yellow"))
    return table


@click.command("estimate")
@_FLEET
@_JSON
@click.option("--agent", is_flag=True,
              help="Plain aligned columns (job, target, kind, hardware, wire_bytes, runtime_s, "
                   "setup_p50_s, setup_p90_s, setup_samples, rate_usd_hr, expected_usd, "
                   "p90_usd); - where unknown (for scripts and LLM agents). An environment "
                   "still to build adds its target's timed builds to setup (--json: env).")
@click.pass_context
def estimate_cmd(ctx: click.Context, fleet: str, as_json: bool, agent: bool) -> None:
    """Per job: setup p50/p90 from this workspace's past jobs, runtime, rate, cost.

    A target nobody has timed shows 0 samples and no setup or cost: never a guess.
    """
    from mainboard.batch.plan import estimate

    rows = _planned(ctx, fleet, as_json, agent, estimate)
    if rows is None:
        return
    if agent:
        columns.echo(ESTIMATE_KEYS, (
            [r.name, r.target, r.kind, r.hardware, r.wire_bytes, r.runtime_s, r.setup.p50_s,
             r.setup.p90_s, r.setup.samples, r.usd_hr, r.expected_usd, r.p90_usd]
            for r in rows))
    else:
        columns.show(_estimate_table(rows))


ESTIMATE_KEYS = ("job", "target", "kind", "hardware", "wire_bytes", "runtime_s", "setup_p50_s",
                 "setup_p90_s", "setup_samples", "rate_usd_hr", "expected_usd", "p90_usd")


def _estimate_table(rows: list[Estimate]) -> Table:
    from rich.text import Text

    table = columns.table("JOB", "TARGET", "SETUP p50/p90 (n)", "RUNTIME", "USD/H", "COST exp/p90",
                   "NOTES")
    for r in rows:
        setup = (f"{_seconds(r.setup.p50_s)}/{_seconds(r.setup.p90_s)} ({r.setup.samples})"
                 if r.setup.samples else "never timed (0)")
        if r.env.state == "to build":
            setup += f" incl. env build ({r.env.build.samples})"
        cost = "-" if r.expected_usd is None else f"{_usd(r.expected_usd)}/{_usd(r.p90_usd)}"
        table.add_row(Text(r.name), Text(r.target), setup, _seconds(r.runtime_s),
                      "-" if r.usd_hr is None else f"{r.usd_hr:.4f}", cost,
                      Text("; ".join([r.rate, *r.notes] if r.kind == "provider" else r.notes)))
    return table


