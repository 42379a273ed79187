"""`mainboard batch prepare|estimate|run|watch|list|show`: many jobs from one fleet.toml.

``estimate`` contacts no target, ``prepare`` asks each only whether it can be reached. ``run`` prints only the batch id on stdout
(or one JSON object), one line per job on stderr as it is dispatched. ``watch`` drives
the monitor sweep until every job has an outcome (on a terminal a live table and a bar
of jobs done with the batch's ETA, one line per outcome otherwise, NDJSON events with
``--json``) and exits 0 only if every job completed. All state is read
back from ``.mainboard/batches/<id>/``: a killed ``watch`` started again continues.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from mainboard.cli import batchplan, columns, common
from mainboard.redact import redact_text

if TYPE_CHECKING:
    from rich.table import Table

    from mainboard.batch.store import BatchView
    from mainboard.batch.watch import JobRow, WatchStep
    from mainboard.receipts import BatchCost, Payload

_JSON = common.json_option()
_FLEET = click.argument("fleet", type=click.Path(dir_okay=False))



def _echo_json(value: Any) -> None:
    common.echo_json(value, default=str)


@click.group("batch")
def batch() -> None:
    """Many jobs from one fleet.toml: prepare, estimate, run, watch, list, show."""


batch.add_command(batchplan.prepare_cmd)  # planning verbs live in batchplan.py
batch.add_command(batchplan.estimate_cmd)


def _event_line(payload: Payload) -> str:
    from mainboard.receipts import BatchAnnounced, BatchDispatched, BatchDispatchFailed

    if isinstance(payload, BatchDispatched):
        how = " (adopted: already submitted)" if payload.adopted else ""
        return f"dispatched {payload.name} -> {payload.target}: job {payload.job}{how}"
    if isinstance(payload, BatchDispatchFailed):
        return f"{payload.outcome} {payload.name} -> {payload.target}: {payload.reason}"
    # dispatch writes the two above; a watch step announces outcomes, and nothing else
    assert isinstance(payload, BatchAnnounced), payload
    code = "" if payload.exit_code is None else f" (exit {payload.exit_code})"
    got = f"; pulled {', '.join(payload.pulled)}" if payload.pulled else ""
    why = f"; {payload.reason}" if payload.reason else ""
    return f"{payload.outcome}: {payload.name} on {payload.target}{code}{got}{why}"


def _event_json(payload: Payload) -> dict[str, Any]:
    return {"event": payload.topic.removeprefix("batch."), **payload.model_dump(mode="json")}


@batch.command("run")
@_FLEET
@common.json_option(
    'Print one JSON object instead of the id: {"batch": id, "name": batch name, "jobs": '
    'how many, "dispatched": how many reached their target, "failed": how many did not, '
    '"events": [one per job, in the order written: {"event": "dispatched", "batch_id", '
    '"name", "target", "job": mainboard job id, "adopted": bool} or {"event": '
    '"dispatch_failed", "batch_id", "name", "target", "outcome": "unreachable" | "refused" | '
    '"error", "reason"}]}.')
@click.pass_context
def run_cmd(ctx: click.Context, fleet: str, as_json: bool) -> None:
    """Record a batch, print its id, dispatch every job to its target.

    Stdout carries only the result: the batch id (printed before dispatching starts, so
    `ID=$(mainboard batch run fleet.toml)` works), or with --json the object described
    there. A file with a [study] table runs as `mainboard study run` does (the study id). One line per job dispatched goes to stderr. A target that cannot be reached
    fails only its own jobs (recorded with the reason); the others still go. Then
    `mainboard batch watch ID`, or let a cron'd `mainboard monitor` bring the results back.
    """
    from mainboard.batch.run import dispatch, load_batch, start, store_of

    with common.board(ctx) as board:
        if load_batch(fleet, board.config).study is not None:  # a [study] table: a study
            from mainboard.cli.study import run_and_report

            common.echo(f"mainboard: {fleet} declares [study]: running it as a study (see "
                        "`mainboard study show ID`)", err=True)
            ctx.exit(run_and_report(board, fleet, as_json))
        batch_id = start(board, fleet)
        if not as_json:
            common.echo(batch_id)
        written = dispatch(board, batch_id, on_event=lambda p: common.echo(_event_line(p),
                                                                           err=True))
        view = store_of(board).load(batch_id)
    if as_json:
        events = [_event_json(p) for p in written]
        sent = sum(e["event"] == "dispatched" for e in events)
        _echo_json({"batch": batch_id, "name": view.name, "jobs": len(view.jobs),
                    "dispatched": sent, "failed": len(events) - sent, "events": events})


class _WatchOutput:
    """Where a watch's news goes: NDJSON events, plain lines, or lines above a live table."""

    def __init__(self, as_json: bool) -> None:
        from rich.console import Console

        self.as_json = as_json
        self.console = Console(soft_wrap=True)
        self.live: Any = None
        self.bar: Any = None
        self.down: dict[str, str] = {}

    def start(self, view: BatchView) -> None:
        if not self.as_json and self.console.is_terminal:
            from rich.live import Live

            from mainboard.cli.runview import make_bar

            self.bar = make_bar(self.console)
            self.bar.add_task(f"batch {view.name}", total=len(view.jobs), stats="", eta="")
            self.live = Live(console=self.console, auto_refresh=False, transient=True)
            self.live.start()
        if not self.as_json and view.announced:
            self.line(f"batch {view.id} ({view.name}): {len(view.announced)} of "
                      f"{len(view.jobs)} outcomes already announced")

    def line(self, text: str) -> None:
        if self.live is not None:
            self.live.console.print(redact_text(text), markup=False, highlight=False)
        else:
            common.echo(text)

    def step(self, step: WatchStep) -> None:
        news: list[Payload] = [*step.dispatched, *step.announced]
        for payload in news:
            if self.as_json:
                _echo_json(_event_json(payload))
            else:
                self.line(_event_line(payload))
        for host in sorted(set(step.unreachable) | set(self.down)):
            now = step.unreachable.get(host)
            if now != self.down.get(host):
                if self.as_json:
                    _echo_json({"event": "host", "host": host, "unreachable": now is not None,
                                "reason": now or ""})
                else:
                    self.line(f"host {host}: " + (f"unreachable: {now}" if now else "back"))
        self.down = dict(step.unreachable)
        if self.as_json and step.spent is not None:  # the batch's spend grew: one event
            from mainboard.batch.spend import spend_json

            _echo_json({"event": "spend", **(spend_json(step.spent) or {})})
        for error in step.errors:
            common.warn(error)
        if self.live is not None:
            from rich.console import Group

            self.live.update(Group(_rows_table(step.rows, step.view.cost), self._progress(step)),
                             refresh=True)

    def _progress(self, step: WatchStep) -> Any:
        """The bar under the table: jobs with an outcome of all, and the batch's overall ETA
        (its pace since it was created)."""
        import time

        from mainboard.cli.runview import eta_by_rate, eta_text

        done, total = sum(r.outcome is not None for r in step.rows), len(step.rows)
        left = eta_by_rate(done, total, time.time() - step.view.created_at)
        self.bar.update(self.bar.task_ids[0], completed=done, stats=f"{done} of {total} jobs done",
                        eta=eta_text(left))
        return self.bar

    def stop(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None


_STYLE = {"completed": "green", "failed": "red", "timeout": "red", "unreachable": "red",
          "refused": "red", "error": "red", "cancelled": "yellow", "preempted": "yellow"}


def _rows_table(rows: list[JobRow], cost: BatchCost | None = None) -> Table:
    from rich.text import Text

    from mainboard.jobs.costs import usd_text

    spent = cost.jobs if cost is not None else {}
    table = columns.table("JOB", "TARGET", "STATE", "EXIT", "JOB ID", "SPEND", "DETAIL", fold=2)
    for r in rows:
        detail = "; ".join(x for x in (f"pulled {', '.join(r.pulled)}" if r.pulled else "",
                                       r.detail) if x)
        table.add_row(Text(r.name), Text(r.target),
                      Text(r.state, style=_STYLE.get(r.outcome or "", "")),
                      "" if r.exit_code is None else str(r.exit_code), r.job or "-",
                      usd_text(spent[r.name]["usd"]) if r.name in spent else "-", Text(detail))
    return table


def _summary_line(view: BatchView) -> str:
    counts = ", ".join(f"{n} {outcome}" for outcome, n in view.outcomes().items()) \
        or "no outcome yet"
    left = len(view.jobs) - len(view.announced)
    more = f", {left} still owed an outcome" if left else ""
    cost = view.cost
    spent = "" if cost is None else f"; spend so far ${cost.usd:.4f}" + (
        f" ({len(cost.unknown)} job(s) rate unknown)" if cost.unknown else "")
    return f"batch {view.id} ({view.name}): {len(view.jobs)} jobs: {counts}{more}{spent}"


@batch.command("watch")
@click.argument("batch_id", metavar="ID")
@click.option("--interval", type=click.FloatRange(min=0.05), default=5.0, show_default=True,
              metavar="S", help="Seconds between sweeps.")
@_JSON
@click.pass_context
def watch_cmd(ctx: click.Context, batch_id: str, interval: float, as_json: bool) -> None:
    """Sweep until every job has an outcome; exit 0 only if all completed.

    Each sweep is one `mainboard monitor` pass (results pulled, rentals released,
    running jobs' costs observed) and records the batch's spend so far (SPEND per
    job, the total in the summary; "rate unknown" for a host without a rate); each
    outcome is announced once, even across a killed and restarted watch. On a
    terminal a live table and a bar (jobs done of all, overall ETA) are drawn; piped,
    one line per outcome.
    """
    from mainboard.batch.run import store_of
    from mainboard.batch.watch import summary, watch

    with common.board(ctx) as board:
        out = _WatchOutput(as_json)
        out.start(store_of(board).load(batch_id))
        try:
            last = watch(board, batch_id, interval=interval, on_step=out.step)
        finally:
            out.stop()
    result = summary(last.view, last.rows)
    if as_json:
        _echo_json({"event": "summary", **result})
    else:
        columns.show(_rows_table(last.rows, last.view.cost))
        common.echo(_summary_line(last.view))
    ctx.exit(0 if result["ok"] else 1)


@batch.command("list")
@_JSON
@click.pass_context
def list_cmd(ctx: click.Context, as_json: bool) -> None:
    """Every batch of this workspace, oldest first (read from receipts only)."""
    import datetime as dt

    from mainboard.batch.run import BatchStore

    config = common.load(ctx)
    views, problems = BatchStore(config.state_dir).scan()
    for problem in problems:
        common.warn(problem)
    if as_json:
        _echo_json([{"batch": v.id, "name": v.name, "jobs": len(v.jobs), "created": v.created_at,
                     "complete": v.complete, "outcomes": v.outcomes()} for v in views])
        return
    if not views:
        common.echo("no batches yet (`mainboard batch run fleet.toml`)")
        return
    table = columns.table("BATCH", "CREATED", "JOBS", "OUTCOMES")
    for v in views:
        counts = ", ".join(f"{n} {o}" for o, n in v.outcomes().items()) or "-"
        owed = len(v.jobs) - len(v.announced)
        table.add_row(v.id, dt.datetime.fromtimestamp(v.created_at).strftime("%Y-%m-%d %H:%M:%S"),
                      str(len(v.jobs)), counts + (f" ({owed} owed)" if owed else ""))
    columns.show(table)


@batch.command("show")
@click.argument("batch_id", metavar="ID")
@_JSON
@click.pass_context
def show_cmd(ctx: click.Context, batch_id: str, as_json: bool) -> None:
    """One batch: every job's target, state and outcome (receipts only; no host asked)."""
    from mainboard.batch.run import store_of
    from mainboard.batch.watch import job_rows, summary

    with common.board(ctx) as board:
        view = store_of(board).load(batch_id)
        rows = job_rows(board, view)
    for problem in view.errors:
        common.warn(problem)
    if as_json:
        _echo_json(summary(view, rows))
        return
    columns.show(_rows_table(rows, view.cost))
    common.echo(_summary_line(view))
