"""The wheel a user installs: built from this checkout, installed alone into a fresh venv,
it serves the dashboard (its script and its page template come from inside the wheel).

The build copies the sources to a scratch folder first, so the checkout gets no ``build/``
or ``*.egg-info``; pip builds it with the setuptools pyproject.toml asks for (build
isolation). The fresh venv holds only the wheel: the third-party packages come from this
interpreter's site-packages through a ``.pth`` path line, which puts that folder on
``sys.path`` without running the ``.pth`` files inside it (the editable install's finder
among them), so every ``mainboard`` module imported there is the wheel's.
"""

from __future__ import annotations

import shutil
import site
import subprocess
import sys
import urllib.request
import zipfile
from pathlib import Path

from mainboard.bridges.project import snapshot, write_wheel
from mainboard.config import load_config
from tests.support.dashboard import start_dashboard, stop_dashboard
from tests.support.importgraph import REPO

SOURCES = ("mainboard", "bridges", "tasks", "integrators", "gammaboard-process",
           "pyproject.toml", "setup.py", "README.md", "LICENSE")


def build_wheel(into: Path) -> tuple[Path, str]:
    """The wheel built from a copy of the sources, and what the build printed."""
    src = into / "src"
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(REPO / name, src / name)
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-v",
                           "-w", str(into / "dist"), str(src)],
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (wheel,) = (into / "dist").glob("mainboard-*.whl")
    return wheel, done.stdout + done.stderr


def venv_with(wheel: Path, at: Path) -> Path:
    """A fresh venv holding ``wheel`` and no other package; returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(at)], check=True,
                   timeout=60)
    python = at / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                    "--no-deps", "--no-index", str(wheel)], check=True, timeout=120)
    (purelib,) = (at / "lib").glob("python3*/site-packages")
    (purelib / "borrowed.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return python


def test_a_built_wheel_installed_alone_serves_the_dashboard(tmp_path: Path) -> None:
    wheel, printed = build_wheel(tmp_path / "build")
    assert "would be ignored" not in printed and "is absent from the `packages`" not in printed
    names = set(zipfile.ZipFile(wheel).namelist())
    # the wheel hosts get (bridges/project.py, written from the same discovery) holds the same
    ours = write_wheel(snapshot(tmp_path / "build" / "src"), tmp_path / "ours")
    assert {n for n in zipfile.ZipFile(ours).namelist() if ".dist-info/" not in n} == \
        {n for n in names if ".dist-info/" not in n}
    for data in (REPO / "mainboard" / "dashboard").glob("*/*.*"):  # static/, templates/
        if data.parent.name == "__pycache__":  # the checkout's bytecode (scripts/bootstrap)
            continue
        assert f"mainboard/{data.relative_to(REPO / 'mainboard')}" in names, data
    python = venv_with(wheel, tmp_path / "venv")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "mainboard.toml").write_text('[workspace]\nname = "wheel"\n')
    where = subprocess.run([str(python), "-c", "import mainboard.dashboard.server as s, "
                            "mainboard.supervisor.up, mainboard.bridges.providers.rest, "
                            "mainboard.integrators.process.client, gammaboard_process; "
                            "print(s.__file__)"], cwd=workspace, capture_output=True,
                           text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(tmp_path / "venv"), where.stdout
    dash = start_dashboard(load_config(workspace / "mainboard.toml"), python=str(python),
                           cwd=workspace, env={"PYTHONPATH": ""})
    try:
        with urllib.request.urlopen(dash.page("/static/app.js"), timeout=10) as reply:
            assert reply.status == 200
            assert reply.read() == (REPO / "mainboard/dashboard/static/app.js").read_bytes()
        with urllib.request.urlopen(dash.page("/runs"), timeout=10) as reply:
            assert reply.status == 200
            assert 'static/app.js"' in reply.read().decode()  # page.html, rendered
    finally:
        stop_dashboard(dash)
