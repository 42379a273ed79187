"""Packaging and layout: mapped subpackages, no shadowing, the CLI, the README contract."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


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
    readme_line = next(line for line in block.group(1).splitlines() if commands[1] in line)
    ci_lines = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines()]
    assert readme_line.strip() in ci_lines, "CI must run the README's test line as written"


def test_the_demo_finds_its_files() -> None:
    """The README's main job reads its config and run file from the checkout."""
    from mainboard.cli import demo

    assert demo.DEMO_CONFIG.is_file() and demo.DEMO_RUN.is_file(), demo.ROOT


def test_layout_folders_exist() -> None:
    for name in ("mainboard", "bridges", "tasks", "integrators", "deploy", "tests", "bench"):
        assert (REPO / name).is_dir(), name
    assert (REPO / "compose.yaml").is_file()


def test_every_error_class_has_a_one_line_docstring() -> None:
    """errors.py is one hierarchy: every class derives from MainboardError and says why in one line."""
    import inspect

    from mainboard import errors

    classes = [c for _, c in inspect.getmembers(errors, inspect.isclass)
               if c.__module__ == errors.__name__]
    assert len(classes) >= 15
    for cls in classes:
        assert issubclass(cls, errors.MainboardError), cls
        doc = cls.__dict__.get("__doc__") or ""
        assert doc.strip() and "\n" not in doc.strip(), f"{cls.__name__}: {doc!r}"
    assert issubclass(errors.ConfigError, errors.UserError) and errors.UserError.exit_code == 2


def test_bootstrap_names_what_to_install_without_apt(tmp_path: Path) -> None:
    """SIMULATION of a Debian system python without python3-venv: a stand-in `ensurepip` that
    fails to import sits first on PYTHONPATH. The PATH holds only the tools bootstrap needs,
    so there is no apt-get: it must stop before making .venv and name the packages."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    (repo / "scripts" / "bootstrap").write_bytes((REPO / "scripts" / "bootstrap").read_bytes())
    (repo / "scripts" / "bootstrap").chmod(0o755)
    (repo / "pyproject.toml").write_text("")
    shadow = tmp_path / "shadow" / "ensurepip"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('ensurepip is in python3-venv')\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "dirname", "id", "cat", "cut", "sha256sum"):
        found = shutil.which(tool)
        assert found, tool
        (bin_dir / tool).symlink_to(found)
    real = Path(sys.executable).resolve()
    for name in ("python3", "python3.11", "python3.12", "python3.13"):
        wrapper = bin_dir / name
        wrapper.write_text(f"#!/bin/sh\nPYTHONPATH={tmp_path / 'shadow'} exec {real} \"$@\"\n")
        wrapper.chmod(0o755)
    done = subprocess.run([str(repo / "scripts" / "bootstrap"), "demo"], capture_output=True,
                          text=True, env={"PATH": str(bin_dir), "HOME": str(tmp_path)},
                          timeout=60)
    assert done.returncode == 1, done.stderr
    assert "bootstrap: missing: python3 python3-venv" in done.stderr
    assert "apt-get install python3 python3-venv" in done.stderr and "then rerun" in done.stderr
    assert not (repo / ".venv").exists()
