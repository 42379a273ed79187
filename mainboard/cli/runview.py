"""How `integrate` and `runs` show a run: a progress bar on stderr, the result on stdout.

Shared by both verbs so a result always looks the same; ``make_bar`` and ``eta_text``
also draw `batch watch`'s bar, so every long wait shows its ETA the same way. Numbers are formatted here and
nowhere else; ``--json`` output goes through :func:`result_json` (one object, stable keys).
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any

from mainboard.cli import common

if TYPE_CHECKING:  # imported lazily: numpy and Celery cost every other verb startup time
    from rich.console import Console
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


# a run halted by `runs pause` / `runs stop` carries the status, not a stop rule
_HALTED = {"paused": "paused by the user (`mainboard runs resume` goes on)",
           "stopped": "stopped by the user"}


def _ending(reason: str) -> str:
    """How the run ended, in words: the stop rule that fired, or the user's halt."""
    return _HALTED.get(reason, f"stopped by {reason}")


def result_text(result: RunResult) -> str:
    """The human-readable result block."""
    rate = result.samples / result.wall_s if result.wall_s else float("nan")
    lines = [f"run       {result.run_id} ({result.name})",
             f"estimate  {pm(result.estimate, result.error)}"]
    if result.exact is not None:
        lines.append(f"exact     {_num(result.exact)}{_pull(result)}")
    training = f" (+{result.training_samples:,} training)" if result.training_samples else ""
    q = None if math.isnan(result.q) else result.q
    lines += [f"chi2/dof  {_num(result.chi2_dof, 3)}   Q {_num(q, 3)}",
              f"samples   {result.samples:,} in {result.iterations} iterations{training}, "
              f"{result.nan_count} non-finite, {_ending(result.stop_reason)}"]
    if result.wall_s is not None:
        lines.append(f"wall      {result.wall_s:.2f} s ({rate:,.0f} samples/s)")
    return "\n".join(lines)


def fit_text(result: Mapping[str, Any]) -> str:
    """``runs show``'s result line: estimate ± error, chi2/dof and Q ("-" where undefined)."""
    estimate = "-" if result.get("estimate") is None else pm(result["estimate"], result["error"])
    return f"{estimate}   chi2/dof {_num(result.get('chi2_dof'), 3)}   Q " \
           f"{_num(result.get('q'), 3)}"


def result_json(result: RunResult) -> str:
    """One JSON object; complex values as {"real", "imag"}, ``exact`` null when unknown."""
    from mainboard.integrators.plain import to_plain

    data = result.to_dict()
    data.setdefault("exact", None)
    ordered = {k: data[k] for k in JSON_KEYS if k in data}
    ordered.update({k: v for k, v in data.items() if k not in ordered})
    return json.dumps(to_plain(ordered), allow_nan=False)


def diagnostics_text(diag: dict[str, Any]) -> str:
    """One line of a sampler's diagnostics (integrators.diagnostics) for ``runs show``."""
    parts = [f"{diag.get('kind')} v{diag.get('version')}"]
    grid = diag.get("grid")
    if grid:
        parts.append("grid width ratio " + "/".join(f"{r:.3g}" for r in grid["width_ratio"]))
    channels = diag.get("channel_weights")
    if channels:
        parts.append("channels " + " ".join(f"{c}:{w:.3f}" for c, w in channels["top"].items()))
    if diag.get("process") is not None:
        parts.append(json.dumps(diag["process"], sort_keys=True)[:200])
    return ", ".join(parts)


def histograms_text(obs: dict[str, Any]) -> str:
    """``runs show --histograms``: each histogram's bins (edges, estimate ± error, hits) and
    the moments of f, one line each."""
    labels = obs["components"]

    def value(est: list[list[float]], err: list[list[float]], i: int) -> str:
        if len(labels) == 1:
            return pm(est[0][i], err[0][i])
        return ", ".join(f"{label} {pm(est[c][i], err[c][i])}" for c, label in enumerate(labels))

    lines = []
    for h in obs["histograms"]:
        lines.append(f"histogram  {h['name']} of {h['of']}: {h['bins']} bins on "
                     f"[{_num(h['range'][0])}, {_num(h['range'][1])}], "
                     f"{sum(h['hits']):,} hits")
        edges = h["edges"]
        lines += [f"  [{_num(edges[b], 6):>12}, {_num(edges[b + 1], 6):>12}]  "
                  f"{value(h['estimate'], h['error'], b)}  ({h['hits'][b]:,})"
                  for b in range(h["bins"])]
    moments = obs.get("moments")
    if moments:
        lines.append("moments    integral of f^k")
        lines += [f"  k={k}  {value(moments['estimate'], moments['error'], i)}"
                  for i, k in enumerate(moments["orders"])]
    return "\n".join(lines)


def emit(result: RunResult, as_json: bool) -> None:
    """Print the result on stdout."""
    common.echo(result_json(result) if as_json else result_text(result))


def eta_text(seconds: float | None) -> str:
    """``ETA 0:01:05`` (``ETA -`` while unknown): the time left, the same on every bar."""
    if seconds is None or not math.isfinite(seconds):
        return "ETA -"
    minutes, secs = divmod(max(0, round(seconds)), 60)
    return f"ETA {minutes // 60}:{minutes % 60:02d}:{secs:02d}"


def eta_by_rate(done: float, total: float, elapsed: float) -> float | None:
    """Seconds left when ``done`` of ``total`` took ``elapsed`` seconds at a steady rate."""
    if done <= 0 or elapsed <= 0:
        return None
    return max(0.0, elapsed * (total - done) / done)


