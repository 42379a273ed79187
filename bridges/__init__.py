"""mainboard.bridges: run commands and jobs on every kind of host.

``bridge_for(name, host_config, transport)`` picks the bridge for a host's ``kind``
(``bridge_class(kind)``: its class, from the one table of host kinds).
Bridge modules are imported only when asked for, so ``import mainboard.bridges`` stays
cheap (no paramiko, no scheduler code) for the CLI and for workers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from mainboard.config.hostkinds import HOST_TABLE
from mainboard.errors import UserError

if TYPE_CHECKING:
    from mainboard.config import ContainerConfig, HostConfig

    from .base import Bridge
    from .transport import Transport


def bridge_class(kind: str, host_name: str | None = None) -> type[Bridge]:
    """The bridge class of host kind ``kind``, from its row of ``config.hostkinds.HOST_TABLE``
    (a host kind and its bridge are registered there together, once). Every scheduler fact
    (commands, states, signals, fan-out) is asked of this class, never spelled elsewhere."""
    who = f"host {host_name!r}: " if host_name else ""
    if kind not in HOST_TABLE:
        raise UserError(f"{who}no bridge for kind {kind!r}; valid kinds: {', '.join(HOST_TABLE)}")
    module_name, _, class_name = HOST_TABLE[kind].bridge.partition(":")
    try:
        module = importlib.import_module(f"{__name__}.{module_name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"{__name__}.{module_name}":
            raise
        raise UserError(f"{who}jobs on {kind} hosts are not available yet "
                        f"(mainboard.bridges.{module_name} is not installed in this version); "
                        f"valid kinds here: {', '.join(k for k in HOST_TABLE if k != kind)}") from None
    if not hasattr(module, class_name):
        raise UserError(f"{who}mainboard.bridges.{module_name} has no "
                        f"{class_name} yet; jobs on {kind} hosts are not available")
    cls: type[Bridge] = getattr(module, class_name)
    return cls


def bridge_for(host_name: str, host_config: HostConfig, transport: Transport, *,
               container: ContainerConfig | None = None, root: str | None = None) -> Bridge:
    """The bridge for ``host_config.kind`` over ``transport`` (which reaches its login side).

    ``container`` is the ``[containers.X]`` the host names (the caller resolves the name);
    ``root`` overrides the host's root (e.g. the workspace root for the local host).
    """
    cls = bridge_class(host_config.kind, host_name)
    return cls(host_name, host_config, transport, container=container, root=root)
