"""A parent run's result table, folded from its receipts (no Celery, no Redis).

Why one fold for every reader: ``runs show`` (text, ``--json``, ``--csv``), the dashboard
and the drivers themselves (the best trial, the campaign total) read the same rows, so a
table printed while the parent runs, after it was killed, or once it finished always
agrees. A row is the latest ``parent.child_done`` of each child, or its latest
``parent.child`` while it runs.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping, Sequence
from typing import Any

from mainboard.receipts import ChildStarted
from mainboard.runs.store import RunHistory

COLUMNS = ("estimate", "error", "chi2_dof", "samples", "wall_s")


def scalar(value: Any) -> float | None:
    """One number for a result value: a vector's first component, a complex modulus."""
    if isinstance(value, list):
        return scalar(value[0]) if value else None
    if isinstance(value, Mapping) and "real" in value:
        return math.hypot(float(value["real"]), float(value["imag"]))
    if isinstance(value, int | float):
        return float(value)
    return None


def objective(row: Mapping[str, Any], metric: str) -> float | None:
    """A trial's score; None when the row cannot give it (a failed trial, a zero estimate).

    variance is that of the estimate (error squared); time_normalized_variance multiplies it
    by the trial's wall seconds: equal budgets, so lower means more precision per second.
    """
    est, err, wall = scalar(row.get("estimate")), scalar(row.get("error")), row.get("wall_s")
    if err is None:
        return None
    value = {"relative_error": (abs(err / est) if est else None),
             "variance": err * err,
             "time_normalized_variance": err * err * float(wall) if wall is not None else None,
             "error": err,
             "wall_s": float(wall) if wall is not None else None}[metric]
    return value if value is not None and math.isfinite(value) else None


def child_rows(history: RunHistory) -> list[dict[str, Any]]:
    """One row per child in the order they first started: its latest state."""
    rows: dict[str, dict[str, Any]] = {}
    for item in history.children:
        row = rows.setdefault(item.label, {"label": item.label, "child": item.child,
                                           "point": dict(item.point)})
        if isinstance(item, ChildStarted):
            row.update(status="running", budget=item.budget)
        else:  # ChildDone
            row.update({k: item.result.get(k) for k in COLUMNS}, status=item.status,
                       budget=item.budget, failure=item.error)
    return list(rows.values())


def total(rows: Sequence[Mapping[str, Any]], coefficients: Mapping[str, float]
          ) -> dict[str, Any]:
    """Sum c_i I_i with its error sqrt(sum c_i^2 s_i^2) over the children that have a result."""
    est = var = 0.0
    samples = 0
    for row in rows:
        e, s = scalar(row.get("estimate")), scalar(row.get("error"))
        if e is None or s is None:
            continue
        c = coefficients[row["label"]]
        est += c * e
        var += (c * s) ** 2
        samples += int(row.get("samples") or 0)
    return {"estimate": est, "error": math.sqrt(var), "samples": samples}


def view(history: RunHistory) -> dict[str, Any]:
    """What ``runs show PARENT`` prints: kind, status, rows and the kind's summary."""
    spec = history.created.spec
    kind = history.created.kind or "run"
    rows = child_rows(history)
    out: dict[str, Any] = {"run_id": history.run_id, "name": history.created.name,
                           "kind": kind, "status": history.status, "rows": rows}
    if history.failed is not None:
        out["failure"] = history.failed.error
    if kind == "scan":
        out["parameters"] = [p["name"] for p in spec["scan"]["parameters"]]
    elif kind == "tune":
        goal = spec["tune"]["objective"]
        out.update(metric=goal["metric"], mode=goal["mode"],
                   parameters=[p["name"] for p in spec["tune"]["parameters"]])
        for row in rows:
            row["objective"] = objective(row, goal["metric"]) \
                if row["status"] == "finished" else None
        scored = [r for r in rows if r["objective"] is not None]
        pick = min if goal["mode"] == "minimize" else max
        out["best"] = pick(scored, key=lambda r: r["objective"]) if scored else None
    else:  # campaign
        coeff = {c["name"]: float(c["coefficient"]) for c in spec["campaign"]["children"]}
        for row in rows:
            row["coefficient"] = coeff[row["label"]]
            err = scalar(row.get("error"))
            row["variance"] = None if err is None else (coeff[row["label"]] * err) ** 2
        out["parameters"] = []
        out["total"] = total(rows, coeff)
        if history.finished is not None:
            out["total"]["stop_reason"] = history.finished.result.get("stop_reason")
    return out


def _fmt(value: Any, digits: int = 6) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def _point(row: Mapping[str, Any], names: Sequence[str]) -> list[str]:
    return [_fmt(row["point"].get(n)) for n in names]


def text(data: Mapping[str, Any]) -> str:
    """The table as lines for a terminal."""
    names = list(data.get("parameters", []))
    lines = [f"{data['kind']:10} {data['run_id']} ({data['name']})",
             f"status     {data['status']}" + (f": {data['failure']}" if data.get("failure")
                                               else "")]
    head = ["child", *(["name", "coefficient"] if data["kind"] == "campaign" else names),
            "estimate", "error", "chi2/dof", "samples", "wall s", "status"]
    if data["kind"] == "tune":
        head.insert(-1, data["metric"])
    table = [head]
    for row in data["rows"]:
        cells = [row["label"]] + ([row["label"], _fmt(row["coefficient"])]
                                  if data["kind"] == "campaign" else _point(row, names))
        cells += [_fmt(row.get(k), 10 if k == "estimate" else 3) for k in COLUMNS[:3]]
        cells += [_fmt(row.get("samples")), _fmt(row.get("wall_s"), 3)]
        if data["kind"] == "tune":
            cells.append(_fmt(row.get("objective"), 4))
        cells.append(row["status"] + (f" ({row['failure']})" if row.get("failure") else ""))
        table.append(cells)
    widths = [max(len(r[i]) for r in table) for i in range(len(head) - 1)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + r[-1]
              for r in table]
    if data["kind"] == "tune":
        best = data.get("best")
        lines.append("best       " + (f"{best['label']} {data['metric']} "
                                      f"{_fmt(best['objective'], 6)} at {best['point']}"
                                      if best else "- (no trial finished)"))
    if data["kind"] == "campaign":
        t = data["total"]
        lines.append(f"total      {_fmt(t['estimate'], 10)} ± {_fmt(t['error'], 3)}  "
                     f"({t['samples']:,} samples" + (f", stopped by {t['stop_reason']}"
                                                     if t.get("stop_reason") else "") + ")")
    return "\n".join(lines)


def to_csv(data: Mapping[str, Any]) -> str:
    """One line per child: label, point (or name and coefficient), result columns, status."""
    names = list(data.get("parameters", []))
    extra = ["coefficient"] if data["kind"] == "campaign" else names
    tail = ["objective"] if data["kind"] == "tune" else []
    buf = io.StringIO()
    out = csv.writer(buf, lineterminator="\n")
    out.writerow(["child", "run_id", *extra, *COLUMNS, *tail, "status", "failure"])
    for row in data["rows"]:
        cells = [row["coefficient"]] if data["kind"] == "campaign" else \
            [row["point"].get(n) for n in names]
        out.writerow([row["label"], row["child"], *cells, *(row.get(k) for k in COLUMNS),
                      *(row.get(k) for k in tail), row["status"], row.get("failure") or ""])
    return buf.getvalue()


__all__ = ["child_rows", "objective", "scalar", "text", "to_csv", "total", "view"]
