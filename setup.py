"""Packages discovered from the source tree, not listed by hand (the rest of the build is
pyproject.toml's).

Each folder of ``[tool.setuptools.package-dir]`` is installed under its import name with
every package found inside it: ``mainboard/`` as it is, the top-level ``bridges/``,
``tasks/`` and ``integrators/`` folders inside it (so a user's own ``tasks.py`` never
shadows ours), ``gammaboard-process/gammaboard_process`` as the standalone helper. Folders
of data only (the dashboard's ``static/`` and ``templates/``) are packages too, named by
their ``[tool.setuptools.package-data]`` entries: setuptools installs a folder's files only
when the folder is a package. ``bridges/project.py`` (the wheel a host installs) runs the
same ``packages`` on its snapshot's file list, so both wheels hold the same packages.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def packages(files: Iterable[str], setuptools: Mapping[str, Any]) -> list[str]:
    """Import names of the packages among ``files`` (paths relative to the project, with
    ``/``): each folder under a ``package-dir`` folder that holds ``__init__.py``, then
    each ``package-data`` key (``*`` aside)."""
    found = {name for name in setuptools.get("package-data", {}) if name != "*"}
    for name, folder in setuptools["package-dir"].items():
        prefix = folder.rstrip("/") + "/"
        for path in files:
            if path.startswith(prefix) and path.endswith("__init__.py") \
                    and (path == prefix + "__init__.py" or path.endswith("/__init__.py")):
                inside = path[len(prefix):-len("__init__.py")].strip("/")
                found.add(".".join([name, *inside.split("/")]) if inside else name)
    return sorted(found)


if __name__ == "__main__":  # setuptools' build backend runs this file as __main__
    import tomllib
    from pathlib import Path

    from setuptools import setup

    root = Path(__file__).resolve().parent
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    table = config["tool"]["setuptools"]
    tree = [p.relative_to(root).as_posix() for folder in table["package-dir"].values()
            for p in (root / folder).rglob("__init__.py") if "__pycache__" not in p.parts]
    setup(packages=packages(tree, table))
