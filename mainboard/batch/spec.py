"""``fleet.toml``: a batch of jobs, each sent to one of mainboard.toml's hosts.

```toml
name = "sweep"                      # optional: the file's stem otherwise
[defaults]                          # inherited by every job that does not set the key
target = "hpc"
walltime = "30m"
runtime_s = 600                     # expected runtime (estimate), seconds or "10m"
[[jobs]]
name = "fit-a"                      # optional: "<target>-<position>" otherwise
command = "python fit.py --case a"
data = ["in/a.csv"]                 # workspace paths shipped before it runs
fetch = ["out/a.json"]              # workspace paths brought back after
params = { case = "a" }             # a study's parameters (part of its run id)
```

A ``[study]`` table (``name``, ``description``) makes the file a study: ``mainboard
study run`` (and ``batch run``) give each job a run id and a ledger (``mainboard.study``).

Keys accept ``-`` or ``_``. Every error is one ConfigError naming the file, the key
path as written (``jobs[2].walltime``, 1-based like the ``[[jobs]]`` blocks), the
line, the value and what is valid; a value a job inherited is reported at its
``[defaults]`` key. ``env`` and ``params`` tables merge (the job's keys win); other
keys replace.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, Field, ValidationError, field_validator

from mainboard.bridges.transport import check_env
from mainboard.config import Config, describe_keys
from mainboard.config.base import ConfigModel, PositiveDuration, custom_error
from mainboard.config.sourcemap import KeyPath, SourceMap
from mainboard.errors import ConfigError, UserError
from mainboard.ids import ID
from mainboard.jobs.files import check_paths

NAME_HINT = "1 to 200 printable characters (quotes and spaces are fine; no newlines or tabs)"
_TOML_HINT = "TOML 1.0 (https://toml.io): key = value, strings in quotes, [[jobs]] blocks"


def _command(value: Any) -> Any:
    """Shell text or an argv array of non-empty strings (the job's argv is quoted for you)."""
    if isinstance(value, str) and value.strip():
        return value
    if isinstance(value, list) and value and all(isinstance(v, str) and v for v in value):
        return value
    raise custom_error("not a command", 'shell text ("python fit.py > out/r.txt") or an argv '
                       'array of non-empty strings (["python", "fit.py"])')


Command = Annotated[str | list[str], BeforeValidator(_command)]


def _one_or_many(value: Any) -> Any:
    """A single path may be written as a string (``fetch = "results/a"``), as the page does."""
    return [value] if isinstance(value, str) and value else value


Paths = Annotated[list[str], BeforeValidator(_one_or_many)]
Param = str | int | float | bool
STUDY_HINT = "letters, digits, '.', '_' or '-', starting with a letter or digit (at most 200)"


class JobKeys(ConfigModel):
    """The keys a job may set, and ``[defaults]`` may set for every job."""

    target: str | None = Field(None, description="a host declared in mainboard.toml")
    command: Command | None = None
    data: Paths | None = Field(None, description="a workspace-relative path or an array of them")
    fetch: Paths | None = Field(None, description="a workspace-relative path or an array of them")
    walltime: PositiveDuration | None = None
    runtime_s: PositiveDuration | None = None
    mem_gb: float | None = Field(None, gt=0, description="a number of GB greater than 0")
    cpus: int | None = Field(None, ge=1, description="an integer >= 1")
    gpus: int | None = Field(None, ge=0, description="an integer >= 0")
    queue: str | None = Field(None, description="a queue (partition) of the target")
    env: dict[str, str] | None = Field(None, description="a table of strings")
    params: dict[str, Param] | None = Field(
        None, description="a table of strings, numbers or booleans (studies: part of the run id)")


class JobEntry(JobKeys):
    """One ``[[jobs]]`` block."""

    name: str | None = Field(None, description=NAME_HINT)


class StudyTable(ConfigModel):
    """``[study]``: the jobs form one study (``mainboard study run``): run ids and a ledger."""

    name: str | None = Field(None, description=STUDY_HINT)
    description: str = ""

    @field_validator("name")
    @classmethod
    def _an_id(cls, value: str | None) -> str | None:
        """The name is the ledger's file name: a plain id, never a path."""
        if value is not None and not ID.match(value):
            raise custom_error("a study name is its id and names its ledger file", STUDY_HINT)
        return value


class BatchFile(ConfigModel):
    """The whole file as written (before inheritance)."""

    name: str | None = Field(None, description=NAME_HINT)
    study: StudyTable | None = None
    defaults: JobKeys = Field(default_factory=JobKeys)
    jobs: list[JobEntry] = Field(min_length=1, description="one or more [[jobs]] blocks")


class BatchJob(BaseModel):
    """One job after inheritance: everything ``batch`` needs to prepare, estimate, dispatch it."""

    name: str
    target: str
    command: str | list[str]
    position: int                       # 1-based place among the [[jobs]] blocks
    data: list[str] = Field(default_factory=list)
    fetch: list[str] = Field(default_factory=list)
    walltime: int | None = None
    runtime_s: int | None = None
    mem_gb: float | None = None
    cpus: int | None = None
    gpus: int | None = None
    queue: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    params: dict[str, Param] = Field(default_factory=dict)
    secret_env: list[str] = Field(default_factory=list)  # names recorded redacted (receipts)


@dataclass(frozen=True)
class BatchSpec:
    """A loaded fleet.toml: its name, where it came from, its resolved jobs."""

    name: str
    path: Path
    sha256: str
    jobs: list[BatchJob] = field(default_factory=list)
    study: StudyTable | None = None     # a [study] table: run it with `mainboard study run`

    def job(self, name: str) -> BatchJob:
        """The job called ``name`` (KeyError when the fleet has none)."""
        for job in self.jobs:
            if job.name == name:
                return job
        raise KeyError(name)

    @property
    def targets(self) -> list[str]:
        """Every target, in the order jobs first name it."""
        return list(dict.fromkeys(j.target for j in self.jobs))


def check_name(value: str) -> str | None:
    """Why ``value`` cannot name a job or batch (None when it can)."""
    if not value.strip():
        return "a name cannot be empty"
    if len(value) > 200:
        return "a name is at most 200 characters"
    if any(unicodedata.category(c).startswith("C") for c in value):
        return "a name cannot hold control characters (newlines, tabs, escapes)"
    return None


def _display(loc: KeyPath) -> str:
    """``jobs[2].walltime``: list indices 1-based, as the user counts [[jobs]] blocks."""
    out = ""
    for part in loc:
        out += f"[{part + 1}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


class _Loader:
    """One load of one fleet.toml against one workspace's Config."""

    def __init__(self, path: Path, text: str, config: Config) -> None:
        self.path, self.text, self.config = path, text, config
        self.file = str(path)
        self.sources = SourceMap(text)
        self.raw: dict[str, Any] = {}

    def error(self, loc: KeyPath, message: str, value: Any = None,
              valid: str | Sequence[str] | None = None) -> ConfigError:
        return ConfigError(message, file=self.file, key=_display(loc) or None,
                           line=self.sources.line(loc), value=value, valid=valid)

    def load(self) -> BatchSpec:
        try:
            self.raw = tomllib.loads(self.text)
        except tomllib.TOMLDecodeError as exc:
            match = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
            raise ConfigError(f"TOML syntax error: {str(exc).split(' (at line')[0]}"
                              + (f" at column {match.group(2)}" if match else ""),
                              file=self.file, line=int(match.group(1)) if match else None,
                              valid=_TOML_HINT) from None
        try:
            parsed = BatchFile.model_validate(self.raw)
        except ValidationError as exc:
            raise self._convert(exc.errors()[0]) from None
        name = parsed.name if parsed.name is not None else self.path.stem
        if (why := check_name(name)) is not None:
            raise self.error(("name",), why, name, NAME_HINT)
        jobs = [self._resolve(parsed.defaults, entry, i) for i, entry in enumerate(parsed.jobs)]
        seen: dict[str, int] = {}
        for index, job in enumerate(jobs):
            if job.name in seen:
                first = seen[job.name]
                raise self.error(("jobs", index, "name"), f"duplicate job name (jobs[{first + 1}] "
                                 f"at line {self.sources.line(('jobs', first))} is also called "
                                 "that; a job without a name is <target>-<position>)", job.name,
                                 "a name no other job of this fleet has")
            seen[job.name] = index
        digest = hashlib.sha256(self.text.encode()).hexdigest()
        return BatchSpec(name=name, path=self.path, sha256=digest, jobs=jobs, study=parsed.study)

    def _convert(self, err: dict[str, Any]) -> ConfigError:
        """The first pydantic error as one ConfigError at the key the user wrote."""
        ctx = err.get("ctx") or {}
        loc = self._key_loc(tuple(err["loc"]) + tuple(ctx.get("loc", ())))  # model-level checks
        value = ctx["value"] if "value" in ctx else err.get("input")
        model = self._model_at(loc[:-1])
        if err["type"] == "extra_forbidden":
            return self.error(loc, "unknown key", value, describe_keys(model or JobEntry))
        if err["type"] == "missing":
            return self.error(loc, f"missing required key {loc[-1]}",
                              valid=describe_keys(model or BatchFile))
        if err["type"] == "mainboard":
            return self.error(loc, ctx["detail"], value, ctx.get("valid"))
        hint = None
        if model is not None and loc and str(loc[-1]).replace("-", "_") in model.model_fields:
            hint = model.model_fields[str(loc[-1]).replace("-", "_")].description
        message = err["msg"][0].lower() + err["msg"][1:]
        return self.error(loc, message.replace("input should be", "must be"), value, hint)

    def _key_loc(self, loc: KeyPath) -> KeyPath:
        """Keep the key path the user wrote; drop pydantic's union tags (``str``, ``list[str]``)."""
        out: list[str | int] = []
        node: Any = self.raw
        for part in loc:
            if isinstance(node, dict) and part in node:
                out.append(part)
                node = node[part]
            elif isinstance(node, list) and isinstance(part, int) and part < len(node):
                out.append(part)
                node = node[part]
            elif isinstance(node, dict):
                out.append(str(part).replace("_", "-") if str(part).replace("_", "-") in node
                           else part)
                node = None
            else:
                break
        return tuple(out)

    @staticmethod
    def _model_at(loc: KeyPath) -> type[BaseModel] | None:
        if loc == ():
            return BatchFile
        if loc == ("study",):
            return StudyTable
        if loc == ("defaults",):
            return JobKeys
        if len(loc) == 2 and loc[0] == "jobs" and isinstance(loc[1], int):
            return JobEntry
        return None

    def _where(self, index: int, entry: JobEntry, key: str) -> KeyPath:
        """Where ``key`` of job ``index`` was written: the job's own table, or [defaults]."""
        raw = self.raw.get("jobs", [])[index]
        for spelled in (key, key.replace("_", "-")):
            if spelled in raw:
                return ("jobs", index, spelled)
        defaults = self.raw.get("defaults", {})
        for spelled in (key, key.replace("_", "-")):
            if spelled in defaults:
                return ("defaults", spelled)
        return ("jobs", index)

    def _resolve(self, defaults: JobKeys, entry: JobEntry, index: int) -> BatchJob:
        """Inherit [defaults], check target, command, name and paths; one BatchJob."""
        keys = {k: v for k, v in defaults.model_dump().items() if v is not None}
        keys.update({k: v for k, v in entry.model_dump(exclude={"name"}).items()
                     if v is not None})
        keys["env"] = {**(defaults.env or {}), **(entry.env or {})}
        keys["params"] = {**(defaults.params or {}), **(entry.params or {})}
        hosts = self.config.host_names()
        target = keys.get("target")
        if target is None:
            raise self.error(("jobs", index), "no target: set target in this job or in "
                             "[defaults]", valid=hosts)
        if target not in hosts:
            raise self.error(self._where(index, entry, "target"), "unknown target (not a host "
                             f"in {self.config.path or 'mainboard.toml'})", target, hosts)
        if keys.get("command") is None:
            raise self.error(("jobs", index), "missing required key command",
                             valid='shell text or an argv array, in the job or in [defaults]')
        name = entry.name if entry.name is not None else f"{target}-{index + 1}"
        if (why := check_name(name)) is not None:
            raise self.error(("jobs", index, "name"), why, name, NAME_HINT)
        try:
            check_env(keys["env"])
        except UserError as exc:
            raise self.error(self._where(index, entry, "env"), str(exc)) from None
        for key, must_exist in (("data", True), ("fetch", False)):
            try:
                keys[key] = check_paths(keys.get(key) or [], key, self.config.root,
                                        must_exist=must_exist)
            except UserError as exc:
                raise self.error(self._where(index, entry, key), str(exc),
                                 valid="workspace-relative paths (relative to "
                                       f"{self.config.root})") from None
        return BatchJob(name=name, position=index + 1, **keys)


def load_batch(path: str | Path, config: Config) -> BatchSpec:
    """Read and check ``path`` against the workspace ``config`` (hosts, workspace root)."""
    fleet_path = Path(path).expanduser().absolute()
    try:
        text = fleet_path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"{fleet_path}: no such fleet file; give the path of a fleet.toml "
                        "(name, [defaults], [[jobs]])") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{fleet_path}: cannot read the fleet file ({exc})") from None
    return _Loader(fleet_path, text, config).load()
