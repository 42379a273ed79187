"""The pydantic models behind mainboard.toml (import them from ``mainboard.config``).

Every model forbids unknown keys. TOML keys may use ``-`` or ``_`` (``max-walltime`` ==
``max_walltime``). Validators raise ``PydanticCustomError("mainboard", ...)`` whose
context carries the message, the valid forms and (for cross-field checks) the key path,
so ``mainboard.config`` can turn the first error into one ConfigError line.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    field_validator,
    model_validator,
)

from mainboard.config.base import (
    ConfigModel,
    PositiveDuration,
    custom_error,
)
from mainboard.config.brokerurl import REDIS_URL_FORMS, redis_url_problem
from mainboard.config.hostkinds import (
    HOST_TABLE,
    HostConfig,
    LocalHost,
    ProviderHost,
    SshHost,
    kinds_where,
)
from mainboard.config.pins import check_deps_table, requirement_list
from mainboard.errors import UnknownHost
from mainboard.redact import redact_url
from mainboard.redisclient import (
    SENTINEL_ENTRY_FORM,
    SentinelTarget,
    master_problem,
    sentinel_address,
    sentinel_entry_problem,
    sentinel_url,
)

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _env_name(value: str | None) -> str | None:
    """api_key_env holds a variable NAME; never echo the value, it may be the key itself."""
    if value is not None and not _ENV_NAME.match(value):
        raise custom_error("must be the NAME of an environment variable (value hidden: it may "
                           "be a secret)", "a name such as VAST_API_KEY, never the key itself",
                           value=None)
    return value


class WorkspaceConfig(ConfigModel):
    """[workspace]: the project's name and what never gets copied to hosts."""

    name: str | None = None
    exclude: list[str] = Field(default_factory=list)


class BrokerConfig(ConfigModel):
    """[broker]: url of an external Redis (absent: the embedded one) and the URL its workers
    get (``worker_url``: a user with fewer rights; default ``url``); ``tls`` for the
    embedded one (rediss:// with a CA of its own); how long a run rides out a broker that
    went away (``outage``, default 5 minutes) before it stops, resumable."""

    url: str | None = None
    worker_url: str | None = None
    tls: bool = False
    outage: PositiveDuration = 300
    # A Sentinel-managed broker: url becomes sentinel://HOST:PORT,.../0?master=NAME.
    sentinels: list[str] | None = None
    master: str | None = None
    min_replicas: int = Field(0, ge=0, description="replicas a counted write waits for, >= 0")

    @model_validator(mode="after")
    def _pairs(self) -> BrokerConfig:
        """worker_url belongs to url; tls to the embedded broker (url says rediss:// itself)."""
        if self.worker_url and not self.url:
            raise custom_error("worker_url is for the workers of [broker] url, which is not set",
                               "set url as well, or remove worker_url (the embedded broker "
                               "makes its own worker user)", loc=("worker_url",),
                               value=redact_url(self.worker_url))
        if self.tls and self.url:
            raise custom_error("tls applies to the embedded broker only",
                               "remove tls and write rediss://...?ssl_ca_certs=CA in url",
                               loc=("tls",), value=True)
        return self._sentinel_url()

    def _sentinel_url(self) -> BrokerConfig:
        """sentinels and master come together and stand for url (set here, in one form)."""
        if (self.sentinels is None) != (self.master is None):
            missing = "master" if self.master is None else "sentinels"
            raise custom_error(f"{missing} is missing: sentinels and master come together",
                               'sentinels = ["HOST:PORT", ...] and master = "NAME"',
                               loc=(missing,), value=None)
        if self.sentinels is None or self.master is None:
            if self.min_replicas:
                raise custom_error("min_replicas needs a Sentinel-managed broker",
                                   "add sentinels and master, or remove min_replicas",
                                   loc=("min_replicas",), value=self.min_replicas)
            return self
        if not self.sentinels:
            raise custom_error("no sentinel listed", SENTINEL_ENTRY_FORM, loc=("sentinels",),
                               value=[])
        derived = sentinel_url(SentinelTarget(
            tuple(sentinel_address(e) for e in self.sentinels), self.master,
            min_replicas=self.min_replicas))
        if self.url not in (None, derived):
            raise custom_error("url and sentinels both name the broker", "keep one of them",
                               loc=("url",), value=redact_url(self.url or ""))
        self.url = derived
        return self

    @field_validator("sentinels")
    @classmethod
    def _sentinel_entries(cls, value: list[str] | None) -> list[str] | None:
        """A malformed entry fails here, in one line naming it, before anything starts."""
        for index, entry in enumerate(value or ()):
            problem = sentinel_entry_problem(entry)
            if problem:
                raise custom_error(f"sentinel {entry!r}: {problem}", SENTINEL_ENTRY_FORM,
                                   loc=(index,), value=entry)
        return value

    @field_validator("master")
    @classmethod
    def _master_name(cls, value: str | None) -> str | None:
        """The name Sentinel monitors; a stray character would never match it."""
        problem = None if value is None else master_problem(value)
        if problem:
            raise custom_error(f"master {value!r}: {problem}", 'e.g. master = "mainboard"',
                               value=value)
        return value

    @field_validator("url", "worker_url")
    @classmethod
    def _well_formed(cls, value: str | None) -> str | None:
        """A typo fails here, in one line, not later inside redis-py or kombu."""
        problem = None if value is None else redis_url_problem(value)
        if value is not None and problem:
            raise custom_error(problem, REDIS_URL_FORMS, value=redact_url(value))
        return value


