"""``mainboard dashboard``'s web server: tornado (already here through Flower), pages that
are thin HTML shells, and JSON APIs they poll every second.

Why polling and not server-sent events: a poll is one ``stat`` per run plus a Redis
round trip (the ``/version`` endpoints), it survives a dashboard or broker restart
without reconnection logic, and 1 s polls meet the 2 s freshness target. Every handler,
static files included, answers 401 without the token (see :mod:`auth`); data is read
in a small thread pool so a slow host (ssh for job logs, fleet status) never blocks
another page.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import math
import re
import secrets
import signal
import socket
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import tornado.web
from tornado.httpserver import HTTPServer
from tornado.netutil import bind_sockets

from mainboard.config import Config
from mainboard.dashboard import auth
from mainboard.dashboard.views import PAGE_SIZE, Views
from mainboard.errors import MainboardError, UserError, first_line
from mainboard.redact import redact_text

log = logging.getLogger("mainboard.dashboard")
HERE = Path(__file__).parent
STATIC = HERE / "static"
TEMPLATES = HERE / "templates"
PAGES = {"runs": "Runs", "run": "Run", "fleet": "Fleet", "jobs": "Jobs"}
BASE_PATH = re.compile(r"/(?:[A-Za-z0-9_~-][A-Za-z0-9._~-]*/)*")  # no "." or ".." segment
CSP = ("default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
       "object-src 'none'; frame-ancestors 'none'; base-uri 'none'")


def _clean(value: Any) -> Any:
    """NaN and infinities as None: JSON has neither, and the pages draw None as a gap."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


