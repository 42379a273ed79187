"""How `integrate` and `runs` show a run: a progress bar on stderr, the result on stdout.

Shared by both verbs so a result always looks the same. Numbers are formatted here and
nowhere else; ``--json`` output goes through :func:`result_json` (one object, stable keys).
"""

from __future__ import annotations

import json
import math
import sys
from types import TracebackType
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:  # imported lazily: numpy and Celery cost every other verb startup time
    from rich.progress import Progress as Bar

    from mainboard.integrators.driver import RunResult
    from mainboard.tasks.coordinator import Progress

JSON_KEYS = ("run_id", "name", "estimate", "error", "chi2_dof", "q", "samples", "iterations",
             "nan_count", "wall_s", "exact", "stop_reason")


def _num(value: Any, digits: int = 10) -> str:
    """A float with ``digits`` significant digits; complex as a+bj; lists element-wise."""
    if isinstance(value, complex):
        return f"{_num(value.real, digits)} {'+' if value.imag >= 0 else '-'} " \
               f"{_num(abs(value.imag), digits)}i"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_num(v, digits) for v in value) + "]"
    if value is None:
        return "-"
    return f"{float(value):.{digits}g}"


def pm(estimate: Any, error: Any) -> str:
    """``estimate ± error`` for scalar, complex (per part) and vector values."""
    if isinstance(estimate, complex):
        return f"({_num(estimate.real)} ± {_num(error.real, 2)}) + " \
               f"({_num(estimate.imag)} ± {_num(error.imag, 2)})i"
    if isinstance(estimate, list):
        return "[" + ", ".join(pm(e, s) for e, s in zip(estimate, error, strict=True)) + "]"
    if isinstance(estimate, dict):  # {"real", "imag"} read back from JSON receipts
        return pm(complex(estimate["real"], estimate["imag"]),
                  complex(error["real"], error["imag"]))
    return f"{_num(estimate)} ± {_num(error, 2)}"


def _pull(result: RunResult) -> str:
    """How many standard errors the estimate is off the exact value (scalars only)."""
    if not isinstance(result.exact, float) or not isinstance(result.estimate, float):
        return ""
    if not result.error or not math.isfinite(result.error):
        return ""
    return f"  ({(result.estimate - result.exact) / result.error:+.2f} sigma)"


def result_text(result: RunResult) -> str:
    """The human-readable result block."""
    rate = result.samples / result.wall_s if result.wall_s else float("nan")
    lines = [f"run       {result.run_id} ({result.name})",
             f"estimate  {pm(result.estimate, result.error)}"]
    if result.exact is not None:
        lines.append(f"exact     {_num(result.exact)}{_pull(result)}")
    q = "-" if math.isnan(result.q) else f"{result.q:.3g}"
    lines += [f"chi2/dof  {result.chi2_dof:.3g}   Q {q}",
              f"samples   {result.samples:,} in {result.iterations} iterations, "
              f"{result.nan_count} non-finite, stopped by {result.stop_reason}"]
    if result.wall_s is not None:
        lines.append(f"wall      {result.wall_s:.2f} s ({rate:,.0f} samples/s)")
    return "\n".join(lines)


def result_json(result: RunResult) -> str:
    """One JSON object; complex values as {"real", "imag"}, ``exact`` null when unknown."""
    from mainboard.integrators.plain import to_plain

    data = result.to_dict()
    data.setdefault("exact", None)
    ordered = {k: data[k] for k in JSON_KEYS if k in data}
    ordered.update({k: v for k, v in data.items() if k not in ordered})
    return json.dumps(to_plain(ordered), allow_nan=False)


def emit(result: RunResult, as_json: bool) -> None:
    """Print the result on stdout."""
    click.echo(result_json(result) if as_json else result_text(result))


class ProgressBar:
    """A rich progress bar on stderr: iteration, samples, estimate ± error, samples/s.

    When stderr is not a terminal (a log, a pipe) each iteration is one plain line instead.
    """

    def __init__(self, name: str, max_samples: int | None) -> None:
        self.name, self.total = name, max_samples
        self.live = sys.stderr.isatty()
        self.bar: Bar | None = None
        self.task: Any = None

    def __enter__(self) -> ProgressBar:
        if not self.live:
            return self
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(TextColumn("{task.description}"), BarColumn(),
                            TextColumn("{task.fields[stats]}"), TimeElapsedColumn(),
                            console=Console(stderr=True), transient=False)
        self.bar.start()
        self.task = self.bar.add_task(f"{self.name}: starting", total=self.total,
                                      stats="waiting for the first iteration")
        return self

    def update(self, p: Progress) -> None:
        """Called by the coordinator after every iteration."""
        stats = (f"{p.samples:,} samples  {pm(p.estimate, p.error)}  "
                 f"{p.samples_per_s:,.0f} samples/s")
        if self.bar is None:
            click.echo(f"{self.name}: iteration {p.iteration}: {stats}", err=True)
            return
        self.bar.update(self.task, completed=p.samples,
                        description=f"{self.name}: iteration {p.iteration}", stats=stats)

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.bar is not None:
            self.bar.stop()


__all__ = ["ProgressBar", "emit", "pm", "result_json", "result_text"]
