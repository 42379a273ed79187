"""Drive or resume a parent: the kind's loop on one session, the parent's receipts.

A parent starts through the one way into a run, ``tasks.runner.integrate``, which opens
its session and hands it to :func:`drive` (named there, ``PARENT_DRIVER``: this module
builds on the runner).

The parent is a run in the run store like any other (``.mainboard/runs/<id>/``): a
``run.created`` line with ``kind`` (scan, tune, campaign) and the resolved parent
definition, a ``parent.child`` line per child started and a ``parent.child_done`` line
per child ended, then ``run.finished`` with the kind's result. A resumed parent (its
coordinator died) reads those lines back: what ended is not run again, what was running
continues from its own last snapshot.
"""

from __future__ import annotations

from typing import Any

from mainboard.config import Config, load_config
from mainboard.errors import IntegrationFailed
from mainboard.integrators.plain import to_plain
from mainboard.integrators.spec_parents import ParentSpec, parse_parent
from mainboard.names import symbol_by_name
from mainboard.parents import table
from mainboard.parents.context import Context, Report
from mainboard.receipts import (
    ChildDone,
    RunCreated,
    RunFailed,
    RunFinished,
    RunPaused,
    RunResumed,
)
from mainboard.runs.store import RunHistory
from mainboard.tasks.paths import use_import_roots
from mainboard.tasks.runner import FLEET_PREPARE, Prepare, Session, session

# Each kind's loop, by name (celery's ALIASES + symbol_by_name): the loops import the
# context, never this module, and a new kind is one row here (and its table in spec.py).
LOOPS = {"scan": "mainboard.parents.scan:drive", "tune": "mainboard.parents.tune:drive",
         "campaign": "mainboard.parents.campaign:drive"}


def _drive(s: Session, spec: ParentSpec, history: RunHistory | None, report: Report | None,
           file: str) -> dict[str, Any]:
    parent_id = spec.run_id()
    if history is None:
        s.store.record(RunCreated(run_id=parent_id, name=spec.name, kind=spec.kind,
                                  spec=spec.model_dump(mode="json")))
        prior: list[ChildDone] = []
    else:
        s.store.record(RunResumed(run_id=parent_id, from_iteration=0))
        # a child the user paused is continued from its snapshot, as an interrupted one is
        prior = [c for c in history.children if isinstance(c, ChildDone) and c.status != "paused"]
    ctx = Context(s, spec, parent_id, prior, report, file)
    try:
        result = symbol_by_name(LOOPS[spec.kind])(ctx)
    except IntegrationFailed as exc:
        s.store.record(RunFailed(run_id=parent_id, error=str(exc)))
        raise
    ended = s.store.history(parent_id)
    assert ended is not None
    if any(row["status"] == "paused" for row in table.child_rows(ended)):
        s.store.record(RunPaused(run_id=parent_id, iteration=0))  # `runs resume` goes on
    else:
        s.store.record(RunFinished(run_id=parent_id, result=to_plain({"kind": spec.kind,
                                                                       **result})))
    done = s.store.history(parent_id)
    assert done is not None
    return table.view(done)


def drive(s: Session, spec: ParentSpec, history: RunHistory | None, report: Report | None,
          file: str) -> dict[str, Any]:
    """A parent on the session the runner opened for it (``runner.PARENT_DRIVER``): its
    table (:func:`table.view`). The id is the content's: a parent that finished before is
    only shown, one that was interrupted continues (as ``resume``)."""
    if history is not None and history.status == "finished":
        return table.view(history)
    return _drive(s, spec, history, report, file)


def resume_parent(history: RunHistory, workers: int | None = None, *,
                  config: Config | None = None, broker_url: str | None = None,
                  prepare: Prepare | str | None = FLEET_PREPARE, report: Report | None = None
                  ) -> dict[str, Any]:
    """Continue a parent (a run with a ``kind``: `runs resume` asks this of parents only)
    whose coordinator died: ended children stay, the rest run."""
    if history.status == "finished":
        return table.view(history)
    cfg = config if config is not None else load_config()
    use_import_roots(workspace=cfg.root)  # the children's python modules, found as at first
    spec = parse_parent(dict(history.created.spec), file=f"<parent {history.run_id}>")
    with session(history.run_id, cfg, broker_url, workers, prepare=prepare) as s:
        current = s.store.history(history.run_id) or history
        return _drive(s, spec, current, report, f"<parent {history.run_id}>")


__all__ = ["LOOPS", "drive", "resume_parent"]
