"""What the dashboard shows of runs, read from their receipts (``.mainboard/runs/``).

Receipts are the source because they outlive the broker: the dashboard can start after a
run and keeps showing it with Redis down. A page polls every second, so each run's fold is
cached under its receipts file's (mtime, size): an idle dashboard re-reads nothing, and a
list of 1,000 runs costs 1,000 ``stat`` calls per poll. The cache is filled in a background
thread as the server starts, so the first request finds it warm.
"""

from __future__ import annotations

import math
import os
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mainboard.errors import MainboardError, UnknownRun
from mainboard.integrators.accumulators import RunAccumulator, combine
from mainboard.integrators.integrands import make_integrand
from mainboard.runs.lazy import LazyReceipts
from mainboard.runs.observables import observables_of
from mainboard.runs.store import RECEIPTS_NAME, RunHistory, RunStore

ID_FORM = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def first_component(value: Any) -> float | None:
    """The plotted number of an estimate: a float, the real part of a complex, or the first
    component of a vector (NaN and inf become None: JSON has no NaN)."""
    if isinstance(value, Mapping):
        value = value.get("real")
    while isinstance(value, list | tuple) and value:
        value = value[0]
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


@dataclass
class _Entry:
    stamp: tuple[int, int]
    history: RunHistory | None
    times: list[float | None]
    receipts: LazyReceipts
    row: dict[str, Any] = field(default_factory=dict)
    decoded: bool = False  # the last iteration's snapshot is decoded into the history

    @property
    def snapshots(self) -> frozenset[int]:
        """Iterations whose snapshot the log holds."""
        return frozenset(self.receipts.raw_snapshots)

    def full(self) -> RunHistory | None:
        """The history with its last snapshot decoded (the one snapshot the pages read)."""
        if not self.decoded and self.history is not None and self.history.iterations:
            last = self.history.iterations[-1]
            last.snapshot = self.receipts.snapshot(last)
        self.decoded = True
        return self.history


class RunData:
    """Run histories of one state directory, folded once per change of their receipts file."""

    def __init__(self, state_dir: Path) -> None:
        self.store = RunStore(state_dir)
        self._root = str(self.store.root)
        self._cache: dict[str, _Entry] = {}
        self._lock = threading.Lock()
        self._warming: threading.Thread | None = None

    def warm_up(self) -> None:
        """Fold every run in a background thread now (the server starts it before printing
        its URL), so the first page is served from a warm cache: a request arriving
        meanwhile waits for this fold instead of doing the same work a second time."""
        self._warming = threading.Thread(target=self._warm, name="dashboard-warm-up",
                                         daemon=True)
        self._warming.start()

    def _warm(self) -> None:
        for run_id in self.ids():
            self.entry(run_id)

    def _path(self, run_id: str) -> str:
        return os.path.join(self._root, run_id, RECEIPTS_NAME)

    def stamp(self, run_id: str) -> tuple[int, int] | None:
        """(mtime ns, size) of the run's receipts: changes with every line written."""
        try:
            st = os.stat(self._path(run_id))
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size

    def ids(self) -> list[str]:
        """Ids of every run folder (a plain directory scan: this runs on every poll)."""
        try:
            with os.scandir(self._root) as found:
                return [e.name for e in found if ID_FORM.fullmatch(e.name) and e.is_dir()]
        except OSError:
            return []

    def entry(self, run_id: str) -> _Entry | None:
        """The cached fold of one run (refolded when its file changed); None without receipts."""
        stamp = self.stamp(run_id) if ID_FORM.fullmatch(run_id) else None
        if stamp is None:
            return None
        with self._lock:
            cached = self._cache.get(run_id)
        if cached is not None and cached.stamp == stamp:
            return cached
        receipts = LazyReceipts(Path(self._path(run_id)))
        history = self.store.fold(receipts, [])
        times = [receipts.times.get(i.iteration) for i in history.iterations] \
            if history is not None else []
        entry = _Entry(stamp, history, times, receipts)
        if history is not None:
            entry.row = summary_row(history, entry)
        with self._lock:
            self._cache[run_id] = entry
        return entry

    def histories(self) -> list[RunHistory]:
        """Every run with receipts, most recently updated first."""
        warming = self._warming
        if warming is not None and warming is not threading.current_thread():
            warming.join()
            self._warming = None
        found = [e.history for run_id in self.ids()
                 if (e := self.entry(run_id)) is not None and e.history is not None]
        return sorted(found, key=lambda h: h.updated, reverse=True)

    def resolve(self, ref: str) -> tuple[RunHistory, _Entry]:
        """The run ``ref`` names, as ``RunStore.find`` resolves it (id, unique id prefix, or
        a name one run has), from the cache; the store's UnknownRun when none or several."""
        entry = self.entry(ref)
        if entry is None or entry.history is None:
            runs = self.histories()
            by_prefix = [h for h in runs if h.run_id.startswith(ref)]
            by_name = [h for h in runs if h.created.name == ref]
            one = by_prefix if len(by_prefix) == 1 else by_name if not by_prefix else []
            entry = self.entry(one[0].run_id) if len(one) == 1 else None
        if entry is None or entry.full() is None:
            self.store.find(ref)  # raises UnknownRun saying why (none, ambiguous)
            raise UnknownRun(f"no run matches {ref!r}")  # it changed under us: say so
        return entry.full(), entry  # type: ignore[return-value]

    def row(self, h: RunHistory) -> dict[str, Any]:
        """The runs-list row of ``h`` (computed once per change of its receipts)."""
        entry = self.entry(h.run_id)
        return dict(entry.row) if entry is not None and entry.row else summary_row(h, None)


