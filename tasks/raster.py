"""``plot_line`` and ``image`` tasks on the fleet, the worker's side: the stage task that
computes one chunk of a raster's points and stores its values once.

Why not the iteration loop: nothing is sampled, merged or adapted; a raster is one
published definition (the task's transforms), one iteration number of the run (so
workers cache it apart), and a list of row ranges. A worker computes its rows' points
from the geometry in the message (:mod:`~mainboard.integrators.raster`), so values are
the same whichever worker takes a chunk; a chunk stored twice counts once (HSETNX). The
coordinator's side, chunks sent and collected, is :mod:`mainboard.tasks.rasterrun`: a
worker booting imports this module, and so not the coordinator.
"""

from __future__ import annotations

from typing import Any

from celery import Task

from mainboard.integrators import raster
from mainboard.tasks.context import BatchRef
from mainboard.tasks.stages import _stage_task, run_stage

Message = dict[str, Any]


@_stage_task("raster")
def raster_chunk(self: Task, message: Message) -> Message:
    """The integrand's values at one chunk of a plot's or image's points, stored once."""
    ref = BatchRef.from_dict(message["ref"])

    def body(c: Any) -> Message:
        vals = raster.values(c.run, message["kind"], message["geometry"], int(message["lo"]),
                             int(message["hi"]))
        return c.forward(stored=c.store_result({"values": vals}))

    return run_stage(self, ref, "raster", body, final=True)


__all__ = ["Message", "raster_chunk"]
