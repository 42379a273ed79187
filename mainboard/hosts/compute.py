"""`mainboard compute`: every machine mainboard can use, whether it is usable now, and what it has.

Each declared host gets one quick, concurrent access check with a short timeout
(one ssh round trip at most), so one dead host costs one row, never the command.
Hardware comes from the facts cache (``mainboard facts --on NAME`` fills it), not
from a fresh probe. Providers show only whether their API key variable is set:
the value is never read into a row.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import shutil
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from datetime import datetime
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, model_validator

from mainboard.bridges.ssh import SshTransport
from mainboard.bridges.ssh_session import remote_word
from mainboard.config import Config, HostConfig, ProviderConfig
from mainboard.errors import AuthFailed, HostKeyMismatch, MainboardError, first_line
from mainboard.hosts.access import Hosts
from mainboard.hosts.facts import cached_record, summary

HostAccess = Literal["here", "ready", "unreachable", "auth-failed", "not-set-up"]
Credentials = Literal["keyed", "missing"]  # providers: whether the API key variable is set
Access = HostAccess | Credentials
SCHEDULER_COMMAND = {"slurm": "sbatch", "pbs": "qsub"}
MAX_PARALLEL = 64  # checks mostly wait on the network


class ComputeRow(BaseModel):
    """One line of `mainboard compute`: a host (``type="host"``) or a provider."""

    model_config = ConfigDict(frozen=True)

    name: str
    type: Literal["host", "provider"]
    kind: str
    access: Access
    reason: str | None = None
    summary: str
    probed_at: datetime | None = None

    @model_validator(mode="after")
    def _access_fits_type(self) -> ComputeRow:
        """Hosts say whether they are usable; providers only whether they are keyed."""
        allowed = get_args(HostAccess if self.type == "host" else Credentials)
        if self.access not in allowed:
            raise ValueError(f"a {self.type} row's access is one of {', '.join(allowed)}, "
                             f"not {self.access!r}")
        return self

    @property
    def access_text(self) -> str:
        """``access`` with its reason in parentheses, as users read it."""
        return f"{self.access} ({self.reason})" if self.reason else self.access


@dataclasses.dataclass(frozen=True)
class _Access:
    access: Access
    reason: str | None = None


def provider_access(name: str, provider: ProviderConfig) -> _Access:
    """keyed when the provider's api_key_env variable is set and non-empty; only the name shows."""
    if not provider.api_key_env:
        return _Access("missing", f"providers.{name}.api_key_env is not set")
    if os.environ.get(provider.api_key_env, "").strip():
        return _Access("keyed")
    return _Access("missing", f"set ${provider.api_key_env}")


def _check_script(host: HostConfig) -> str:
    """One shell round trip answering: does root exist, does python run, is the scheduler there."""
    python = shlex.quote(getattr(host, "python", None) or "python3")
    lines = []
    if host.root:
        lines.append(f"if [ -d {remote_word(host.root)} ]; then echo mb-root=ok; "
                     "else echo mb-root=missing; fi")
    lines.append(f"{python} -S -c 'import sys; print(\"mb-python=%d.%d.%d\" % "
                 "tuple(sys.version_info[:3]))' 2>/dev/null || echo mb-python=missing")
    scheduler = SCHEDULER_COMMAND.get(host.kind)
    if scheduler:
        lines.append(f"command -v {scheduler} >/dev/null 2>&1 && echo mb-scheduler=ok "
                     "|| echo mb-scheduler=missing")
    return "\n".join(lines)


def _interpret(host: HostConfig, stdout: str) -> _Access:
    """Turn the check script's ``mb-key=value`` lines into an access state naming what is missing."""
    found = dict(line.strip()[3:].split("=", 1) for line in stdout.splitlines()
                 if line.strip().startswith("mb-") and "=" in line)
    missing = []
    if host.root and found.get("root") != "ok":
        missing.append(f"root {host.root} missing")
    if found.get("python", "missing") == "missing":
        missing.append(f"{getattr(host, 'python', None) or 'python3'} not found")
    scheduler = SCHEDULER_COMMAND.get(host.kind)
    if scheduler and found.get("scheduler") != "ok":
        missing.append(f"{scheduler} not found")
    return _Access("not-set-up", "; ".join(missing)) if missing else _Access("ready")


