"""Runs on disk: one NDJSON receipt file per run under ``.mainboard/runs/<id>/``.

Why receipts and not Redis: they outlive the broker, and a reader takes its cursor from
them (the last ``run.iteration`` line holds the snapshot to resume from). A file may hold
several executions of the same content-derived run id; each starts with a
``run.created`` line, and the latest execution is what ``runs show`` and resume read.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mainboard.errors import ReceiptError, UnknownRun, UserError
from mainboard.receipts import (
    ChildDone,
    ChildStarted,
    IterationDone,
    Payload,
    Receipts,
    RunCreated,
    RunFailed,
    RunFinished,
    RunPaused,
    RunResumed,
    RunStopped,
    TaskDone,
    TasksAppended,
    TaskStarted,
)
from mainboard.runs.lazy import LazyReceipts
from mainboard.store import ReceiptStore

RECEIPTS_NAME = "receipts.ndjson"
_SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def clone_id(spec_id: str, parent: str, from_iteration: int) -> str:
    """Content-derived id of a clone: its spec, its parent and the snapshot it branches from."""
    text = f"{spec_id}:{parent}:{from_iteration}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def defined_fit(result: Mapping[str, Any]) -> dict[str, Any]:
    """A stored result with chi2/dof None where it is undefined: no degrees of freedom (one
    kept iteration), which a null Q marks; results recorded before said 0 there."""
    out = dict(result)
    if "chi2_dof" in out and out.get("q") is None:  # a parent's result has neither
        out["chi2_dof"] = None
    return out


@dataclass
class RunHistory:
    """The latest execution of one run, as its receipts tell it."""

    run_id: str
    created: RunCreated
    iterations: list[IterationDone] = field(default_factory=list)
    resumed: list[RunResumed] = field(default_factory=list)
    finished: RunFinished | None = None
    failed: RunFailed | None = None
    paused: RunPaused | None = None
    stopped: RunStopped | None = None
    updated: float = 0.0
    children: list[ChildStarted | ChildDone] = field(default_factory=list)  # a parent's
    appended: list[dict[str, Any]] = field(default_factory=list)  # tasks `runs append` added
    tasks: list[TaskStarted | TaskDone] = field(default_factory=list)  # task list progress
    # a run without tasks of its own: its implicit sample task ended (it finished before
    # tasks were appended); appended to it while it ran, they follow once it ends
    sampled: bool = False

    @property
    def status(self) -> str:
        """finished, failed, stopped, paused (``runs pause``), or unfinished (running now,
        or interrupted: resume it)."""
        if self.finished is not None:
            return "finished"
        if self.failed is not None:
            return "failed"
        if self.stopped is not None:
            return "stopped"
        return "paused" if self.paused is not None else "unfinished"

    @property
    def result(self) -> dict[str, Any] | None:
        """The finished run's result (chi2/dof None where undefined); None before it ends."""
        return defined_fit(self.finished.result) if self.finished is not None else None

    @property
    def last_snapshot(self) -> tuple[int, dict[str, Any] | None]:
        """(iterations done, snapshot) to continue from; (K, None) for a fresh start."""
        if self.iterations:
            last = self.iterations[-1]
            return last.iteration, last.snapshot
        start = self.created.from_iteration or 0
        return start, self.created.snapshot

    def snapshot_after(self, iteration: int) -> dict[str, Any] | None:
        """The snapshot after ``iteration`` iterations (None for 0 = the initial state)."""
        if iteration == 0:
            return None
        for item in self.iterations:
            if item.iteration == iteration:
                return item.snapshot
        if self.created.from_iteration == iteration and self.created.snapshot is not None:
            return self.created.snapshot
        done = [i.iteration for i in self.iterations]
        raise UserError(f"run {self.run_id} has no snapshot after iteration {iteration}; "
                        f"valid: 0 (from the start){''.join(f', {d}' for d in done)}")

    def summary(self) -> dict[str, Any]:
        """One JSON-ready line for ``runs list``."""
        last = self.iterations[-1] if self.iterations else None
        out: dict[str, Any] = {
            "run_id": self.run_id, "name": self.created.name, "status": self.status,
            "iterations": last.iteration if last else (self.created.from_iteration or 0),
            "samples": last.samples if last else 0,
            "estimate": last.estimate if last else None, "error": last.error if last else None,
            "parent": self.created.parent, "from_iteration": self.created.from_iteration,
            "kind": self.created.kind or "run", "updated": self.updated}
        if self.failed is not None:
            out["failure"] = self.failed.error
        return out