class PythonConfig(ConfigModel):
    """[python]: requirements installed in every host's environment: an array of pip
    requirement strings or a table ``name = "version spec"`` (read as the same list)."""

    deps: Annotated[list[str], BeforeValidator(requirement_list)] = Field(default_factory=list)
    mirror: str | None = Field(None, description="where uv downloads interpreters from "
                               "(UV_PYTHON_INSTALL_MIRROR), e.g. file:///srv/python-mirror")
    downloads: str | None = Field(None, description="a python-downloads JSON (path or URL) "
                                  "listing installable interpreters (UV_PYTHON_DOWNLOADS_JSON_URL)")
    preference: Literal["managed", "only-managed", "system", "only-system"] = Field(
        "managed", description="which interpreters may satisfy [deps] python (uv's "
        "--python-preference): managed ones first, then the host's; only-managed ignores PATH")


class RouterConfig(ConfigModel):
    """[router]: how ``submit --on auto`` weighs candidates (``mainboard.routing``)."""

    prefer: Literal["time", "cost"] = Field(
        "time", description='"time" (soonest expected result) or "cost" (cheapest per hour)')
    max_usd_hr: float | None = Field(default=None, gt=0,
                                     description="US dollars per hour, greater than 0")


class ContainerConfig(ConfigModel):
    """[containers.NAME]: an image a batch host may run its workers in."""

    image: str
    runtime: Literal["apptainer", "singularity", "podman"] = "apptainer"
    binds: list[str] = Field(default_factory=list)


class ProviderConfig(ConfigModel):
    """[providers.NAME]: a GPU rental API; only the NAME of the key's env var is stored."""

    kind: str
    api_key_env: Annotated[str | None, AfterValidator(_env_name)] = None
    api_url: str | None = None
    region: str | None = None
    image: str | None = None
    options: dict[str, str | int | float | bool] = Field(default_factory=dict)


AUTO = "auto"  # the router's name in `on(...)`: never a declared host

_QUEUE_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,199}$"


class PoolConfig(ConfigModel):
    """[fleet.pools.NAME]: allocations of one host that consume the same queues.

    ``jobs`` allocations start with ``fleet up``; with ``max_jobs`` set the fleet keeper
    autoscales between ``min_jobs`` and ``max_jobs`` from the queues' depth, at most
    ``backlog`` allocations waiting in the scheduler at once, releasing workers idle past
    ``idle_timeout``; a provider pool also stays within ``max_usd_hr`` (the prices of the
    offers it rented, plus the next offer's) and ``budget_usd``. With ``max_walltime`` the
    walltime is chosen per allocation: the keeper asks for enough (up to ``max_walltime``)
    for the largest ``time_request`` waiting in the pool's queues.
    """

    host: str
    queues: list[Annotated[str, Field(pattern=_QUEUE_NAME)]] = Field(
        default_factory=lambda: ["mainboard.batches"], min_length=1)
    workers: int = Field(1, ge=1, description="worker processes per node, an integer >= 1")
    cpus: int | None = Field(None, ge=1, description="an integer >= 1")
    mem_gb: float | None = Field(None, gt=0, description="a number of GB greater than 0")
    gpus: int | None = Field(None, ge=0, description="an integer >= 0")
    nodes: int = Field(1, ge=1, description="an integer >= 1")  # one worker per node
    walltime: PositiveDuration | None = None
    max_walltime: PositiveDuration | None = None  # the keeper may ask up to this for time needs
    retire_before: PositiveDuration | None = None
    jobs: int = Field(1, ge=0, description="an integer >= 0")
    min_jobs: int = Field(0, ge=0, description="an integer >= 0")
    max_jobs: int | None = Field(None, ge=0, description="an integer >= 0")
    backlog: int = Field(1, ge=1, description="an integer >= 1")
    idle_timeout: PositiveDuration = 600
    stall_after: PositiveDuration | None = None  # None: [fleet] stall_after
    max_usd_hr: float | None = Field(None, gt=0, description="US dollars per hour, > 0")
    budget_usd: float | None = Field(None, gt=0, description="US dollars, > 0")

    @model_validator(mode="after")
    def _bounds(self) -> PoolConfig:
        if self.max_jobs is not None and self.min_jobs > self.max_jobs:
            raise custom_error(f"min-jobs {self.min_jobs} is above max-jobs {self.max_jobs}",
                               "min-jobs <= max-jobs", ("min-jobs",), value=self.min_jobs)
        if self.max_walltime is not None and self.walltime is not None \
                and self.walltime > self.max_walltime:
            raise custom_error(f"walltime {self.walltime} s is above max-walltime "
                               f"{self.max_walltime} s", "walltime <= max-walltime",
                               ("walltime",), value=self.walltime)
        if self.gpus and self.workers > self.gpus:
            raise custom_error(f"workers {self.workers} would share {self.gpus} GPU(s): each "
                               "worker process gets one of its own", f"workers <= gpus "
                               f"({self.gpus})", ("workers",), value=self.workers)
        return self

    @property
    def autoscaled(self) -> bool:
        """The keeper follows the work between min_jobs and max_jobs."""
        return self.max_jobs is not None


