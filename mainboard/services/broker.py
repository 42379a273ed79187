"""The embedded broker: a private, password-protected redis-server per workspace.

Nothing to install or configure for a first run: ``EmbeddedBroker(state_dir).up()``
starts ``redis-server`` on loopback with two ACL users (``mainboard.services.acl``): the
coordinator, whose random password is kept in ``state_dir/broker.secret``, and the
fleet's worker user (``broker-worker.secret``), cut down to our keys and no dangerous
command; the ``default`` user is off. Passwords live only in those 0600 files and the
generated aclfile (0600); the process is started as ``redis-server CONF`` so none shows
up in ``ps``. With ``[broker] tls = true`` it listens on TLS only (``rediss://``), its
certificate signed by a CA of its own (``mainboard.services.tls``) that the fleet ships
to its workers. ``[broker] url = "redis://..."`` in mainboard.toml replaces all of this
with an existing Redis (see :func:`resolve_broker_url`; ``[broker] worker_url`` names the
user its workers get).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from redis.sentinel import MasterNotFoundError

from mainboard.config.brokerurl import BROKER_URL_ENV, REDIS_URL_FORMS, redis_url_problem
from mainboard.daemon import (
    FORBIDDEN_PORTS,
    HOST,
    Daemon,
    fresh_port,
    port_is_free,
    read_or_create_secret,
    write_private,
)
from mainboard.errors import (
    BrokerError,
    ConfigError,
    MissingDependency,
    SentinelsDown,
    first_line,
)
from mainboard.redact import redact_url
from mainboard.redisclient import is_sentinel, parse_sentinel_url, redis_client
from mainboard.services.acl import COORDINATOR, WORKER, acl_text
from mainboard.services.tls import TlsFiles, ensure_tls

if TYPE_CHECKING:
    from mainboard.config import Config

REDIS_SERVER_ENV = "MAINBOARD_REDIS_SERVER"
START_TIMEOUT = 15.0
STOP_TIMEOUT = 15.0
PING_TIMEOUT_S = 5.0  # connect and answer: a broker that is down is told within seconds
_CONNECTING = re.compile(r"^Error -?\d+ connecting to \S+?\. ")  # redis-py's prefix

INSTALL_HINT = (
    "install it (Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis; "
    "conda: conda install -c conda-forge redis), or use an existing Redis with "
    '[broker] url = "redis://..." in mainboard.toml'
)


def find_redis_server() -> str:
    """Path of the redis-server binary: $MAINBOARD_REDIS_SERVER, else the first on PATH."""
    override = os.environ.get(REDIS_SERVER_ENV)
    if override:
        if os.path.isfile(override) and os.access(override, os.X_OK):
            return override
        raise MissingDependency(
            f"{REDIS_SERVER_ENV}={override!r} is not an executable file: point it at "
            f"redis-server or unset it to search PATH; or {INSTALL_HINT}")
    found = shutil.which("redis-server")
    if not found:
        raise MissingDependency(f"redis-server not found on PATH (nor set in {REDIS_SERVER_ENV}): "
                                f"{INSTALL_HINT}")
    return found


def address(url: str) -> str:
    """``host:port`` of a broker URL (never its password), for messages."""
    if is_sentinel(url):
        try:
            target = parse_sentinel_url(url)
        except ValueError:
            return "the configured sentinels"
        hosts = ",".join(f"{h}:{p}" for h, p in target.sentinels)
        return f"master {target.master} of sentinels {hosts}"
    try:
        parts = urlsplit(url)
        return f"{parts.hostname or '?'}:{parts.port or 6379}"
    except ValueError:
        return "the configured broker"


def _origin(url: str, config: Config | None) -> tuple[str, str]:
    """Where ``url`` comes from, and what to do when it does not answer."""
    if url == os.environ.get(BROKER_URL_ENV, "").strip():
        return f"${BROKER_URL_ENV}", f"start that Redis, or correct or unset {BROKER_URL_ENV}"
    if config is not None and url == config.broker.url:
        return (f"[broker] url of {config.path or 'mainboard.toml'}",
                "start that Redis, or correct [broker] url (without it the embedded broker "
                "is used)")
    if config is not None and url == _embedded_url(config.state_dir):
        log = EmbeddedBroker(config.state_dir).log_path
        return "the embedded broker", f"restart it with `mainboard broker up` (log: {log})"
    return "broker_url", "start that Redis, or pass the URL of one that runs"


def _embedded_url(state_dir: Path) -> str | None:
    """The embedded broker's URL, None when it has never been started."""
    try:
        return EmbeddedBroker(state_dir).url()
    except BrokerError:
        return None