class RunStore(ReceiptStore[RunHistory]):
    """Receipt files of every run in one workspace state directory (``.mainboard/runs/<id>/``)."""

    FOLDER, LAYOUT, FIRST = "runs", "{id}/" + RECEIPTS_NAME, "run.created"

    @property
    def root(self) -> Path:
        """The folder holding one folder per run."""
        return self.directory

    def record(self, payload: Payload) -> None:
        """Write one receipt line to the run the payload names."""
        self.append(payload.run_id, payload)  # type: ignore[attr-defined]

    def fold(self, receipts: Receipts, errors: list[ReceiptError] | None) -> RunHistory | None:
        """The latest execution in one run's log: a ``run.created`` line starts each."""
        current: RunHistory | None = None
        for item in receipts.read(errors=errors):
            if isinstance(item, RunCreated):
                current = RunHistory(receipts.path.parent.name, item)
            elif current is None:
                continue
            elif isinstance(item, IterationDone):
                current.iterations.append(item)
            elif isinstance(item, RunResumed):
                current.resumed.append(item)
                current.iterations = [i for i in current.iterations
                                      if i.iteration <= item.from_iteration]
                current.failed = current.paused = current.stopped = None
            elif isinstance(item, RunPaused):
                current.paused = item
            elif isinstance(item, RunStopped):
                current.stopped = item
            elif isinstance(item, RunFinished):
                current.finished = item
            elif isinstance(item, TasksAppended):
                current.appended.extend(item.tasks)
                current.sampled = current.sampled or current.finished is not None
                current.finished = None  # a finished run continues with them
            elif isinstance(item, TaskStarted | TaskDone):
                current.tasks.append(item)
            elif isinstance(item, RunFailed):
                current.failed = item
            elif isinstance(item, ChildStarted | ChildDone):
                current.children.append(item)
        if current is not None:
            current.updated = receipts.path.stat().st_mtime
        return current

    def history(self, run_id: str, snapshots: bool = True) -> RunHistory | None:
        """The latest execution of ``run_id`` (None when it has no receipts);
        ``snapshots=False``: iteration snapshots left unread, as in :meth:`all`."""
        return self.view(run_id) if snapshots else self._fold(run_id, False)

    def all(self, snapshots: bool = True) -> Iterator[RunHistory]:
        """Every run with receipts, most recently updated first; ``snapshots=False`` leaves
        iteration snapshots unread (empty): enough for names, statuses and summaries, and
        ten times cheaper, snapshots being most of a log's bytes."""
        found = [h for run_id in self.ids() if (h := self._fold(run_id, snapshots)) is not None]
        yield from sorted(found, key=lambda h: h.updated, reverse=True)

    def _fold(self, run_id: str, snapshots: bool) -> RunHistory | None:
        if snapshots:
            return self.history(run_id)
        return self.fold(LazyReceipts(self.path(run_id)), None)

    def find(self, what: str) -> RunHistory:
        """A run by id, unique id prefix (like git's), or name when one run has it."""
        if not _SAFE.fullmatch(what):
            raise UnknownRun(f"no run matches {what!r}: run ids and names are letters, digits, "
                             "'.', '_' or '-'")
        exact = self.history(what) if (self.root / what).is_dir() else None
        if exact is not None:
            return exact
        runs = list(self.all(snapshots=False))  # names and ids only: then one full read
        by_prefix = [h for h in runs if h.run_id.startswith(what)]
        by_name = [h for h in runs if h.created.name == what]
        one = by_prefix if len(by_prefix) == 1 else by_name if not by_prefix else []
        if len(one) == 1:
            found = self.history(one[0].run_id)
            if found is None:  # removed since the scan
                raise UnknownRun(f"run {one[0].run_id} ({what!r}) was removed just now")
            return found
        if len(by_name) > 1 and not by_prefix:  # names are not unique: never guess
            ids = ", ".join(f"{h.run_id} ({h.status})" for h in by_name[:10])
            raise UnknownRun(f"run name {what!r} matches {len(by_name)} runs: {ids}; give an "
                             "id or a unique id prefix")
        known = ", ".join(f"{h.run_id} ({h.created.name})" for h in runs[:10]) or "none yet"
        if len(by_prefix) > 1:
            raise UnknownRun(f"run {what!r} is ambiguous: {len(by_prefix)} run ids start with "
                             f"it; give more characters (runs: {known})")
        raise UnknownRun(f"no run matches {what!r} in {self.root} (by id, id prefix or name); "
                         f"runs: {known}")


def spec_of(history: RunHistory) -> Mapping[str, Any]:
    """The run definition a history was created with."""
    return history.created.spec


__all__ = ["RunHistory", "RunStore", "UnknownRun", "clone_id", "spec_of"]
