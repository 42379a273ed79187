"""Deterministic per-batch random streams: batch i of iteration k always draws the same numbers.

Streams come from ``SeedSequence(entropy=run_seed, spawn_key=(k, i))``, so any process that knows
the run seed and the batch coordinates reproduces them, whatever the order batches run in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from mainboard.integrators.spec_types import INT64_MAX
from mainboard.names import symbol_by_name

# Latent batches other than the seeded one, by name: a process sampler's batch class lives
# with the process sampler, which builds on this module (it would import it back).
LATENT_KINDS = {"process": "mainboard.integrators.process.sampler:ProcessLatentBatch"}
MAX_SEED = INT64_MAX  # the run file's seed range (spec_types), checked again for direct callers


def batch_rng(run_seed: int, iteration: int, batch_index: int) -> np.random.Generator:
    """The generator for one batch: independent of every other (iteration, batch) pair."""
    for name, value in (("run_seed", run_seed), ("iteration", iteration),
                        ("batch_index", batch_index)):
        if not isinstance(value, int | np.integer) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    if run_seed > MAX_SEED:
        raise ValueError(f"run_seed must be at most 2**63-1, got {run_seed}")
    seq = np.random.SeedSequence(entropy=int(run_seed),
                                 spawn_key=(int(iteration), int(batch_index)))
    return np.random.Generator(np.random.PCG64(seq))


@dataclass(frozen=True)
class LatentBatch:
    """The compact form of a batch that travels to workers: coordinates and size, no arrays."""

    run_seed: int
    iteration: int
    batch_index: int
    n: int

    def __post_init__(self) -> None:
        if not isinstance(self.n, int | np.integer) or self.n < 1:
            raise ValueError(f"a batch needs at least one sample, got n={self.n!r}")

    def rng(self) -> np.random.Generator:
        """The batch's own random stream (fresh each call, so materializing twice is identical)."""
        return batch_rng(self.run_seed, self.iteration, self.batch_index)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for a codec."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LatentBatch:
        """Inverse of :meth:`to_dict`, for every kind of latent batch: ``kind = "process"``
        (a process sampler's batch, which carries its points) rebuilds that subclass, so a
        worker needs no special case."""
        kind = data.get("kind")
        if kind in LATENT_KINDS and cls is LatentBatch:
            return symbol_by_name(LATENT_KINDS[kind]).from_dict(data)
        if kind is not None and kind != "process":
            raise ValueError(f"unknown latent batch kind {kind!r}; valid: none (seeded) or "
                             "'process'")
        return cls(int(data["run_seed"]), int(data["iteration"]), int(data["batch_index"]),
                   int(data["n"]))
