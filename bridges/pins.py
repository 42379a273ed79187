"""``[deps]`` pins asked of a host: one shell round trip reports every pinned tool's version.

The probe runs where a job would start: the host's ``modules`` are loaded first (a tool
such as singularity may exist only after ``module load``), ``python`` is the host's
``python`` key, every other tool answers ``TOOL --version``. Tool names were checked at
load time and are quoted anyway. ``mainboard compute`` adds the same lines to its check
script; ``require_pins`` refuses a submit with one line naming what is wrong and the fix.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

from packaging.specifiers import SpecifierSet

from mainboard.config import Config, HostConfig
from mainboard.config.pins import checked_pins, pins, unmet, version_in
from mainboard.errors import HostError, PinNotMet

from .envmodules import module_block
from .ssh_session import remote_word
from .transport import Transport

PROBE_TIMEOUT_S = 60.0
_TAG = "mb-pin-"


def host_python(host: HostConfig) -> str:
    """The interpreter a host's jobs start from (its ``python`` key, else python3)."""
    return host.interpreter()


def probe_script(names: Sequence[str], python: str, modules: Sequence[str] = ()) -> str:
    """Bash text printing ``mb-pin-NAME=VERSION TEXT`` (empty when missing) for each name;
    python always comes first because every check needs it."""
    q = shlex.quote
    lines = ["{\n" + module_block(modules) + "\n} >/dev/null 2>&1"] if modules else []
    lines.append(f"printf '{_TAG}python=%s\\n' \"$({q(python)} -S -c 'import sys; "
                 "print(\"%d.%d.%d\" % tuple(sys.version_info[:3]))' 2>/dev/null)\"")
    for name in names:
        if name == "python":
            continue
        lines.append(f"if command -v {q(name)} >/dev/null 2>&1; then printf '{_TAG}%s=%s\\n' "
                     f"{q(name)} \"$({q(name)} --version 2>&1 </dev/null | head -n 3 | "
                     "tr '\\n' ' ')\"; else printf '%s\\n' "
                     f"{q(_TAG + name + '=')}; fi")
    return "\n".join(lines)


def managed_probe(root: str) -> str:
    """Bash text printing ``mb-managed=VERSION`` for every interpreter uv installed for
    ``[deps] python`` under the host's root (``ROOT/.mainboard/pythons``)."""
    return (f"for p in {remote_word(root)}/.mainboard/pythons/*/bin/python3; do "
            '[ -x "$p" ] && printf \'mb-managed=%s\\n\' "$("$p" -S -c \'import sys; '
            'print("%d.%d.%d" % tuple(sys.version_info[:3]))\' 2>/dev/null)"; done')


def managed_versions(stdout: str) -> list[str]:
    """The versions ``managed_probe`` printed."""
    return [line.strip()[len("mb-managed="):] for line in stdout.splitlines()
            if line.strip().startswith("mb-managed=")]


def python_problem(config: Config, name: str, host_version: str | None,
                   managed: Sequence[str]) -> str | None:
    """Why host ``name`` has no interpreter for ``[deps] python`` yet (None: it has one):
    one installed under its root, or its own python unless ``[python] preference`` is
    only-managed."""
    spec = pins(config.deps).get("python")
    if spec is None or any(unmet("python", spec, v) is None for v in managed):
        return None
    own = config.python.preference != "only-managed"
    reason = unmet("python", spec, host_version)
    if own and reason is None:
        return None
    why = reason if own else f"no python {spec} ([python] preference = only-managed)"
    return f"{why} and none is installed under the root; `mainboard env build --on {name}` " \
        "installs one"


def read_versions(stdout: str) -> dict[str, str | None]:
    """``{name: version or None}`` from the probe's lines (None: missing or no number)."""
    found: dict[str, str | None] = {}
    for line in stdout.splitlines():
        if line.startswith(_TAG) and "=" in line:
            name, _, text = line[len(_TAG):].partition("=")
            found[name] = version_in(text)
    return found


def problems(wanted: Mapping[str, SpecifierSet], versions: Mapping[str, str | None]
             ) -> list[str]:
    """Every pin the reported versions do not satisfy, in [deps] order."""
    out = [unmet(name, spec, versions.get(name)) for name, spec in wanted.items()]
    return [p for p in out if p]


def fix_hint(config: Config, name: str) -> str:
    """What to change, naming the file."""
    where = config.path or "mainboard.toml"
    return (f"set `python = ...` (or `modules`) for hosts.{name}, or change [deps] in {where}")


def require_pins(config: Config, name: str, host: HostConfig, transport: Transport) -> None:
    """Raise PinNotMet (one line) unless the host satisfies every [deps] pin; no round trip
    when nothing is pinned."""
    wanted = checked_pins(config.deps)
    if not wanted:
        return
    script = probe_script(list(wanted), host_python(host), host.env_modules())
    done = transport.run(["/bin/bash", "-c", script], env=host.env, timeout=PROBE_TIMEOUT_S)
    versions = read_versions(done.stdout)
    if "python" not in versions:
        raise HostError(f"{name}: the [deps] probe answered nothing (exit code "
                        f"{done.returncode}): {done.stderr.strip()[-200:]}")
    found = problems(wanted, versions)
    if found:
        raise PinNotMet(f"{name}: {'; '.join(found)}; {fix_hint(config, name)}")


def require_env_python(config: Config, name: str, version: str) -> None:
    """The provisioned environment's python (inside the container, if any) against the pin."""
    spec = pins(config.deps).get("python")
    reason = unmet("python", spec, version) if spec is not None else None
    if reason:
        raise PinNotMet(f"{name}: the environment's {reason}; {fix_hint(config, name)}")
