"""How the CLI runs and shows parent runs (scan, tune, campaign): thin, over parents/.

A parent's progress is one line per child on stderr as it ends; its table (or ``--json``,
or ``--csv``) on stdout.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from mainboard.cli import common

if TYPE_CHECKING:
    from mainboard.config import Config
    from mainboard.integrators.spec_parents import ParentSpec
    from mainboard.parents.children import Outcome
    from mainboard.runs.store import RunHistory


def report(outcome: Outcome) -> None:
    """One stderr line per child that ended."""
    from mainboard.cli.runview import pm

    point = " ".join(f"{k}={v}" for k, v in outcome.child.point.items())
    row = outcome.row
    what = pm(row["estimate"], row["error"]) if outcome.status == "finished" and \
        row.get("estimate") is not None else f"{outcome.status}: {outcome.error}"
    again = " (from its receipts)" if outcome.reused else ""
    print(f"{outcome.child.label:>6} {outcome.run_id} {point}  {what}{again}", file=sys.stderr,
          flush=True)


def emit(data: dict[str, Any], as_json: bool, as_csv: bool = False) -> None:
    """The parent's table on stdout: text, one JSON object, or CSV."""
    from mainboard.parents.table import text, to_csv

    if as_json:
        common.echo_json(data)
    elif as_csv:
        common.echo(to_csv(data), nl=False)
    else:
        common.echo(text(data))


def integrate(spec: ParentSpec, run_file: str, config: Config, workers: int | None,
              as_json: bool) -> None:
    """`mainboard integrate PARENT.toml`: the one run entry, its table printed."""
    from mainboard.tasks.runner import integrate as run_integration

    table = run_integration(spec, workers, config=config, run_file=run_file, report=report)
    assert isinstance(table, dict)  # a parent's table
    emit(table, as_json)


def resume(history: RunHistory, config: Config, workers: int | None, as_json: bool) -> None:
    """`mainboard runs resume PARENT`."""
    from mainboard.parents.driver import resume_parent

    emit(resume_parent(history, workers, config=config, report=report), as_json)


def show(history: RunHistory, as_json: bool, as_csv: bool) -> None:
    """`mainboard runs show PARENT`."""
    from mainboard.parents.table import view

    emit(view(history), as_json, as_csv)
