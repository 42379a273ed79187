"""`mainboard study run|show|list`: many simultaneous jobs under one identity, with a ledger.

``run`` prints the study id on stdout (or one JSON object) and one line per job on
stderr: submitted, adopted, skipped (completed or in flight: the same run id never runs
twice by accident) or failed to submit; it exits 1 when a job could not be submitted.
Verdicts reach the ledger through `mainboard monitor`; ``show`` reads only the ledger.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from mainboard.cli import common

if TYPE_CHECKING:
    from mainboard.hosts.access import Hosts
    from mainboard.study.ledger import StudyView
    from mainboard.study.run import Outcome

_JSON = common.json_option()


@click.group("study")
def study() -> None:
    """Studies: run ids by content, data shipped, one ledger of verdicts per study."""


def run_and_report(board: Hosts, path: str, as_json: bool) -> int:
    """Run the study file ``path``, report it; the exit code (1: a job was not submitted)."""
    from mainboard.study.run import run_study

    def event(outcome: Outcome) -> None:
        if not as_json:
            common.echo(outcome.line(), err=True)

    found, outcomes = run_study(board, path, on_event=event)
    failed = sum(o.action == "failed" for o in outcomes)
    if as_json:
        common.echo_json({"study": found.id, "jobs": [o.as_json() for o in outcomes],
                          "failed": failed})
    else:
        common.echo(found.id)
    return 1 if failed else 0


@study.command("run")
@click.argument("file", type=click.Path(dir_okay=False))
@common.json_option('One JSON object: {"study", "failed", "jobs": [{"name", "run_id", "target", '
                    '"action": "submitted" | "adopted" | "skipped" | "failed", "job", "why"}]}.')
@click.pass_context
def run_cmd(ctx: click.Context, file: str, as_json: bool) -> None:
    """Submit every run of FILE (a fleet.toml, its [study] table naming the study) not run yet.

    Each job's run id hashes its command, environment, data contents and params; a run
    completed or in flight is skipped, one that failed, was lost or cancelled runs again.
    """
    with common.board(ctx) as board:
        code = run_and_report(board, file, as_json)
    ctx.exit(code)


@study.command("show")
@click.argument("study_id", metavar="ID")
@_JSON
@click.pass_context
def show_cmd(ctx: click.Context, study_id: str, as_json: bool) -> None:
    """One study: each run's latest job and verdict, and the counts (ledger only)."""
    from mainboard.study.ledger import StudyStore

    view = StudyStore(common.load(ctx).state_dir).load(study_id)
    if as_json:
        common.echo_json(view.as_json())
        return
    _show(view)


def _show(view: StudyView) -> None:
    from mainboard.cli import columns

    columns.echo(("run_id", "name", "target", "job", "attempts", "verdict", "exit_code"), (
        [e.submitted.run_id, e.submitted.name, e.submitted.target, e.submitted.job,
         e.attempts, e.outcome, e.verdict.exit_code if e.verdict else None]
        for e in view.runs.values()))
    counts = ", ".join(f"{n} {word}" for word, n in view.counts().items() if n)
    common.echo(f"study {view.id}: {len(view.runs)} runs: {counts}")


@study.command("list")
@_JSON
@click.pass_context
def list_cmd(ctx: click.Context, as_json: bool) -> None:
    """Every study of this workspace with its counts."""
    from mainboard.study.ledger import StudyStore

    views, problems = StudyStore(common.load(ctx).state_dir).scan()
    for problem in problems:
        common.warn(problem)
    if as_json:
        common.echo_json([{"study": v.id, "runs": len(v.runs), "counts": v.counts()}
                          for v in views])
        return
    for v in views:
        counts = ", ".join(f"{n} {word}" for word, n in v.counts().items() if n)
        common.echo(f"{v.id}: {len(v.runs)} runs: {counts}")
