"""Havana-style sampling of discrete dimensions combined with VEGAS grids.

Each joint value of the discrete dimensions is a channel c drawn with probability p_c; the
continuous point comes from a VEGAS grid that is either shared or the channel's own. The weight
is Jacobian / p_c, so the estimator sums over channels. Between iterations p moves towards the
allocation that minimises variance, p_c ~ sqrt(E_c[g^2]) (``train_on = "rms"``) or
p_c ~ E_c[|g|] (``"abs"``) with g = f * Jacobian, damped by ``learning_rate`` and mixed with
the uniform distribution by ``floor`` so no channel is ever starved.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from mainboard.integrators.domain import Batch, Domain
from mainboard.integrators.grid import GridTables, adapt_edges, uniform_edges
from mainboard.integrators.samplers import Sampler, Training
from mainboard.integrators.seeding import LatentBatch


class DiscreteSampler(Sampler):
    """Adaptive channel probabilities plus a shared or per-channel VEGAS grid."""

    kind = "discrete"

    def __init__(self, domain: Domain, bins: int = 64, alpha: float = 0.5,
                 grids: str = "shared", learning_rate: float = 0.5, floor: float = 0.05,
                 train_on: str = "rms") -> None:
        super().__init__(domain)
        if grids not in ("shared", "per_channel"):
            raise ValueError(f"grids must be 'shared' or 'per_channel', got {grids!r}")
        if train_on not in ("rms", "abs"):
            raise ValueError(f"train_on must be 'rms' or 'abs', got {train_on!r}")
        if not 0 < floor < 1 or not 0 < learning_rate <= 1:
            raise ValueError("need 0 < floor < 1 and 0 < learning_rate <= 1")
        self.bins, self.alpha, self.grids = int(bins), float(alpha), grids
        self.learning_rate, self.floor, self.train_on = float(learning_rate), float(floor), train_on
        self.channels = domain.channels
        self.probs = np.full(self.channels, 1.0 / self.channels)
        groups = self.channels if grids == "per_channel" else 1
        self.tables = GridTables(uniform_edges(groups, domain.continuous, self.bins))

    def config(self) -> dict[str, Any]:
        """Settings."""
        return {"kind": self.kind, "bins": self.bins, "alpha": self.alpha, "grids": self.grids,
                "learning_rate": self.learning_rate, "floor": self.floor,
                "train_on": self.train_on}

    def _draw_channels(self, rng: np.random.Generator, n: int) -> np.ndarray:
        cdf = np.cumsum(self.probs)
        cdf[-1] = 1.0
        flat = np.searchsorted(cdf, rng.random(n), side="right")
        return np.minimum(flat, self.channels - 1).astype(np.int64)

    def materialize(self, latent: LatentBatch) -> Batch:
        """Channel by p, then the point from that channel's (or the shared) grid."""
        rng = latent.rng()
        flat = self._draw_channels(rng, latent.n)
        group = flat if self.tables.groups > 1 else None
        x, jac, bins = self.tables.draw(rng, latent.n, group)
        weights = jac / self.probs[flat]
        return Batch(x=x.T, idx=self.domain.unflatten(flat), weights=weights,
                     aux={"bins": bins.T, "channel": flat.astype(np.int32)})

    def training(self, batch: Batch, wf2: np.ndarray, finite: np.ndarray | None) -> Training:
        """Grid sums (as VEGAS) plus per-channel sums of g^2, |g| and counts."""
        flat = batch.aux["channel"].astype(np.intp)
        p = self.probs[flat]
        g2 = wf2 * p * p  # |f * Jacobian|^2 without the 1/p_c of the channel draw
        per_channel = self.tables.groups > 1
        group = flat if per_channel else None
        sums, counts = self.tables.training(batch.aux["bins"].T, group,
                                            g2 if per_channel else wf2, finite)
        weight = np.ones_like(g2) if finite is None else finite.astype(np.float64)
        g2 = g2 * weight
        c = self.channels
        return {"grid_sum": sums, "grid_count": counts,
                "channel_g2": np.bincount(flat, weights=g2, minlength=c),
                "channel_abs": np.bincount(flat, weights=np.sqrt(g2), minlength=c),
                "channel_count": np.bincount(flat, weights=weight, minlength=c)}

    def _adapt(self, training: Training) -> None:
        self.tables = GridTables(adapt_edges(self.tables.edges, training["grid_sum"],
                                             training["grid_count"], self.alpha))
        counts = training["channel_count"]
        seen = counts > 0
        if not seen.any():
            return
        moment = training["channel_g2"] if self.train_on == "rms" else training["channel_abs"]
        est = np.zeros(self.channels)
        est[seen] = moment[seen] / counts[seen]
        if self.train_on == "rms":
            est = np.sqrt(est)
        if est[seen].sum() <= 0:
            return
        target = self.probs.copy()
        target[seen] = est[seen] / est[seen].sum() * self.probs[seen].sum()
        new = (1.0 - self.learning_rate) * self.probs + self.learning_rate * target
        self.probs = (1.0 - self.floor) * new / new.sum() + self.floor / self.channels

    def _state(self) -> dict[str, Any]:
        return {"edges": self.tables.edges, "probs": self.probs}

    def _load(self, state: Mapping[str, Any]) -> None:
        edges = np.asarray(state["edges"], dtype=np.float64)
        probs = np.asarray(state["probs"], dtype=np.float64)
        if edges.shape != self.tables.edges.shape or probs.shape != (self.channels,):
            raise ValueError(f"discrete snapshot shapes {edges.shape}, {probs.shape} do not "
                             f"match {self.tables.edges.shape}, ({self.channels},)")
        self.tables = GridTables(edges)
        self.probs = probs
