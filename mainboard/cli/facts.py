"""`mainboard facts [--on HOST] [--json|--table] [--cached]`: a host's hardware, probed or
cached; JSON when stdout is not a terminal."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

import click

from mainboard.cli import common
from mainboard.errors import UserError

if TYPE_CHECKING:
    from mainboard.hosts.facts import Facts

GIB = 1024**3  # same unit as mainboard.hosts.facts.GIB, without importing pydantic models for --help


def _gib(n: int | None) -> str:
    return "?" if n is None else f"{n / GIB:.1f} GiB"


def fact_lines(facts: Facts) -> list[tuple[str, str]]:
    """(label, text) pairs for the human view, one topic per line."""
    cpu = (f"{facts.cpu_name or 'unknown'}: {facts.cpu_logical or '?'} logical, "
           f"{facts.cpu_physical or '?'} physical, {facts.cpu_usable or '?'} usable")
    mem_limit = _gib(facts.cgroup_memory_limit) if facts.cgroup_memory_limit else "unlimited"
    cpu_limit = f"{facts.cgroup_cpu_limit:g} cpus" if facts.cgroup_cpu_limit else "unlimited"
    cgroup = (f"v{facts.cgroup_version}: memory {mem_limit}, cpu {cpu_limit}"
              if facts.cgroup_version else "none")
    gpus = "; ".join(f"{i}: {g.name}, {g.memory_mb if g.memory_mb is not None else '?'} MiB, "
                     f"driver {g.driver}, {g.uuid}" for i, g in enumerate(facts.gpus)) or "none"
    scratch = "; ".join(f"{s.path} {_gib(s.free_bytes)} free of {_gib(s.total_bytes)}"
                        + ("" if s.writable else " (read-only)") for s in facts.scratch) or "none"
    ib = "; ".join(f"{d.name} " + ",".join(f"port {p.port} {p.state or '?'} {p.rate or ''}".strip()
                                            for p in d.ports) for d in facts.infiniband) or "none"
    found = ", ".join(f"{p.name} {p.version}" for p in facts.pythons) or "none on PATH"
    lines = [
        ("hostname", facts.hostname),
        ("os", f"{facts.os}, {facts.system} {facts.kernel} {facts.arch}"),
        ("cpu", cpu),
        ("memory", f"{_gib(facts.memory_total)} total, {_gib(facts.memory_available)} available"),
        ("cgroup", cgroup),
        ("gpus", gpus),
        ("scratch", scratch),
        ("infiniband", ib),
        ("python", f"{facts.python.version} ({facts.python.path}); on PATH: {found}"),
    ]
    lines += [("warning", warning) for warning in facts.warnings]
    return lines


@click.command("facts")
@click.option("--on", "host", default="local", show_default=True, metavar="HOST",
              help="Host from mainboard.toml to probe.")
@common.json_option("Print the facts as JSON (schema v1); the default when stdout is "
                    "not a terminal.")
@click.option("--table", "as_table", is_flag=True,
              help="Print the table even when stdout is not a terminal.")
@click.option("--cached", is_flag=True, help="Show the last probed facts; do not contact the host.")
@click.pass_context
def facts(ctx: click.Context, host: str, as_json: bool, as_table: bool, cached: bool) -> None:
    """Probe a host's hardware (CPU, memory, cgroup limits, GPUs, scratch, InfiniBand, pythons).

    The probe is a standard-library script sent to the host's python, so nothing
    needs installing there; the answer is cached for `mainboard compute`.
    """
    from mainboard.board import Board  # imported late: `mainboard --help` stays fast

    if as_json and as_table:
        raise click.UsageError("--json and --table are alternatives; give one")

    board = Board(common.config_path(ctx))
    board.config.host(host)  # unknown host -> UnknownHost listing the declared ones
    from mainboard.hosts.facts import cached_record, probe_facts

    if cached:
        record = cached_record(board.config.state_dir, host)
        if record is None:
            raise UserError(f"no cached facts for host {host!r}; run: mainboard facts --on "
                            f"{shlex.quote(host)}")
        result, when = record.facts, record.probed_at
    else:
        result, when = probe_facts(board, host), None
    # A pipe (`mainboard facts | head -4`, a script) gets the JSON; a terminal the table.
    if as_json or not (as_table or click.get_text_stream("stdout").isatty()):
        common.echo(result.model_dump_json(indent=2))
        return
    from rich.console import Console  # start-up time: rich only when a table is drawn
    from rich.table import Table

    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    title = f"facts of {host}" + (f" (cached, probed {when:%Y-%m-%d %H:%M} UTC)" if when else "")
    for label, text in fact_lines(result):
        table.add_row(label, text)
    console = Console()
    console.print(title, markup=False, highlight=False)
    console.print(table, markup=False, highlight=False)