def _remote_access(board: Hosts | None, name: str, host: HostConfig, timeout: float) -> _Access:
    """Connect with a short timeout and run the check script once (never in the root dir)."""
    started = time.monotonic()
    if board is not None:  # the Board's transport: same path resolution as `board.on(name)`
        transport = board.on(name).transport
    else:
        params = host.ssh_params()
        assert params is not None
        transport = SshTransport.from_params(params, name)
    if isinstance(transport, SshTransport):
        transport.connect_timeout = min(transport.connect_timeout, timeout)
    try:
        left = max(timeout - (time.monotonic() - started), 0.5)
        result = transport.run(_check_script(host), timeout=left, env=host.env)
    except (AuthFailed, HostKeyMismatch) as exc:
        return _Access("auth-failed", _short(exc, name))
    except MainboardError as exc:
        return _Access("unreachable", _short(exc, name))
    except Exception as exc:  # noqa: BLE001 - a row must say what went wrong, not crash the list
        return _Access("unreachable", f"{type(exc).__name__}: {exc}"[:200])
    finally:
        transport.close()
    return _interpret(host, result.stdout)


def _short(exc: BaseException, name: str = "") -> str:
    """First line of an error, without the host name prefix the row already shows."""
    text = first_line(exc, limit=10_000)
    return (text.removeprefix(f"{name}: ") if name else text)[:300]


def host_access(board: Hosts | None, name: str, host: HostConfig, config: Config,
                timeout: float) -> _Access:
    """Access state of one declared host (never raises)."""
    if host.kind == "local":
        return _Access("here")
    if host.kind == "provider":  # rented on demand: usable once its provider is keyed
        keyed = provider_access(host.provider, config.providers[host.provider])
        return _Access("ready") if keyed.access == "keyed" else _Access("not-set-up", keyed.reason)
    if host.ssh_params() is None:  # slurm/pbs whose login is this machine
        scheduler = SCHEDULER_COMMAND[host.kind]
        if shutil.which(scheduler):
            return _Access("ready")
        return _Access("not-set-up", f"{scheduler} not found on PATH")
    return _remote_access(board, name, host, timeout)


def _hardware(config: Config, name: str, host: HostConfig) -> tuple[str, datetime | None]:
    """One-line summary from cached facts, or how to get them."""
    record = cached_record(config.state_dir, name)
    if record is not None:
        return summary(record.facts), record.probed_at
    if host.kind == "provider":
        gpu = getattr(host, "gpu", None) or "any GPU"
        price = getattr(host, "max_usd_hr", None)
        return (f"rented on demand from {host.provider}: {gpu}"
                + (f", at most ${price:g}/h" if price else "")), None
    return f"no facts yet (run mainboard facts --on {shlex.quote(name)})", None


def list_compute(config: Config, timeout: float = 5.0) -> list[ComputeRow]:
    """Rows for local, every declared host (checked concurrently) and every provider."""
    names = config.host_names()
    hosts = {name: config.host(name) for name in names}
    # A Board gives each host the transport `board.on(name)` would use (relative identity
    # and known_hosts paths resolved next to mainboard.toml). Without a file there are no
    # declared remote hosts unless the Config was built in code; then params are used as-is.
    board = Hosts(config=config) if config.path else None
    states: dict[str, _Access] = {}
    # Not a `with` block: its exit would wait for a hung check, and the list must not.
    pool = ThreadPoolExecutor(max_workers=max(1, min(MAX_PARALLEL, len(names))),
                              thread_name_prefix="mainboard-compute")
    futures: dict[str, Future[_Access]] = {
        name: pool.submit(host_access, board, name, host, config, timeout)
        for name, host in hosts.items()}
    # Each check bounds itself; the grace covers an ssh banner that arrives late.
    wait_futures(futures.values(), timeout=timeout + 2.0)
    pool.shutdown(wait=False, cancel_futures=True)
    for name, future in futures.items():
        finished = future.done() and not future.cancelled()
        error = future.exception(timeout=0) if finished else None
        if not finished:
            states[name] = _Access("unreachable", f"no answer within {timeout:g}s")
        elif error is not None:
            states[name] = _Access("unreachable", _short(error, name))
        else:
            states[name] = future.result()
    rows = []
    for name, host in hosts.items():
        text, probed_at = _hardware(config, name, host)
        rows.append(ComputeRow(name=name, type="host", kind=host.kind, access=states[name].access,
                               reason=states[name].reason, summary=text, probed_at=probed_at))
    for name, provider in config.providers.items():
        state = provider_access(name, provider)
        where = f" at {provider.api_url}" if provider.api_url else ""
        rows.append(ComputeRow(name=name, type="provider", kind=provider.kind,
                               access=state.access, reason=state.reason,
                               summary=f"{provider.kind} GPU rental API{where}"))
    return rows


AGENT_KEYS = ("type", "name", "kind", "access", "reason", "summary", "probed_at")


def agent_lines(rows: list[ComputeRow]) -> list[str]:
    """One ``key=value`` line per row in a fixed key order; values shell-quoted (shlex.split)."""
    lines = []
    for row in rows:
        data = row.model_dump(mode="json")
        lines.append(" ".join(f"{key}={shlex.quote(str(data[key] or ''))}"
                              for key in AGENT_KEYS))
    return lines