def summary_row(h: RunHistory, entry: _Entry | None) -> dict[str, Any]:
    """One row of the runs list: the store's summary plus chi2/dof and plain numbers."""
    row = h.summary()
    row["estimate_value"] = first_component(row["estimate"])
    row["error_value"] = first_component(row["error"])
    if h.result is not None:
        row["chi2_dof"] = first_component(h.result.get("chi2_dof"))
    else:
        if entry is not None:
            entry.full()  # an unfinished run's chi2/dof needs its last snapshot
        row["chi2_dof"] = _chi2_now(h.iterations[-1].snapshot) if h.iterations else None
    return row


class Chi2Memo:
    """The chi2/dof and Q series of one run kept between refreshes: the values after the
    first k iterations never change while the run appends, so a refresh combines only the
    new ones (each point combines every iteration before it: redone from scratch, a
    2,000-iteration run took 2.6 s per refresh). Any earlier iteration changed (the run
    was run again): recomputed from there."""

    def __init__(self) -> None:
        self.state: tuple[int, list[bytes], list[tuple[float | None, float | None]]] = \
            (0, [], [])  # discard, each iteration's (mean, var) bytes, the series


def _accumulator(snapshot: Mapping[str, Any]) -> Any:
    """The snapshot's RunAccumulator (None without a readable one)."""
    data = snapshot.get("accumulator") if isinstance(snapshot, Mapping) else None
    if not isinstance(data, Mapping):
        return None

    try:
        return RunAccumulator.restore(data)
    except (KeyError, TypeError, ValueError):
        return None


def _chi2_now(snapshot: Mapping[str, Any]) -> float | None:
    """chi2/dof after the last iteration (the runs list: one combine, not the series)."""
    acc = _accumulator(snapshot)
    return _defined(acc.result())[0] if acc and acc.iterations else None


def _defined(comb: Any) -> tuple[float | None, float | None]:
    """(chi2/dof, Q) of a combination; both None without degrees of freedom (one
    iteration), shown "-"."""
    return first_component(comb.chi2_dof), first_component(comb.q_total)


def _chi2_series(snapshot: Mapping[str, Any], memo: Chi2Memo | None = None
                 ) -> list[tuple[float | None, float | None]]:
    """(chi2/dof, Q) after each iteration, from the accumulator in a snapshot."""
    acc = _accumulator(snapshot)
    if acc is None:
        return []
    marks = [e.mean.tobytes() + e.var.tobytes() for e in acc.iterations]
    discard, seen, done = memo.state if memo is not None else (0, [], [])
    same = 0
    if discard == acc.discard:
        while same < min(len(seen), len(marks)) and seen[same] == marks[same]:
            same += 1
    out = done[:same]
    for k in range(same + 1, len(acc.iterations) + 1):
        kept = acc.iterations[acc.discard:k] or acc.iterations[k - 1:k]
        out.append(_defined(combine(kept)))
    if memo is not None:
        memo.state = (acc.discard, marks, out)  # one assignment: safe across threads
    return out


