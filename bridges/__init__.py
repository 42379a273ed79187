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
    if kind not in HOST_TABLE:  # a kind from receipts or the environment, not a loaded config
        who = f"host {host_name!r}: " if host_name else ""
        raise UserError(f"{who}no bridge for kind {kind!r}; valid kinds: {', '.join(HOST_TABLE)}")
    # Every row names a module and class that exist (tests/repo/test_architecture.py).
    module_name, _, class_name = HOST_TABLE[kind].bridge.partition(":")
    cls: type[Bridge] = getattr(importlib.import_module(f"{__name__}.{module_name}"), class_name)
    return cls


def bridge_for(host_name: str, host_config: HostConfig, transport: Transport, *,
               container: ContainerConfig | None = None, root: str | None = None) -> Bridge:
    """The bridge for ``host_config.kind`` over ``transport`` (which reaches its login side).

    ``container`` is the ``[containers.X]`` the host names (the caller resolves the name);
    ``root`` overrides the host's root (e.g. the workspace root for the local host).
    """
    cls = bridge_class(host_config.kind, host_name)
    return cls(host_name, host_config, transport, container=container, root=root)
