"""CLI verb `runs`: list, show, resume and clone integration runs from their receipts.

Everything here reads ``.mainboard/runs/<id>/receipts.ndjson``, so it works after the
broker or the coordinator is gone; only `runs show` also asks the broker for the run's
live forecast, when there is one. RUN is a run id, a unique id prefix, or a
run name (its most recent run).
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

import click

from mainboard.cli import common

if TYPE_CHECKING:
    from mainboard.runs.store import RunHistory, RunStore

_WORKERS = click.option("--workers", type=click.IntRange(min=0), default=None,
                        help="Local batch workers to start (default: the fleet, else one "
                             "per core; 0: the fleet only, refused within seconds when "
                             "none answers).")
_JSON = common.json_option()


def _store(ctx: click.Context) -> tuple[RunStore, Any]:
    from mainboard.runs.store import RunStore

    config = common.load(ctx)
    return RunStore(config.state_dir), config


def _when(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def _value(summary: dict[str, Any]) -> str:
    from mainboard.cli.runview import pm

    if summary.get("kind", "run") != "run":  # a parent's numbers are its children's table
        return f"{summary['kind']} of child runs: `mainboard runs show {summary['run_id']}`"
    return "-" if summary["estimate"] is None else pm(summary["estimate"], summary["error"])


@click.group("runs")
def runs() -> None:
    """Integration runs of this workspace: list, show, export, resume, clone, logs, pause,
    stop, remove, trace."""


@runs.command("list")
@_JSON
@click.pass_context
def list_runs(ctx: click.Context, as_json: bool) -> None:
    """Every run with receipts, most recent first."""
    store, _ = _store(ctx)
    rows = [h.summary() for h in store.all(snapshots=False)]
    if as_json:
        common.echo_json(rows)
        return
    if not rows:
        common.echo(f"no runs yet in {store.root} (start one with `mainboard integrate RUN.toml`)")
        return
    common.echo(f"{'RUN':16}  {'NAME':16}  {'STATUS':10}  {'ITER':>4}  {'SAMPLES':>12}  "
                f"{'UPDATED':19}  ESTIMATE")
    for r in rows:
        common.echo(f"{r['run_id']:16}  {r['name'][:16]:16}  {r['status']:10}  "
                    f"{r['iterations']:>4}  {r['samples']:>12,}  {_when(r['updated'])}  "
                    f"{_value(r)}")


def _detail(h: RunHistory) -> dict[str, Any]:
    out = h.summary()
    out["spec"] = h.created.spec
    out["resumed_from"] = [r.from_iteration for r in h.resumed]
    out["stale_refused"] = max((i.stale_refused for i in h.iterations), default=0)
    out["history"] = [{"iteration": i.iteration, "samples": i.samples,
                       "estimate": i.estimate, "error": i.error,
                       "training_samples": (i.snapshot or {}).get("training_samples", 0),
                       "diagnostics": (i.snapshot or {}).get("diagnostics")}
                      for i in h.iterations]
    if h.result is not None:
        out["result"] = h.result
    return out


def _forecast(config: Any, history: RunHistory) -> dict[str, Any] | None:
    """The run's live forecast, from the broker (with the deadline of its receipts); None
    for a run without an error target, or with the broker gone (the rest still shows)."""
    stop = history.created.spec.get("stop") or {}
    if stop.get("relative_error") is None and stop.get("absolute_error") is None:
        return None
    import redis

    from mainboard.errors import MainboardError, first_line
    from mainboard.runs.control import connect
    from mainboard.runs.forecast import read_forecast

    try:
        r = connect(config)
        doc = read_forecast(r, history.run_id) if r is not None else None
    except (MainboardError, OSError, redis.RedisError) as exc:
        common.echo(f"forecast: the broker did not answer ({first_line(exc)})", err=True)
        return None
    if doc is not None and history.created.deadline:
        doc["deadline_utc"] = history.created.deadline
    return doc


@runs.command("show")
@click.argument("run")
@click.option("--timeline", "with_timeline", is_flag=True,
              help="Also each iteration's dispatch, completion, re-sends, adaptation and "
                   "snapshot, and every pause, resume and stop, with times.")
@click.option("--histograms", "with_histograms", is_flag=True,
              help="Also the run's histograms (each bin's estimate ± error) and moments.")
@click.option("--csv", "as_csv", is_flag=True,
              help="A scan, tune or campaign: its table as CSV (one line per child).")
@_JSON
@click.pass_context
def show(ctx: click.Context, run: str, with_timeline: bool, with_histograms: bool,
         as_csv: bool, as_json: bool) -> None:
    """One run: definition, status, every iteration's cumulative estimate; a scan, tune
    or campaign: its table of child runs."""
    from mainboard.runs import observables
    from mainboard.runs.timeline import timeline

    store, config = _store(ctx)
    history = store.find(run)
    if history.created.kind is not None:
        from mainboard.cli import parentview

        parentview.show(history, as_json, as_csv)
        return
    if as_csv:
        raise click.UsageError(f"--csv exports the table of a scan, tune or campaign; run "
                               f"{history.run_id} is a single run (use --json)")
    data = _detail(history)
    forecast = _forecast(config, history)
    if forecast is not None:
        data["forecast"] = forecast
    events = timeline(store, history.run_id) if with_timeline else []
    if with_timeline:
        data["timeline"] = [e.to_dict() for e in events]
    if with_histograms:
        data["observables"] = observables.require(history)
    if as_json:
        common.echo_json(data)
        return
    common.echo(f"run        {data['run_id']} ({data['name']})")
    common.echo(f"status     {data['status']}" + (f": {data['failure']}" if "failure" in data
                                                  else ""))
    if history.created.point is not None:
        point = " ".join(f"{k}={v}" for k, v in history.created.point.items())
        common.echo(f"child of   {data['parent']} at {point}")
    elif data["parent"]:
        common.echo(f"clone of   {data['parent']} after iteration {data['from_iteration']}")
    spec = data["spec"]
    common.echo(f"integrand  {spec['integrand']['kind']}  sampler {spec['sampler']['kind']}  "
                f"seed {spec['seed']}  stop " + ", ".join(
                   f"{k}={v}" for k, v in spec["stop"].items() if v not in (None, 0)))
    from mainboard.cli.runview import diagnostics_text, fit_text

    for row in data["history"]:
        common.echo(f"  iteration {row['iteration']:>4}  {row['samples']:>12,} samples  "
                    f"{_value(row)}" + (f"  (training {row['training_samples']:,})"
                                       if row["training_samples"] else "")
                    + (f"  [{diagnostics_text(row['diagnostics'])}]"
                      if row["diagnostics"] else ""))
    if "result" in data:
        common.echo(f"result     {fit_text(data['result'])}")
    if forecast is not None:
        from mainboard.runs.forecast import forecast_lines

        for line in forecast_lines(forecast):
            common.echo(line)
    if with_timeline:
        common.echo("timeline")
    origin = events[0].time if events else 0.0
    for e in events:
        it = "" if e.iteration is None else f"it {e.iteration}"
        common.echo(f"  {_when(e.time)}  +{e.time - origin:9.3f}s  {e.kind:9}  {it:7}  "
                    f"{e.detail}".rstrip())
    if with_histograms:
        from mainboard.cli.runview import histograms_text

        common.echo(histograms_text(data["observables"]))


@runs.command("export")
@click.argument("run")
@click.option("--format", "fmt", type=click.Choice(["hwu", "csv", "json"]), default="hwu",
              show_default=True, help="HwU (MadGraph's histogram text), CSV rows, or JSON.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write to this file (default: stdout).")
@click.pass_context
def export(ctx: click.Context, run: str, fmt: str, output: str | None) -> None:
    """Write a run's histograms (and moments, in JSON) for plotting tools; with
    `--format csv`, a run's plot_line and image task values when it has them."""
    from pathlib import Path

    from mainboard.runs import observables, rasters

    store, _ = _store(ctx)
    history = store.find(run)
    if fmt == "csv" and rasters.raster_tasks(history):
        text = rasters.csv_text(history)
    else:
        text = observables.export(observables.require(history), fmt)
    if output is None:
        common.echo(text, nl=False)
        return
    Path(output).write_text(text, encoding="utf-8")
    common.echo(f"wrote {output}", err=True)


