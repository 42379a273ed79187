"""The newcomer's docs do what they say: every command of docs/quickstart.md runs, in
order, as a user types it (one shell state: the folder and PATH carry over), and the
docs index lists every page under docs/ and links only pages that exist.

The quickstart runs in a scratch folder that mirrors a checkout (links to this one's
``scripts/``, ``examples/``, ``pyproject.toml`` and ``.venv``), so nothing is written
into the repository but the demo's own state. A command marked ``# runs until Ctrl-C``
is started, its URL (first stdout line) fetched, then it gets SIGINT (Ctrl-C).
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
FOREGROUND = "# runs until Ctrl-C"

pytestmark = [pytest.mark.live, pytest.mark.timeout(600)]


def commands(page: Path) -> list[str]:
    """The lines of the page's ``sh`` blocks, in order."""
    blocks = re.findall(r"```sh\n(.*?)```", page.read_text(), flags=re.S)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def _serve_once(line: str, cwd: Path, env: dict[str, str]) -> None:
    """Start a foreground server, fetch the URL its first line shows, stop it with Ctrl-C:
    exit 0 (``up``) or 130 (``dashboard``: the CLI's Ctrl-C code), never a traceback."""
    proc = subprocess.Popen(shlex.split(line, comments=True), cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()  # the event: the URL line
        found = re.search(r"http://127\.0\.0\.1:\S+", first)
        assert found, (first, proc.stderr.read() if proc.stderr else "")
        url = found.group(0)
        with urllib.request.urlopen(url, timeout=30) as page:
            assert page.status == 200 and b"mainboard" in page.read().lower()
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        code = proc.wait(timeout=30)
    stderr = proc.stderr.read() if proc.stderr else ""
    assert code in (0, 130) and "Traceback" not in stderr, (line, code, stderr)


def test_every_quickstart_command_runs_in_order(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    for name in ("scripts", "examples", "pyproject.toml"):
        (checkout / name).symlink_to(REPO / name)
    (checkout / ".venv").symlink_to(Path(sys.prefix))
    venv_bin = str(Path(sys.prefix) / "bin")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAINBOARD_")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if p != venv_bin)
    env["COLUMNS"] = "200"
    cwd = checkout
    ran: list[str] = []
    said: dict[str, str] = {}
    try:
        for line in commands(DOCS / "quickstart.md"):
            words = shlex.split(line, comments=True)
            if words[:2] == [".", ".venv/bin/activate"]:
                env["PATH"] = os.pathsep.join([str(cwd / ".venv" / "bin"), env["PATH"]])
            elif words[0] == "cd":
                cwd = (cwd / words[1]).resolve()
            elif line.rstrip().endswith(FOREGROUND):
                _serve_once(line, cwd, env)
            else:
                done = subprocess.run(line, shell=True, cwd=cwd, env=env, text=True,
                                      capture_output=True, timeout=300)
                assert done.returncode == 0, (line, done.stdout[-2000:], done.stderr[-2000:])
                said[line] = done.stdout
            ran.append(words[0])
    finally:
        subprocess.run([sys.executable, "-m", "mainboard", "broker", "down"], cwd=cwd, env=env,
                       capture_output=True, timeout=60)
    assert len(ran) == len(commands(DOCS / "quickstart.md"))
    assert "gauss-8d" in said["mainboard runs list"]
    assert "local" in said["mainboard fleet status"]


def test_the_docs_index_lists_every_page_and_links_only_pages_that_exist() -> None:
    index = (DOCS / "README.md").read_text()
    linked = set(re.findall(r"\]\(([^)#]+\.md)\)", index))
    assert {p.name for p in DOCS.glob("*.md")} - {"README.md"} <= linked
    missing = [link for link in linked if not (DOCS / link).resolve().exists()]
    assert not missing, f"docs/README.md links pages that do not exist: {missing}"
