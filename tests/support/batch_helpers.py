"""Shared pieces of the batch tests: a workspace whose hosts are never contacted, fleet files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from mainboard.cli import cli
from tests.support.boards import TomlValue, write_config
from tests.support.services import free_port

HOSTILE = "a'; echo pwned"


def invoke(config: Path, *args: str) -> Result:
    """The real `mainboard` command in this process (faster than a fresh interpreter)."""
    return CliRunner().invoke(cli, ["--config", str(config), *args], env={"COLUMNS": "200"})


def fleet_file(directory: Path, text: str, name: str = "fleet.toml") -> Path:
    """Write a fleet file (next to mainboard.toml, usually) and return its path."""
    path = directory / name
    path.write_text(text)
    return path


def batch_receipts(ws: Path, batch_id: str) -> Path:
    """A batch's receipts file (where the design says it lives)."""
    return ws / ".mainboard" / "batches" / batch_id / "receipts.ndjson"


def raw_receipts(path: Path) -> list[dict[str, Any]]:
    """Raw receipt lines, parsed independently of mainboard.receipts."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def plain_workspace(tmp_path: Path) -> Path:
    """A workspace with a local host rooted outside it, an ssh host and a SLURM host with
    queue limits; nothing here is contacted (no service needed)."""
    ws = tmp_path / "ws"
    (ws / "in").mkdir(parents=True)
    (ws / "in" / "d.txt").write_text("hello\n")
    hosts: dict[str, dict[str, TomlValue]] = {
        "scratch": {"kind": "local", "root": str(tmp_path / "scratch-root")},
        "edge": {"kind": "ssh", "host": "127.0.0.1", "port": free_port(), "user": "root",
                 "known_hosts": str(tmp_path / "kh"), "root": str(tmp_path / "edge-root")},
        "hpc": {"kind": "slurm", "partition": "debug", "root": str(tmp_path / "hpc-root")}}
    return write_config(ws, hosts, '\n[hosts.hpc.queues.debug]\nmax-walltime = "1h"\n'
                                   "mem-ceiling-gb = 2\n")
