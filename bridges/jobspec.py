"""What a job asks for, defined once, and the queue-policy check that runs before any traffic.

``JobSpec`` is the single list of valid job parameters (submitit style): an unknown
keyword is refused with every valid one and its default. ``resolve`` fills what the
caller left out from ``[hosts.X.defaults]`` evaluated for the job's attempt (so
``mem-gb = "min(100, attempt * 50)"`` asks for more on attempt 2), then the host's
partition/queue and account. ``check_policy`` compares the result with
``[hosts.X.queues.Q]`` and refuses, with the message the scheduler should have given,
before a single byte leaves this machine.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator

from mainboard.config import (
    DURATION_FORMS,
    HostConfig,
    QueuePolicy,
    positive_duration,
)
from mainboard.errors import ConfigError, NotPositive, QueuePolicyError, UserError

from .transport import check_env

_NAME_TOKEN = re.compile(r"^[A-Za-z0-9_.@+-]+$")
Signal = Literal["TERM", "INT", "HUP", "USR1", "USR2"]
RETIRE_SIGNAL: Signal = "INT"  # Celery's warm shutdown that spares the task in hand (JobSpec)


def _duration(value: Any) -> Any:
    """Seconds from an int or a duration string; ConfigError becomes a pydantic error."""
    if value is None:
        return None
    try:
        return positive_duration(value)
    except NotPositive as exc:
        raise ValueError(exc.detail) from None
    except ConfigError as exc:
        raise ValueError(f"{exc.detail}; valid: {DURATION_FORMS}") from None


Duration = Annotated[int | None, BeforeValidator(_duration)]


class JobSpec(BaseModel):
    """Everything a job asks of a host. ``None`` means "the host's default".

    ``retire_signal`` goes to the command's whole process group ``retire_before`` seconds
    before walltime (the job script's watchdog, or SLURM's ``--signal=B:`` forwarded by the
    script's trap). Its default is INT so that a retiring Celery worker finishes its task:
    the worker's main process takes INT or TERM alike as a warm shutdown, but its prefork
    pool children ignore INT and die on TERM (Celery's ``concurrency/prefork.py``:
    ``WORKER_SIGIGNORE = {'SIGINT'}``, SIGTERM reset to the default), so TERM to the group
    would kill the task in hand. ``mainboard.tasks.fleet`` makes the INT exit 0.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    command: str | list[str] = Field(description="shell text, or an argv list (quoted for you)")
    name: str = Field("job", min_length=1, max_length=200)
    walltime: Duration = Field(None, description='seconds or "2h", "01:30:00"')
    mem_gb: float | None = Field(None, gt=0)
    cpus: int | None = Field(None, ge=1)
    gpus: int | None = Field(None, ge=0)
    queue: str | None = Field(None, description="SLURM partition or PBS queue")
    account: str | None = None
    nodes: int = Field(1, ge=1)
    per_node: bool = Field(False, description="run the command once on every node (srun, "
                           "pbsdsh), not only on the first")
    env: dict[str, str] = Field(default_factory=dict)
    workdir: str | None = Field(None, description="where the command runs (default: host root)")
    attempt: int = Field(1, ge=1)
    path: list[str] = Field(default_factory=list, description="directories put in front of PATH")
    retire_before: Duration = Field(None, description="signal the command this long before walltime")
    retire_signal: Signal = RETIRE_SIGNAL
    extra: list[str] = Field(default_factory=list, description="extra scheduler header options")
    tag: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$",
                            description="an owner tag the host's own listing finds the job by")

    @field_validator("command")
    @classmethod
    def _command(cls, value: str | list[str]) -> str | list[str]:
        if isinstance(value, str) and not value.strip():
            raise ValueError("empty command; give shell text or a non-empty argv list")
        if isinstance(value, list) and (not value or not all(value)):
            raise ValueError("an argv list must be non-empty and hold non-empty strings")
        return value

    @field_validator("queue", "account")
    @classmethod
    def _token(cls, value: str | None) -> str | None:
        if value is not None and not _NAME_TOKEN.match(value):
            raise ValueError("must be one word of letters, digits and _ . @ + -")
        return value

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        return check_env(value)

    @field_validator("extra", "path")
    @classmethod
    def _one_line(cls, value: list[str]) -> list[str]:
        for item in value:
            if not item or any(c in item for c in "\n\r\0"):
                raise ValueError(f"{item!r}: each item must be one non-empty line")
        return value

    @field_validator("extra")
    @classmethod
    def _options(cls, value: list[str]) -> list[str]:
        for item in value:
            if not item.startswith("-"):
                raise ValueError(f"{item!r}: an extra scheduler option starts with -")
        return value

    @classmethod
    def from_params(cls, params: Mapping[str, Any] | None = None, **kwargs: Any) -> JobSpec:
        """Validate keyword parameters; unknown or bad ones raise one UserError naming the fix."""
        given = {**(params or {}), **kwargs}
        for key in given:
            if key not in cls.model_fields:
                close = difflib.get_close_matches(key, list(cls.model_fields), n=1)
                hint = f" (did you mean {close[0]}?)" if close else ""
                raise UserError(f"unknown job parameter {key!r}{hint}; valid: {describe_params()}")
        try:
            return cls.model_validate(given)
        except ValidationError as exc:
            raise _user_error(exc) from None

    @property
    def walltime_s(self) -> int | None:
        """The walltime in seconds (alias that reads well next to other *_s values)."""
        return self.walltime


