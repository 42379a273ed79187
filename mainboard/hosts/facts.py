"""Hardware facts of a host: one pydantic schema, the probe that fills it, and a cache.

The probe (``mainboard/hosts/facts_probe.py``) is plain standard-library Python sent on
stdin to the host's own ``python3 -``, so nothing has to be installed there. Its
JSON answer is validated here against :class:`Facts`, the single definition of the
schema, and cached under ``.mainboard/facts/<host>.json`` so listings such as
``mainboard compute`` can show hardware without touching the host again.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from mainboard.errors import FactsError
from mainboard.hosts import facts_probe

if TYPE_CHECKING:
    from mainboard.config import HostConfig
    from mainboard.hosts.access import Hosts

PROBE_TIMEOUT = 120.0
GIB = 1024**3


class _Strict(BaseModel):
    """Exact types, no unknown keys: probe and schema must never drift apart silently."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Gpu(_Strict):
    """One NVIDIA GPU as nvidia-smi reports it (memory in MiB, as nvidia-smi's 'MiB')."""

    name: str
    memory_mb: int | None
    uuid: str
    driver: str


class ScratchDir(_Strict):
    """A place a job could write large files, and how much room it has."""

    path: str
    source: str
    free_bytes: int
    total_bytes: int
    writable: bool


class IbPort(_Strict):
    """One InfiniBand port: state such as ACTIVE, rate such as '200 Gb/sec (4X HDR)'."""

    port: int
    state: str | None
    rate: str | None
    link_layer: str | None


class IbDevice(_Strict):
    """One device under /sys/class/infiniband."""

    name: str
    ports: list[IbPort]


class Interpreter(_Strict):
    """The python that ran the probe."""

    path: str | None
    version: str


class PythonCommand(_Strict):
    """A python3 / python3.X command on the host's PATH that answered with its version."""

    name: str
    path: str
    version: str


class CpuKind(_Strict):
    """One kind of core and how many cores of it (a hybrid CPU has several kinds)."""

    model: str
    count: int


class Facts(_Strict):
    """Everything mainboard knows about a host's hardware; bytes for memory and disk."""

    schema_version: Literal[1]
    hostname: str
    os: str
    system: str
    arch: str
    kernel: str
    cpu_name: str | None        # a hybrid CPU: its kinds joined, "10x Arm Cortex-A725 + ..."
    cpu_kinds: list[CpuKind] = []  # [] in facts cached before kinds were probed
    cpu_logical: int | None
    cpu_physical: int | None
    cpu_usable: int | None
    memory_total: int | None
    memory_available: int | None
    cgroup_version: Literal[1, 2] | None
    cgroup_memory_limit: int | None
    cgroup_cpu_limit: float | None
    gpus: list[Gpu]
    scratch: list[ScratchDir]
    infiniband: list[IbDevice]
    python: Interpreter
    pythons: list[PythonCommand]
    warnings: list[str]


class FactsRecord(BaseModel):
    """What the cache file holds: whose facts, when they were probed, and the facts."""

    model_config = ConfigDict(extra="forbid")

    host: str
    probed_at: datetime
    facts: Facts


INLINED = re.compile(r"^from mainboard\.hosts\.(\w+) import \(  # probe: inlined\n[^)]*\)$", re.M)


def probe_source() -> str:
    """The probe's source text, exactly as it is sent to a host: ``facts_probe.py`` with
    each import marked ``# probe: inlined`` replaced by that module's source, so the
    host runs one standard-library script."""
    here = Path(facts_probe.__file__)
    return INLINED.sub(lambda m: here.with_name(f"{m.group(1)}.py").read_text(encoding="utf-8"),
                       here.read_text(encoding="utf-8"))


def parse_facts(stdout: str, host: str = "local") -> Facts:
    """Validate the probe's JSON output; a mismatch raises FactsError naming the field.

    Login shells on some clusters print banners before our output, so the facts are
    the last line that looks like a JSON object.
    """
    lines = [line for line in stdout.splitlines() if line.lstrip().startswith("{")]
    if not lines:
        raise FactsError(f"facts probe on {host} printed no JSON object "
                         f"(stdout starts: {stdout[:200]!r})")
    try:
        data = json.loads(lines[-1])
    except json.JSONDecodeError as exc:
        raise FactsError(f"facts probe on {host} printed invalid JSON: {exc} "
                         f"(line starts: {lines[-1][:200]!r})") from None
    return validate_facts(data, host)


