"""The per-batch pipeline as pure functions, shared by the local driver and Celery tasks.

``sample -> materialize -> transform -> evaluate`` turns (sampler state, iteration, batch
index, n) into a :class:`BatchResult`; :func:`process_batch` is the fused form. Results merge
with :func:`merge_results` in batch-index order, so an iteration's numbers are bit-identical
whichever process ran each batch and in whatever order they finished. Inside a batch,
materialize and evaluate work in the fixed row slices of :mod:`~mainboard.integrators.chunking`
(cache-sized temporaries), combining per-slice sums in slice order: fused and chained stages
on any worker add the same numbers in the same order.

Process kinds (integrand, sampler, materializer, transforms in child processes) need nothing
special from callers: each stage runs under ``run_scope(run.run_id)`` (unless the caller set
a scope), so the worker's pool keeps one process per run and role across batches; a caller
ends them with :func:`release_processes` when the run is over or the worker shuts down.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import numpy as np

from mainboard.errors import MergeError
from mainboard.integrators.accumulators import IterationEstimate, Partial, real_columns
from mainboard.integrators.chunking import SLICE_ROWS, row_slices
from mainboard.integrators.domain import Batch, Domain, validate
from mainboard.integrators.integrands import Integrand, load_target, make_integrand
from mainboard.integrators.observables import Observables, Sums, iteration_estimates
from mainboard.integrators.observables import add as add_sums
from mainboard.integrators.observables import from_plain as sums_from_plain
from mainboard.integrators.process.adapters import RUN_ID, run_scope
from mainboard.integrators.process.pool import default_pool
from mainboard.integrators.projection import component_labels, project
from mainboard.integrators.samplers import (
    Sampler,
    Training,
    make_sampler,
    merge_training,
    restore_sampler,
)
from mainboard.integrators.seeding import LatentBatch
from mainboard.integrators.spec import RunSpec, parse_run
from mainboard.integrators.strata import stratified_variance
from mainboard.integrators.transforms import TransformChain


@dataclass(frozen=True)
class Run:
    """A run spec turned into the objects the stages call (the "spec objects")."""

    spec: RunSpec
    domain: Domain
    integrand: Integrand
    transforms: TransformChain
    kind: str
    width: int
    observables: Observables | None = None  # [accumulator] histograms and moments

    def new_sampler(self) -> Sampler:
        """A sampler in its initial state."""
        return make_sampler(self.spec.sampler, self.domain)

    @cached_property
    def run_id(self) -> str:
        """The spec's content-derived id (computed once)."""
        return self.spec.run_id()

    @cached_property
    def uses_processes(self) -> bool:
        """Whether any stage of this run talks to an external process."""
        spec = self.spec
        kinds = {spec.integrand.kind, spec.sampler.kind, *(t.kind for t in spec.transforms),
                 *(t.kind for t in self.transforms.transforms), self.integrand.kind}
        return "process" in kinds or getattr(spec.sampler, "materializer", None) is not None


def build_run(spec: RunSpec | Mapping[str, Any]) -> Run:
    """Validate a run spec (model or plain dict) and build its domain, integrand, transforms."""
    if not isinstance(spec, RunSpec):
        spec = parse_run(dict(spec))
    domain = Domain(spec.domain.continuous, spec.domain.discrete)
    transforms = TransformChain(spec.transforms, domain)
    integrand = make_integrand(spec.integrand, transforms.output_dim, domain.discrete)
    exact = transforms.exact(spec.integrand.kind, integrand.exact)
    if exact is not integrand.exact:  # the transformed problem's, or unknown
        integrand = replace(integrand, exact=exact)
    kind = spec.accumulator_kind
    observables = Observables.build(spec.accumulator, integrand.width, bool(domain.discrete),
                                    load_target)
    return Run(spec, domain, integrand, transforms, kind, integrand.width, observables)


@dataclass
class BatchResult:
    """Everything the coordinator merges from one batch: sums, counts, training data."""

    iteration: int
    batch_index: int
    sampler_version: int
    partial: Partial
    training: Training = field(default_factory=dict)
    nonfinite_example: list[float] | None = None
    observables: Sums | None = None  # histogram and moment sums, when the run asks

    def to_dict(self) -> dict[str, Any]:
        """Plain data (numpy arrays kept for a binary codec; see plain.to_plain for JSON)."""
        out = {"iteration": self.iteration, "batch_index": self.batch_index,
               "sampler_version": self.sampler_version, "partial": self.partial.to_dict(),
               "training": dict(self.training), "nonfinite_example": self.nonfinite_example}
        if self.observables is not None:
            out["observables"] = self.observables
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BatchResult:
        """Inverse of :meth:`to_dict`; lists accepted for arrays."""
        return cls(int(data["iteration"]), int(data["batch_index"]),
                   int(data["sampler_version"]), Partial.from_dict(data["partial"]),
                   {k: np.asarray(v, dtype=np.float64) for k, v in data["training"].items()},
                   data.get("nonfinite_example"),
                   None if data.get("observables") is None
                   else sums_from_plain(data["observables"]))


