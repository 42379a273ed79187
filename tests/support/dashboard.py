"""`mainboard dashboard` as a subprocess, and the scripts the Chromium tests read pages with."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mainboard.config import Config

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
                    python: str = sys.executable, cwd: Path | None = None) -> Dashboard:
    """`mainboard --config C dashboard --json ARGS` (under ``python``, in ``cwd``); returns
    once it printed its URL."""
    env = {**os.environ, **(env or {})}
    env.pop("MAINBOARD_CONFIG", None)
    proc = subprocess.Popen([python, "-m", "mainboard", "--config", str(config.path),
                             "dashboard", "--json", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)
    ready, _, _ = select.select([proc.stdout], [], [], 30)
    line = proc.stdout.readline() if ready else ""  # type: ignore[union-attr]
    if not line:
        proc.kill()
        raise AssertionError(f"dashboard printed no URL: {proc.communicate()[1]}")
    return Dashboard(proc, json.loads(line)["url"])


def stop_dashboard(dash: Dashboard) -> None:
    dash.proc.send_signal(signal.SIGINT)
    try:
        assert dash.proc.wait(60) == 130  # Ctrl-C: the conventional exit (60 s: a hang guard)
    finally:
        if dash.proc.poll() is None:
            dash.proc.kill()
    assert "Traceback" not in (dash.proc.stderr.read() if dash.proc.stderr else "")


# what a person sees: the page wider than the window, and each box that sticks out of it
MEASURE = """JSON.stringify((() => { const root = document.documentElement;
  const out = [...document.querySelectorAll('table, .uplot, .plot, pre, .card, h1, p')]
    .filter((n) => n.getBoundingClientRect().right > root.clientWidth + 0.5)
    .map((n) => n.id || n.className || n.tagName);
  return { scroll: root.scrollWidth, client: root.clientWidth, out }; })())"""
