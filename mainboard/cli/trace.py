"""`mainboard trace merge`: runs, jobs and trace files on one timeline.

ITEM: a run or job (id, unique id prefix or name, as `runs`/`jobs` verbs resolve them) or
a trace file (`.json`, e.g. from `runs trace`, `jobs trace`). Every item is resolved
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
