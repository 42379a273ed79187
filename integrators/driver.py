"""The whole integration loop in one process, and the run state a coordinator also keeps.

:class:`RunState` is the loop's memory between iterations: sampler, accumulator, counters and
stop reason, all snapshot-able to plain data. :func:`step` runs one iteration locally through
:func:`~mainboard.integrators.stages.process_batch` and
:func:`~mainboard.integrators.stages.merge_results`; a distributed coordinator does the same with
batches on workers and then calls :meth:`RunState.apply`, so both reach identical numbers.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from mainboard.integrators.accumulators import Combined, IterationEstimate, RunAccumulator
from mainboard.integrators.samplers import Sampler, restore_sampler
from mainboard.integrators.spec import RunSpec
from mainboard.integrators.stages import (
    IterationResult,
    Run,
    build_run,
    merge_results,
    process_batch,
    release_processes,
    scope,
)
from mainboard.integrators.stop import plan_iteration, stop_reason


@dataclass
class RunState:
    """Where a run is between iterations."""

    run: Run
    sampler: Sampler
    accumulator: RunAccumulator
    iteration: int = 0
    samples: int = 0
    stop: str | None = None

    @classmethod
    def start(cls, run: Run) -> RunState:
        """Fresh state: initial sampler, no iterations."""
        acc = RunAccumulator(run.kind, run.width, run.spec.accumulator.discard)
        return cls(run, run.new_sampler(), acc)

    def next_batches(self) -> list[int]:
        """Batch sizes of the next iteration; empty once the run has stopped."""
        if self.stop is not None:
            return []
        sizes = plan_iteration(self.run.spec.stop, self.run.spec.batching, self.samples)
        self.sampler.plan(sizes)  # before any snapshot of the iteration (VEGAS+ strata)
        return sizes

    def apply(self, result: IterationResult) -> str | None:
        """Fold a merged iteration in: accumulate, adapt the sampler, decide whether to stop."""
        if result.iteration != self.iteration:
            raise ValueError(f"expected iteration {self.iteration}, got {result.iteration}")
        if result.sampler_version != self.sampler.version:
            raise ValueError(f"iteration used sampler version {result.sampler_version}, "
                             f"state has {self.sampler.version}")
        self.accumulator.add(result.estimate())
        self.sampler.ingest(result.training)
        self.sampler.adapt()
        self.iteration += 1
        self.samples += result.partial.samples
        self.stop = stop_reason(self.run.spec.stop, samples=self.samples,
                                iterations=self.iteration, result=self.accumulator.result(),
                                kind=self.run.kind)
        if self.stop is None and not self.next_batches():
            self.stop = "max_samples"
        return self.stop

    def snapshot(self) -> dict[str, Any]:
        """Plain data; with the run spec, :meth:`restore` continues bit-identically."""
        return {"run_id": self.run.spec.run_id(), "iteration": self.iteration,
                "samples": self.samples, "stop": self.stop,
                "sampler": self.sampler.snapshot(), "accumulator": self.accumulator.snapshot()}

    @classmethod
    def restore(cls, run: Run, data: Mapping[str, Any]) -> RunState:
        """Inverse of :meth:`snapshot` (JSON-decoded data accepted)."""
        if data["run_id"] != run.spec.run_id():
            raise ValueError(f"snapshot belongs to run {data['run_id']}, "
                             f"not {run.spec.run_id()}")
        return cls(run, restore_sampler(data["sampler"], run.domain),
                   RunAccumulator.restore(data["accumulator"]), int(data["iteration"]),
                   int(data["samples"]), data.get("stop"))

    def result(self, wall_s: float | None = None) -> RunResult:
        """The run's answer so far."""
        if not self.accumulator.iterations:
            raise ValueError("no iteration has finished yet")
        return RunResult.build(self, self.accumulator.result(), wall_s)


def _shape(values: np.ndarray, kind: str) -> Any:
    """Per-component numbers back to the integrand's kind: float, complex or list."""
    if kind == "complex":
        return complex(float(values[0]), float(values[1]))
    if kind == "scalar":
        return float(values[0])
    return [float(v) for v in values]


def _plain(value: Any) -> Any:
    if isinstance(value, complex):
        return {"real": value.real, "imag": value.imag}
    return value


@dataclass(frozen=True)
class RunResult:
    """The answer: estimate +- error, fit quality, budget used, and the exact value if known."""

    run_id: str
    name: str
    kind: str
    estimate: Any
    error: Any
    chi2_dof: float
    q: float
    samples: int
    iterations: int
    nan_count: int
    exact: Any
    stop_reason: str | None
    wall_s: float | None
    iteration_estimates: tuple[IterationEstimate, ...]

    @classmethod
    def build(cls, state: RunState, comb: Combined, wall_s: float | None) -> RunResult:
        """From a state and its combined estimate."""
        return cls(state.run.spec.run_id(), state.run.spec.name, state.run.kind,
                   _shape(comb.mean, state.run.kind), _shape(comb.error, state.run.kind),
                   comb.chi2_dof, comb.q_total, state.samples, state.iteration,
                   state.accumulator.nonfinite, state.run.integrand.exact, state.stop, wall_s,
                   tuple(state.accumulator.iterations))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready; complex numbers as {"real", "imag"}, exact only when known."""
        out = {"run_id": self.run_id, "name": self.name, "kind": self.kind,
               "estimate": _plain(self.estimate), "error": _plain(self.error),
               "chi2_dof": self.chi2_dof, "q": None if math.isnan(self.q) else self.q,
               "samples": self.samples, "iterations": self.iterations,
               "nan_count": self.nan_count, "stop_reason": self.stop_reason,
               "wall_s": self.wall_s}
        if self.exact is not None:
            out["exact"] = _plain(self.exact)
        return out


def step(state: RunState) -> IterationResult | None:
    """Run one iteration in this process and apply it; None if the run has stopped."""
    sizes = state.next_batches()
    if not sizes:
        return None
    results = [process_batch(state.run, state.sampler, state.iteration, i, n)
               for i, n in enumerate(sizes)]
    merged = merge_results(results, expected=len(sizes))
    state.apply(merged)
    return merged


def integrate_local(spec: RunSpec | Mapping[str, Any] | Run, *,
                    state: RunState | None = None,
                    on_iteration: Callable[[RunState, IterationResult], None] | None = None
                    ) -> RunResult:
    """Integrate a run in this process until a stop condition holds; resumes from ``state``.

    External processes the run starts are ended on return, unless the caller entered a
    ``run_scope`` (then they are the caller's to release) or passed ``state`` (its sampler's
    process lives as long as the state).
    """
    run = spec if isinstance(spec, Run) else build_run(spec)
    current = state if state is not None else RunState.start(run)
    began = time.perf_counter()
    with scope(run) as owned:
        try:
            while (merged := step(current)) is not None:
                if on_iteration is not None:
                    on_iteration(current, merged)
        finally:
            if owned is not None:  # no caller scope: this call owns the run's processes
                release_processes(owned)
            if state is None:  # nobody else holds this state: end a process sampler now
                close = getattr(getattr(current.sampler, "inner", current.sampler), "close",
                                None)
                if close is not None:
                    close()
    return current.result(wall_s=time.perf_counter() - began)
