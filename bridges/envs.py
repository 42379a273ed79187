"""A host's environments through one backend interface: ``mainboard env status|build|remove``.

``EnvBackend`` is what builds environments; ``UvBackend`` (uv: ``[deps] python`` as an
interpreter uv finds or installs, ``[python.deps]`` on it) is the one that ships, and
``backend_for`` picks it. For uv, one driver round trip (``provision_driver``'s ``status``/``remove`` modes) lists every
environment under the host's root with its python, size and age, says whether the
workspace's declared set (its key) is built, and which uv-managed interpreter satisfies
``[deps] python`` there now (never installing one). ``build`` is ``provision_host``.
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass, field
from typing import Any, Protocol

from mainboard.config import Config

from .provision import (
    Driver,
    ProvisionedEnv,
    build_manifest,
    check_deps,
    default_root,
    driver_env,
    provision_host,
    python_request,
)
from .transport import Command, LocalTransport, Transport


@dataclass(frozen=True)
class EnvStatus:
    """What ``env status`` shows for one host."""

    host: str
    declared_python: str | None
    interpreter: str | None
    python_version: str | None
    key: str
    built: bool
    envs: list[dict[str, Any]] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {"host": self.host, "declared_python": self.declared_python,
                "interpreter": self.interpreter, "python_version": self.python_version,
                "key": self.key, "built": self.built, "envs": self.envs}


def _ask(config: Config, name: str, transport: Transport, mode: str,
         root: str | None) -> EnvStatus:
    host = config.host(name)
    request = python_request(config)
    deps = check_deps(config.python.deps, file=str(config.path or "mainboard.toml"))
    manifest = build_manifest(deps, None, None, request, config.python.preference)
    driver = Driver(transport, root or default_root(config, host),
                     host.interpreter(), driver_env(config, host), None, host.env_modules())
    found = driver(mode, manifest)
    return EnvStatus(host=name, declared_python=request, interpreter=found.get("interpreter"),
                     python_version=str(found["python_version"]) if found.get("ready") else None,
                     key=str(found["key"]), built=bool(found.get("ready")),
                     envs=list(found.get("envs") or []))


def env_status(config: Config, name: str, transport: Transport,
               root: str | None = None) -> EnvStatus:
    """Host ``name``'s environments (the job/worker set without the project)."""
    return _ask(config, name, transport, "status", root)


def env_remove(config: Config, name: str, transport: Transport,
               root: str | None = None) -> EnvStatus:
    """Delete every environment under host ``name``'s root; returns what was there."""
    return _ask(config, name, transport, "remove", root)


def env_declared(config: Config) -> bool:
    """Whether the workspace declares an environment: ``[deps] python`` or ``[python.deps]``
    (without either, commands run as they always did, on the host's own PATH)."""
    return bool(python_request(config) or config.python.deps)


def in_env(command: Command, env_dir: str) -> Command:
    """``command`` run with the env's ``bin`` first on PATH and ``VIRTUAL_ENV`` set; shell
    text keeps its shell, an argv stays an argv (the env path travels quoted)."""
    if isinstance(command, str):
        q = shlex.quote(env_dir)
        return (f"VIRTUAL_ENV={q}; PATH={q}/bin:\"$PATH\"; export VIRTUAL_ENV PATH; "
                f"{command}")
    return ["/bin/sh", "-c", 'VIRTUAL_ENV="$0"; PATH="$0/bin:$PATH"; export VIRTUAL_ENV PATH; '
            'exec "$@"', env_dir, *command]


class EnvBackend(Protocol):
    """What builds a workspace's environment on a host. Each call is one host operation:
    ``status`` never installs, ``build`` finds or installs the declared interpreter then
    builds the env on it, keyed by what was declared, reused when the key is built;
    ``remove`` deletes the host's envs. A new ecosystem (pixi, conda) is a new class."""

    name: str

    def status(self, config: Config, host: str, transport: Transport,
               root: str | None = None) -> EnvStatus: ...

    def build(self, config: Config, host: str, transport: Transport, root: str | None = None,
              stream: Any = False) -> ProvisionedEnv: ...

    def build_for_workers(self, config: Config, host: str, transport: Transport,
                          root: str | None = None) -> ProvisionedEnv:
        """``build`` with mainboard itself in the env: what a Celery worker there runs."""
        ...

    def remove(self, config: Config, host: str, transport: Transport,
               root: str | None = None) -> EnvStatus: ...


class UvBackend:
    """uv: ``uv python find/install`` for the interpreter, ``uv venv`` + ``uv pip install``
    for the env, all run on the host by ``provision_driver``."""

    name = "uv"

    def status(self, config: Config, host: str, transport: Transport,
               root: str | None = None) -> EnvStatus:
        return env_status(config, host, transport, root)

    def build(self, config: Config, host: str, transport: Transport, root: str | None = None,
              stream: Any = False) -> ProvisionedEnv:
        return provision_host(config, host, transport, root=root, stream=stream,
                              with_project=False, purpose="job")

    def build_for_workers(self, config: Config, host: str, transport: Transport,
                          root: str | None = None) -> ProvisionedEnv:
        return provision_host(config, host, transport, root=root, purpose="worker")

    def remove(self, config: Config, host: str, transport: Transport,
               root: str | None = None) -> EnvStatus:
        return env_remove(config, host, transport, root)


def worker_python(config: Config) -> str:
    """The interpreter this machine's own workers (``integrate``'s, ``mainboard up``'s)
    run: the declared environment's, mainboard in it, built or reused by its key; this
    process' own when the workspace declares none."""
    if not env_declared(config):
        return sys.executable
    return backend_for(config).build_for_workers(config, "local", LocalTransport("local")).python


def backend_for(config: Config) -> EnvBackend:
    """The backend of the workspace's declared environment (only uv ships; ``[conda]`` and
    ``[pixi]`` tables are refused when mainboard.toml is loaded)."""
    return UvBackend()