def make_bar(console: Console) -> Bar:
    """A rich bar (not started): description, bar, ``stats`` and ``eta`` fields, time elapsed."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(),
                    TextColumn("{task.fields[stats]}"), TextColumn("{task.fields[eta]}"),
                    TimeElapsedColumn(), console=console, transient=False)


def _magnitudes(value: Any) -> list[float]:
    """Sizes of an estimate's or error's parts (complex ones by modulus, as the stop rule)."""
    if hasattr(value, "tolist"):  # numpy
        value = value.tolist()
    if isinstance(value, dict):
        return [math.hypot(value["real"], value["imag"])]
    if isinstance(value, list | tuple):
        return [m for v in value for m in _magnitudes(v)]
    return [abs(value)] if value is not None else []


@dataclass(frozen=True)
class StopLimits:
    """A run's ``[stop]`` as its bar needs it: where "done" is and how far off it is."""

    max_samples: int | None = None
    max_iterations: int | None = None
    absolute_error: float | None = None
    relative_error: float | None = None
    min_samples: int = 0

    @classmethod
    def of(cls, stop: Any, max_samples: int | None = None) -> StopLimits:
        """From a StopSpec or its dict (None: no limits); ``max_samples`` overrides its own."""
        def get(key: str) -> Any:
            return stop.get(key) if isinstance(stop, Mapping) else getattr(stop, key, None)

        return cls(max_samples if max_samples is not None else get("max_samples"),
                   get("max_iterations"), get("absolute_error"), get("relative_error"),
                   get("min_samples") or 0)

    def samples_needed(self, p: Progress) -> float | None:
        """Samples the error target needs at today's error (it falls as 1/sqrt(samples))."""
        errors, values = _magnitudes(p.error), _magnitudes(p.estimate)
        if not errors or not all(map(math.isfinite, errors + values)):
            return None
        ratios = []
        if self.absolute_error:
            ratios.append(max(e / self.absolute_error for e in errors))
        if self.relative_error and values and all(v > 0 for v in values):
            ratios.append(max(e / (self.relative_error * v) for e, v in zip(errors, values,
                                                                            strict=False)))
        if not ratios:
            return None
        return max(p.samples * min(ratios) ** 2, float(self.min_samples))  # either target stops

    def progress(self, p: Progress) -> tuple[float, float | None]:
        """(fraction done, seconds left): the nearest of the limits set decides both."""
        done: list[float] = []
        left: list[float] = []
        targets = [(p.samples, float(self.max_samples))] if self.max_samples else []
        needed = self.samples_needed(p)
        if needed is not None:
            targets.append((p.samples, max(needed, float(p.samples))))
        if self.max_iterations and p.iteration:  # an iteration's samples, at today's size
            targets.append((p.samples, p.samples / p.iteration * self.max_iterations))
        for now, total in targets:
            done.append(min(1.0, now / total) if total else 1.0)
            if p.samples_per_s > 0:
                left.append(max(0.0, total - now) / p.samples_per_s)
        return max(done, default=0.0), min(left, default=None)

    def target_text(self) -> str:
        """`` -> 0.001`` / `` -> 1% rel.``: the error target(s), for the bar's stats."""
        parts = ([f"{self.absolute_error:.3g}"] if self.absolute_error else []) + \
            ([f"{self.relative_error * 100:.3g}% rel."] if self.relative_error else [])
        return f" -> {' or '.join(parts)}" if parts else ""


class ProgressBar:
    """A rich progress bar on stderr: iteration, samples done of ``max_samples``, estimate ±
    error (and the error target ``stop`` sets, if any), samples/s and the overall ETA.

    ``stop`` is the run's ``[stop]`` (a StopSpec or its dict): the ETA is the time to the
    nearest limit (samples, iterations, or the error target at 1/sqrt(samples)). When
    stderr is not a terminal (a log, a pipe) there is no bar: each iteration is one plain
    line instead.
    """

    def __init__(self, name: str, max_samples: int | None, stop: Any = None) -> None:
        self.name, self.limits = name, StopLimits.of(stop, max_samples)
        self.live = sys.stderr.isatty()
        self.bar: Bar | None = None
        self.task: Any = None

    def __enter__(self) -> ProgressBar:
        if not self.live:
            return self
        from rich.console import Console

        self.bar = make_bar(Console(stderr=True))
        self.bar.start()
        self.task = self.bar.add_task(f"{self.name}: starting", total=1.0, eta=eta_text(None),
                                      stats="waiting for the first iteration")
        return self

    def update(self, p: Progress) -> None:
        """Called by the coordinator after every iteration."""
        rate = f"{p.samples_per_s:,.0f} samples/s"
        if self.bar is None:
            common.echo(f"{self.name}: iteration {p.iteration}: {p.samples:,} samples  "
                        f"{pm(p.estimate, p.error)}  {rate}", err=True)
            return
        most = self.limits.max_samples
        done, left = self.limits.progress(p)
        stats = (f"{p.samples:,}{f' of {most:,}' if most else ''} samples  "
                 f"{pm(p.estimate, p.error)}{self.limits.target_text()}  {rate}")
        self.bar.update(self.task, completed=done, description=f"{self.name}: iteration "
                        f"{p.iteration}", stats=stats, eta=eta_text(left))

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.bar is not None:
            self.bar.stop()


__all__ = ["ProgressBar", "StopLimits", "emit", "eta_by_rate", "eta_text", "histograms_text",
           "make_bar", "pm", "diagnostics_text", "fit_text", "result_json", "result_text"]