@dataclass
class IterationResult:
    """One iteration's merged batches."""

    iteration: int
    batches: int
    sampler_version: int
    partial: Partial
    training: Training
    observables: Sums | None = None

    def estimate(self) -> IterationEstimate:
        """Mean and variance of the mean per component (a stratified iteration's variance
        from its per-stratum training data, see :mod:`~mainboard.integrators.strata`)."""
        estimate = IterationEstimate.from_partial(self.iteration, self.partial)
        var = stratified_variance(self.training)
        return estimate if var is None else replace(estimate, var=var)

    def observable_estimates(self) -> dict[str, Any] | None:
        """Per-bin and per-order means and variances of this iteration (None: no observables)."""
        if self.observables is None:
            return None
        return iteration_estimates(self.observables, self.partial.count)


def _sampler(run: Run, sampler: Sampler | Mapping[str, Any]) -> Sampler:
    return sampler if isinstance(sampler, Sampler) else restore_sampler(sampler, run.domain)


def _latent(latent: LatentBatch | Mapping[str, Any]) -> LatentBatch:
    return latent if isinstance(latent, LatentBatch) else LatentBatch.from_dict(latent)


@contextlib.contextmanager
def scope(run: Run) -> Iterator[str | None]:
    """Pooled processes acquired inside belong to this run: ``run_scope(run.run_id)``, unless
    the run has no process stage or the caller already entered a scope (the outer one wins).
    Yields the run id it set, or None when it set nothing."""
    if not run.uses_processes:
        yield None
        return

    if RUN_ID.get():
        yield None
        return
    with run_scope(run.run_id):
        yield run.run_id


def release_processes(run_id: str | None = None) -> None:
    """End this worker process's pooled processes of one run (of every run when None).

    Call it when a run ends and at worker shutdown; a no-op where no process stage ran.
    """
    if "mainboard.integrators.process.pool" in sys.modules:
        default_pool().release(run_id)


def prepare_sampler(run: Run, sampler: Sampler) -> Sampler:
    """Give a process sampler the process evaluator's ``initialize`` metadata (the protocol's
    ``evaluator_metadata``) before its process starts; other samplers pass through."""
    inner = getattr(sampler, "inner", sampler)  # a MaterializedSampler wraps its planner
    if (run.integrand.kind == "process" and getattr(inner, "kind", "") == "process"
            and hasattr(inner, "evaluator_metadata") and not inner.evaluator_metadata):
        with scope(run):
            inner.evaluator_metadata = dict(run.integrand.fn.metadata)  # type: ignore[attr-defined]
    return sampler


def sample(run: Run, sampler: Sampler | Mapping[str, Any], iteration: int, batch_index: int,
           n: int) -> LatentBatch:
    """Stage 1: the compact latent batch (a process sampler's carries its points)."""
    smp = prepare_sampler(run, _sampler(run, sampler))
    with scope(run):
        return smp.sample(run.spec.seed, iteration, batch_index, n)


def materialize(run: Run, sampler: Sampler | Mapping[str, Any],
                latent: LatentBatch | Mapping[str, Any]) -> Batch:
    """Stage 2: concrete points in the unit cube, validated against the domain."""
    with scope(run):
        batch = _sampler(run, sampler).materialize(_latent(latent))
    # in_cube: the compiled VEGAS map's tables put every point in the cube. Passed here only,
    # straight from the sampler: a transform that edits x in place keeps the flag and must
    # be checked
    return validate(batch, run.domain, "materialize", in_cube=batch.in_cube)


def transform(run: Run, batch: Batch) -> Batch:
    """Stage 3: the run's transforms in order, each validated."""
    with scope(run):
        return run.transforms.apply(batch)


