"""The Board facade: one object that runs commands here or on any host mainboard.toml declares.

``Board().run(cmd)`` runs in the workspace root; ``Board().on("gpu-box").run(cmd)`` runs
in that host's ``root`` (created on first use), over ssh when the host is remote;
``Board().on("cluster").submit(cmd, walltime="1h")`` sends a batch job there. ssh
connections are pooled per (host, port, user) across Boards in the process.

Reaching hosts lives in :mod:`mainboard.hosts.access`, jobs in :mod:`mainboard.jobs`; the
facade only joins them, so nothing below it imports it back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from mainboard.bridges.transport import Command
from mainboard.hosts.access import Host, Hosts

if TYPE_CHECKING:
    from mainboard.jobs.job import Job

__all__ = ["Board", "HostHandle"]


class HostHandle(Host):
    """One declared host: run commands, copy files, mirror the workspace, submit jobs."""

    def submit(self, cmd: Command, **options: Any) -> Job:
        """Submit ``cmd`` as a batch job here; see ``mainboard.jobs.submit`` for the options."""
        from mainboard.jobs.job import submit  # jobs imports the bridges; keep `board` light

        return submit(self.board, self.name, cmd, **options)


class Board(Hosts):
    """mainboard.toml made usable: ``run`` here, ``on(name).run`` there, ``close`` when done."""

    handle_type = HostHandle

    def on(self, name: str) -> HostHandle:
        """The named host; UnknownHost (listing the declared ones) when it is not declared."""
        return cast(HostHandle, super().on(name))
