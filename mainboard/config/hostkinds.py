"""Host kinds: the model of each ``[hosts.NAME]`` table, registered with its bridge in ONE table.

Why one table: adding a host kind (a scheduler such as LSF) is one bridge module in
``mainboard.bridges``, one model here with its row in ``HOST_TABLE``, and their tests;
the kinds the loader accepts, the discriminated union pydantic validates and the kinds
whose allocations span nodes all derive from the table. Every question the code asks a
host is a method with a default on ``_HostBase`` (``ssh_params``, ``interpreter``,
``env_modules``...), so no caller reads a host by duck typing. What a scheduler does
(its commands, states, signals) is its bridge's; here is only what its table holds.
"""

from __future__ import annotations

import getpass
import operator
import os
from dataclasses import dataclass
from functools import reduce
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, model_validator

from mainboard.config.base import ConfigModel, JobDefaults, QueuePolicy, custom_error
from mainboard.config.pins import module_list

# Addresses and user names reach ssh and paramiko: no shell characters, no leading "-" (an ssh
# option), no spaces or quotes.
_HOST = "a host name or IP address: letters, digits, '.', '-', ':', e.g. login.example.org"
_ADDRESS = r"^[A-Za-z0-9_\[:][A-Za-z0-9_.:%\[\]-]*$"
_USER = r"^[A-Za-z0-9_][A-Za-z0-9_.@-]*$"
_USER_FORM = "a user name: letters, digits, '.', '_', '-', '@', not starting with '-'"


@dataclass(frozen=True)
class SshParams:
    """Everything paramiko needs to reach a host (paths expanded, user resolved)."""

    host: str
    user: str
    port: int
    identity: str | None
    trust: Literal["known-hosts", "first-use"]
    known_hosts: str
    connect_timeout: float
    given: frozenset[str] | None = None  # keys mainboard.toml wrote: they win over ~/.ssh/config


@dataclass(frozen=True)
class SubmitGate:
    """A scheduler host's submit limits (``bridges/gate.py`` checks them before each submit)."""

    max_jobs: int | None        # the site's cap on this user's queued + running jobs
    per_minute: int             # max_submits_per_minute
    per_minute_given: bool      # written in mainboard.toml (else a site's default may apply)
    address: str | None         # the login host: one gate per cluster, not per table


class _HostBase(ConfigModel):
    """Keys every host kind accepts, and the answers every kind gives (defaults here)."""

    kind: str
    root: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    defaults: JobDefaults = Field(default_factory=JobDefaults)
    queues: dict[str, QueuePolicy] = Field(default_factory=dict)
    usd_hr: float | None = Field(default=None, ge=0, description=(
        "what an hour of this host costs you, US dollars >= 0 (owned hosts: 0 when absent)"))

    def ssh_params(self) -> SshParams | None:
        """How to reach the host over ssh; None when its commands run on this machine."""
        return None

    def job_defaults(self, attempt: int = 1, walltime_s: float | None = None,
                     num_cpus: int | None = None) -> dict[str, float | int | str]:
        """This host's [defaults] evaluated for one attempt (num_cpus defaults to local CPUs)."""
        return self.defaults.evaluate(attempt, walltime_s, num_cpus)

    def interpreter(self) -> str:
        """The python command jobs and probes start from on the host (its ``python`` key)."""
        return "python3"

    def env_modules(self) -> list[str]:
        """Environment modules loaded before anything runs there (its ``modules`` key)."""
        return []

    def container_name(self) -> str | None:
        """The ``[containers.NAME]`` its workers and jobs run in (None: none)."""
        return None

    def default_queue(self) -> str | None:
        """The queue a job goes to when neither it nor ``[defaults]`` names one."""
        return None

    def default_account(self) -> str | None:
        """The account a job is charged to when it names none."""
        return None

    def submit_gate(self) -> SubmitGate | None:
        """The submit limits checked before each job (None: this kind has none)."""
        return None


class LocalHost(_HostBase):
    """kind = "local": this machine."""

    kind: Literal["local"] = "local"


class _Connected(_HostBase):
    """Connection keys shared by ssh hosts and ssh-login batch hosts."""

    host: str | None = Field(default=None, min_length=1, pattern=_ADDRESS, description=_HOST)
    user: str | None = Field(default=None, min_length=1, pattern=_USER, description=_USER_FORM)
    port: int = Field(default=22, ge=1, le=65535, description="an integer from 1 to 65535")
    identity: str | None = None
    trust: Literal["known-hosts", "first-use"] = "known-hosts"
    known_hosts: str | None = None
    connect_timeout: float = Field(default=10.0, gt=0, description="seconds, greater than 0")
    python: str = "python3"

    def interpreter(self) -> str:
        return self.python or "python3"

    def _params(self) -> SshParams:
        assert self.host is not None  # guaranteed by the validators of the subclasses
        return SshParams(
            host=self.host, user=self.user or getpass.getuser(), port=self.port,
            identity=os.path.expanduser(self.identity) if self.identity else None,
            trust=self.trust,
            known_hosts=os.path.expanduser(self.known_hosts or "~/.ssh/known_hosts"),
            connect_timeout=self.connect_timeout, given=frozenset(self.model_fields_set))


