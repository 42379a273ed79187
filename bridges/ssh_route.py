"""Where an ssh host really is: mainboard.toml first, then ``~/.ssh/config``, then defaults.

A host's ``host`` may be an alias of the user's ssh config, resolved as ``ssh alias``
would (through paramiko's ``SSHConfig``): ``HostName``, ``User``, ``Port``,
``IdentityFile``, ``UserKnownHostsFile``, ``ConnectTimeout``, ``ProxyJump`` and
``ProxyCommand``. A value given explicitly (in mainboard.toml, or as an argument)
always wins over the ssh config; what neither gives takes the defaults (port 22, the
local user, ``~/.ssh/known_hosts``). Host-key trust is never read from the ssh config
(``StrictHostKeyChecking`` is ignored): ``trust`` in mainboard.toml decides, for the
target and every jump host alike.

The file is ``$MAINBOARD_SSH_CONFIG`` when set (``none`` reads no file, like
``ssh -F none``), else ``~/.ssh/config`` when it exists. ``Include`` lines are followed.
"""

from __future__ import annotations

import getpass
import glob
import os
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import paramiko

from mainboard.errors import UserError

CONFIG_ENV = "MAINBOARD_SSH_CONFIG"
DEFAULT_CONFIG = "~/.ssh/config"
DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"
DEFAULT_TIMEOUT_S = 10.0
MAX_JUMPS = 8
_INCLUDE = re.compile(r"^\s*include\s*(?:=\s*|\s)(.+)$", re.IGNORECASE)
_JUMP = re.compile(r"^(?:ssh://)?(?:(?P<user>[^@\s]+)@)?(?:\[(?P<v6>[^\]\s]+)\]|(?P<host>[^:@\s]+))"
                   r"(?::(?P<port>\d+))?$")


@dataclass(frozen=True)
class Hop:
    """One ssh server on the way: its address, port, login and the keys to offer it.

    ``identities`` empty means: ssh-agent and ``~/.ssh/id_*`` (for a jump host, the
    target's keys are offered first). With identities, ssh-agent's keys are offered
    too only when ``agent`` (an ssh config IdentityFile without ``IdentitiesOnly yes``,
    as OpenSSH does; an ``identity`` in mainboard.toml is offered alone).
    """

    host: str
    port: int
    user: str
    identities: tuple[str, ...] = ()
    agent: bool = True

    @property
    def target(self) -> str:
        """``user@host:port`` for messages."""
        return f"{self.user}@{self.host}:{self.port}"


@dataclass(frozen=True)
class Route:
    """How to reach one host: the jump hosts in order (or a proxy command), then the target."""

    target: Hop
    jumps: tuple[Hop, ...]
    proxy_command: str | None
    known_hosts: Path
    connect_timeout: float
    config: Path | None  # the ssh config file consulted, for messages

    @property
    def via(self) -> str:
        """`` via jump a -> b`` (or `` via ProxyCommand``) for messages; empty when direct."""
        if self.jumps:
            return " via jump " + " -> ".join(h.target for h in self.jumps)
        return " via ProxyCommand" if self.proxy_command else ""


def config_path(explicit: str | os.PathLike[str] | None = None) -> Path | None:
    """The ssh config file to read: ``explicit``, ``$MAINBOARD_SSH_CONFIG``, ``~/.ssh/config``.

    ``none`` (either way) means no file. An explicitly named file must exist; the
    default one is simply skipped when missing.
    """
    chosen = os.fspath(explicit) if explicit is not None else os.environ.get(CONFIG_ENV)
    if chosen is not None and chosen.strip().lower() == "none":
        return None
    if chosen:
        path = Path(chosen).expanduser()
        if not path.is_file():
            source = "ssh_config" if explicit is not None else f"${CONFIG_ENV}"
            raise UserError(f"{source} names {path}, which is not a file; give the path of an "
                            "OpenSSH client config, or `none` to read none")
        return path
    default = Path(DEFAULT_CONFIG).expanduser()
    return default if default.is_file() else None


_CACHE: dict[Path, tuple[tuple[int, int], paramiko.SSHConfig]] = {}
_CACHE_LOCK = threading.Lock()


def _inlined(path: Path, depth: int = 0) -> str:
    """The file's text with ``Include`` lines replaced by the files they name (as ssh reads them)."""
    if depth > 16:
        raise UserError(f"ssh config {path}: Include nested more than 16 deep (a loop?)")
    out = []
    for line in path.read_text(errors="replace").splitlines():
        found = _INCLUDE.match(line)
        if not found:
            out.append(line)
            continue
        for word in found.group(1).split():
            pattern = os.path.expanduser(word.strip('"'))
            if not os.path.isabs(pattern):  # relative to ~/.ssh, as OpenSSH does for user files
                pattern = os.path.join(os.path.expanduser("~/.ssh"), pattern)
            for name in sorted(glob.glob(pattern)):
                if os.path.isfile(name):
                    out.append(_inlined(Path(name), depth + 1))
    return "\n".join(out) + "\n"


def load(path: Path) -> paramiko.SSHConfig:
    """The parsed config at ``path`` (cached until the file changes)."""
    stat = path.stat()
    stamp = (stat.st_mtime_ns, stat.st_size)
    with _CACHE_LOCK:
        cached = _CACHE.get(path)
        if cached is not None and cached[0] == stamp:
            return cached[1]
    try:
        parsed = paramiko.SSHConfig.from_text(_inlined(path))
    except (paramiko.ssh_exception.ConfigParseError, OSError) as exc:
        raise UserError(f"ssh config {path}: {exc}; fix the line or point "
                        f"${CONFIG_ENV} at another file (`none` reads none)") from exc
    with _CACHE_LOCK:
        _CACHE[path] = (stamp, parsed)
    return parsed


