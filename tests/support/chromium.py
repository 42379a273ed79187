"""Headless Chromium driven over the DevTools protocol, for tests that look at real pages.

Basic-auth credentials go in an ``Authorization`` header set through DevTools
(``Network.setExtraHTTPHeaders``), never in the URL or Chromium's arguments, so they
cannot show up in ``ps``; without them, the login prompt is cancelled as a person would.
``render`` waits until the page's DOM contains a given text (pages like Flower's fill
their tables from JavaScript after load), then returns the DOM and writes a PNG
screenshot; ``drive`` keeps a page open for a test that watches it change.
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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from tornado.httpclient import HTTPRequest
from tornado.websocket import WebSocketClientConnection, websocket_connect

from tests.support.services import require

T = TypeVar("T")

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


class Tab:
    """One open page of a running headless Chromium, for tests that watch a page change."""

    def __init__(self, cdp: _Session) -> None:
        self.cdp = cdp

    @property
    def status(self) -> int | None:
        """HTTP status of the last main document."""
        return self.cdp.status

    async def goto(self, url: str) -> None:
        """Navigate to ``url`` (returns at once; ``wait_for`` what the page should show)."""
        await self.cdp.call("Page.navigate", url=url)

    async def evaluate(self, expression: str, *, wait: bool = False) -> Any:
        """The value of a JavaScript expression in the page (``wait``: of the promise it gives)."""
        done = await self.cdp.call("Runtime.evaluate", returnByValue=True, expression=expression,
                                   awaitPromise=wait)
        return done.get("result", {}).get("value")

    async def click(self, selector: str) -> None:
        """A person's left click (mouse down and up, a user gesture) on the middle of the
        first element ``selector`` matches."""
        found = await self.evaluate(f"(r => r && [r.left + r.width / 2, r.top + r.height / 2])"
                                    f"(document.querySelector({json.dumps(selector)})"
                                    f"?.getBoundingClientRect())")
        if not found:
            raise RuntimeError(f"nothing on the page matches {selector}")
        for kind in ("mousePressed", "mouseReleased"):
            await self.cdp.call("Input.dispatchMouseEvent", type=kind, x=found[0], y=found[1],
                                button="left", clickCount=1)

    async def resize(self, width: int, height: int) -> None:
        """Make the viewport ``width`` x ``height`` CSS pixels at scale 1 (a screenshot is
        then that many pixels); an open page gets its ``resize`` event."""
        await self.cdp.call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                            deviceScaleFactor=1, mobile=False)

    async def dom(self) -> str:
        """The DOM as HTML once the document has loaded ('' before)."""
        return await self.evaluate("document.readyState === 'complete' ? "
                                   "document.documentElement.outerHTML : ''") or ""

    async def wait_for(self, text: str | None, timeout: float, every: float = 0.1) -> str:
        """The DOM once it contains ``text`` (or after ``timeout``: the DOM as it is)."""
        deadline = time.monotonic() + timeout
        html = ""
        while time.monotonic() < deadline:
            html = await self.dom()
            if html and (text is None or text in html):
                break
            await asyncio.sleep(every)
        return html

    async def wait_until(self, expression: str, timeout: float, every: float = 0.1) -> Any:
        """The first truthy value of a JavaScript expression (the last value after ``timeout``):
        cheaper than ``wait_for`` on big pages, whose whole DOM it would copy each time."""
        deadline = time.monotonic() + timeout
        value = None
        while time.monotonic() < deadline:
            value = await self.evaluate(expression)
            if value:
                break
            await asyncio.sleep(every)
        return value

    async def screenshot(self, path: Path) -> Path:
        """A PNG of the viewport."""
        shot = await self.cdp.call("Page.captureScreenshot", format="png")
        path.write_bytes(base64.b64decode(shot["data"]))
        return path


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) of a PNG file, from its IHDR chunk; ValueError if it is no PNG."""
    head = path.read_bytes()[:24]
    if len(head) < 24 or head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        raise ValueError(f"{path} is not a PNG file")
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


async def _open(port: int, url: str, auth: tuple[str, str] | None,
                scenario: Callable[[Tab], Awaitable[T]]) -> T:
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
        return await scenario(Tab(cdp))
    finally:
        ws.close()


def drive(url: str, scenario: Callable[[Tab], Awaitable[T]], *,
          auth: tuple[str, str] | None = None, timeout: float = 30.0) -> T:
    """Open ``url`` in a fresh headless Chromium and run ``scenario(tab)`` on the open page."""
    chromium = require("chromium", "apt-get install chromium")
    with tempfile.TemporaryDirectory(prefix="mb-chromium-") as profile:
        proc = subprocess.Popen([chromium, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            port = _devtools_port(Path(profile), proc, timeout)
            return asyncio.run(asyncio.wait_for(_open(port, url, auth, scenario), timeout))
        finally:
            _stop(proc)


def render(url: str, *, auth: tuple[str, str] | None = None, wait_for: str | None = None,
           screenshot: Path | None = None, timeout: float = 30.0) -> Page:
    """``url`` once its DOM contains ``wait_for`` (or after ``timeout``): DOM and HTTP status."""
    async def look(tab: Tab) -> Page:
        html = await tab.wait_for(wait_for, timeout, every=0.2)
        if screenshot is not None:
            await tab.screenshot(screenshot)
        return Page(html, tab.status)

    return drive(url, look, auth=auth, timeout=timeout + 15)


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
