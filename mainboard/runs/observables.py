"""A run's histograms and moments, read from its stored snapshot, in the formats people plot.

The last iteration snapshot in the run's receipts holds every kept iteration's per-bin
estimates (``accumulator.observables``); :func:`observables_of` combines them as the run
does. :func:`to_hwu` writes the HwU text format of MadGraph5_aMC@NLO (``##&`` header, one
``<histogram> N "title |X_AXIS@LIN |Y_AXIS@LIN |TYPE@..."`` block per histogram and
component, ``<\\histogram>``), which MC physicists load into their plotting tools; CSV has
one row per bin and component.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from mainboard.errors import UserError

if TYPE_CHECKING:
    from mainboard.runs.store import RunHistory

FORMATS = ("hwu", "csv", "json")
HWU_HEADER = "##& xmin & xmax & central value & dy &"
CSV_COLUMNS = ("histogram", "of", "component", "bin", "xmin", "xmax", "estimate", "error",
               "hits")


def observables_of(history: RunHistory) -> dict[str, Any] | None:
    """The run's histograms and moments so far (None: it has none, or no iteration yet)."""
    # lazy: start-up time, numpy only for a run with observables (`runs show` reads this)
    from mainboard.integrators.observables import run_observables

    spec = history.created.spec
    accumulator = spec.get("accumulator") or {}
    if not accumulator.get("histograms") and not accumulator.get("moments"):
        return None
    _, snapshot = history.last_snapshot
    if not snapshot:
        return None
    return run_observables(spec, snapshot["accumulator"].get("observables"))


def require(history: RunHistory) -> dict[str, Any]:
    """:func:`observables_of`, or a one-line UserError saying why there is nothing."""
    found = observables_of(history)
    if found is not None:
        return found
    spec = history.created.spec.get("accumulator") or {}
    if not spec.get("histograms") and not spec.get("moments"):
        raise UserError(f"run {history.run_id} has no histograms or moments: add "
                        "[[accumulator.histograms]] {name, of, bins, range} or "
                        "[accumulator] moments = K to its run file")
    raise UserError(f"run {history.run_id} has no finished iteration yet: no histograms "
                    "to show")


def rows(obs: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """One row per histogram, component and bin."""
    for h in obs["histograms"]:
        edges = h["edges"]
        for c, label in enumerate(obs["components"]):
            for b in range(h["bins"]):
                yield {"histogram": h["name"], "of": h["of"], "component": label, "bin": b,
                       "xmin": edges[b], "xmax": edges[b + 1],
                       "estimate": h["estimate"][c][b], "error": h["error"][c][b],
                       "hits": h["hits"][b]}


def _title(h: dict[str, Any], label: str, components: int) -> str:
    return h["name"] if components == 1 else f"{h['name']} {label}"


def to_hwu(obs: dict[str, Any]) -> str:
    """The HwU text of every histogram (one block per real component when there are several):
    bin edges, the bin's integral and its error."""
    out = [HWU_HEADER, ""]
    labels = obs["components"]
    for h in obs["histograms"]:
        for c, label in enumerate(labels):
            out.append(f'<histogram> {h["bins"]} "{_title(h, label, len(labels))} '
                       f'|X_AXIS@LIN |Y_AXIS@LIN |TYPE@MAINBOARD"')
            edges = h["edges"]
            out += [f"  {edges[b]:+.16e}   {edges[b + 1]:+.16e}   "
                    f"{h['estimate'][c][b]:+.16e}   {h['error'][c][b]:+.16e}"
                    for b in range(h["bins"])]
            out += ["<\\histogram>", ""]
    return "\n".join(out)


def to_csv(obs: dict[str, Any]) -> str:
    """Bins as CSV rows (floats written with repr: they read back exactly)."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in rows(obs):
        writer.writerow({k: repr(v) if isinstance(v, float) else v for k, v in row.items()})
    return buf.getvalue()


def export(obs: dict[str, Any], fmt: str) -> str:
    """The observables as ``fmt`` (one of FORMATS)."""
    if fmt == "hwu":
        return to_hwu(obs)
    if fmt == "csv":
        return to_csv(obs)
    return json.dumps(obs, allow_nan=False, indent=1) + "\n"


__all__ = ["CSV_COLUMNS", "FORMATS", "HWU_HEADER", "export", "observables_of", "require",
           "rows", "to_csv", "to_hwu"]