def check_broker(url: str, config: Config | None = None,
                 timeout: float = PING_TIMEOUT_S) -> None:
    """Return once the broker at ``url`` answers PING; else BrokerError in one line naming
    its host:port (never the password), where the URL comes from and what to do."""
    try:
        with redis_client(url, socket_timeout=timeout, socket_connect_timeout=timeout,
                          retry=Retry(NoBackoff(), 0)) as client:
            client.ping()
        return
    except redis.AuthenticationError as exc:
        problem, fix = first_line(exc), "correct the password in that URL"
    except MasterNotFoundError as exc:  # no sentinel answered, or none knows the master
        origin, _how = _origin(url, config)
        raise SentinelsDown(
            f"broker connection failed: {address(url)} ({origin}): {first_line(exc)}; start "
            "those sentinels (`mainboard broker up --replicas 2` for a local set) or correct "
            "[broker] sentinels and master") from None
    except redis.RedisError as exc:  # refused, timed out, unknown host, TLS, ...
        problem, fix = _CONNECTING.sub("", first_line(exc)).rstrip("."), None
    origin, how = _origin(url, config)
    raise BrokerError(f"broker connection failed: {address(url)} ({origin}) does not answer: "
                      f"{problem}; {fix or how}")


def embedded_down(state_dir: Path, workers: int) -> BrokerError:
    """The embedded broker is not running while ``workers`` fleet workers expect it."""
    port = EmbeddedBroker(state_dir).status().port
    count = f"{workers} worker{'s' if workers != 1 else ''}"
    return BrokerError(f"broker connection failed: {HOST}:{port or '?'} (the embedded broker) "
                       f"is not running while the fleet has {count} on it; start it with "
                       "`mainboard broker up`, then run this again")


def resolve_broker_url(config: Config) -> str:
    """The broker URL to use: ``[broker] url`` if set, else the embedded broker (started if needed)."""
    url = config.broker.url
    if url:
        problem = redis_url_problem(url)  # a Config built without validation, e.g. in code
        if problem:
            raise ConfigError(problem, file=str(config.path or "<default>"), key="broker.url",
                              value=redact_url(url), valid=REDIS_URL_FORMS)
        return url
    broker = EmbeddedBroker(config.state_dir, tls=config.broker.tls)
    broker.up()
    return broker.url()


def worker_url(url: str, config: Config | None = None) -> str:
    """The URL a worker gets for the broker the coordinator reaches at ``url``: the embedded
    broker's worker user, or ``[broker] worker_url`` beside ``[broker] url``; any other URL
    (given as an argument or in the environment) is passed on as it is."""
    if config is None:
        return url
    if config.broker.url:
        if url == config.broker.url and config.broker.worker_url:
            return config.broker.worker_url
        return url
    broker = EmbeddedBroker(config.state_dir)
    try:
        if url == broker.url():
            return broker.url(user=WORKER)
    except BrokerError:
        pass
    return url


@dataclass(frozen=True)
class BrokerStatus:
    """What a PING/INFO of the embedded broker says (or that it is stopped)."""

    running: bool
    state_dir: str
    pid: int | None = None
    port: int | None = None
    url: str | None = None  # display form, password replaced by ***
    redis_version: str | None = None
    uptime_s: int | None = None
    memory_used_bytes: int | None = None
    memory_used_human: str | None = None
    aof_enabled: bool | None = None
    keys: int | None = None
    action: str | None = None  # started | already running | stopped | not running
    note: str | None = None  # e.g. a stale pid file that was cleared

    @property
    def state(self) -> str:
        """``running`` or ``stopped``."""
        return "running" if self.running else "stopped"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (never holds the password)."""
        return {"state": self.state, **asdict(self)}


def _conf_value(value: str) -> str:
    """Quote a value for redis.conf (double quotes, backslash escapes)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _pings(client: redis.Redis) -> bool:
    """True if the server answers PING; False while it is not (yet) reachable."""
    try:
        return bool(client.ping())
    except (redis.ConnectionError, redis.TimeoutError):
        return False


