"""What a user's process implements: optional base classes and the batch records they return.

Inheritance is optional (the runners duck-type), the bases only document the contract and
store the constructor keywords. Standard library and numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class SampleBatch:
    """A sampler's batch: ``xs_discrete`` (n, k) ints, ``xs_continuous`` (n, d), ``weights`` (n,) > 0."""

    xs_discrete: Any
    xs_continuous: Any
    weights: Any


@dataclass
class MaterializedBatch:
    """A materializer's concrete batch (same fields as :class:`SampleBatch`)."""

    xs_discrete: Any
    xs_continuous: Any
    weights: Any


@dataclass
class TransformedBatch:
    """A batch transform's output (same fields as :class:`SampleBatch`)."""

    xs_discrete: Any
    xs_continuous: Any
    weights: Any


class _Component:
    """Stores the keywords every constructor receives: the domain shape and the run's args."""

    def __init__(self, *, discrete_cardinalities: list[int], continuous_dims: int,
                 **args: Any) -> None:
        self.discrete_cardinalities = list(discrete_cardinalities)
        self.continuous_dims = int(continuous_dims)
        self.args = args


class Evaluator(_Component):
    """An integrand: ``eval`` returns (n,) or (n, len(components)) values, or a dict per component."""

    def eval(self, xs_discrete: np.ndarray, xs_continuous: np.ndarray) -> Any:
        raise NotImplementedError("an Evaluator must implement eval(xs_discrete, xs_continuous)")


class Sampler(_Component):
    """An adaptive sampler: plans, produces batches, learns from training values, snapshots."""

    def sample_plan(self) -> dict[str, Any]:
        """``{"kind": "produce", "nr_samples": n}`` or ``{"kind": "pause"}``."""
        raise NotImplementedError("a Sampler must implement sample_plan()")

    def produce_latent_batch(self, nr_samples: int) -> SampleBatch:
        raise NotImplementedError("a Sampler must implement produce_latent_batch(nr_samples)")

    def ingest_training_values(self, values: np.ndarray) -> None:
        raise NotImplementedError("a Sampler must implement ingest_training_values(values)")

    def snapshot(self) -> Any:
        """JSON-safe state; restored through :meth:`from_snapshot`."""
        raise NotImplementedError("a Sampler must implement snapshot()")

    def training_samples_remaining(self) -> int | None:
        return None

    def get_diagnostics(self) -> dict[str, Any]:
        return {}

    @classmethod
    def from_snapshot(cls, *, snapshot: Any, discrete_cardinalities: list[int],
                      continuous_dims: int, init_args: dict[str, Any]) -> Sampler:
        raise NotImplementedError(f"{cls.__name__} cannot restore a snapshot: implement "
                                  "from_snapshot(snapshot=, discrete_cardinalities=, "
                                  "continuous_dims=, init_args=)")


class BatchTransform(_Component):
    """Maps a batch to a batch of the same domain (points and weights; the Jacobian goes in weights)."""

    def transform_batch(self, xs_discrete: np.ndarray, xs_continuous: np.ndarray,
                        weights: np.ndarray) -> TransformedBatch:
        raise NotImplementedError("a BatchTransform must implement transform_batch(...)")


class Materializer(_Component):
    """Turns a compact latent batch (plain JSON from the host) into concrete samples."""

    def materialize_batch(self, latent_batch: dict[str, Any]) -> MaterializedBatch:
        raise NotImplementedError("a Materializer must implement materialize_batch(latent_batch)")
