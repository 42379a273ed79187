"""``[campaign]``: a total sum c_i I_i over child runs, samples sent where the variance is.

Each child first gets ``min_samples_per_child``. Then, until the total's error meets
``stop.absolute_error`` or the samples given out reach ``stop.max_total_samples``, the
idle child with the largest contribution c_i^2 s_i^2 to the total variance gets
``step_samples`` more (``allocation = "largest_variance"``), at most ``max_active_runs``
children running at once. A child given more samples continues from its last snapshot
(its sampler keeps what it learned; its estimate keeps every sample), so a child run is
one run however many times it is extended. The total's error is propagated from the
children's: sqrt(sum c_i^2 s_i^2).
"""

from __future__ import annotations

from typing import Any

from mainboard.errors import IntegrationFailed
from mainboard.integrators.spec_parents import CampaignSpec, apply_point
from mainboard.parents.children import Child, Children, Outcome
from mainboard.parents.context import Context
from mainboard.parents.table import total
from mainboard.receipts import ChildStarted


class Allocation:
    """The campaign's books: each child's latest result and the samples given to it."""

    def __init__(self, ctx: Context, camp: CampaignSpec) -> None:
        self.ctx, self.camp = ctx, camp
        self.coeff = {c.name: float(c.coefficient) for c in camp.children}
        self.runs = {c.name: c.run for c in camp.children}
        self.rows: dict[str, dict[str, Any]] = {}
        self.done: dict[str, int] = {}  # budget of each child's latest result
        self.given: dict[str, int] = {}  # budget each child was last given
        self.active: set[str] = set()

    def child(self, name: str, samples: int) -> Child:
        """The child run of ``name`` with ``samples`` as its budget."""
        run = self.runs[name]
        assert isinstance(run, dict)
        spec = apply_point(run, {}, samples=samples, name=self.ctx.child_name(name),
                           file=f"{self.ctx.file} campaign child {name}")
        return Child(name, {"coefficient": self.coeff[name]}, spec, budget=samples)

    def absorb(self, outcome: Outcome) -> None:
        """A child's allocation ended: its row counts from now on; a failure ends the
        campaign (its total would be wrong)."""
        name = outcome.child.label
        self.active.discard(name)
        if outcome.status != "finished":
            raise IntegrationFailed(f"campaign {self.ctx.parent_id}: child {name} "
                                    f"({outcome.run_id}) failed: {outcome.error}")
        self.rows[name] = {**outcome.row, "label": name}
        self.done[name] = int(outcome.child.budget or 0)

    def total(self) -> dict[str, Any]:
        """The weighted sum so far and its propagated error."""
        return total(list(self.rows.values()), self.coeff)

    def stop_reason(self) -> str | None:
        """Why no more samples are given out (None: give more)."""
        stop = self.camp.stop
        if stop.absolute_error is not None and len(self.rows) == len(self.coeff) \
                and self.total()["error"] <= stop.absolute_error:
            return "absolute_error"
        if stop.max_total_samples is not None and \
                sum(self.given.values()) >= stop.max_total_samples:
            return "max_total_samples"
        return None

    def next(self) -> tuple[str, int] | None:
        """The idle child with the largest variance contribution and its new budget."""
        if self.stop_reason() is not None:
            return None
        idle = [n for n in self.rows if n not in self.active]
        if not idle:
            return None
        name = max(idle, key=lambda n: (self.coeff[n] * float(self.rows[n]["error"])) ** 2)
        more = self.camp.step
        if self.camp.stop.max_total_samples is not None:
            more = min(more, self.camp.stop.max_total_samples - sum(self.given.values()))
        return name, self.given[name] + more


def _books(ctx: Context, camp: CampaignSpec) -> tuple[Allocation, list[tuple[str, int]]]:
    """The books after what the parent's receipts say (a resumed campaign), and the
    allocations to start first: those in flight when it stopped, then first ones."""
    books = Allocation(ctx, camp)
    for d in ctx.prior:
        if d.status == "finished" and d.budget is not None:
            books.rows[d.label] = {**d.result, "label": d.label}
            books.done[d.label] = books.given[d.label] = d.budget
    history = ctx.s.store.history(ctx.parent_id)
    for c in (history.children if history else []):
        if isinstance(c, ChildStarted) and c.budget is not None:
            books.given[c.label] = max(books.given.get(c.label, 0), c.budget)
    queue = [(n, b) for n, b in books.given.items() if b > books.done.get(n, 0)]
    queue += [(c.name, camp.min_samples_per_child) for c in camp.children
              if c.name not in books.given]
    return books, queue


def drive(ctx: Context) -> dict[str, Any]:
    """Give out samples until the stop rule holds; the total and each child's share."""
    camp = ctx.spec.campaign
    assert camp is not None
    books, queue = _books(ctx, camp)
    with Children(ctx.s, ctx.parent_id, camp.max_active_runs, ctx.report) as pool:
        while True:
            while pool.free > 0:
                if not queue:
                    nxt = books.next()
                    if nxt is None:
                        break
                    queue.append(nxt)
                name, samples = queue.pop(0)
                books.given[name] = samples
                books.active.add(name)
                found = pool.start(books.child(name, samples))
                if found is not None:
                    books.absorb(found)
            if not pool.active:
                break
            for outcome in pool.wait():
                books.absorb(outcome)
    return {**books.total(), "stop_reason": books.stop_reason() or "max_total_samples",
            "children": {n: books.done.get(n) for n in books.coeff}}


__all__ = ["Allocation", "drive"]
