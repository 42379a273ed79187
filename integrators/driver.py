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
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mainboard.integrators.accumulators import Combined, IterationEstimate, RunAccumulator
from mainboard.integrators.diagnostics import sampler_diagnostics
from mainboard.integrators.observables import run_observables
from mainboard.integrators.owner import owned, produce_iteration, training_wanted
from mainboard.integrators.samplers import Sampler, restore_sampler
from mainboard.integrators.seeding import LatentBatch
from mainboard.integrators.spec import RunSpec
from mainboard.integrators.stages import (
    IterationResult,
    Run,
    build_run,
    merge_results,
    prepare_sampler,
    process_batch,
    process_latent,
    release_processes,
    scope,
)
from mainboard.integrators.stop import plan_iteration, stop_reason


@dataclass
class RunState:
    """Where a run is between iterations.

    ``samples`` counts every sample evaluated; ``training_samples`` (of
    ``training_iterations``) those of the training phase, which adapted the sampler and are
    not in the accumulator. :meth:`next_batches` plans one iteration; for a process sampler
    it also produces its batches (``latents``, see :mod:`~mainboard.integrators.owner`).
    """

    run: Run
    sampler: Sampler
    accumulator: RunAccumulator
    iteration: int = 0
    samples: int = 0
    stop: str | None = None
    training_samples: int = 0
    training_iterations: int = 0
    trained: bool = False  # the training phase is over (never entered again)
    training: bool = field(default=False, repr=False)  # the planned iteration trains
    latents: list[LatentBatch] | None = field(default=None, repr=False)
    frozen: bool = False  # a task's inference: the sampler samples and never adapts
    task: str | None = None  # the run task this state belongs to (runs with [[tasks]])

    @classmethod
    def start(cls, run: Run) -> RunState:
        """Fresh state: initial sampler, no iterations."""
        acc = RunAccumulator(run.kind, run.width, run.spec.accumulator.discard)
        return cls(run, run.new_sampler(), acc)

    def next_batches(self) -> list[int]:
        """Batch sizes of the next iteration; empty once the run has stopped.

        Plans (for a process sampler: produces) that iteration, so call it once per
        iteration; a training iteration holds at most the samples the phase still takes.
        """
        self.latents = None
        if self.stop is not None:
            return []
        phase = self._training_left()
        self.training = phase > 0
        spec = self.run.spec
        if owned(self.sampler) is None:
            sizes = plan_iteration(spec.stop, spec.batching, self.samples,
                                   cap=phase if self.training else None)
            self.sampler.plan(sizes)  # before any snapshot of the iteration (VEGAS+ strata)
            return sizes
        budget = self._samples_left()
        if self.training:
            budget = phase if budget is None else min(budget, phase)
        prepare_sampler(self.run, self.sampler)  # the evaluator's metadata, before it starts
        self.latents = produce_iteration(self.sampler, spec.seed, self.iteration, budget,
                                         int(spec.batching.batches_per_iteration))
        return [latent.n for latent in self.latents]

    def lookahead(self, sizes: list[int]) -> tuple[list[int], Sampler] | None:
        """The batch sizes and sampler of the iteration after the planned one (of ``sizes``)
        when neither depends on its results, else None.

        Why: a coordinator sends those batches while this iteration is still out, so
        workers never wait for its merge and bookkeeping. That holds for a sampler that
        does not learn (naive) or is ``frozen``, outside a training phase and a process
        sampler, and when no stop rule but the error targets can end the run after this
        iteration (a target met leaves the batches sent ahead unused, never merged).
        """
        if owned(self.sampler) is not None or self.training or self.stop is not None or \
                (self.sampler.learns and not self.frozen):
            return None
        spec, samples = self.run.spec, self.samples + int(sum(sizes))
        if stop_reason(spec.stop, samples=samples, iterations=len(self.accumulator.iterations)
                       + 1, result=None, kind=self.run.kind) is not None:
            return None
        after = plan_iteration(spec.stop, spec.batching, samples)  # samples < max: not empty
        sampler = restore_sampler(self.sampler.snapshot(), self.run.domain)
        if not self.frozen:  # as apply() does, with the training data it has none of
            sampler.ingest({})
            sampler.adapt()
        sampler.plan(after)
        return after, sampler

    def _samples_left(self) -> int | None:
        cap = self.run.spec.stop.max_samples
        return None if cap is None else int(cap) - self.samples

    def _training_left(self) -> int:
        """Samples the training phase still takes (0 once it is over)."""
        wanted = getattr(self.run.spec.sampler, "training_samples", None) or 0
        if self.trained or wanted <= 0:
            return 0
        left = training_wanted(self.sampler, wanted - self.training_samples)
        if left <= 0:
            self.trained = True
        return max(left, 0)

    def apply(self, result: IterationResult) -> str | None:
        """Fold a merged iteration in: accumulate, adapt the sampler, decide whether to stop."""
        if result.iteration != self.iteration:
            raise ValueError(f"expected iteration {self.iteration}, got {result.iteration}")
        if result.sampler_version != self.sampler.version:
            raise ValueError(f"iteration used sampler version {result.sampler_version}, "
                             f"state has {self.sampler.version}")
        if self.training:  # the sampler learns, the estimate does not see it
            self.training_samples += result.partial.samples
            self.training_iterations += 1
        else:
            self.accumulator.add(result.estimate(), result.observable_estimates())
        if not self.frozen:
            self.sampler.ingest(result.training)
            self.sampler.adapt()
        self.iteration += 1
        self.samples += result.partial.samples
        self.training, self.latents = False, None
        kept = self.accumulator.iterations
        self.stop = stop_reason(self.run.spec.stop, samples=self.samples,
                                iterations=len(kept), kind=self.run.kind,
                                result=self.accumulator.result() if kept else None)
        return self.stop  # stop_reason says max_samples once the budget is spent

    def snapshot(self) -> dict[str, Any]:
        """Plain data; with the run spec, :meth:`restore` continues bit-identically."""
        out = {"run_id": self.run.spec.run_id(), "iteration": self.iteration,
               "samples": self.samples, "stop": self.stop,
               "training_samples": self.training_samples,
               "training_iterations": self.training_iterations, "trained": self.trained,
               "sampler": self.sampler.snapshot(), "accumulator": self.accumulator.snapshot(),
               "diagnostics": sampler_diagnostics(self.sampler)}
        if self.task is not None:  # only task runs: other snapshots stay as they were
            out.update(task=self.task, frozen=self.frozen)
        return out

    @classmethod
    def restore(cls, run: Run, data: Mapping[str, Any]) -> RunState:
        """Inverse of :meth:`snapshot` (JSON-decoded data accepted)."""
        if data["run_id"] != run.spec.run_id():
            raise ValueError(f"snapshot belongs to run {data['run_id']}, "
                             f"not {run.spec.run_id()}")
        return cls(run, restore_sampler(data["sampler"], run.domain),
                   RunAccumulator.restore(data["accumulator"]), int(data["iteration"]),
                   int(data["samples"]), data.get("stop"),
                   int(data.get("training_samples", 0)),
                   int(data.get("training_iterations", 0)), bool(data.get("trained", False)),
                   frozen=bool(data.get("frozen", False)), task=data.get("task"))

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
    chi2_dof: float | None  # None: one kept iteration, no degrees of freedom
    q: float
    samples: int
    iterations: int
    nan_count: int
    exact: Any
    stop_reason: str | None
    wall_s: float | None
    iteration_estimates: tuple[IterationEstimate, ...]
    training_samples: int = 0  # of ``samples``: the training phase's, not in the estimate
    observables: dict[str, Any] | None = None  # histograms and moments, when asked for

    @classmethod
    def build(cls, state: RunState, comb: Combined, wall_s: float | None) -> RunResult:
        """From a state and its combined estimate."""
        return cls(state.run.spec.run_id(), state.run.spec.name, state.run.kind,
                   _shape(comb.mean, state.run.kind), _shape(comb.error, state.run.kind),
                   comb.chi2_dof, comb.q_total, state.samples, len(state.accumulator.iterations),
                   state.accumulator.nonfinite, state.run.integrand.exact, state.stop, wall_s,
                   tuple(state.accumulator.iterations), state.training_samples,
                   run_observables(state.run.spec, state.accumulator.observables))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready; complex numbers as {"real", "imag"}, exact only when known."""
        out = {"run_id": self.run_id, "name": self.name, "kind": self.kind,
               "estimate": _plain(self.estimate), "error": _plain(self.error),
               "chi2_dof": self.chi2_dof, "q": None if math.isnan(self.q) else self.q,
               "samples": self.samples, "iterations": self.iterations,
               "nan_count": self.nan_count, "stop_reason": self.stop_reason,
               "wall_s": self.wall_s, "training_samples": self.training_samples}
        if self.exact is not None:
            out["exact"] = _plain(self.exact)
        if self.observables is not None:
            out["observables"] = self.observables
        return out


def step(state: RunState) -> IterationResult | None:
    """Run one iteration in this process and apply it; None if the run has stopped."""
    sizes = state.next_batches()
    if not sizes:
        return None
    if state.latents is not None:  # an owned sampler produced them, in order
        results = [process_latent(state.run, state.sampler, latent)
                   for latent in state.latents]
    else:
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
