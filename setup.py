"""Packages discovered from the source tree, not listed by hand (the rest of the build is
pyproject.toml's).

Each folder of ``[tool.setuptools.package-dir]`` is installed under its import name with
every package found inside it: ``mainboard/`` as it is, the top-level ``bridges/``,
``tasks/`` and ``integrators/`` folders inside it (so a user's own ``tasks.py`` never
shadows ours), ``gammaboard-process/gammaboard_process`` as the standalone helper. Folders
of data only (the dashboard's ``static/`` and ``templates/``) are packages too, named by
their ``[tool.setuptools.package-data]`` entries: setuptools installs a folder's files only
when the folder is a package.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).resolve().parent


def packages() -> list[str]:
    """Every package under each mapped folder, then the data-only packages."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]
    folders: dict[str, str] = config["setuptools"]["package-dir"]
    found = [f"{name}.{sub}" if sub else name
             for name, folder in folders.items()
             for sub in ["", *find_packages(str(ROOT / folder))]]
    return sorted({*found, *config["setuptools"]["package-data"]})


setup(packages=packages())
