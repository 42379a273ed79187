"""The one owner of a process sampler: the plan is the sampler's, batches come in order.

A process sampler keeps state no seed can rebuild (its own random stream, its grid), so one
live instance per run produces every latent batch, in batch order, and ingests the training
values in that order (gammaboard's sampler aggregator). The owner is whoever holds the
:class:`~mainboard.integrators.driver.RunState`: ``integrate_local`` or the distributed
coordinator, both through :func:`produce_iteration`, so they produce the same batches.

How the protocol's plan maps on iterations (see docs/process-protocol.md): an iteration is
at most ``batches_per_iteration`` batches; before each the owner asks ``sample_plan``;
``produce`` gives the batch's size, clipped to the samples the stop rule and the training
phase leave; ``pause`` ends the iteration early: its batches are evaluated, their training
values ingested in order at the iteration's end, and the next iteration asks again. A pause
with nothing produced in the iteration has nothing outstanding to wait for: an error.
"""

from __future__ import annotations

from typing import Any

from mainboard.errors import IntegrationFailed
from mainboard.integrators.samplers import Sampler
from mainboard.integrators.seeding import LatentBatch


def owned(sampler: Sampler) -> Any:
    """The sampler object whose batches only its owner may produce (a process sampler,
    possibly wrapped by a materializer), or None for samplers whose batches are pure
    functions of (seed, iteration, batch) and may be drawn on any worker."""
    inner = getattr(sampler, "inner", sampler)
    return inner if getattr(inner, "owned", False) else None


def training_wanted(sampler: Sampler, left: int) -> int:
    """The samples the training phase still takes: ``left`` of the run's N, cut (or ended)
    by an owned sampler's ``training_samples_remaining`` (None: no opinion)."""
    inner = owned(sampler)
    if left <= 0 or inner is None:
        return max(left, 0)
    remaining = inner.training_samples_remaining()
    return left if remaining is None else min(left, remaining)


def produce_iteration(sampler: Sampler, run_seed: int, iteration: int, budget: int | None,
                      max_batches: int) -> list[LatentBatch]:
    """The owner's batches of one iteration, produced now in batch order (see module doc).

    ``budget`` is the most samples this iteration may hold (None: unlimited).
    """
    inner = owned(sampler)
    if inner is None:
        raise TypeError(f"a {sampler.kind!r} sampler has no owner; draw its batches anywhere")
    out: list[LatentBatch] = []
    left = budget
    while len(out) < max_batches and (left is None or left > 0):
        plan = inner.sample_plan()
        if plan["kind"] == "pause":
            if not out:
                raise IntegrationFailed(
                    f"process sampler `{inner.label}` paused before iteration {iteration} with "
                    "no batch outstanding (all training values were ingested): it would wait "
                    "forever; its sample_plan must produce")
            break
        n = plan["nr_samples"] if left is None else min(plan["nr_samples"], left)
        out.append(sampler.sample(run_seed, iteration, len(out), n))
        if left is not None:
            left -= n
    return out


__all__ = ["owned", "produce_iteration", "training_wanted"]