class FleetConfig(ConfigModel):
    """[fleet]: the pools ``fleet up`` starts (``[fleet.pools.NAME]``); ``stall_after``: how
    long a beating worker may start no task while its queues hold work before the keeper
    restarts it (a consumer that never came back from a broker reconnect)."""

    pools: dict[str, PoolConfig] = Field(default_factory=dict)
    stall_after: PositiveDuration = 120

    def stall_of(self, pool: PoolConfig) -> int:
        """The pool's own ``stall_after``, else the fleet's."""
        return pool.stall_after if pool.stall_after is not None else self.stall_after


class Config(ConfigModel):
    """One validated mainboard.toml (or the implicit default when there is none)."""

    path: Path | None = None
    root: Path = Field(default_factory=Path.cwd)
    workspace: WorkspaceConfig = Field(default_factory=WorkspaceConfig)
    broker: BrokerConfig = Field(default_factory=BrokerConfig)
    deps: Annotated[dict[str, str], BeforeValidator(check_deps_table)] = \
        Field(default_factory=dict)
    python: PythonConfig = Field(default_factory=PythonConfig)
    containers: dict[str, ContainerConfig] = Field(default_factory=dict)
    providers: dict[str, ProviderConfig] = Field(default_factory=dict)
    hosts: dict[str, HostConfig] = Field(default_factory=dict)
    fleet: FleetConfig = Field(default_factory=FleetConfig)
    router: RouterConfig = Field(default_factory=RouterConfig)

    @model_validator(mode="after")
    def _references(self) -> Config:
        """Hosts may only name declared containers/providers; "local" is this machine;
        pools only declared hosts."""
        for name, pool in self.fleet.pools.items():
            if pool.host != "local" and pool.host not in self.hosts:
                raise custom_error(f"host {pool.host!r} is not declared",
                                   _declared("hosts", self.hosts) + ", or local",
                                   ("fleet", "pools", name, "host"), value=pool.host)
            kind = self.hosts[pool.host].kind if pool.host in self.hosts else "local"
            if pool.nodes > 1 and not HOST_TABLE[kind].multi_node:
                raise custom_error(
                    f"nodes {pool.nodes} on host {pool.host!r} (kind {kind}): only a "
                    "scheduler's allocation spans nodes", f"nodes = 1 for "
                    f"{_words(kinds_where(False))} hosts; nodes >= 1 for "
                    f"{_words(kinds_where(True))} hosts",
                    ("fleet", "pools", name, "nodes"), value=pool.nodes)
        for name, host in self.hosts.items():
            if isinstance(host, SshHost) and host.host is None:
                host.host = name  # host names already fit the address form
            if name == "local" and host.kind != "local":
                raise custom_error('the host name "local" is reserved for this machine',
                                   'kind = "local", or another name', ("hosts", name, "kind"),
                                   value=host.kind)
            if name == AUTO:
                raise custom_error(f'the host name "{AUTO}" is reserved for the router '
                                   "(submit --on auto picks a host)", "another name",
                                   ("hosts", name), value=None)
            container = host.container_name()
            if container is not None and container not in self.containers:
                raise custom_error(f"container {container!r} is not declared",
                                   _declared("containers", self.containers),
                                   ("hosts", name, "container"), value=container)
            if isinstance(host, ProviderHost) and host.provider not in self.providers:
                raise custom_error(f"provider {host.provider!r} is not declared",
                                   _declared("providers", self.providers),
                                   ("hosts", name, "provider"), value=host.provider)
        return self

    @property
    def state_dir(self) -> Path:
        """Where mainboard keeps its state for this workspace."""
        return self.root / ".mainboard"

    def host(self, name: str) -> HostConfig:
        """The named host; "local" always exists. Unknown names list the declared ones."""
        if name in self.hosts:
            return self.hosts[name]
        if name == "local":
            return LocalHost()
        where = str(self.path) if self.path else "no mainboard.toml"
        raise UnknownHost(f"unknown host {name!r} ({where}); declared hosts: "
                          f"{', '.join(self.host_names())}")

    def container_of(self, host: HostConfig) -> ContainerConfig | None:
        """The ``[containers.NAME]`` a host runs its workers and jobs in (None: none)."""
        name = host.container_name()
        return self.containers[name] if name else None

    def host_names(self) -> list[str]:
        """"local" first, then the declared hosts in file order."""
        return ["local"] + [n for n in self.hosts if n != "local"]


def _declared(table: str, names: dict[str, Any]) -> str:
    if names:
        return f"declared {table}: {', '.join(names)}"
    return f"no [{table}.NAME] table is declared; add one or remove the reference"


def _words(names: list[str]) -> str:
    """``a, b and c``."""
    return " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)
