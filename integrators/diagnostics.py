"""A short, JSON-ready summary of what a sampler has learned, stored with each snapshot.

Why a summary and not the snapshot itself: a snapshot holds whole grids (bins x dims edges),
too much to read; ``runs show`` wants a few numbers per iteration. VEGAS: per dimension the
narrowest bin, its centre and the widest-to-narrowest ratio (1 for a uniform grid); the
discrete sampler: channel probabilities and the same grid figures; a process sampler: what
its ``get_diagnostics`` answers (asked only where the process already runs: its owner).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mainboard.integrators.samplers import Sampler

TOP_CHANNELS = 8  # the largest channel weights shown; the rest are summed


def grid_summary(edges: np.ndarray) -> dict[str, Any]:
    """Per dimension (over every grid of ``edges``, shape (grids, d, bins + 1)): narrowest
    bin width, where it sits, and widest / narrowest width."""
    edges = np.asarray(edges, dtype=np.float64).reshape(-1, edges.shape[-2], edges.shape[-1])
    grids, d, _ = edges.shape
    widths = np.diff(edges, axis=-1)
    narrow = widths.min(axis=(0, 2))
    g, b = np.unravel_index(widths.transpose(1, 0, 2).reshape(d, -1).argmin(axis=1),
                            (grids, widths.shape[-1]))
    where = [float(edges[g[j], j, b[j]:b[j] + 2].mean()) for j in range(d)]
    return {"grids": int(edges.shape[0]), "bins": int(widths.shape[-1]),
            "narrowest_bin": [float(v) for v in narrow], "narrowest_at": where,
            "width_ratio": [float(v) for v in widths.max(axis=(0, 2)) / narrow]}


def channel_summary(probs: np.ndarray) -> dict[str, Any]:
    """The largest channel probabilities (channel index -> weight) and the rest's sum."""
    probs = np.asarray(probs, dtype=np.float64)
    order = np.argsort(-probs, kind="stable")[:TOP_CHANNELS]
    return {"channels": int(probs.size),
            "top": {str(int(c)): float(probs[c]) for c in order},
            "rest": float(probs.sum() - probs[order].sum())}


def sampler_diagnostics(sampler: Sampler) -> dict[str, Any]:
    """The summary for ``runs show``; never starts a process."""
    inner = getattr(sampler, "inner", sampler)
    out: dict[str, Any] = {"kind": inner.kind, "version": int(sampler.version)}
    if inner.kind == "process":
        running = getattr(inner, "_managed", None) is not None
        out["process"] = inner.get_diagnostics() if running else None
        return out
    tables = getattr(inner, "tables", None)
    if tables is not None:
        out["grid"] = grid_summary(tables.edges)
    probs = getattr(inner, "probs", None)
    if probs is not None:
        out["channel_weights"] = channel_summary(probs)
    return out


__all__ = ["channel_summary", "grid_summary", "sampler_diagnostics"]
