"""Combine the coverage data of every process the suite started; print the total and a table
per room; fail below the floors in ``pyproject.toml``.

``scripts/bootstrap test`` runs it after pytest (even when ``-x`` stopped the suite, then
with ``--no-floors``): ``[tool.coverage.report] fail_under`` is the floor of the total and
``[tool.mainboard.coverage_floors]`` those of the rooms (docs/architecture.md), percent of
statements and branches together as coverage counts its total. The combined data stays in
``DATA/cov`` (``coverage report -m --data-file .coverage-data/cov`` lists missed lines),
the per-file figures in ``DATA/coverage.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "covboot"))  # fastsave: the per-process files' format
import fastsave  # noqa: E402 - found through the line above

TOP_ROOMS = ("bridges", "tasks", "integrators", "gammaboard-process")


@dataclass
class Tally:
    """Statements and branches of a room, and how many of each ran."""

    statements: int = 0
    covered: int = 0
    branches: int = 0
    covered_branches: int = 0
    files: int = 0

    def add(self, summary: dict[str, int]) -> None:
        self.statements += summary["num_statements"]
        self.covered += summary["covered_lines"]
        self.branches += summary.get("num_branches", 0)
        self.covered_branches += summary.get("covered_branches", 0)
        self.files += 1

    @property
    def percent(self) -> float:
        total = self.statements + self.branches
        return 100.0 * (self.covered + self.covered_branches) / total if total else 100.0


def room_of(path: str) -> str:
    """The room of a file as docs/architecture.md names it (``mainboard`` alone: ground)."""
    parts = Path(path).parts
    if parts and parts[0] in TOP_ROOMS:
        return parts[0] + "/"
    if len(parts) > 2 and parts[0] == "mainboard":
        return f"mainboard/{parts[1]}"
    if len(parts) == 2 and parts[0] == "mainboard":
        return "mainboard (ground)"
    return "elsewhere: " + path  # a copy combine did not map back ([tool.coverage.paths])


def record_unexecuted(data: Path) -> None:
    """One process that imports our packages under coverage, with the walk of the source
    folders left on (tests/covboot skips it in every other process): the files no test ran
    count with 0 lines run. Only where the suite's processes were measured."""
    if not os.environ.get("COVERAGE_PROCESS_START"):
        return
    env = {**os.environ, "MAINBOARD_COVERAGE_FIND_UNEXECUTED": "1",
           "COVERAGE_FILE": str(data / "cov")}
    subprocess.run([sys.executable, "-c", "import mainboard, gammaboard_process"],
                   cwd=ROOT, env=env, check=True)


def _finished(part: Path) -> bool:
    """Whether a process's data file holds coverage's schema (one killed while it saved
    leaves the file without it)."""
    try:
        with contextlib.closing(sqlite3.connect(f"file:{part}?mode=ro", uri=True)) as db:
            return bool(db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND "
                                   "name = 'coverage_schema'").fetchone())
    except sqlite3.Error:
        return False


def drop_torn(parts: list[Path]) -> list[Path]:
    """The data files that hold coverage's schema; the others (a process killed while it
    saved) are named in one line and deleted, where coverage would warn of each with a
    SQLite error."""
    torn = [p for p in parts if not _finished(p)]
    if torn:
        print(f"coverage_report: {len(torn)} data file(s) left unfinished by a process killed "
              f"while saving (skipped): {', '.join(p.name for p in torn)}", file=sys.stderr)
        for p in torn:
            p.unlink()
    return [p for p in parts if p not in torn]


def combine(data: Path) -> dict[str, dict[str, object]]:
    """Combine the per-process files in ``data``; the per-file summaries, relative paths."""
    import coverage

    os.environ.setdefault("MAINBOARD_COVERAGE_ROOT", str(ROOT))
    os.chdir(ROOT)
    record_unexecuted(data)
    fastsave.gather(data)
    cov = coverage.Coverage(data_file=str(data / "cov"), config_file=str(ROOT / "pyproject.toml"))
    parts = drop_torn([p for p in data.iterdir() if p.name.startswith("cov.")])
    if parts:
        cov.combine([str(p) for p in parts], keep=False)
        cov.save()
    elif not (data / "cov").exists():  # nothing new, nothing combined before
        raise SystemExit(f"coverage_report: no coverage data in {data} (was the suite run "
                         "through scripts/bootstrap test with coverage on?)")
    else:
        cov.load()
    out = data / "coverage.json"
    cov.json_report(outfile=str(out), ignore_errors=True)
    files = json.loads(out.read_text())["files"]
    return {os.path.relpath(name, ROOT) if os.path.isabs(name) else name: info
            for name, info in files.items()}


def floors() -> tuple[float, dict[str, float]]:
    """The total's floor and the rooms' floors from pyproject.toml."""
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]
    return (float(tool["coverage"]["report"].get("fail_under", 0)),
            {k: float(v) for k, v in tool.get("mainboard", {}).get("coverage_floors", {}).items()})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT / ".coverage-data")
    parser.add_argument("--no-floors", action="store_true",
                        help="print only (a part of the suite, or a failed run)")
    parser.add_argument("--lowest", type=int, default=12, help="how many least-covered files")
    args = parser.parse_args(argv)
    files = combine(args.data.resolve())
    rooms: dict[str, Tally] = {}
    total = Tally()
    for path, info in files.items():
        summary = info["summary"]
        rooms.setdefault(room_of(path), Tally()).add(summary)
        total.add(summary)
    floor_total, floor_rooms = floors()
    print("\nbranch coverage, every process (statements + branches)")
    print(f"{'room':<24} {'files':>5} {'stmts':>6} {'miss':>5} {'branches':>8} {'br miss':>7} "
          f"{'cover':>6} {'floor':>6}")
    for name in sorted(rooms):
        t = rooms[name]
        floor = floor_rooms.get(name)
        print(f"{name:<24} {t.files:>5} {t.statements:>6} {t.statements - t.covered:>5} "
              f"{t.branches:>8} {t.branches - t.covered_branches:>7} {t.percent:>5.1f}% "
              f"{'' if floor is None else f'{floor:.1f}%':>6}")
    print(f"{'TOTAL':<24} {total.files:>5} {total.statements:>6} "
          f"{total.statements - total.covered:>5} {total.branches:>8} "
          f"{total.branches - total.covered_branches:>7} {total.percent:>5.1f}% "
          f"{floor_total:>5.1f}%")
    lowest = sorted(files.items(), key=lambda item: item[1]["summary"]["percent_covered"])
    print("least covered: " + ", ".join(f"{path} {info['summary']['percent_covered']:.0f}%"
                                        for path, info in lowest[:args.lowest]))
    if args.no_floors:
        print("(floors not checked: a part of the suite ran, or it failed)")
        return 0
    below = [f"{name}: {rooms[name].percent:.1f}% < floor {floor:.1f}%"
             for name, floor in sorted(floor_rooms.items())
             if name in rooms and rooms[name].percent < floor]
    if total.percent < floor_total:
        below.insert(0, f"total: {total.percent:.1f}% < floor {floor_total:.1f}%")
    for line in below:
        print(f"coverage below its floor (pyproject.toml): {line}", file=sys.stderr)
    return 1 if below else 0


if __name__ == "__main__":
    sys.exit(main())
