"""The environment a job runs in: ``[deps]`` pins checked, ``[python.deps]`` provisioned.

Before a job leaves this machine for good, its host is asked once for every pinned
tool's version (nothing when nothing is pinned) and a host that misses a pin is
refused in one line. When the workspace declares ``[python.deps]``, the same cached
environment machinery as ``fleet up`` (``bridges.provision``: uv, keyed by the
resolved set, reused when unchanged, built inside the host's container on a bound
host path) makes the environment on the host, on a uv-managed interpreter when
``[deps] python`` is declared; the job then starts with its ``bin`` first on ``PATH``
and ``VIRTUAL_ENV`` set, the local host included. A batch prepares each
target once and hands the result to every job of that target.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mainboard.bridges.envs import env_declared
from mainboard.bridges.pins import require_pins
from mainboard.bridges.provision import provision_host
from mainboard.config import Config
from mainboard.config.pins import pins

if TYPE_CHECKING:
    from mainboard.bridges.base import Bridge
    from mainboard.hosts.access import Host


@dataclass(frozen=True)
class JobEnvironment:
    """What a job on one host gets: the env's key and directory (None: no env declared)."""

    key: str | None = None
    env_dir: str | None = None
    actions: tuple[str, ...] = field(default=())

    def spec_params(self, path: list[str], env: dict[str, str]) -> dict[str, object]:
        """JobSpec fields with the environment in front (the job's own values kept)."""
        if self.env_dir is None:
            return {}
        return {"path": [posixpath.join(self.env_dir, "bin"), *path],
                "env": {"VIRTUAL_ENV": self.env_dir, **env}}


def declared(config: Config) -> bool:
    """Whether jobs need anything prepared: a [deps] pin or [python.deps]."""
    return bool(pins(config.deps) or config.python.deps)


def prepare_environment(handle: Host, bridge: Bridge) -> JobEnvironment:
    """Check the pins and provision the workspace environment on ``handle``'s host."""
    config = handle.board.config
    require_pins(config, handle.name, handle.config, bridge.transport)
    if not env_declared(config):
        return JobEnvironment()
    built = provision_host(config, handle.name, bridge.transport, root=bridge.root,
                           with_project=False, purpose="job")
    return JobEnvironment(built.key, built.env_dir, built.actions)
