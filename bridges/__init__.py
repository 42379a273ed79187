"""mainboard.bridges: run commands and jobs on every kind of host.

``bridge_for(name, host_config, transport)`` picks the bridge for a host's ``kind``.
Bridge modules are imported only when asked for, so ``import mainboard.bridges`` stays
cheap (no paramiko, no scheduler code) for the CLI and for workers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from mainboard.errors import UserError

if TYPE_CHECKING:
    from mainboard.config import ContainerConfig, HostConfig

    from .base import Bridge
    from .transport import Transport

# kind -> (module, class); a provider host's transport reaches its rental (see board.py).
BRIDGES: dict[str, tuple[str, str]] = {
    "local": ("local", "LocalBridge"),
    "ssh": ("remote", "RemoteBridge"),
    "slurm": ("slurm", "SlurmBridge"),
    "pbs": ("pbs", "PbsBridge"),
    "provider": ("remote", "RentalBridge"),
}


def bridge_for(host_name: str, host_config: HostConfig, transport: Transport, *,
               container: ContainerConfig | None = None, root: str | None = None) -> Bridge:
    """The bridge for ``host_config.kind`` over ``transport`` (which reaches its login side).

    ``container`` is the ``[containers.X]`` the host names (the caller resolves the name);
    ``root`` overrides the host's root (e.g. the workspace root for the local host).
    """
    kind = host_config.kind
    if kind not in BRIDGES:
        raise UserError(f"host {host_name!r}: no bridge for kind {kind!r}; "
                        f"valid kinds: {', '.join(BRIDGES)}")
    module_name, class_name = BRIDGES[kind]
    try:
        module = importlib.import_module(f"{__name__}.{module_name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"{__name__}.{module_name}":
            raise
        raise UserError(f"host {host_name!r}: jobs on {kind} hosts are not available yet "
                        f"(mainboard.bridges.{module_name} is not installed in this version); "
                        "use a local, ssh, slurm or pbs host") from None
    if not hasattr(module, class_name):
        raise UserError(f"host {host_name!r}: mainboard.bridges.{module_name} has no "
                        f"{class_name} yet; jobs on {kind} hosts are not available")
    cls: type[Bridge] = getattr(module, class_name)
    return cls(host_name, host_config, transport, container=container, root=root)