def per_iteration(snapshot: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each iteration's own estimate and error (component 0), from the accumulator."""
    data = snapshot.get("accumulator") if isinstance(snapshot, Mapping) else None
    items = data.get("iterations") if isinstance(data, Mapping) else None
    out = []
    for item in items or []:
        var = first_component(item.get("var"))
        out.append({"mean": first_component(item.get("mean")),
                    "error": math.sqrt(var) if var is not None and var >= 0 else None})
    return out


def exact_of(h: RunHistory) -> float | None:
    """The exact value: the finished result's, else the built-in integrand's (no user code)."""
    if h.finished is not None:
        return first_component(h.finished.result.get("exact"))
    spec = h.created.spec
    integrand = spec.get("integrand") or {}
    if integrand.get("kind") in ("python", "process", None):
        return None
    try:
        domain = spec.get("domain") or {}
        built = make_integrand(integrand, int(domain.get("continuous", 0)),
                               list(domain.get("discrete") or []))
    except Exception:  # a spec this version cannot build: no exact line, nothing worse
        return None
    return first_component(built.exact)


def series(h: RunHistory, times: list[float | None], memo: Chi2Memo | None = None
           ) -> list[dict[str, Any]]:
    """One point per iteration: cumulative estimate and error, the iteration's own estimate,
    chi2/dof and Q so far, samples/s of that iteration, and when it was recorded."""
    last = h.iterations[-1].snapshot if h.iterations else {}
    own = per_iteration(last)
    chi2 = _chi2_series(last, memo)
    points = []
    start = h.created.snapshot or {}
    prev_samples, prev_wall = int(start.get("samples") or 0), 0.0
    for n, item in enumerate(h.iterations):
        spent = (item.wall_s - prev_wall) if item.wall_s is not None else 0.0
        rate = (item.samples - prev_samples) / spent if spent > 0 else None
        idx = item.iteration - 1
        point = {"iteration": item.iteration, "samples": item.samples,
                 "estimate": first_component(item.estimate), "error": first_component(item.error),
                 "own": own[idx]["mean"] if 0 <= idx < len(own) else None,
                 "own_error": own[idx]["error"] if 0 <= idx < len(own) else None,
                 "chi2_dof": chi2[idx][0] if 0 <= idx < len(chi2) else None,
                 "q": chi2[idx][1] if 0 <= idx < len(chi2) else None,
                 "samples_per_s": rate,
                 "time": times[n] if n < len(times) else None}
        points.append(point)
        prev_samples, prev_wall = item.samples, item.wall_s or prev_wall
    return points


def diagnostics(h: RunHistory) -> dict[str, Any]:
    """Sampler diagnostics of the latest snapshot: the VEGAS grid of a built-in sampler (bin
    edges per dimension), and ``get_diagnostics`` of a process sampler when the snapshot
    holds them."""
    last = h.iterations[-1].snapshot if h.iterations else (h.created.snapshot or {})
    sampler = last.get("sampler") if isinstance(last, Mapping) else None
    out: dict[str, Any] = {"kind": None, "grid": None, "reported": None}
    if not isinstance(sampler, Mapping):
        return out
    out["kind"] = sampler.get("kind")
    state = sampler.get("state")
    edges = state.get("edges") if isinstance(state, Mapping) else None
    while isinstance(edges, list) and edges and isinstance(edges[0], list) \
            and edges[0] and isinstance(edges[0][0], list):
        edges = edges[0]  # (1, d, bins + 1): the one grid table, per dimension
    if isinstance(edges, list) and edges and isinstance(edges[0], list):
        out["grid"] = edges
    reported = last.get("diagnostics", sampler.get("diagnostics"))
    if reported is not None:
        out["reported"] = reported
    return out


def observables(h: RunHistory) -> dict[str, Any] | None:
    """The run's histograms and moments from its latest snapshot (None: it has none; a run
    file this version cannot read shows none rather than breaking the page)."""
    try:
        return observables_of(h)
    except (MainboardError, KeyError, TypeError, ValueError):
        return None


def lineage(data: RunData, h: RunHistory) -> dict[str, Any]:
    """Where the run came from (its parent and branch iteration, its resumes) and its clones."""
    clones = [{"run_id": c.run_id, "name": c.created.name,
               "from_iteration": c.created.from_iteration, "status": c.status}
              for c in data.histories() if c.created.parent == h.run_id]
    return {"parent": h.created.parent, "from_iteration": h.created.from_iteration,
            "resumed_from": [r.from_iteration for r in h.resumed], "clones": clones}


def snapshots(h: RunHistory, held: frozenset[int]) -> list[dict[str, Any]]:
    """The snapshots a resume or clone can start from: one after each iteration."""
    out: list[dict[str, Any]] = [{"iteration": i.iteration, "samples": i.samples}
                                 for i in h.iterations if i.iteration in held or i.snapshot]
    if h.created.snapshot is not None and h.created.from_iteration:
        out.insert(0, {"iteration": h.created.from_iteration,
                       "samples": h.created.snapshot.get("samples"), "inherited": True})
    return out


__all__ = ["RunData", "diagnostics", "exact_of", "first_component", "observables",
           "lineage", "per_iteration", "series", "snapshots", "summary_row"]