def evaluate(run: Run, sampler: Sampler | Mapping[str, Any],
             latent: LatentBatch | Mapping[str, Any], batch: Batch) -> BatchResult:
    """Stage 4: integrand values -> partial sums, non-finite count and training data.

    Works in the fixed row slices of :mod:`~mainboard.integrators.chunking` (built-in
    integrands are evaluated slice by slice too; user and process integrands see the whole
    batch once), merging the slices' partial sums in slice order.
    """
    smp, latent = _sampler(run, sampler), _latent(latent)
    n = batch.n
    wf2 = np.empty(n)
    strata = smp.strata_sums(batch, latent.batch_index, run.width)  # None: unstratified
    # signed w f of one slice, for the strata (summed while the slice is in cache)
    signed = np.empty((min(n, SLICE_ROWS), run.width)) if strata is not None else None
    partial = Partial.empty(run.width)
    finite: np.ndarray | None = None
    learner = getattr(smp, "inner", smp)  # a process sampler learns projection(f) * w
    projection = getattr(learner, "projection", None)
    projected = np.empty(n) if projection is not None else None
    labels = component_labels(run.spec.integrand) if projection is not None else []
    obs = run.observables
    sums = obs.empty() if obs is not None else None
    with scope(run):
        bins = obs.bins(batch.x, batch.idx) if obs is not None else []
        layout = smp.strata_layout(batch, latent.batch_index) if obs is not None else None
        whole = None if run.integrand.sliceable else run.integrand.evaluate(batch.x, batch.idx)
        # points by column (the VEGAS map's layout): a compiled twin's input
        cols = batch.x.T if run.integrand.columns is not None and \
            batch.x.T.flags.c_contiguous else None
        for sl in row_slices(n):
            values = (run.integrand.evaluate_rows(batch.x, batch.idx, sl, cols)
                      if whole is None else whole[sl])
            if projected is not None:
                projected[sl] = project(values, batch.weights[sl], projection, labels)
            rows = sl.stop - sl.start
            part, part_finite = _reduce(values, batch.weights[sl], wf2[sl],
                                        None if signed is None else signed[:rows])
            if strata is not None:  # one real column: wf2 is its square (non-finite zeroed)
                strata.add(sl.start, signed[:rows], wf2[sl] if run.width == 1 else None,
                           part_finite)
            partial = partial.merge(part)
            if sums is not None:  # same slices, same order: bit-identical anywhere
                sums = add_sums(sums, obs.reduce(
                    real_columns(values), batch.weights[sl], [b[sl] for b in bins],
                    part_finite, None if layout is None else (layout[0][sl], layout[1])))
            if part_finite is not None:
                if finite is None:
                    finite = np.ones(n, dtype=bool)
                finite[sl] = part_finite
    example = None
    if finite is not None:
        example = batch.x[int(np.flatnonzero(~finite)[0])].tolist()
    if projected is not None:
        training = learner.training_values(latent.batch_index, projected)
    else:
        training = smp.training(batch, wf2, finite)
        if strata is not None:
            training.update(strata.result())
    return BatchResult(latent.iteration, latent.batch_index, smp.version, partial, training,
                       example, sums)


def _reduce(values: np.ndarray, weights: np.ndarray, wf2: np.ndarray,
            signed: np.ndarray | None = None) -> tuple[Partial, np.ndarray | None]:
    """One slice: the partial sums of w f, and |w f|^2 per sample written into ``wf2``
    (and w f per real column into ``signed`` when given).

    Non-finite |w f|^2 become 0 in ``wf2`` so NaN/inf (and overflowing squares) stay out of
    training; the returned finite-row mask (None when all rows are finite) says which.
    """
    with np.errstate(over="ignore", invalid="ignore"):  # non-finite products are counted
        if values.ndim == 1 and not np.iscomplexobj(values):
            wf = np.multiply(values, weights, out=None if signed is None else signed[:, 0])
            np.multiply(wf, wf, out=wf2)
            wf = wf[:, None]
        else:
            wf = np.multiply(real_columns(values), weights[:, None], out=signed)
            np.square(wf).sum(axis=1, out=wf2)
        wf2_total = wf2.sum()
    partial, finite = Partial.from_values(wf)
    if not np.isfinite(wf2_total):
        np.copyto(wf2, 0.0, where=~np.isfinite(wf2))
    return partial, finite


def process_batch(run: Run, sampler: Sampler | Mapping[str, Any], iteration: int,
                  batch_index: int, n: int) -> BatchResult:
    """All stages fused: what one worker does for one batch."""
    smp = _sampler(run, sampler)
    return process_latent(run, smp, sample(run, smp, iteration, batch_index, n))


def process_latent(run: Run, sampler: Sampler | Mapping[str, Any],
                   latent: LatentBatch) -> BatchResult:
    """materialize -> transform -> evaluate of a latent batch drawn already (an owned
    sampler's batch: its owner produced it)."""
    smp = _sampler(run, sampler)
    batch = transform(run, materialize(run, smp, latent))
    return evaluate(run, smp, latent, batch)


def merge_results(results: Sequence[BatchResult], expected: int | None = None
                  ) -> IterationResult:
    """Merge one iteration's batch results in batch-index order (input order is irrelevant)."""
    if not results:
        raise MergeError("no batch results to merge")
    ordered = sorted(results, key=lambda r: r.batch_index)
    iterations = {r.iteration for r in ordered}
    versions = {r.sampler_version for r in ordered}
    if len(iterations) != 1:
        raise MergeError(f"batch results from several iterations: {sorted(iterations)}")
    if len(versions) != 1:
        raise MergeError(f"batch results from several sampler versions: {sorted(versions)}")
    indices = [r.batch_index for r in ordered]
    want = list(range(expected if expected is not None else len(ordered)))
    if indices != want:
        dupes = sorted({i for i in indices if indices.count(i) > 1})
        missing = sorted(set(want) - set(indices))
        raise MergeError(f"iteration {ordered[0].iteration}: batch indices must be 0..{len(want) - 1} "
                         f"exactly once (duplicates {dupes}, missing {missing})")
    partial = Partial.empty(ordered[0].partial.mean.shape[0])
    for r in ordered:
        partial = partial.merge(r.partial)
    sums = None
    for r in ordered:  # exactly once each, in batch-index order, like the total
        if r.observables is not None:
            sums = r.observables if sums is None else add_sums(sums, r.observables)
    return IterationResult(ordered[0].iteration, len(ordered), ordered[0].sampler_version,
                           partial, merge_training([r.training for r in ordered]), sums)
