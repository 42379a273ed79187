"""`mainboard dashboard` as a subprocess, and the scripts the Chromium tests read pages with."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mainboard.config import Config
from tests.support.cliserver import popen_mainboard

# non-white pixels of a canvas: a plot that drew its data has thousands
INK = """(() => { const c = document.querySelector('#%s canvas');
  if (!c) return 0; const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  let n = 0; for (let i = 0; i < d.length; i += 4) if (d[i] + d[i+1] + d[i+2] < 600) n++;
  return n; })()"""


@dataclass
class Dashboard:
    """A running `mainboard dashboard` subprocess and the URL it printed."""

    proc: subprocess.Popen[str]
    url: str
    stderr: list[str] = field(default_factory=list)  # read as it comes: a full pipe would block it
    reader: threading.Thread | None = None

    @property
    def base(self) -> str:
        return self.url.split("/?token=")[0]

    @property
    def token(self) -> str:
        return self.url.split("?token=")[1]

    def page(self, path: str) -> str:
        """``path`` with the token, as the printed URL carries it."""
        return f"{self.base}{path}{'&' if '?' in path else '?'}token={self.token}"

    def api(self, path: str) -> Any:
        request = urllib.request.Request(self.base + path,
                                         headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(request, timeout=10) as reply:
            return json.load(reply)


def start_dashboard(config: Config, *args: str, env: dict[str, str] | None = None,
                    python: str = sys.executable, cwd: Path | None = None,
                    ignore_ctrl_c: bool = False) -> Dashboard:
    """`mainboard --config C dashboard --json ARGS` (under ``python``, in ``cwd``, with
    Ctrl-C ignored as nohup does if asked); returns once it printed its URL."""
    # faulthandler: a dashboard that hangs on Ctrl-C is stopped with SIGABRT, which prints
    # every thread's stack (stop_dashboard puts them in the failure)
    env = {**os.environ, "PYTHONFAULTHANDLER": "1", **(env or {})}
    env.pop("MAINBOARD_CONFIG", None)
    argv = ["--config", str(config.path), "dashboard", "--json", *args]
    options: dict[str, Any] = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE,
                               "text": True, "env": env, "cwd": cwd,
                               "preexec_fn": _ignore_ctrl_c if ignore_ctrl_c else None}
    proc = (popen_mainboard(argv, **options) if python == sys.executable else
            subprocess.Popen([python, "-m", "mainboard", *argv], **options))
    ready, _, _ = select.select([proc.stdout], [], [], 30)
    line = proc.stdout.readline() if ready else ""  # type: ignore[union-attr]
    if not line:
        proc.kill()
        raise AssertionError(f"dashboard printed no URL: {proc.communicate()[1]}")
    dash = Dashboard(proc, json.loads(line)["url"])
    dash.reader = threading.Thread(target=dash.stderr.extend, args=(proc.stderr,),
                                   daemon=True, name="dashboard-stderr")
    dash.reader.start()
    return dash


def _ignore_ctrl_c() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def stop_dashboard(dash: Dashboard) -> None:
    """Ctrl-C, and the conventional exit 130 without a traceback; a dashboard still running
    after it (60 s: a hang guard) fails the test with its threads' stacks."""
    dash.proc.send_signal(signal.SIGINT)
    try:
        code = dash.proc.wait(60)
    except subprocess.TimeoutExpired:
        dash.proc.send_signal(signal.SIGABRT)  # faulthandler prints the stacks, then it dies
        try:
            dash.proc.wait(30)
        finally:
            dash.proc.kill()
        dash.reader.join(10)  # type: ignore[union-attr]
        raise AssertionError("the dashboard did not exit on Ctrl-C; its threads:\n"
                             + "".join(dash.stderr)) from None
    dash.reader.join(10)  # type: ignore[union-attr]  (the pipe ends with the process)
    err = "".join(dash.stderr)
    assert code == 130 and "Traceback" not in err, (code, err)


# what a person sees: the page wider than the window, and each box that sticks out of it
MEASURE = """JSON.stringify((() => { const root = document.documentElement;
  const out = [...document.querySelectorAll('table, .uplot, .plot, pre, .card, h1, p')]
    .filter((n) => n.getBoundingClientRect().right > root.clientWidth + 0.5)
    .map((n) => n.id || n.className || n.tagName);
  return { scroll: root.scrollWidth, client: root.clientWidth, out }; })())"""
