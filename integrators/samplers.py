"""Samplers: how a batch's points are drawn, and how they learn between iterations.

Common interface (all state is plain data so a coordinator can snapshot and ship it):

- ``sample(run_seed, iteration, batch_index, n) -> LatentBatch``: the compact batch.
- ``materialize(latent) -> Batch``: draw points from the latent batch's own random stream.
- ``training(batch, wf2, finite) -> dict[str, ndarray]``: per-batch training data from the
  squared magnitudes |w f|^2; the arrays of different batches simply add (:func:`merge_training`).
- ``ingest(training)`` then ``adapt()``: once per iteration, with the merged training data.
- ``snapshot() -> dict`` / ``restore(dict)`` and :func:`restore_sampler` for a fresh process.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from mainboard.integrators.domain import Batch, Domain
from mainboard.integrators.grid import GridTables, adapt_edges, uniform_edges
from mainboard.integrators.kernels import (
    classic_draw,
    grid_training,
    stratified_draw,
    stratified_kernel,
    training_kernel,
)
from mainboard.integrators.seeding import LatentBatch
from mainboard.integrators.strata import KEYS as STRATA_KEYS
from mainboard.integrators.strata import (
    SPAN,
    StrataPlan,
    StrataSums,
    StratifiedFill,
    add_span,
    learn,
    run_starts,
    strata_shape,
)
from mainboard.names import symbol_by_name

Training = dict[str, np.ndarray]


def merge_training(parts: Sequence[Mapping[str, np.ndarray]]) -> Training:
    """Key-wise sum of training data, in the order given (batch order for reproducibility).
    VEGAS+ batch statistics in span form are added into full-length arrays
    (:func:`~mainboard.integrators.strata.add_span`)."""
    out: Training = {}
    for part in parts:
        spanned = SPAN in part
        if spanned:
            add_span(out, part)
        for key, arr in part.items():
            if spanned and (key == SPAN or key in STRATA_KEYS):
                continue
            arr = np.asarray(arr, dtype=np.float64)
            if key in out:
                out[key] += arr  # in place: no fresh (page-faulting) array per batch
            else:
                out[key] = arr.copy()
    return out


def _uniform_channels(domain: Domain, rng: np.random.Generator, n: int
                      ) -> tuple[np.ndarray, np.ndarray, float]:
    """Uniform discrete indices: (n, k) idx, flat channels, and the weight factor (#channels)."""
    channels = domain.channels
    if channels == 1:
        return np.zeros((n, len(domain.discrete)), np.int64), np.zeros(n, np.int64), 1.0
    flat = rng.integers(0, channels, size=n, dtype=np.int64)
    return domain.unflatten(flat), flat, float(channels)


class Sampler(ABC):
    """Base of every sampler: holds the domain, a version counter and pending training data."""

    kind: ClassVar[str]
    # Whether adapt() can change how batches are drawn; False lets a coordinator send the
    # next iteration's batches before this one's results are in (tasks/coordinator).
    learns: ClassVar[bool] = True

    def __init__(self, domain: Domain) -> None:
        self.domain = domain
        self.version = 0
        self.pending: Training = {}

    def sample(self, run_seed: int, iteration: int, batch_index: int, n: int) -> LatentBatch:
        """The compact latent batch; points are drawn later, from its seed, by materialize."""
        return LatentBatch(int(run_seed), int(iteration), int(batch_index), int(n))

    @abstractmethod
    def materialize(self, latent: LatentBatch) -> Batch:
        """Concrete points, indices and weights for a latent batch (deterministic in its seed)."""

    def training(self, batch: Batch, wf2: np.ndarray, finite: np.ndarray | None) -> Training:
        """Training data of one batch (none for samplers that do not learn)."""
        return {}

    def plan(self, sizes: Sequence[int]) -> None:
        """The owner says the next iteration's batch sizes before snapshotting it (VEGAS+
        shares its strata out over them); samplers that do not care ignore it."""
        del sizes

    def strata_sums(self, batch: Batch, batch_index: int, width: int) -> StrataSums | None:
        """Per-stratum sums for batch ``batch_index``, fed slice by slice with its signed
        values w f (``width`` columns) by evaluate; None for unstratified batches."""
        del batch, batch_index, width
        return None

    def strata_layout(self, batch: Batch, batch_index: int
                      ) -> tuple[np.ndarray, np.ndarray] | None:
        """(stratum of each row, ascending; samples of each stratum in the iteration) of
        stratified batch ``batch_index``, for the observables' stratified errors; None when
        unstratified."""
        del batch, batch_index
        return None

    def ingest(self, training: Mapping[str, np.ndarray]) -> None:
        """Add (merged) training data; adapt() uses everything ingested since the last adapt."""
        self.pending = merge_training([self.pending, training])

    def adapt(self) -> None:
        """Learn from pending training data and clear it; bumps ``version``."""
        self._adapt(self.pending)
        self.pending = {}
        self.version += 1

    def _adapt(self, training: Training) -> None:
        """Subclasses learn here; a sampler that does not learn ignores its training data."""
        del training

    def config(self) -> dict[str, Any]:
        """The sampler's settings (the run file's ``[sampler]`` table)."""
        return {"kind": self.kind}

    def snapshot(self) -> dict[str, Any]:
        """Plain data restoring this exact state (settings, version, learned arrays)."""
        return {"kind": self.kind, "config": self.config(), "domain": self.domain.to_dict(),
                "version": self.version, "pending": dict(self.pending),
                "state": self._state()}

    def _state(self) -> dict[str, Any]:
        return {}

    def restore(self, snapshot: Mapping[str, Any]) -> None:
        """Load a snapshot taken from a sampler of the same kind and settings."""
        if snapshot.get("kind") != self.kind:
            raise ValueError(f"snapshot is of a {snapshot.get('kind')!r} sampler, "
                             f"not {self.kind!r}")
        self.version = int(snapshot["version"])
        self.pending = {k: np.asarray(v, dtype=np.float64)
                        for k, v in snapshot.get("pending", {}).items()}
        self._load(snapshot.get("state", {}))

    def _load(self, state: Mapping[str, Any]) -> None:
        """Subclasses read their learned arrays here; stateless samplers have none."""
        del state


class NaiveSampler(Sampler):
    """Uniform points in the cube, uniform discrete indices: weight = number of channels."""

    kind = "naive"
    learns = False

    def materialize(self, latent: LatentBatch) -> Batch:
        """Uniform draws."""
        rng = latent.rng()
        idx, _flat, factor = _uniform_channels(self.domain, rng, latent.n)
        x = rng.random((self.domain.continuous, latent.n)).T
        return Batch(x=x, idx=idx, weights=np.full(latent.n, factor))


class VegasSampler(Sampler):
    """One VEGAS grid over the continuous dimensions; discrete indices uniform.

    ``beta > 0`` adds VEGAS+ adaptive stratification of the map's input cube (see
    :mod:`~mainboard.integrators.strata`) for iterations the owner planned with
    :meth:`plan`; ``beta = 0``, no plan, or a batch the plan does not list (a direct
    call with other coordinates) is classic VEGAS.
    """

    kind = "vegas"

    def __init__(self, domain: Domain, bins: int = 64, alpha: float = 0.5,
                 beta: float = 0.0) -> None:
        super().__init__(domain)
        self.bins, self.alpha, self.beta = int(bins), float(alpha), float(beta)
        self.tables = GridTables(uniform_edges(1, domain.continuous, self.bins))
        self.sigf: np.ndarray | None = None  # learned allocation weights, per stratum
        self.sigf_shape: np.ndarray | None = None  # the strata they belong to
        self.strata: StrataPlan | None = None  # this iteration's plan
        self.bin_corners = np.empty((domain.continuous, 0))  # strata corners * bins, (d, H)
        self.corner_shape = np.zeros(domain.continuous, dtype=np.int64)  # their nstrat

    @property
    def edges(self) -> np.ndarray:
        """Current grid edges, shape (d, bins + 1)."""
        return self.tables.edges[0]

    def config(self) -> dict[str, Any]:
        """Settings (``beta`` only when stratifying, so classic snapshots stay as they were)."""
        out: dict[str, Any] = {"kind": self.kind, "bins": self.bins, "alpha": self.alpha}
        if self.beta:
            out["beta"] = self.beta
        return out

    def plan(self, sizes: Sequence[int]) -> None:
        """Share the next iteration's samples out over the strata (none for beta = 0 or when
        the budget is too small for two strata); learned weights of other strata reset."""
        current, self.strata = self.strata, None
        if not self.beta or not sizes:
            return
        shape = strata_shape(int(sum(sizes)), self.domain.continuous)
        if int(np.prod(shape)) < 2:
            return
        if (current is not None and current.sizes == tuple(int(s) for s in sizes)
                and np.array_equal(current.nstrat, shape)):
            self.strata = current
            return  # planned already (the owner asks again before snapshotting)
        same = self.sigf_shape is not None and np.array_equal(self.sigf_shape, shape)
        if self.bin_corners.shape[1] != int(np.prod(shape)) or not np.array_equal(
                self.corner_shape, shape):  # most iterations keep their strata
            self.bin_corners = StrataPlan.corners_of(shape, self.bins)
            self.corner_shape = shape
        self.strata = StrataPlan.build(shape, sizes, self.sigf if same else None)

    def materialize(self, latent: LatentBatch) -> Batch:
        """Uniform y mapped through the grid (drawn in fixed row slices, see
        ``GridTables.draw``); bin numbers kept for training. Stratified: each y moved into
        its stratum's hypercube, weight times N / (H n_h), that factor kept too (the batch's
        strata follow from the plan and its index, see :meth:`strata_layout`)."""
        rng = latent.rng()
        idx, _flat, factor = _uniform_channels(self.domain, rng, latent.n)
        inside = False  # the compiled map's tables are checked (kernels.maps_into_cube)
        if self.strata is None or not self.strata.covers(latent.batch_index, latent.n):
            kernel = stratified_kernel(latent.n) if self.tables.groups == 1 else None
            if kernel is not None:  # the same numbers, in one compiled pass
                x, jac, bins, inside = classic_draw(kernel, rng, latent.n, self.tables)
            else:
                x, jac, bins = self.tables.draw(rng, latent.n)
            aux = {"bins": bins.T}
        else:
            first, local = self.strata.share(latent.batch_index, latent.n)
            step, span = self.bins / self.strata.nstrat, slice(first, first + local.size)
            kernel = stratified_kernel(latent.n)
            if kernel is not None:  # the same numbers, in one compiled pass
                x, jac, bins, scale, inside = stratified_draw(
                    kernel, rng, latent.n, self.tables, step, self.bin_corners[:, span],
                    run_starts(local), self.strata.factors[span])
            else:
                fill = StratifiedFill(self.bin_corners, self.strata.nstrat, step, first, local)
                x, jac, bins = self.tables.draw(rng, latent.n, into=fill)
                scale = np.repeat(self.strata.factors[span], local)
                jac *= scale
            aux = {"bins": bins.T, "stratum_factor": scale}
        if factor != 1.0:
            jac *= factor
        return Batch(x=x.T, idx=idx, weights=jac, aux=aux, in_cube=inside)

    def training(self, batch: Batch, wf2: np.ndarray, finite: np.ndarray | None) -> Training:
        """Per-dimension per-bin sums of |w f|^2 and counts (stratified: |w f|^2 without
        the stratum factor, i.e. (J f)^2 up to a constant, as the grid wants)."""
        scale = batch.aux.get("stratum_factor")  # the factor per sample, from materialize
        kernel = training_kernel(batch.n) if self.tables.groups == 1 else None
        if kernel is not None:  # the same sums, in one compiled pass
            sums, counts = grid_training(kernel, self.tables, batch.aux["bins"].T, wf2,
                                         finite, scale)
        else:
            if scale is not None:
                unscale = np.square(scale)
                np.divide(wf2, unscale, out=unscale)
                wf2 = unscale
            sums, counts = self.tables.training(batch.aux["bins"].T, None, wf2, finite)
        return {"grid_sum": sums, "grid_count": counts}

    def strata_layout(self, batch: Batch, batch_index: int
                      ) -> tuple[np.ndarray, np.ndarray] | None:
        """The batch's strata (from its plan) when it was drawn stratified."""
        if self.strata is None or "stratum_factor" not in batch.aux:
            return None
        return self.strata.layout(batch_index, batch.n), self.strata.counts

    def strata_sums(self, batch: Batch, batch_index: int, width: int) -> StrataSums | None:
        """Sums over the batch's strata (its share of the plan), for the stratified variance
        and the next allocation."""
        if self.strata is None or "stratum_factor" not in batch.aux:
            return None
        first, local = self.strata.share(batch_index, batch.n)
        return StrataSums(first, local, self.strata.counts.size, width)

    def _adapt(self, training: Training) -> None:
        self.tables = GridTables(adapt_edges(self.tables.edges, training["grid_sum"],
                                             training["grid_count"], self.alpha))
        if self.strata is not None and "strata_count" in training:
            self.sigf, self.sigf_shape = learn(training, self.beta), self.strata.nstrat
        self.strata = None  # the owner plans the next iteration

    def _state(self) -> dict[str, Any]:
        state: dict[str, Any] = {"edges": self.tables.edges}
        if self.beta:  # classic snapshots unchanged
            state["strata"] = {
                "sigf": self.sigf, "sigf_shape": self.sigf_shape,
                "sizes": None if self.strata is None else list(self.strata.sizes)}
        return state

    def _load(self, state: Mapping[str, Any]) -> None:
        edges = np.asarray(state["edges"], dtype=np.float64)
        want = (1, self.domain.continuous, self.bins + 1)
        if edges.shape != want:
            raise ValueError(f"vegas snapshot edges have shape {edges.shape}, expected {want}")
        self.tables = GridTables(edges)
        strata = state.get("strata") or {}
        self.sigf = _array(strata.get("sigf"), np.float64)
        self.sigf_shape = _array(strata.get("sigf_shape"), np.int64)
        sizes = strata.get("sizes")
        self.strata = None
        if sizes:
            self.plan([int(s) for s in sizes])


def _array(value: Any, dtype: Any) -> np.ndarray | None:
    return None if value is None else np.asarray(value, dtype=dtype)


SamplerFactory = Callable[..., Sampler]
_SAMPLERS: dict[str, SamplerFactory] = {"naive": NaiveSampler, "vegas": VegasSampler}
# Kinds whose code lives in optional modules, imported on first use.
_LAZY_SAMPLERS = {"discrete": "mainboard.integrators.discrete:DiscreteSampler",
                  "process": "mainboard.integrators.process.sampler:ProcessSampler"}
_MATERIALIZED = "mainboard.integrators.process.sampler:MaterializedSampler"


def register_sampler(kind: str, factory: SamplerFactory) -> None:
    """Add a sampler kind: ``factory(domain, **settings) -> Sampler``."""
    _SAMPLERS[kind] = factory


def make_sampler(spec: Any, domain: Domain) -> Sampler:
    """Build a sampler from the run file's ``[sampler]`` table (pydantic model or plain dict).

    A ``materializer`` table wraps the sampler so a process turns its latent batches into
    points (see ``mainboard.integrators.process.sampler.MaterializedSampler``).
    """
    config = dict(spec) if isinstance(spec, Mapping) else spec.model_dump()
    kind = config.pop("kind", None)
    materializer = config.pop("materializer", None)
    config.pop("training_samples", None)  # the run's training phase (driver.RunState)
    if kind not in _SAMPLERS and kind in _LAZY_SAMPLERS:
        register_sampler(kind, symbol_by_name(_LAZY_SAMPLERS[kind]))
    if kind not in _SAMPLERS:
        valid = ", ".join(sorted({*_SAMPLERS, *_LAZY_SAMPLERS}))
        raise ValueError(f"unknown sampler kind {kind!r}; valid: {valid}")
    sampler = _SAMPLERS[kind](domain, **config)
    if materializer is not None:
        sampler = symbol_by_name(_MATERIALIZED)(sampler, materializer)
    return sampler


def restore_sampler(snapshot: Mapping[str, Any], domain: Domain | None = None) -> Sampler:
    """A sampler rebuilt from :meth:`Sampler.snapshot` data alone (e.g. in a worker process)."""
    dom = domain if domain is not None else Domain.from_dict(snapshot["domain"])
    sampler = make_sampler(snapshot["config"], dom)
    sampler.restore(snapshot)
    return sampler
