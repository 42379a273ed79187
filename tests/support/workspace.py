"""Run the real `mainboard` command on a test workspace; extra TOML tables for tests.support.boards."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

from tests.support.boards import TomlValue
from tests.support.cliserver import run_mainboard


def toml_tables(tables: Mapping[str, Mapping[str, TomlValue]]) -> str:
    """TOML text for ``{header: {key: value}}``, e.g. providers (``write_config(extra=...)``)."""
    return "".join(f"\n[{header}]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in keys.items())
                   for header, keys in tables.items())


def run_cli(config: Path, *args: str, env: Mapping[str, str] | None = None,
            timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """``python -m mainboard --config CONFIG ARGS`` as a user would run it, wide terminal."""
    full_env = {**os.environ, "COLUMNS": "200", **(env or {})}
    full_env.pop("MAINBOARD_CONFIG", None)
    return run_mainboard(["--config", str(config), *args], env=full_env, cwd=config.parent,
                         timeout=timeout)
