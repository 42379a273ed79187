"""Bad run files get one clear line, and nothing runs (issue 16, part 4).

Every case of ``tests/support/runfile_cases.py`` goes through ``load_run_file``, the loader
``mainboard integrate`` calls before it loads mainboard.toml or starts a broker; a handful go
through the real CLI in a fresh workspace to show exit 2, one stderr line, no traceback and
no ``.mainboard/`` (no broker, no workers).
"""

from __future__ import annotations

import os
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mainboard.errors import ConfigError
from mainboard.integrators.spec import RunSpec, load_run_file, parse_run
from mainboard.integrators.spec_types import INT64_MAX
from tests.support.cliserver import run_mainboard
from tests.support.runfile_cases import BAD, CHANNELS, GENZ, PYTHON, Bad, c, edit

CLI_CASES = ("seed-bool", "max-samples-huge", "sigma-inf", "floor-one", "u-too-short",
             "too-many-channels", "empty-file")


def write(directory: Path, text: str) -> Path:
    path = directory / "RUN.toml"
    path.write_text(text)
    return path


def test_the_table_covers_at_least_twenty_five_files() -> None:
    assert len(BAD) >= 25


@pytest.mark.parametrize("text", [CHANNELS, GENZ, PYTHON], ids=["channels", "genz", "python"])
def test_the_bases_of_the_cases_are_valid(tmp_path: Path, text: str) -> None:
    assert isinstance(load_run_file(write(tmp_path, text)), RunSpec)


@pytest.mark.parametrize("case", BAD.values(), ids=list(BAD))
def test_bad_run_file_is_one_line_naming_file_line_and_key(tmp_path: Path, case: Bad) -> None:
    path = write(tmp_path, case.text)
    with pytest.raises(ConfigError) as info:
        load_run_file(path)
    message = str(info.value)
    assert message.startswith(f"{path}:{case.line}: {case.key}: "), message
    assert case.fragment in message, message
    assert "; valid: " in message and "\n" not in message, message
    assert info.value.exit_code == 2


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "MAINBOARD_CONFIG"}
    return run_mainboard(args, cwd=tmp_path, env=env, timeout=60)


@pytest.mark.parametrize("name", CLI_CASES)
def test_cli_refuses_before_anything_starts(tmp_path: Path, name: str) -> None:
    case = BAD[name]
    (tmp_path / "mainboard.toml").write_text("")  # an empty workspace config is valid
    write(tmp_path, case.text)
    result = _cli(tmp_path, "integrate", "RUN.toml", "--workers", "1")
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith(f"mainboard: error: RUN.toml:{case.line}: {case.key}: "), lines[0]
    assert case.fragment in lines[0] and result.stdout == ""
    state = tmp_path / ".mainboard"
    assert not (state / "redis").exists() and not list(tmp_path.rglob("broker.json"))
    assert not state.exists(), sorted(p.name for p in state.rglob("*"))  # no broker, no workers


def test_cli_max_samples_override_is_checked_too(tmp_path: Path) -> None:
    write(tmp_path, CHANNELS)
    result = _cli(tmp_path, "integrate", "RUN.toml", "--max-samples", str(INT64_MAX + 1))
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stderr
    assert "stop.max_samples: too large" in result.stderr
    assert not (tmp_path / ".mainboard").exists()


def test_toml_integers_are_still_numbers() -> None:
    """Strict types refuse true and "3", never an integer where a number belongs."""
    text = (c("alpha = 0.5", "alpha = 1").replace("sigma = 0.2", "sigma = 1")
            .replace("u = [0.5, 0.5]", "u = [0, 1]").replace("relative_error = 1e-3",
                                                             "relative_error = 1"))
    spec = parse_run(_toml(text))
    assert spec.sampler.alpha == 1.0 and isinstance(spec.sampler.alpha, float)
    assert spec.integrand.u == [0.0, 1.0] and spec.stop.relative_error == 1.0
    floats = (c("alpha = 0.5", "alpha = 1.0").replace("sigma = 0.2", "sigma = 1.0")
              .replace("u = [0.5, 0.5]", "u = [0.0, 1.0]")
              .replace("relative_error = 1e-3", "relative_error = 1.0"))
    assert spec.run_id() == parse_run(_toml(floats)).run_id()  # the same definition


def test_numpy_integers_from_python_callers_are_integers() -> None:
    data = _toml(CHANNELS)
    data["seed"], data["domain"]["discrete"] = np.int64(7), [np.int32(3)]
    data["stop"]["max_samples"] = np.uint32(1000)
    spec = parse_run(data)
    assert type(spec.seed) is int and spec.run_id() == parse_run(_toml(CHANNELS)).run_id()
    data["batching"]["fuse"] = np.True_
    with pytest.raises(ConfigError, match="batching.fuse: wrong type"):
        parse_run(data)


def test_largest_int64_budget_is_accepted(tmp_path: Path) -> None:
    spec = load_run_file(write(tmp_path, edit(GENZ, "max_iterations = 3",
                                              f"max_samples = {INT64_MAX}")))
    assert spec.stop.max_samples == INT64_MAX


def test_run_dict_errors_without_a_file_still_name_the_key() -> None:
    data = _toml(CHANNELS)
    data["stop"]["max_samples"] = True
    with pytest.raises(ConfigError) as info:
        parse_run(data, file="<run dict>")
    assert str(info.value).startswith("<run dict>: stop.max_samples: wrong type: expected an "
                                      "integer (got True); valid: an integer from 1 to")


def _toml(text: str) -> dict[str, Any]:
    return tomllib.loads(text)
