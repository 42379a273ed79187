"""The Board facade: one object that runs commands here or on any host mainboard.toml declares.

``Board().run(cmd)`` runs in the workspace root; ``Board().on("gpu-box").run(cmd)`` runs
in that host's ``root`` (created on first use), over ssh when the host is remote;
``Board().on("cluster").submit(cmd, walltime="1h")`` sends a batch job there, and
``Board().on("auto").submit(cmd, gpus=1, runtime_s=600)`` lets the router pick the host.
ssh connections are pooled per (host, port, user) across Boards in the process.

Reaching hosts lives in :mod:`mainboard.hosts.access`, jobs in :mod:`mainboard.jobs`, the
router in :mod:`mainboard.routing`; the facade only joins them, so nothing below it
imports it back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, cast, overload

from mainboard.bridges.transport import Command
from mainboard.config import AUTO
from mainboard.hosts.access import Host, Hosts
from mainboard.hosts.mirror import Mirror, Plan, SyncReport
from mainboard.jobs.job import submit
from mainboard.routing.router import RANKED, rank, submit_auto

if TYPE_CHECKING:
    from mainboard.jobs.job import Job
    from mainboard.routing.router import Decision

__all__ = ["AutoHandle", "Board", "HostHandle"]


class HostHandle(Host):
    """One declared host: run commands, copy files, mirror the workspace, submit jobs."""

    def submit(self, cmd: Command, **options: Any) -> Job:
        """Submit ``cmd`` as a batch job here; see ``mainboard.jobs.submit`` for the options."""
        return submit(self.board, self.name, cmd, **options)

    def sync(self, *, full: bool = False) -> SyncReport:
        """Mirror the workspace to this host's root, sending only what changed."""
        return Mirror.of(self).sync(full=full)

    def plan(self, *, probe: bool = False) -> Plan:
        """What ``sync()`` would send now (files, raw and wire bytes), without sending."""
        return Mirror.of(self).plan(probe=probe)


class AutoHandle:
    """``on("auto")``: submit where the router (``mainboard.routing``) says is best."""

    def __init__(self, board: Board) -> None:
        self.board = board
        self.decision: Decision | None = None  # the last ranking made here

    def rank(self, **asked: Any) -> Decision:
        """Every declared host scored for a job asking ``asked``; nothing is submitted."""
        self.decision = rank(self.board, **asked)
        return self.decision

    def submit(self, cmd: Command, *, runtime_s: float | None = None, **options: Any) -> Job:
        """Submit ``cmd`` on the best fitting host; the ranking lands in the job's receipts."""
        decision = self.rank(runtime_s=runtime_s,
                             **{k: options[k] for k in RANKED if options.get(k) is not None})
        return submit_auto(self.board, cmd, decision, **options)


class Board(Hosts):
    """mainboard.toml made usable: ``run`` here, ``on(name).run`` there, ``close`` when done."""

    handle_type = HostHandle

    @overload
    def on(self, name: Literal["auto"]) -> AutoHandle: ...
    @overload
    def on(self, name: str) -> HostHandle: ...

    def on(self, name: str) -> HostHandle | AutoHandle:  # type: ignore[override]
        """The named host (UnknownHost lists the declared ones), or the router for "auto"."""
        if name == AUTO:
            return AutoHandle(self)
        return cast(HostHandle, super().on(name))
