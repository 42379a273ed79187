"""Headless Chromium driven over the DevTools protocol, for tests that look at real pages.

Basic-auth credentials go in an ``Authorization`` header set through DevTools
(``Network.setExtraHTTPHeaders``), never in the URL or Chromium's arguments, so they
cannot show up in ``ps``; without them, the login prompt is cancelled as a person would.
``render`` waits until the page's DOM contains a given text (pages like Flower's fill
their tables from JavaScript after load), then returns the DOM and writes a PNG
screenshot.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import signal
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tornado.httpclient import HTTPRequest
from tornado.websocket import WebSocketClientConnection, websocket_connect

from tests.services import require

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--window-size=1280,800", "--remote-debugging-address=127.0.0.1",
         "--remote-debugging-port=0"]


@dataclass
class Page:
    """What the browser ended up showing: the DOM, and the main document's HTTP status."""

    html: str
    status: int | None


class _Session:
    """One DevTools websocket; ``call`` sends a command and waits for its answer, meanwhile
    answering paused requests and auth challenges (a browser without credentials cancels the
    login prompt, like a person would) and noting the main document's HTTP status."""

    def __init__(self, ws: WebSocketClientConnection) -> None:
        self.ws, self.next_id, self.status = ws, 0, None

    async def send(self, method: str, **params: Any) -> int:
        self.next_id += 1
        await self.ws.write_message(json.dumps({"id": self.next_id, "method": method,
                                                "params": params}))
        return self.next_id

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        mine = await self.send(method, **params)
        while True:
            raw = await self.ws.read_message()
            if raw is None:
                raise RuntimeError(f"chromium closed the DevTools socket during {method}")
            message = json.loads(raw)
            if message.get("id") == mine:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            await self._event(message.get("method"), message.get("params") or {})

    async def _event(self, method: str | None, params: dict[str, Any]) -> None:
        if method == "Fetch.requestPaused":
            await self.send("Fetch.continueRequest", requestId=params["requestId"])
        elif method == "Fetch.authRequired":
            await self.send("Fetch.continueWithAuth", requestId=params["requestId"],
                            authChallengeResponse={"response": "CancelAuth"})
        elif method == "Network.responseReceived" and params.get("type") == "Document":
            self.status = params["response"]["status"]


def _devtools_port(profile: Path, proc: subprocess.Popen[bytes], timeout: float) -> int:
    """Chromium writes the port it picked to DevToolsActivePort in its profile dir."""
    marker = profile / "DevToolsActivePort"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"chromium exited with code {proc.returncode}")
        lines = marker.read_text().split() if marker.exists() else []
        if len(lines) >= 2:
            return int(lines[0])
        time.sleep(0.05)
    raise TimeoutError("chromium did not open its DevTools port")


async def _render(port: int, url: str, auth: tuple[str, str] | None, wait_for: str | None,
                  screenshot: Path | None, timeout: float) -> Page:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as reply:
        page = next(t for t in json.load(reply) if t["type"] == "page")
    ws = await websocket_connect(HTTPRequest(page["webSocketDebuggerUrl"]),
                                 max_message_size=64 << 20)
    try:
        cdp = _Session(ws)
        await cdp.call("Network.enable")
        await cdp.call("Fetch.enable", handleAuthRequests=True)
        if auth is not None:
            token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
            await cdp.call("Network.setExtraHTTPHeaders",
                           headers={"Authorization": f"Basic {token}"})
        await cdp.call("Page.enable")
        await cdp.call("Page.navigate", url=url)
        deadline = time.monotonic() + timeout
        html = ""
        while time.monotonic() < deadline:
            done = await cdp.call("Runtime.evaluate", returnByValue=True, expression=(
                "document.readyState === 'complete' ? document.documentElement.outerHTML : ''"))
            html = done.get("result", {}).get("value") or ""
            if html and (wait_for is None or wait_for in html):
                break
            await asyncio.sleep(0.2)
        if screenshot is not None:
            shot = await cdp.call("Page.captureScreenshot", format="png")
            screenshot.write_bytes(base64.b64decode(shot["data"]))
        return Page(html, cdp.status)
    finally:
        ws.close()


def render(url: str, *, auth: tuple[str, str] | None = None, wait_for: str | None = None,
           screenshot: Path | None = None, timeout: float = 30.0) -> Page:
    """``url`` once its DOM contains ``wait_for`` (or after ``timeout``): DOM and HTTP status."""
    chromium = require("chromium", "apt-get install chromium")
    with tempfile.TemporaryDirectory(prefix="mb-chromium-") as profile:
        proc = subprocess.Popen([chromium, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            port = _devtools_port(Path(profile), proc, timeout)
            return asyncio.run(_render(port, url, auth, wait_for, screenshot, timeout))
        finally:
            _stop(proc)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """TERM, then KILL, Chromium's whole process group (its helpers too)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(10)
            return
        except subprocess.TimeoutExpired:
            continue
