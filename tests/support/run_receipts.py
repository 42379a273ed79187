"""Run receipts made from a real run's, for dashboard tests and bench: a run under a new id
and name (optionally cut after some iterations), or a thousand of them."""

from __future__ import annotations

import json
from pathlib import Path

from mainboard.runs.store import RECEIPTS_NAME


def copy_run(source: Path, state_dir: Path, run_id: str, name: str,
             keep: int | None = None) -> Path:
    """``source`` (a run's receipts file) as run ``run_id`` named ``name``: the same lines with
    the id and name replaced, iterations after ``keep`` left out. Returns the new file."""
    old_id = source.parent.name
    old_name = json.loads(source.read_text().splitlines()[0])["payload"]["name"]
    lines = [line.replace(old_id, run_id).replace(f'"name":"{old_name}"', f'"name":"{name}"')
             for line in source.read_text().splitlines()]
    if keep is not None:
        lines = [line for line in lines if '"topic":"run.finished"' not in line and not (
            '"topic":"run.iteration"' in line
            and json.loads(line)["payload"]["iteration"] > keep)]
    path = state_dir / "runs" / run_id / RECEIPTS_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def fill(source: Path, state_dir: Path, count: int) -> None:
    """``count`` finished runs ``bulk-<n>`` with ids ``<n>`` as 16 hex digits."""
    for n in range(count):
        copy_run(source, state_dir, f"{n:016x}", f"bulk-{n}")