@runs.command("resume")
@click.argument("run")
@_WORKERS
@_JSON
@click.pass_context
def resume(ctx: click.Context, run: str, workers: int | None, as_json: bool) -> None:
    """Continue an unfinished run from its last snapshot (a finished run just prints).

    Exit codes as for `mainboard integrate`: 1 when the broker does not answer (one line
    naming its host:port and the fix), 2 for `--workers 0` with no fleet worker.
    """
    from mainboard.cli.runview import ProgressBar, emit
    from mainboard.tasks.runner import resume as resume_run

    store, config = _store(ctx)
    history = store.find(run)
    if history.created.kind is not None:
        from mainboard.cli import parentview

        parentview.resume(history, config, workers, as_json)
        return
    spec = history.created.spec
    with ProgressBar(spec["name"], spec["stop"].get("max_samples"), stop=spec["stop"]) as bar:
        result = resume_run(history.run_id, workers, config=config, progress=bar.update)
    emit(result, as_json)


@runs.command("clone")
@click.argument("run")
@click.option("--from-iteration", "from_iteration", type=click.IntRange(min=0), default=None,
              help="Branch from the snapshot after K iterations (default: the last one; "
                   "0: from the start).")
@click.option("--max-samples", type=click.IntRange(min=1), default=None,
              help="New [stop] max_samples for the clone.")
@click.option("--max-iterations", type=click.IntRange(min=1), default=None,
              help="New [stop] max_iterations for the clone.")
@_WORKERS
@_JSON
@click.pass_context
def clone(ctx: click.Context, run: str, from_iteration: int | None, max_samples: int | None,
          max_iterations: int | None, workers: int | None, as_json: bool) -> None:
    """Branch a new run (new id) from a snapshot of RUN and run it to its stop condition."""
    from mainboard.cli.runview import ProgressBar, emit
    from mainboard.tasks.runner import clone as clone_run

    store, config = _store(ctx)
    history = store.find(run)
    if history.created.kind is not None:
        raise click.UsageError(f"run {history.run_id} is a {history.created.kind}: clone one of "
                               "its child runs (`mainboard runs show` lists them)")
    start = from_iteration if from_iteration is not None else history.last_snapshot[0]
    spec = history.created.spec
    with ProgressBar(spec["name"], max_samples or spec["stop"].get("max_samples"),
                     stop=spec["stop"]) as bar:
        result = clone_run(history.run_id, start, workers, max_samples=max_samples,
                           max_iterations=max_iterations, config=config, progress=bar.update)
    emit(result, as_json)