class SshHost(_Connected):
    """kind = "ssh": a machine reached with paramiko; ``host`` left out is the table's name
    (as ``ssh NAME`` reads it: an alias in ~/.ssh/config or a DNS name)."""

    kind: Literal["ssh"] = "ssh"
    root: str = "~/mainboard"

    def ssh_params(self) -> SshParams:
        """ssh hosts are always remote."""
        return self._params()


class _Batch(_Connected):
    """Keys shared by scheduler hosts. The login side is reached over ssh when ``host`` is
    set and is this machine otherwise; ``login`` only ever states that explicitly."""

    login: Literal["local", "ssh"] = "local"  # left out: "ssh" when host is set (below)
    account: str | None = None
    max_submits_per_minute: int = Field(30, ge=1, description="an integer >= 1")
    max_jobs: int | None = Field(None, ge=1, description="an integer >= 1")  # the site's cap
    modules: Annotated[list[str], BeforeValidator(module_list)] = Field(default_factory=list)
    container: str | None = None

    @model_validator(mode="after")
    def _login_matches_host(self) -> _Batch:
        """``host`` alone means ssh; ``login = "local"`` beside a ``host`` is a contradiction
        (it would submit from here and ignore host, port and user), so it is refused."""
        if "login" not in self.model_fields_set:
            self.login = "ssh" if self.host else "local"
        elif self.login == "local" and self.host:
            raise custom_error(f'login = "local" would ignore host = "{self.host}" and submit '
                               'from this machine', 'login = "ssh" (or no login key) to submit '
                               'through host, or no host to submit from this machine', ("login",),
                               value=None)
        elif self.login == "ssh" and not self.host:
            raise custom_error('missing required key host (login = "ssh")',
                               'host = "login.cluster.example" (or login = "local")', ("host",),
                               value=None)
        return self

    def ssh_params(self) -> SshParams | None:
        """Remote only when the login node is reached over ssh."""
        return self._params() if self.login == "ssh" else None

    def env_modules(self) -> list[str]:
        return list(self.modules)

    def container_name(self) -> str | None:
        return self.container

    def default_account(self) -> str | None:
        return self.account

    def submit_gate(self) -> SubmitGate:
        return SubmitGate(self.max_jobs, self.max_submits_per_minute,
                          "max_submits_per_minute" in self.model_fields_set, self.host)


class SlurmHost(_Batch):
    """kind = "slurm": jobs go through its bridge (``mainboard.bridges.slurm``)."""

    kind: Literal["slurm"] = "slurm"
    partition: str | None = None

    def default_queue(self) -> str | None:
        return self.partition


class PbsHost(_Batch):
    """kind = "pbs": jobs go through its bridge (``mainboard.bridges.pbs``)."""

    kind: Literal["pbs"] = "pbs"
    queue: str | None = None
    # How a multi-node job starts its node shares: pbsdsh when it is on PATH in the job, else
    # ssh to each node (PBS lets a job's user ssh between its nodes); or one of them, always.
    fanout: Literal["auto", "pbsdsh", "ssh"] = "auto"

    def default_queue(self) -> str | None:
        return self.queue


class ProviderHost(_HostBase):
    """kind = "provider": a GPU machine rented from a [providers.X] when needed."""

    kind: Literal["provider"] = "provider"
    provider: str
    gpu: str | None = None
    max_usd_hr: float | None = Field(default=None, gt=0,
                                     description="US dollars per hour, greater than 0")
    root: str = "~/mainboard"
    python: str = "python3"

    def interpreter(self) -> str:
        return self.python or "python3"


@dataclass(frozen=True)
class HostKind:
    """One row of the table: a kind's model and the bridge that runs its jobs."""

    model: type[_HostBase]
    bridge: str               # "module:Class" in mainboard.bridges, imported when first asked
    multi_node: bool = False  # its allocations span nodes: a pool's nodes > 1, one worker each

    @property
    def kind(self) -> str:
        """The ``kind = "..."`` literal of the model."""
        return str(self.model.model_fields["kind"].default)


HOST_TABLE: dict[str, HostKind] = {row.kind: row for row in (
    HostKind(LocalHost, "local:LocalBridge"),
    HostKind(SshHost, "remote:RemoteBridge"),
    HostKind(SlurmHost, "slurm:SlurmBridge", multi_node=True),
    HostKind(PbsHost, "pbs:PbsBridge", multi_node=True),
    HostKind(ProviderHost, "remote:RentalBridge"),  # the transport reaches the rental
)}
HOST_KINDS = tuple(HOST_TABLE)
HOST_MODELS: dict[str, type[_HostBase]] = {kind: row.model for kind, row in HOST_TABLE.items()}
HostConfig = Annotated[reduce(operator.or_, HOST_MODELS.values()),  # type: ignore[valid-type]
                       Field(discriminator="kind")]


def kinds_where(multi_node: bool) -> list[str]:
    """The kinds whose allocations do (or do not) span nodes, in table order."""
    return [kind for kind, row in HOST_TABLE.items() if row.multi_node == multi_node]
