"""Packaging and layout: mapped subpackages, no shadowing, the CLI, the README contract."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("sub", ["tasks", "bridges", "integrators"])
def test_user_modules_do_not_shadow_subpackages(tmp_path: Path, sub: str) -> None:
    """A user project with its own tasks.py (the Celery habit) still gets mainboard.tasks."""
    (tmp_path / f"{sub}.py").write_text("raise SystemExit('user module imported')\n")
    (tmp_path / sub).mkdir()
    (tmp_path / sub / "__init__.py").write_text("raise SystemExit('user package imported')\n")
    code = (f"import mainboard.{sub} as m, sys; "
            f"assert sys.path[0] == '', sys.path[0]; print(m.__file__)")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, check=True).stdout.strip()
    assert Path(out).resolve() == (REPO / sub / "__init__.py").resolve()


def test_help_lists_commands() -> None:
    out = subprocess.run([sys.executable, "-m", "mainboard", "--help"], capture_output=True,
                         text=True, check=True).stdout
    for verb in ("run", "facts", "compute", "broker"):
        assert re.search(rf"^\s+{verb}\b", out, re.M), f"{verb} missing from --help:\n{out}"


def test_readme_has_two_commands_and_ci_runs_the_test_one() -> None:
    readme = (REPO / "README.md").read_text()
    block = re.search(r"## Two commands.*?```sh\n(.*?)```", readme, re.S)
    assert block, "README lost its 'Two commands' block"
    commands = [line.split("#")[0].strip() for line in block.group(1).splitlines() if line.strip()]
    assert commands == ["scripts/bootstrap demo", "scripts/bootstrap test"]
    ci = (REPO / ".ci" / "run").read_text()
    assert "exec scripts/bootstrap test" in ci


def test_layout_folders_exist() -> None:
    for name in ("mainboard", "bridges", "tasks", "integrators", "deploy", "tests", "bench"):
        assert (REPO / name).is_dir(), name
    assert (REPO / "compose.yaml").is_file()