def validate_facts(data: object, host: str = "local") -> Facts:
    """Facts from a decoded JSON object, or FactsError naming the first bad field."""
    try:
        return Facts.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "<root>"
        got = "" if first["type"] == "missing" else f" (got {first.get('input')!r})"
        more = f"; {exc.error_count() - 1} more problem(s)" if exc.error_count() > 1 else ""
        raise FactsError(f"facts from {host} do not match the facts schema: field {field}: "
                         f"{first['msg']}{got}{more}") from None


def host_python(host_config: HostConfig | None) -> str:
    """Shell words that start the host's python: this interpreter locally, else its `python`."""
    if host_config is None or host_config.kind == "local":
        return shlex.quote(sys.executable)
    return shlex.quote(host_config.interpreter())


def probe_facts(board: Hosts, host: str = "local", *, timeout: float = PROBE_TIMEOUT) -> Facts:
    """Run the probe on ``host`` through the board, validate, cache and return the facts."""
    handle = board.on(host)  # UnknownHost for undeclared names
    command = f"{host_python(handle.config)} -"
    # The transport, not handle.run: probing must not create the host's root directory.
    result = handle.transport.run(command, stdin=probe_source().encode(), timeout=timeout,
                                  env=handle.config.env)
    if result.returncode != 0:
        tail = "\n".join(result.stderr.rstrip().splitlines()[-5:])
        raise FactsError(f"facts probe on {host} failed: `{command}` exited {result.returncode}"
                         + (f": {tail}" if tail else "")
                         + " (the probe needs Python 3.6+ on the host; set hosts."
                         f"{host}.python to its path)")
    facts = parse_facts(result.stdout, host)
    save_facts(board.config.state_dir, host, facts)
    return facts


def _cache_name(host: str) -> str:
    """A file name for any host name: safe characters kept, others %XX-escaped (reversible)."""
    return re.sub(r"[^A-Za-z0-9_-]", lambda m: "".join(f"%{b:02X}" for b in
                                                       m.group(0).encode()), host) + ".json"


def cache_path(state_dir: Path, host: str) -> Path:
    """Where the facts of ``host`` are cached."""
    return Path(state_dir) / "facts" / _cache_name(host)


def save_facts(state_dir: Path, host: str, facts: Facts) -> Path:
    """Write the facts with a UTC timestamp, atomically (a reader never sees half a file)."""
    path = cache_path(state_dir, host)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = FactsRecord(host=host, probed_at=datetime.now(UTC), facts=facts)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(record.model_dump_json(indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def cached_record(state_dir: Path, host: str) -> FactsRecord | None:
    """The cached record, or None if never probed or written by an incompatible version."""
    path = cache_path(state_dir, host)
    try:
        return FactsRecord.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # absent, unreadable or stale: the fix is the same, probe again


def cached_facts(state_dir: Path, host: str) -> Facts | None:
    """The cached facts of ``host``, or None when there are none usable."""
    record = cached_record(state_dir, host)
    return record.facts if record else None


def _gib(n: int) -> str:
    return f"{n / GIB:.1f} GiB"


def _gpu_text(gpus: list[Gpu]) -> str:
    if not gpus:
        return "no GPU"
    counts: dict[tuple[str, int | None], int] = {}
    for gpu in gpus:
        counts[(gpu.name, gpu.memory_mb)] = counts.get((gpu.name, gpu.memory_mb), 0) + 1
    return " + ".join(f"{n}x {name}" + (f" {mem // 1024} GiB" if mem else "")
                      for (name, mem), n in counts.items())


def summary(facts: Facts) -> str:
    """One line of hardware: OS, CPU, memory (and cgroup limits), GPUs, InfiniBand, python."""
    cpu = facts.cpu_name or "unknown CPU"
    counts = f"{facts.cpu_logical or '?'} cpus"
    if facts.cpu_physical and facts.cpu_physical != facts.cpu_logical:
        counts += f"/{facts.cpu_physical} cores"
    if facts.cgroup_cpu_limit is not None:
        counts += f" (limit {facts.cgroup_cpu_limit:g})"
    mem = _gib(facts.memory_total) + " RAM" if facts.memory_total else "RAM unknown"
    limit = facts.cgroup_memory_limit
    if limit is not None and (facts.memory_total is None or limit < facts.memory_total):
        mem += f" (limit {_gib(limit)})"
    parts = [f"{facts.os} {facts.arch}", f"{cpu} {counts}", mem, _gpu_text(facts.gpus)]
    if facts.infiniband:
        parts.append("IB " + ",".join(dev.name for dev in facts.infiniband))
    parts.append(f"python {facts.python.version}")
    return "; ".join(parts)
