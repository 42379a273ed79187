"""`mainboard trace merge`: runs, jobs and trace files on one timeline.

ITEM: a run or job (id, unique id prefix or name, as `runs`/`jobs` verbs resolve them), a
study or batch (`study:ID`, `batch:ID`, or a bare id: each of its jobs), or a trace file
(`.json`, e.g. from `runs trace`, `jobs trace`). Every item is resolved
before the file is written: an unknown one is one line, exit 2, no file.
"""

from __future__ import annotations

from pathlib import Path

import click

from mainboard.cli import common

_JSON = common.json_option()


@click.group()
def trace() -> None:
    """One Chrome/Perfetto timeline across runs, jobs and machines."""


@trace.command("merge")
@click.argument("items", nargs=-1, required=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              required=True, help="Where to write the merged trace (Trace Event Format JSON).")
@_JSON
@click.pass_context
def merge(ctx: click.Context, items: tuple[str, ...], output: Path, as_json: bool) -> None:
    """Merge ITEMs into one trace: a track per machine, a thread per worker or job process,
    clocks on the broker's; the manifest (each part, its offset, its source) is in the
    trace's `otherData.merge`. Open it in https://ui.perfetto.dev."""
    from mainboard.runs.control import connect
    from mainboard.runs.trace import write_trace
    from mainboard.trace.merge import merge as merged
    from mainboard.trace.merge import resolve

    with common.board(ctx) as board:
        r = connect(board.config)
        parts = resolve(board, items, r)
    doc = merged(parts, "broker" if r is not None else "this machine")
    write_trace(doc, output)
    summary = {"output": str(output), "spans": doc["otherData"]["spans"],
               "tracks": doc["otherData"]["tracks"], "groups": doc["otherData"]["groups"],
               "parts": doc["otherData"]["merge"]["parts"]}
    if as_json:
        common.echo_json(summary)
        return
    common.echo(f"wrote {output}: {summary['spans']} spans from {len(parts)} parts on "
                f"{summary['groups']} machines, {summary['tracks']} tracks")


@trace.command("profile")
@click.argument("item")
@click.option("--seconds", type=click.FloatRange(min=0.5, max=3600), default=5.0,
              show_default=True, help="How long to sample.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("profile.json"), show_default=True,
              help="Where to write the stacks (Trace Event Format JSON; merge-able).")
@_JSON
@click.pass_context
def profile(ctx: click.Context, item: str, seconds: float, output: Path, as_json: bool) -> None:
    """Sample the Python stacks of every worker process of a running run, or of a running
    job's processes, with py-spy (on local, ssh and SLURM hosts; shipped to a host that has
    none) and write them on the timeline (`trace merge ITEM FILE` puts both together)."""
    from mainboard.runs.control import connect
    from mainboard.runs.trace import write_trace
    from mainboard.trace.profile import profile as sampled

    with common.board(ctx) as board:
        doc, skipped = sampled(board, connect(board.config), item, seconds)
    for line in skipped:
        common.warn(line)
    write_trace(doc, output)
    about = doc["otherData"]
    summary = {"run_id": about.get("run_id"), "job": about.get("job"), "output": str(output),
               "spans": about["spans"], "profiled": about["profiled"], "skipped": skipped}
    if as_json:
        common.echo_json(summary)
        return
    common.echo(f"wrote {output}: {summary['spans']} frames of "
                f"{len(summary['profiled'])} processes")
