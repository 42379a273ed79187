"""`mainboard fleet status --pools` and `fleet resume-pool` as a user reads them, with no
broker running: the pools' table (every count zero: nothing to ask), the line when none is
declared, one line and exit 2 for a pool that is not declared.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.workspace import run_cli

POOLS = ('\n[fleet.pools.batch]\nhost = "local"\nmax-jobs = 2\n'
         '[fleet.pools.coord]\nhost = "local"\nqueues = ["mainboard.coordinator"]\n')


def _workspace(directory: Path, extra: str = "") -> Path:
    directory.mkdir()
    (directory / "mainboard.toml").write_text(f'[workspace]\nname = "pools"\n{extra}')
    return directory / "mainboard.toml"


def test_fleet_status_pools_is_a_table_of_every_declared_pool(tmp_path: Path) -> None:
    none = run_cli(_workspace(tmp_path / "none"), "fleet", "status", "--pools")
    assert (none.returncode, none.stderr) == (0, "")
    assert none.stdout == "no pools declared (add [fleet.pools.NAME] to mainboard.toml)\n"
    config = _workspace(tmp_path / "two", POOLS)
    shown = run_cli(config, "fleet", "status", "--pools")
    assert shown.returncode == 0, shown.stderr
    assert [line.split("  ")[0].strip() for line in shown.stdout.splitlines()] == [
        "POOL", "batch", "coord"]
    header, batch, _ = (line.split() for line in shown.stdout.splitlines())
    assert header == ["POOL", "HOST", "TARGET", "PENDING", "RUNNING", "IDLE", "LOST", "QUEUE",
                      "DEPTH", "OUTSTANDING"]
    assert batch == ["batch", "local", "0", "0", "0", "0", "0", "0", "0"]
    listed = json.loads(run_cli(config, "fleet", "status", "--pools", "--json").stdout)
    assert [(p["pool"], p["target"], p["paused"]) for p in listed] == [
        ("batch", 0, False), ("coord", 0, False)]


def test_resuming_a_pool_that_is_not_declared_names_the_declared_ones(tmp_path: Path) -> None:
    for folder, extra, declared in (("none", "", "none ([fleet.pools.NAME] tables)"),
                                    ("two", POOLS, "batch, coord")):
        done = run_cli(_workspace(tmp_path / folder, extra), "fleet", "resume-pool", "bach")
        assert (done.returncode, done.stdout) == (2, "")
        assert done.stderr == (f"mainboard: error: pool 'bach' is not declared; declared "
                               f"pools: {declared}\n")
