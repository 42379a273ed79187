"""`mainboard compute`: every machine mainboard can use, whether it is usable now, and what it has.

Each declared host gets one quick, concurrent access check with a short timeout
(one ssh round trip at most), so one dead host costs one row, never the command.
Hardware comes from the facts cache (``mainboard facts --on NAME`` fills it), not
from a fresh probe. A host missing a ``[deps]`` pin is ``not-set-up``, naming it.
Providers show whether their API key variable is set (the value is never read into a
row) and, when it is, ask the provider's API for the cheapest offer that fits and the
account's remaining credit (``quote``), concurrently with the host checks.
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
from pathlib import Path
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, computed_field, model_validator

from mainboard.bridges import bridge_class
from mainboard.bridges.pins import (
    host_python,
    managed_probe,
    managed_versions,
    probe_script,
    problems,
    python_problem,
    read_versions,
)
from mainboard.bridges.providers import Offer, adapter_for
from mainboard.bridges.ssh import SshTransport
from mainboard.bridges.ssh_session import remote_word
from mainboard.bridges.transport import LocalTransport
from mainboard.config import Config, HostConfig, ProviderConfig, ProviderHost
from mainboard.config.pins import checked_pins, pins
from mainboard.errors import AuthFailed, HostKeyMismatch, MainboardError, first_line
from mainboard.hosts.access import Hosts
from mainboard.hosts.facts import cached_record, summary

HostAccess = Literal["here", "ready", "unreachable", "auth-failed", "not-set-up"]
Credentials = Literal["keyed", "missing"]  # providers: whether the API key variable is set
Access = HostAccess | Credentials
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
    usd_hr: float | None = None       # providers: cheapest fitting offer; hosts: declared rate
    credit_usd: float | None = None   # providers: the account's remaining credit

    @computed_field  # type: ignore[prop-decorator]
    @property
    def detail(self) -> str:
        """The reason (when there is one) then the summary, on one line."""
        return " ".join("; ".join(t for t in (self.reason, self.summary) if t).split())

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


def _check_script(host: HostConfig, config: Config) -> str:
    """One shell round trip answering: does root exist, does python run (and every [deps]
    pin hold, after the host's modules), is the scheduler there."""
    lines = []
    if host.root:
        lines.append(f"if [ -d {remote_word(host.root)} ]; then echo mb-root=ok; "
                     "else echo mb-root=missing; fi")
    lines.append(probe_script(list(pins(config.deps)), host_python(host), host.env_modules()))
    if "python" in pins(config.deps):
        lines.append(managed_probe(host.root or "~/mainboard"))
    scheduler = bridge_class(host.kind).scheduler_command()
    if scheduler:
        lines.append(f"command -v {scheduler} >/dev/null 2>&1 && echo mb-scheduler=ok "
                     "|| echo mb-scheduler=missing")
    return "\n".join(lines)


def _interpret(name: str, host: HostConfig, config: Config, stdout: str) -> _Access:
    """Turn the check script's ``mb-key=value`` lines into an access state naming what is missing."""
    found = dict(line.strip()[3:].split("=", 1) for line in stdout.splitlines()
                 if line.strip().startswith("mb-") and "=" in line)
    versions = read_versions(stdout)
    missing = []
    if host.root and found.get("root") != "ok":
        missing.append(f"root {host.root} missing")
    if versions.get("python") is None:
        missing.append(f"{host_python(host)} not found")
    else:
        missing += problems(checked_pins(config.deps), versions)
        python = python_problem(config, name, versions["python"], managed_versions(stdout))
        missing += [python] if python else []
    scheduler = bridge_class(host.kind).scheduler_command()
    if scheduler and found.get("scheduler") != "ok":
        missing.append(f"{scheduler} not found")
    return _Access("not-set-up", "; ".join(missing)) if missing else _Access("ready")


def _remote_access(board: Hosts | None, name: str, host: HostConfig, config: Config,
                   timeout: float) -> _Access:
    """Connect with a short timeout and run the check script once (never in the root dir)."""
    started = time.monotonic()
    if board is not None:  # the Board's transport: same path resolution as `board.on(name)`
        transport = board.on(name).transport
    else:
        params = host.ssh_params()
        assert params is not None
        transport = SshTransport.from_params(params, name)
    assert isinstance(transport, SshTransport)  # a remote host that is no provider's
    transport.connect_timeout = min(transport.connect_timeout, timeout)
    try:
        left = max(timeout - (time.monotonic() - started), 0.5)
        result = transport.run(["/bin/bash", "-c", _check_script(host, config)], timeout=left,
                               env=host.env)
    except (AuthFailed, HostKeyMismatch) as exc:
        return _Access("auth-failed", _short(exc, name))
    except MainboardError as exc:
        return _Access("unreachable", _short(exc, name))
    except Exception as exc:  # noqa: BLE001 - a row must say what went wrong, not crash the list
        return _Access("unreachable", f"{type(exc).__name__}: {exc}"[:200])
    finally:
        transport.close()
    return _interpret(name, host, config, result.stdout)


def _short(exc: BaseException, name: str = "") -> str:
    """First line of an error, without the host name prefix the row already shows."""
    text = first_line(exc, limit=10_000)
    return (text.removeprefix(f"{name}: ") if name else text)[:300]


def host_access(board: Hosts | None, name: str, host: HostConfig, config: Config,
                timeout: float) -> _Access:
    """Access state of one declared host (never raises)."""
    if host.kind == "provider":  # rented on demand: usable once its provider is keyed
        keyed = provider_access(host.provider, config.providers[host.provider])
        return _Access("ready") if keyed.access == "keyed" else _Access("not-set-up", keyed.reason)
    if host.kind != "local" and host.ssh_params() is not None:
        return _remote_access(board, name, host, config, timeout)
    unmet = _local_pins(name, host, config, timeout)  # this machine: local, or a local batch login
    scheduler = bridge_class(host.kind).scheduler_command()  # a batch host's local login
    if scheduler and not shutil.which(scheduler):
        unmet.append(f"{scheduler} not found on PATH")
    if unmet:
        return _Access("not-set-up", "; ".join(unmet))
    return _Access("here" if host.kind == "local" else "ready")


def _local_pins(name: str, host: HostConfig, config: Config, timeout: float) -> list[str]:
    """[deps] pins this machine misses for ``host`` (no process started when nothing is
    pinned); the python pin is met by an interpreter provisioned under the root too."""
    wanted = pins(config.deps)
    if not wanted:
        return []
    script = probe_script(list(wanted), host_python(host), host.env_modules())
    if "python" in wanted:
        root = config.root / Path(host.root).expanduser() if host.root else config.root
        script += "\n" + managed_probe(str(root))
    done = LocalTransport().run(["/bin/bash", "-c", script], timeout=timeout, env=host.env)
    versions = read_versions(done.stdout)
    python = python_problem(config, name, versions.get("python"), managed_versions(done.stdout))
    return problems(checked_pins(config.deps), versions) + ([python] if python else [])


def _hardware(config: Config, name: str, host: HostConfig) -> tuple[str, datetime | None]:
    """One-line summary from cached facts, or how to get them."""
    record = cached_record(config.state_dir, name)
    if record is not None:
        return summary(record.facts), record.probed_at
    if isinstance(host, ProviderHost):
        gpu = host.gpu or "any GPU"
        price = host.max_usd_hr
        return (f"rented on demand from {host.provider}: {gpu}"
                + (f", at most ${price:g}/h" if price else "")), None
    return f"no facts yet (run mainboard facts --on {shlex.quote(name)})", None


@dataclasses.dataclass(frozen=True)
class Quote:
    """What a provider's API says now: the cheapest offer that fits (and its hourly price)
    and the account's remaining credit; ``error`` says why a part is missing."""

    provider: str
    offer: Offer | None = None
    credit_usd: float | None = None
    error: str | None = None

    @property
    def usd_hr(self) -> float | None:
        """The cheapest fitting offer's price in USD per hour."""
        return self.offer.usd_hr if self.offer else None


def quote(config: Config, name: str, *, gpu: str | None = None,
          max_usd_hr: float | None = None, credit: bool = True,
          timeout: float = 10.0) -> Quote:
    """Ask provider ``name`` for its cheapest offer of ``gpu`` at or under ``max_usd_hr``
    (any GPU, any price: None) and, with ``credit``, the account's balance. Never raises:
    no key means no request at all; an API failure becomes ``error``. The key is never
    part of the answer."""
    keyed = provider_access(name, config.providers[name])
    if keyed.access != "keyed":
        return Quote(name, error=keyed.reason)
    try:
        adapter = adapter_for(name, config.providers[name])
    except MainboardError as exc:
        return Quote(name, error=_short(exc))
    adapter.timeout, adapter.attempts = timeout, 1  # a listing asks once, within its budget
    errors: list[str] = []
    offer: Offer | None = None
    balance: float | None = None
    try:
        offer = adapter.cheapest(gpu, max_usd_hr)
    except MainboardError as exc:
        errors.append(_short(exc))
    if credit:
        try:
            balance = adapter.balance()
        except MainboardError as exc:
            errors.append(_short(exc))
    # an unreachable API says so once
    return Quote(name, offer, balance, "; ".join(dict.fromkeys(errors)) or None)


def offer_sentence(offer: Offer | None) -> str:
    """``cheapest 1x SIM RTX 4090 (25 GB) offer 9001``, or nothing."""
    if offer is None:
        return ""
    return f"cheapest {offer.gpu_count}x {offer.gpu} ({offer.vram_gb:.0f} GB) offer {offer.id}"


def _board(config: Config) -> Hosts | None:
    """A Board gives each host the transport `board.on(name)` would use (relative identity
    and known_hosts paths resolved next to mainboard.toml). Without a file there are no
    declared remote hosts unless the Config was built in code; then params are used as-is."""
    return Hosts(config=config) if config.path else None


def _pool(jobs: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=max(1, min(MAX_PARALLEL, jobs)),
                              thread_name_prefix="mainboard-compute")


def access_of(config: Config, names: list[str], timeout: float = 5.0) -> dict[str, str]:
    """``access`` (with its reason) of each named host, all asked at once: back within about
    ``timeout`` whatever the hosts do, a silent one ``unreachable``. For plans that name
    where they would go (``batch prepare``), so an unreachable target is a row saying so."""
    board = _board(config)
    pool = _pool(len(names))  # not `with`: its exit would wait for a hung check
    futures = {name: pool.submit(host_access, board, name, config.host(name), config, timeout)
               for name in names}
    wait_futures(list(futures.values()), timeout=timeout + 2.0)
    pool.shutdown(wait=False, cancel_futures=True)
    shown = {}
    for name, future in futures.items():
        state = _settled(future, name, timeout)
        shown[name] = f"{state.access}: {state.reason}" if state.reason else state.access
    return shown


def list_compute(config: Config, timeout: float = 5.0) -> list[ComputeRow]:
    """Rows for local, every declared host and every provider, all asked concurrently.

    The listing returns within about ``timeout`` whatever the hosts do: a check that has
    not answered by then is one ``unreachable`` row.
    """
    names = config.host_names()
    hosts = {name: config.host(name) for name in names}
    board = _board(config)
    rented = {name: host for name, host in hosts.items() if host.kind == "provider"}
    jobs = len(names) + len(config.providers) + len(rented)
    # Not a `with` block: its exit would wait for a hung check, and the list must not.
    pool = _pool(jobs)
    futures: dict[str, Future[_Access]] = {
        name: pool.submit(host_access, board, name, host, config, timeout)
        for name, host in hosts.items()}
    quotes: dict[tuple[str, str], Future[Quote]] = {
        ("provider", name): pool.submit(quote, config, name, timeout=timeout)
        for name in config.providers}
    quotes.update({("host", name): pool.submit(
        quote, config, host.provider, gpu=host.gpu, max_usd_hr=host.max_usd_hr, credit=False,
        timeout=timeout) for name, host in rented.items()})
    # Each check bounds itself; the grace covers an ssh banner that arrives late.
    wait_futures([*futures.values(), *quotes.values()], timeout=timeout + 2.0)
    pool.shutdown(wait=False, cancel_futures=True)
    states = {name: _settled(future, name, timeout) for name, future in futures.items()}
    priced = {key: _priced(future, key[1], timeout) for key, future in quotes.items()}
    rows = []
    for name, host in hosts.items():
        text, probed_at = _hardware(config, name, host)
        found = priced.get(("host", name))
        if found is not None and states[name].access == "ready" and (found.offer or found.error):
            text = f"{text}; {offer_sentence(found.offer) or found.error}"
        rows.append(ComputeRow(name=name, type="host", kind=host.kind, access=states[name].access,
                               reason=states[name].reason, summary=text, probed_at=probed_at,
                               usd_hr=found.usd_hr if found else host.usd_hr))
    for name, provider in config.providers.items():
        state = provider_access(name, provider)
        found = priced[("provider", name)]
        where = f" at {provider.api_url}" if provider.api_url else ""
        extra = offer_sentence(found.offer) if state.access == "keyed" else ""
        if state.access == "keyed" and found.error:
            extra = "; ".join(t for t in (extra, found.error) if t)
        rows.append(ComputeRow(name=name, type="provider", kind=provider.kind,
                               access=state.access, reason=state.reason,
                               summary="; ".join(t for t in (f"{provider.kind} GPU rental API"
                                                             f"{where}", extra) if t),
                               usd_hr=found.usd_hr, credit_usd=found.credit_usd))
    return rows


def _settled(future: Future[_Access], name: str, timeout: float) -> _Access:
    """A host check's answer, or ``unreachable`` saying why there is none."""
    if not future.done() or future.cancelled():
        return _Access("unreachable", f"no answer within {timeout:g}s")
    error = future.exception(timeout=0)
    return _Access("unreachable", _short(error, name)) if error else future.result()


def _priced(future: Future[Quote], provider: str, timeout: float) -> Quote:
    """A quote, or one saying the API did not answer in time."""
    if not future.done() or future.cancelled():
        return Quote(provider, error=f"the API did not answer within {timeout:g}s")
    error = future.exception(timeout=0)
    return Quote(provider, error=_short(error)) if error else future.result()


AGENT_KEYS = ("name", "kind", "access", "detail", "usd_hr", "credit_usd")  # `compute --agent`
