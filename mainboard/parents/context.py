"""What a parent kind's loop is handed: the session, the parent, what ended before.

Apart from ``driver.py`` so the loops (``scan``, ``tune``, ``campaign``) import it and the
driver finds them by name: no loop imports the driver back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mainboard.integrators.spec_parents import ParentSpec
from mainboard.parents.children import Outcome
from mainboard.receipts import ChildDone
from mainboard.tasks.runner import Session

Report = Callable[[Outcome], None]
CHILD_NAME_ROOM = 40  # characters of the parent's name kept in a child's name


@dataclass
class Context:
    """What a kind's loop needs: the session, the parent, what ended before, the reporter."""

    s: Session
    spec: ParentSpec
    parent_id: str
    prior: list[ChildDone]
    report: Report | None
    file: str

    def child_name(self, label: str) -> str:
        """A child's run name: the parent's and the child's label."""
        return f"{self.spec.name[:CHILD_NAME_ROOM]}.{label}"


__all__ = ["CHILD_NAME_ROOM", "Context", "Report"]