class EmbeddedBroker(Daemon):
    """A private redis-server whose config, data, password and pid live under ``state_dir``."""

    program = "redis-server"
    error = BrokerError
    secret_bytes = 32
    start_timeout = START_TIMEOUT
    record_indent = 1
    port_in_exit_error = True  # "in use" in that message makes up() retry on a fresh port

    def __init__(self, state_dir: Path, tls: bool | None = None) -> None:
        """``tls``: how ``up`` starts it (None: as it was last started, else plain)."""
        super().__init__(state_dir, "redis", secret="broker.secret", conf="redis.conf",
                         log="redis.log", record="broker.json", lock="broker.lock")
        self.redis_dir = self.dir
        self.pidfile_path = self.redis_dir / "redis.pid"
        self.acl_path = self.redis_dir / "users.acl"
        self.worker_secret_path = self.state_dir / "broker-worker.secret"
        self.tls_files = TlsFiles.under(self.redis_dir / "tls")
        self.tls = tls

    # ----- files -------------------------------------------------------------------------

    def _read_record(self) -> dict[str, Any]:
        """broker.json; redis.pid and redis.conf fill in the pid and port it lacks."""
        data = super()._read_record()
        if data.get("pid") is None:
            with contextlib.suppress(OSError, ValueError):
                data["pid"] = int(self.pidfile_path.read_text().strip())
        if data.get("port") is None:
            with contextlib.suppress(OSError):
                found = re.search(r"^(?:tls-)?port ([1-9]\d*)$", self.conf_path.read_text(),
                                  re.MULTILINE)
                data["port"] = int(found.group(1)) if found else None
        return data

    def _mode(self) -> tuple[bool, bool]:
        """(ACL users, TLS) as the running or last started server was set up."""
        data = self._read_record()
        return bool(data.get("acl")), bool(data.get("tls"))

    def _worker_password(self) -> str:
        """The worker user's password (made once, kept in its own 0600 file)."""
        return read_or_create_secret(self.worker_secret_path, self.secret_bytes)

    def _write_conf(self, port: int, password: str, tls: bool) -> None:
        """The generated redis.conf and aclfile: the only places besides the secret files
        holding the passwords. ``tls``: the TLS port only, no plain-text listener."""
        worker = self._worker_password()
        for path, secret in ((self.secret_path, password), (self.worker_secret_path, worker)):
            if any(c.isspace() for c in secret):  # an aclfile line ends at the first space
                raise ConfigError("the broker password in it holds whitespace", file=str(path),
                                  valid="one word without spaces (delete the file: the next "
                                        "`mainboard broker up` makes a new one)")
        write_private(self.acl_path, acl_text(password, worker))
        listen = [f"port {port}"]
        if tls:
            files = ensure_tls(self.tls_files.ca.parent)
            listen = ["port 0", f"tls-port {port}",
                      f"tls-cert-file {_conf_value(str(files.cert))}",
                      f"tls-key-file {_conf_value(str(files.key))}",
                      f"tls-ca-cert-file {_conf_value(str(files.ca))}",
                      "tls-auth-clients no"]
        lines = [
            "# generated by `mainboard broker up`, rewritten on every start; do not edit",
            f"bind {HOST}", "protected-mode yes", *listen,
            "daemonize no", "set-proc-title no",
            f"dir {_conf_value(str(self.redis_dir))}",
            f"pidfile {_conf_value(str(self.pidfile_path))}",
            f"logfile {_conf_value(str(self.log_path))}", "loglevel notice",
            "appendonly yes", "appendfsync everysec", 'save ""',
            "maxmemory-policy noeviction", "tcp-keepalive 60",
            f"aclfile {_conf_value(str(self.acl_path))}",
        ]
        write_private(self.conf_path, "\n".join(lines) + "\n")

    # ----- process -----------------------------------------------------------------------

    def _marks(self) -> tuple[str, ...]:
        """The redis-server running our conf file (set-proc-title no keeps argv intact)."""
        return "redis-server", str(self.conf_path)

    def _client(self, port: int, password: str | None, mode: tuple[bool, bool] | None = None
                ) -> redis.Redis:
        """A coordinator client that fails fast: no retries, so a stopped server is noticed
        at once. ``mode``: (ACL users, TLS), by default as recorded."""
        acl, tls = mode if mode is not None else self._mode()
        extra: dict[str, Any] = ({"ssl": True, "ssl_cert_reqs": "required",
                                  "ssl_ca_certs": str(self.tls_files.ca)} if tls else {})
        return redis.Redis(host=HOST, port=port, username=COORDINATOR if acl else None,
                           password=password, socket_timeout=3, socket_connect_timeout=3,
                           retry=Retry(NoBackoff(), 0), **extra)

    def _launch(self, binary: str, port: int, password: str, tls: bool) -> int:
        """Start redis-server (passwords only in its files); return its pid once it answers."""
        self._write_conf(port, password, tls)
        with self._client(port, password, (True, tls)) as client:
            return self._start([binary, str(self.conf_path)], port,
                               [password, self._worker_password()], lambda: _pings(client))

    def _launch_retrying(self, binary: str, port: int, password: str, tls: bool
                         ) -> tuple[int, int]:
        """``_launch`` on ``port``, or on a fresh one when someone grabbed it between the
        check and redis-server's bind (three tries); (pid, port)."""
        for attempt in range(3):
            try:
                return self._launch(binary, port, password, tls), port
            except BrokerError as exc:
                if attempt == 2 or "in use" not in str(exc):
                    raise
                port = fresh_port()
        raise AssertionError("unreachable")

    # ----- public API ----------------------------------------------------------------------

    def status(self) -> BrokerStatus:
        """Running or stopped, with pid, port, memory, uptime, AOF and key count from INFO."""
        pid, port = self._recorded()
        base = BrokerStatus(running=False, state_dir=str(self.state_dir), port=port)
        if not self._is_ours(pid):
            note = f"stale pid {pid} (process gone)" if pid else None
            return replace(base, note=note)
        base = replace(base, running=True, pid=pid, url=self.display_url)
        try:
            with self._client(port or 0, self._password()) as client:
                info = client.info("everything")
        except redis.RedisError as exc:
            return replace(base, note=f"process alive but not answering: {type(exc).__name__}")
        keys = sum(v.get("keys", 0) for k, v in info.items()
                   if re.fullmatch(r"db\d+", k) and isinstance(v, dict))
        return replace(base, redis_version=str(info.get("redis_version")),
                       uptime_s=int(info.get("uptime_in_seconds", 0)),
                       memory_used_bytes=int(info.get("used_memory", 0)),
                       memory_used_human=str(info.get("used_memory_human")),
                       aof_enabled=bool(info.get("aof_enabled")), keys=keys)

    def up(self) -> BrokerStatus:
        """Start the broker, or reuse the one already running for this state dir."""
        with self._locked():
            current = self.status()
            tls = self.tls if self.tls is not None else self._mode()[1]
            if current.running:
                if self.tls is not None and self._mode()[1] != self.tls:
                    raise BrokerError(
                        f"the embedded broker runs {'without' if self.tls else 'with'} TLS "
                        f"while [broker] tls = {str(self.tls).lower()}; restart it: "
                        "`mainboard broker down`, then run this again")
                return replace(current, action="already running")
            binary = find_redis_server()
            password = self._ensure_password()
            previous = current.port
            port = previous if previous and previous not in FORBIDDEN_PORTS \
                and port_is_free(previous) else fresh_port()
            pid, port = self._launch_retrying(binary, port, password, tls)
            self._record(pid=pid, port=port, conf=str(self.conf_path), started_at=time.time(),
                         acl=True, tls=tls)
        return replace(self.status(), action="started", note=current.note)

    def down(self) -> BrokerStatus:
        """Stop the broker: SHUTDOWN (AOF flushed), else SIGTERM to our verified pid."""
        with self._locked():
            current = self.status()
            if not current.running or current.pid is None:
                with contextlib.suppress(FileNotFoundError):
                    self.pidfile_path.unlink()  # left behind by a killed server
                if current.note:  # stale pid: forget it, keep the port for the next start
                    self._record(port=current.port, acl=self._mode()[0], tls=self._mode()[1])
                return replace(current, action="not running")
            pid, port = current.pid, current.port
            try:
                with self._client(port or 0, self._password()) as client:
                    client.ping()  # shutdown() alone mistakes a refused AUTH for success
                    client.shutdown()  # returns once the server has dropped the connection
                asked = True
            except redis.RedisError:  # e.g. broker.secret lost or replaced: fall back to a signal
                asked = False
            if not (asked and self._wait_gone(pid, STOP_TIMEOUT)):
                if self._is_ours(pid):  # re-check right before signalling: never hit a stranger
                    os.kill(pid, signal.SIGTERM)
                if not self._wait_gone(pid, STOP_TIMEOUT):
                    raise BrokerError(f"redis-server pid {pid} did not stop after SHUTDOWN and "
                                      f"SIGTERM; see {self.log_path}")
            self._record(port=port, acl=self._mode()[0], tls=self._mode()[1])  # for the next start
        return BrokerStatus(running=False, state_dir=str(self.state_dir), pid=pid, port=port,
                            action="stopped")

    def url(self, with_password: bool = True, user: str = COORDINATOR) -> str:
        """``redis://USER:PASSWORD@127.0.0.1:PORT/0`` (``rediss://...?ssl_ca_certs=CA`` with
        TLS) for internal use (Celery); never print it. ``user``: the coordinator (every
        right) or ``WORKER`` (what fleet and local workers get)."""
        port = self._recorded()[1]
        if not port:
            raise BrokerError(f"the embedded broker in {self.state_dir} has never been started; "
                              "run `mainboard broker up`")
        acl, tls = self._mode()  # a server started before ACL users knows one password only
        if with_password:
            password = self._worker_password() if user == WORKER and acl else self._password()
        else:
            password = "***"
        name = user if acl else ""
        auth = f"{name}:{password}@" if password else ""
        if not tls:
            return f"redis://{auth}{HOST}:{port}/0"
        ca = quote(str(self.tls_files.ca), safe="/")
        return f"rediss://{auth}{HOST}:{port}/0?ssl_cert_reqs=required&ssl_ca_certs={ca}"

    @property
    def display_url(self) -> str:
        """The URL with the password shown as ``***``: safe for output and logs."""
        return self.url(with_password=False)