class _Base(tornado.web.RequestHandler):
    """Token or cookie, else 401 with one line and nothing else."""

    def initialize(self, views: Views, token: str, pool: ThreadPoolExecutor) -> None:
        self.views, self.token, self.pool = views, token, pool

    def set_default_headers(self) -> None:
        self.set_header("Content-Security-Policy", CSP)
        self.set_header("X-Content-Type-Options", "nosniff")
        self.set_header("Referrer-Policy", "no-referrer")
        self.set_header("Cache-Control", "no-store")

    def prepare(self) -> None:
        name = auth.cookie_name(self.application.settings["port"])
        given = self.get_query_argument("token", None)
        if auth.matches(given, self.token):
            self.set_signed_cookie(name, "ok", expires_days=None, httponly=True,
                                   samesite="Strict", path=self.application.settings["base"])
            return
        if auth.matches(auth.from_header(self.request.headers.get("Authorization")),
                        self.token):
            return
        if self.get_signed_cookie(name, max_age_days=31) == b"ok":
            return
        self.set_status(401)
        self.set_header("Content-Type", "text/plain; charset=utf-8")
        self.finish("401: this dashboard needs its token; open the URL that "
                    "`mainboard dashboard` printed\n")

    async def off_loop(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` in the pool: file reads, Redis, ssh never stall the event loop."""
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        self.set_header("Content-Type", "text/plain; charset=utf-8")
        self.finish(f"{status_code}: {self._reason}\n")


class PageHandler(_Base):
    """A page shell; its script fetches the data and keeps it fresh."""

    def get(self, page: str = "runs", ref: str = "") -> None:
        self.render("page.html", page=page, ref=ref, title=PAGES[page],
                    base=self.application.settings["base"])


class ApiHandler(_Base):
    """``/api/...``: JSON for the pages (and for scripts, with the header)."""

    def initialize(self, views: Views, token: str, pool: ThreadPoolExecutor,  # type: ignore[override]
                   what: str) -> None:
        super().initialize(views, token, pool)
        self.what = what

    async def get(self, ref: str = "") -> None:
        try:
            data = await self.off_loop(self._load, ref)
        except UserError as exc:  # UnknownRun, a bad offset
            self.set_status(404)
            data = {"error": first_line(exc)}
        except MainboardError as exc:
            self.set_status(502)
            data = {"error": first_line(exc)}
        self.set_header("Content-Type", "application/json")
        # Through the one redaction, like every CLI line: a job's command, a host's error
        # or a worker's broker URL may quote a credential.
        self.finish(redact_text(json.dumps(_clean(data), allow_nan=False, default=str)))

    def _load(self, ref: str) -> Any:
        v, what = self.views, self.what
        if what == "runs":
            try:
                offset = int(self.get_query_argument("offset", "0"))
                limit = int(self.get_query_argument("limit", str(PAGE_SIZE)))
            except ValueError:
                raise UserError("offset and limit must be integers") from None
            return v.runs_list(max(offset, 0), max(1, min(limit, PAGE_SIZE)))
        loaders: dict[str, Callable[..., Any]] = {
            "runs-version": v.runs_version, "run": v.run, "run-version": v.run_version,
            "run-tasks": v.run_tasks,
            "fleet": v.fleet, "jobs": v.jobs, "jobs-version": v.jobs_version,
            "broker": v.broker}
        data = loaders[what](ref) if ref else loaders[what]()
        return {"version": data} if what.endswith("version") else data


class JobLogHandler(_Base):
    """A job's last lines of stdout or stderr, as plain text (fetched from its host)."""

    async def get(self, ref: str) -> None:
        stream = self.get_query_argument("stream", "stdout")
        if stream not in ("stdout", "stderr"):
            raise tornado.web.HTTPError(400, reason="stream must be stdout or stderr")
        self.set_header("Content-Type", "text/plain; charset=utf-8")
        try:
            text = await self.off_loop(self.views.job_logs, ref, stream)
        except MainboardError as exc:
            self.set_status(502 if not isinstance(exc, UserError) else 404)
            text = f"{first_line(exc)}\n"
        self.finish(redact_text(text))


class StaticHandler(_Base, tornado.web.StaticFileHandler):
    """The vendored uPlot and the pages' own script and style, behind the token too."""

    def initialize(self, views: Views, token: str, pool: ThreadPoolExecutor,  # type: ignore[override]
                   path: str) -> None:
        _Base.initialize(self, views, token, pool)
        tornado.web.StaticFileHandler.initialize(self, path)

    def set_extra_headers(self, path: str) -> None:
        self.set_header("Cache-Control", "private, max-age=300")


def _log(handler: tornado.web.RequestHandler) -> None:
    """Server errors only, by path: the token rides in query strings and is never logged."""
    if handler.get_status() >= 500:
        log.error("%d %s %s", handler.get_status(), handler.request.method,
                  handler.request.path)


def clean_base_path(value: str) -> str:
    """``--base-path`` as the server uses it: one leading and one trailing slash (``board``,
    ``/board`` and ``/board/`` are the same); UserError naming the value otherwise."""
    path = "/" + value.strip("/") + "/" if value.strip("/") else "/"
    if not BASE_PATH.fullmatch(path):
        raise UserError(f"--base-path {value!r}: not a URL path prefix; valid: segments of "
                        "letters, digits, '.', '_', '~', '-' separated by '/' (no '.' or '..' "
                        "segment), e.g. /board/")
    return path


def make_app(views: Views, token: str, port: int, base: str = "/") -> tornado.web.Application:
    """The tornado application for one workspace, token and port, every route under ``base``
    (a path from :func:`clean_base_path`: what a reverse proxy forwards unchanged)."""
    pool = ThreadPoolExecutor(4, thread_name_prefix="dashboard")
    common = {"views": views, "token": token, "pool": pool}
    ref = r"([A-Za-z0-9][A-Za-z0-9._-]{0,127})"
    at = re.escape(base)

    def api(path: str, what: str) -> tuple[str, type, dict[str, Any]]:
        return (f"{at}api/{path}", ApiHandler, {**common, "what": what})

    routes: list[Any] = [
        (at, PageHandler, common),
        (rf"{at}(runs|fleet|jobs)", PageHandler, common),
        (rf"{at}(run)/{ref}", PageHandler, common),
        api("runs", "runs"), api("runs-version", "runs-version"), api(f"run/{ref}", "run"),
        api(f"run/{ref}/version", "run-version"), api(f"run/{ref}/tasks", "run-tasks"),
        api("fleet", "fleet"), api("jobs", "jobs"),
        api("jobs-version", "jobs-version"),
        api("broker", "broker"),
        (rf"{at}jobs/{ref}/logs", JobLogHandler, common),
        (rf"{at}static/(.*)", StaticHandler, {**common, "path": str(STATIC)}),
    ]
    if base != "/":  # "/board" (no slash) is the dashboard too
        routes.append((re.escape(base.rstrip("/")), tornado.web.RedirectHandler,
                       {"url": base}))
    return tornado.web.Application(
        routes, template_path=str(TEMPLATES), cookie_secret=secrets.token_bytes(32),
        port=port, base=base, xsrf_cookies=False, compress_response=True, log_function=_log)


def listen(host: str, port: int) -> list[socket.socket]:
    """Sockets on ``host:port`` (port 0: a free one); one line naming the flag at fault when
    the host is no address of this machine or the port is taken."""
    try:
        return bind_sockets(port, address=host)
    except OSError as exc:
        if isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL:
            raise UserError(f"--host {host}: not an address of this machine ({exc.strerror});"
                            " valid: an IP address or name it listens on, e.g. 127.0.0.1 (the"
                            " default)") from None
        raise UserError(f"--host {host} --port {port}: cannot listen there ({exc.strerror}); "
                        "choose another --port, or leave it out for a free one") from None


def url_of(host: str, port: int, token: str, base: str = "/") -> str:
    """The one URL to print: it opens the dashboard as is."""
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}{base}?token={token}"


async def serve(config: Config, host: str, port: int, token: str,
                ready: Callable[[str], None], base: str = "/") -> None:
    """Serve until cancelled; ``ready(url)`` once the socket listens."""
    sockets = listen(host, port)
    bound = sockets[0].getsockname()[1]
    views = Views(config)
    views.runs.warm_up()
    server = HTTPServer(make_app(views, token, bound, base), xheaders=False)
    server.add_sockets(sockets)
    ready(url_of(host, bound, token, base))
    interrupted = _ctrl_c_event()
    try:
        await interrupted.wait()
    finally:
        server.stop()
        views.close()
    raise KeyboardInterrupt  # as Ctrl-C anywhere else: the CLI exits 130


def _ctrl_c_event() -> asyncio.Event:
    """Set by Ctrl-C. ``asyncio.run``'s own handler is a plain signal handler: a SIGINT the
    kernel hands to one of the pool's threads leaves the loop asleep in ``select`` until the
    next request comes (seen in tests). The loop's handler writes to its wakeup fd, which
    wakes it whichever thread took the signal. A Ctrl-C ignored on purpose (nohup) stays so."""
    event = asyncio.Event()
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        asyncio.get_running_loop().add_signal_handler(signal.SIGINT, event.set)
    return event


__all__ = ["clean_base_path", "listen", "make_app", "serve", "url_of"]