def _lookup(config: paramiko.SSHConfig | None, path: Path | None, name: str) -> dict[str, object]:
    if config is None:
        return {}
    try:
        return dict(config.lookup(name))
    except Exception as exc:  # noqa: BLE001 - paramiko raises assorted errors for Match lines
        raise UserError(f"ssh config {path}: cannot evaluate it for {name!r}: {exc}") from exc


def _port(value: object, path: Path | None, name: str) -> int:
    text = str(value)
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise UserError(f"ssh config {path}: Port {text!r} for {name!r} is not a port; "
                        "valid: an integer from 1 to 65535")
    return int(text)


def _identities(entry: dict[str, object]) -> tuple[str, ...]:
    """The ``IdentityFile`` lines that exist (OpenSSH skips missing ones from a config)."""
    files = entry.get("identityfile") or []
    assert isinstance(files, list)
    found = [os.path.expanduser(str(f)) for f in files]
    return tuple(f for f in found if os.path.isfile(f))


def _agent(entry: dict[str, object]) -> bool:
    """ssh-agent's keys are offered unless ``IdentitiesOnly yes``."""
    return str(entry.get("identitiesonly", "no")).lower() != "yes"


def parse_jump(text: str, path: Path | None = None) -> list[tuple[str | None, str, int | None]]:
    """``[user@]host[:port]`` (or ``ssh://...``) hops of a ProxyJump value, in order."""
    hops = []
    for part in text.split(","):
        found = _JUMP.match(part.strip())
        if not found:
            where = f"ssh config {path}" if path else "jump"
            raise UserError(f"{where}: ProxyJump hop {part.strip()!r} is not understood; "
                            "valid: [user@]host[:port], comma-separated")
        port = found.group("port")
        hops.append((found.group("user"), found.group("v6") or found.group("host"),
                     int(port) if port else None))
    return hops


def _jump_hops(text: str, config: paramiko.SSHConfig | None, path: Path | None,
               depth: int) -> tuple[Hop, ...]:
    """The hops of a ProxyJump value; the first hop's own ProxyJump comes first (as ssh does)."""
    if depth > MAX_JUMPS:
        raise UserError(f"ssh config {path}: ProxyJump chains more than {MAX_JUMPS} hosts "
                        "deep (a loop?)")
    hops: list[Hop] = []
    for index, (user, name, port) in enumerate(parse_jump(text, path)):
        entry = _lookup(config, path, name)
        inner = entry.get("proxyjump")
        if index == 0 and isinstance(inner, str) and inner.lower() != "none":
            hops.extend(_jump_hops(inner, config, path, depth + 1))
        hops.append(Hop(
            host=str(entry.get("hostname") or name),
            port=port or (_port(entry["port"], path, name) if "port" in entry else 22),
            user=user or str(entry.get("user") or getpass.getuser()),
            identities=_identities(entry), agent=_agent(entry)))
    return tuple(hops)


def resolve(host: str, *, port: int | None = None, user: str | None = None,
            identity: str | None = None, known_hosts: str | os.PathLike[str] | None = None,
            connect_timeout: float | None = None, jump: str | Sequence[Hop] | None = None,
            ssh_config: str | os.PathLike[str] | None = None) -> Route:
    """The route to ``host``: arguments given win, then its ssh config entry, then defaults.

    ``jump`` is a ProxyJump value (``none`` for a direct connection) or hops already
    resolved; either wins over the config's ProxyJump and ProxyCommand.
    """
    path = config_path(ssh_config)
    config = load(path) if path is not None else None
    entry = _lookup(config, path, host)
    target = Hop(
        host=str(entry.get("hostname") or host),
        port=port if port is not None else (
            _port(entry["port"], path, host) if "port" in entry else 22),
        user=user or str(entry.get("user") or getpass.getuser()),
        identities=(str(Path(identity).expanduser()),) if identity else _identities(entry),
        agent=not identity and _agent(entry))
    if known_hosts is None:
        files = str(entry.get("userknownhostsfile") or DEFAULT_KNOWN_HOSTS).split()
        known_hosts = files[0] if files and files[0].lower() != "none" else DEFAULT_KNOWN_HOSTS
    if connect_timeout is None:
        raw = entry.get("connecttimeout")
        connect_timeout = float(raw) if isinstance(raw, str) and raw.isdigit() and int(raw) \
            else DEFAULT_TIMEOUT_S
    jumps: tuple[Hop, ...] = ()
    proxy: str | None = None
    if isinstance(jump, str):
        jumps = () if jump.strip().lower() == "none" else _jump_hops(jump, config, path, 0)
    elif jump is not None:
        jumps = tuple(jump)
    else:
        spec, command = entry.get("proxyjump"), entry.get("proxycommand")
        if isinstance(spec, str) and spec.lower() != "none":
            jumps = _jump_hops(spec, config, path, 0)
        elif isinstance(command, str) and command.strip().lower() != "none":
            proxy = command
    return Route(target=target, jumps=jumps, proxy_command=proxy,
                 known_hosts=Path(known_hosts).expanduser(), connect_timeout=connect_timeout,
                 config=path)
