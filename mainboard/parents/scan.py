"""``[scan]``: the full grid of the parameters' values, one child run per point.

Why all points up front: the grid is fixed, so every child is known (and was validated
when the file was read); a resumed scan starts the same list and each point that ended
before is taken from the receipts.
"""

from __future__ import annotations

from typing import Any

from mainboard.parents.children import Child, run_all
from mainboard.parents.context import Context


def drive(ctx: Context) -> dict[str, Any]:
    """Run every grid point, ``max_concurrent_runs`` at a time; the rows in grid order."""
    scan = ctx.spec.scan
    assert scan is not None
    children = []
    for i, point in enumerate(scan.points()):
        label = f"p{i}"
        children.append(Child(label, point, ctx.spec.child_spec(
            point, name=ctx.child_name(label), file=ctx.file)))
    outcomes = run_all(ctx.s, ctx.parent_id, children, scan.max_concurrent_runs, ctx.report,
                       ctx.prior)
    return {"points": len(children),
            "failed": sum(o.status == "failed" for o in outcomes)}


__all__ = ["drive"]