def describe_params() -> str:
    """``command (required), name (default: 'job'), ...`` for error messages."""
    parts = []
    for name, field in JobSpec.model_fields.items():
        if field.is_required():
            parts.append(f"{name} (required)")
        else:
            parts.append(f"{name} (default: {field.get_default(call_default_factory=True)!r})")
    return ", ".join(parts)


def _user_error(exc: ValidationError) -> UserError:
    err = exc.errors()[0]
    key = ".".join(str(p) for p in err["loc"]) or "job"
    field = JobSpec.model_fields.get(str(err["loc"][0])) if err["loc"] else None
    message = err["msg"].removeprefix("Value error, ")
    hint = f"; expected {field.description}" if field is not None and field.description \
        and "valid:" not in message else ""
    return UserError(f"job parameter {key}: {message} (got {err.get('input')!r}){hint}")


def resolve(spec: JobSpec, host: HostConfig) -> JobSpec:
    """Fill what ``spec`` leaves open from the host's defaults for ``spec.attempt``.

    Order: explicit value, then ``[hosts.X.defaults]`` (expressions evaluated for the
    attempt), then the host's ``partition``/``queue`` and ``account``. Idempotent.
    """
    defaults = host.job_defaults(attempt=spec.attempt, walltime_s=spec.walltime)
    filled: dict[str, Any] = {}
    for key in ("walltime", "mem_gb", "cpus", "gpus", "queue"):
        if getattr(spec, key) is None and defaults.get(key) is not None:
            filled[key] = defaults[key]
    if spec.queue is None and "queue" not in filled:
        host_queue = host.default_queue()
        if host_queue:
            filled["queue"] = host_queue
    if spec.account is None and host.default_account():
        filled["account"] = host.default_account()
    if not filled:
        return spec
    try:
        return JobSpec.model_validate({**spec.model_dump(), **filled})
    except ValidationError as exc:
        raise _user_error(exc) from None


def format_walltime(seconds: int) -> str:
    """``H:MM:SS`` (or ``D-HH:MM:SS`` from one day up), the form SLURM and people both read."""
    days, rest = divmod(int(seconds), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{hours}:{minutes:02d}:{secs:02d}"


def _limits(policy: QueuePolicy) -> str:
    parts = [f"max-walltime {format_walltime(policy.max_walltime)}",
             f"mem-ceiling-gb {policy.mem_ceiling_gb:g}"]
    if policy.max_gpus is not None:
        parts.append(f"max-gpus {policy.max_gpus}")
    if policy.max_nodes is not None:
        parts.append(f"max-nodes {policy.max_nodes}")
    return ", ".join(parts)


def violations(spec: JobSpec, policy: QueuePolicy) -> list[str]:
    """Each limit of ``policy`` that ``spec`` exceeds, as "asked X, limit Y" phrases."""
    found = []
    if spec.walltime is not None and spec.walltime > policy.max_walltime:
        found.append(f"walltime {format_walltime(spec.walltime)} is over max-walltime "
                     f"{format_walltime(policy.max_walltime)}")
    if spec.mem_gb is not None and spec.mem_gb > policy.mem_ceiling_gb:
        found.append(f"mem-gb {spec.mem_gb:g} is over mem-ceiling-gb {policy.mem_ceiling_gb:g}")
    if spec.gpus is not None and policy.max_gpus is not None and spec.gpus > policy.max_gpus:
        found.append(f"gpus {spec.gpus} is over max-gpus {policy.max_gpus}")
    if policy.max_nodes is not None and spec.nodes > policy.max_nodes:
        found.append(f"nodes {spec.nodes} is over max-nodes {policy.max_nodes}")
    return found


def _named_queues(host: HostConfig) -> set[str]:
    """Queues the host's table names outside ``[queues]``: its default and its defaults'."""
    named = {host.default_queue(), host.defaults.queue}
    return {q for q in named if q}


def check_policy(spec: JobSpec, host: HostConfig, host_name: str) -> None:
    """Refuse a job its queue would refuse, naming queue, limit, ask and the queues that fit.

    Only queues declared in ``[hosts.X.queues]`` have limits; a host without any declares
    none, and a job without a queue goes to the scheduler's default unchecked. A queue the
    host's own table names (its ``partition``/``queue`` or ``[defaults] queue``) but does not
    declare is the user's word, not a typo: it goes to the scheduler unchecked.
    """
    queues = host.queues
    if not queues or spec.queue is None or (spec.queue not in queues
                                            and spec.queue in _named_queues(host)):
        return
    fitting = [name for name, policy in queues.items() if not violations(spec, policy)]
    fits = (f"queues that would fit: {', '.join(f'{q} ({_limits(queues[q])})' for q in fitting)}"
            if fitting else "no declared queue fits this job; ask for less")
    if spec.queue not in queues:
        declared = ", ".join(f"{q} ({_limits(p)})" for q, p in queues.items())
        raise QueuePolicyError(
            f"host {host_name!r}: unknown queue {spec.queue!r} for job {spec.name!r}; "
            f"declared queues: {declared}; {fits}")
    problems = violations(spec, queues[spec.queue])
    if problems:
        raise QueuePolicyError(
            f"host {host_name!r}: queue {spec.queue!r} refuses job {spec.name!r} "
            f"(attempt {spec.attempt}): {'; '.join(problems)}; {fits}")
