"""A run's ``[[tasks]]``: an ordered list of things to do with one integrand and one seed.

Why its own module: the task list is a timeline over the run's own tables. Each task
changes some of them (``sampler``, ``frozen``, ``transforms``, ``accumulator``, ``stop``,
``batching``) and keeps the rest as the task before it left them; ``from = "NAME"`` starts
the task from an earlier task's end instead (the timeline branches). :func:`plan_tasks`
walks the list once and gives every task its name and the tables in effect, as plain run
data; ``spec.py`` validates each of those as a run of its own, so a task's ``sampler`` or
``stop`` is refused with the same words as the run's. gammaboard's spellings
(``[[task_queue]]``, ``batch_transforms``, ``geometry`` of ``plot_line`` and ``image``) are
accepted where they do not conflict.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from mainboard.errors import SpecError
from mainboard.integrators.spec_types import Count, Flag, Int, Real, Text

TASK_KINDS = ("sample", "plot_line", "image", "configure", "pause")
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
SETTINGS = ("sampler", "frozen", "transforms", "accumulator", "stop", "batching")
MAX_POINTS = 1_000_000  # of one plot or image: its values are stored with the run


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class _Task(_Model):
    name: Text | None = Field(default=None, pattern=NAME_PATTERN)
    from_: Text | None = Field(default=None, alias="from")

    @model_serializer(mode="wrap")
    def _as_written(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Unset keys stay out (they mean "as the timeline left it"); ``from`` as spelled.
        return {("from" if k == "from_" else k): v for k, v in handler(self).items()
                if v is not None}


class SampleTask(_Task):
    """Samples with the sampler as the timeline left it: ``nr_samples`` (or ``stop``) of
    them, ``frozen = true`` for inference (no adaptation), new tables where given."""

    kind: Literal["sample"]
    nr_samples: Count | None = None
    stop: dict[str, Any] | None = None
    sampler: dict[str, Any] | None = None
    frozen: Flag | None = None
    transforms: list[dict[str, Any]] | None = Field(
        default=None, validation_alias=AliasChoices("transforms", "batch_transforms"))
    accumulator: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _one_budget(self) -> SampleTask:
        if self.nr_samples is not None and self.stop is not None:
            raise SpecError("nr_samples", "give nr_samples or stop, not both", self.nr_samples,
                            valid="nr_samples = N, or stop = { max_samples = N, ... }")
        return self


class Linspace(_Model):
    """gammaboard's ``{ start, stop, count }``: ``count`` evenly spaced values."""

    start: Real
    stop: Real
    count: Annotated[Int, Field(ge=1, le=MAX_POINTS)]

    def values(self) -> list[float]:
        """The points, ends included (one point: ``start``)."""
        if self.count == 1:
            return [float(self.start)]
        step = (self.stop - self.start) / (self.count - 1)
        return [float(self.start + i * step) for i in range(self.count)]


class LineGeometry(_Model):
    """x(t) = offset + t direction for t in the linspace (gammaboard's line raster)."""

    offset: list[Real] = Field(min_length=1)
    direction: list[Real] = Field(min_length=1)
    linspace: Linspace
    discrete: list[Int] = []


class PlaneGeometry(_Model):
    """x(u, v) = offset + u u_vector + v v_vector over the u/v linspaces (gammaboard's
    plane raster); values are stored row by row, v outer, u inner."""

    offset: list[Real] = Field(min_length=1)
    u_vector: list[Real] = Field(min_length=1)
    v_vector: list[Real] = Field(min_length=1)
    u_linspace: Linspace
    v_linspace: Linspace
    discrete: list[Int] = []


class _Raster(_Task):
    """The integrand evaluated on fixed points, through the task's transforms."""

    observable: Text | None = None  # gammaboard names the value family; ours: the integrand's
    transforms: list[dict[str, Any]] | None = Field(
        default=None, validation_alias=AliasChoices("transforms", "batch_transforms"))


    def check_dims(self, domain: Mapping[str, Any], where: str) -> None:
        """Every vector of the geometry lives in the run's continuous domain (the input of
        the transforms); ``discrete`` gives one index per discrete dimension."""
        d = int(domain["continuous"])
        g = self.geometry  # type: ignore[attr-defined]
        for key in ("offset", "direction", "u_vector", "v_vector"):
            vec = getattr(g, key, None)
            if vec is not None and len(vec) != d:
                raise SpecError(f"{where}.geometry.{key}", f"has {len(vec)} components",
                                vec, valid=f"{d} numbers (domain.continuous)")
        cards = list(domain.get("discrete") or [])
        if g.discrete and (len(g.discrete) != len(cards) or any(
                not 0 <= i < c for i, c in zip(g.discrete, cards, strict=True))):
            raise SpecError(f"{where}.geometry.discrete", "needs one index per discrete "
                            "dimension, each below its cardinality", g.discrete,
                            valid=f"{len(cards)} indices below {cards}")


class PlotLineTask(_Raster):
    """A 1-d linspace along a direction."""

    kind: Literal["plot_line"]
    geometry: LineGeometry


class ImageTask(_Raster):
    """A u/v raster over a plane."""

    kind: Literal["image"]
    geometry: PlaneGeometry

    @model_validator(mode="after")
    def _size(self) -> ImageTask:
        g = self.geometry
        if g.u_linspace.count * g.v_linspace.count > MAX_POINTS:
            raise SpecError("geometry", f"the image has {g.u_linspace.count} x "
                            f"{g.v_linspace.count} points", None,
                            valid=f"at most {MAX_POINTS} points")
        return self


class ConfigureTask(_Task):
    """Batching, accumulator and stop rules from here on; samples nothing."""

    kind: Literal["configure"]
    batching: dict[str, Any] | None = None
    accumulator: dict[str, Any] | None = None
    stop: dict[str, Any] | None = None


class PauseTask(_Task):
    """The run pauses here; ``runs resume`` continues with the next task."""

    kind: Literal["pause"]


TaskSpec = Annotated[SampleTask | PlotLineTask | ImageTask | ConfigureTask | PauseTask,
                     Field(discriminator="kind")]


class TaskFile(_Model):
    """A file of tasks for ``runs append``: ``[[tasks]]`` (or ``[[task_queue]]``), and
    gammaboard's single ``task = {...}``, which goes first."""

    task: TaskSpec | None = None
    tasks: list[TaskSpec] = Field(default=[],
                                  validation_alias=AliasChoices("tasks", "task_queue"))

    @model_validator(mode="after")
    def _some(self) -> TaskFile:
        if self.task is None and not self.tasks:
            raise SpecError("tasks", "the file holds no task", None,
                            valid="[[tasks]] tables (or task = { kind = ... })")
        return self

    def all(self) -> list[Any]:
        """The tasks in the order they are appended."""
        return ([self.task] if self.task is not None else []) + list(self.tasks)


@dataclass(frozen=True)
class Step:
    """One task on the timeline: its name, the task it starts from (``parent``: an index,
    None for the run's start) and the run tables in effect while it runs."""

    index: int
    name: str
    task: Any  # a TaskSpec
    parent: int | None
    settings: Mapping[str, Any]

    @property
    def kind(self) -> str:
        """The task's kind."""
        return str(self.task.kind)

    def run_data(self, base: Mapping[str, Any]) -> dict[str, Any]:
        """The run this task executes: the run's data with its tables in effect, no tasks."""
        return {**{k: v for k, v in base.items() if k not in ("tasks", "task_queue")},
                **{k: v for k, v in self.settings.items() if k != "frozen"}}


def _changes(task: Any) -> dict[str, Any]:
    """The tables a task sets (its omitted keys keep the timeline's values)."""
    out: dict[str, Any] = {}
    for key in SETTINGS:
        value = getattr(task, key, None)
        if value is not None:
            out[key] = value
    if getattr(task, "nr_samples", None) is not None:
        out["stop"] = {"max_samples": task.nr_samples}
    return out


def plan_tasks(base: Mapping[str, Any], tasks: Sequence[Any],
               before: Sequence[Step] = ()) -> list[Step]:
    """Name every task and give it the tables in effect; ``before``: the run's steps so far
    (appended tasks continue its timeline). A generated name is ``<kind>-<n>``, the task
    being the n-th of its kind (named ones count), the next free n if that is taken.
    Raises SpecError naming ``tasks.<i>.<key>``."""
    start = {"frozen": False, **{k: base[k] for k in SETTINGS if k in base}}
    steps = list(before)
    taken = {s.name for s in steps}
    counts: dict[str, int] = {}
    for s in steps:
        counts[s.kind] = counts.get(s.kind, 0) + 1
    for offset, task in enumerate(tasks):
        i = len(steps)
        where = f"tasks.{offset}"
        counts[task.kind] = counts.get(task.kind, 0) + 1
        name = task.name
        if name is None:
            n = counts[task.kind]
            while f"{task.kind}-{n}" in taken:
                n += 1
            name = f"{task.kind}-{n}"
        elif name in taken:
            raise SpecError(f"{where}.name", f"task name {name!r} is used twice", name,
                            valid="a name no other task of the run has")
        parent = i - 1 if i else None
        if task.from_ is not None:
            names = [s.name for s in steps]
            if task.from_ not in names:
                raise SpecError(f"{where}.from", f"no earlier task is named {task.from_!r}",
                                task.from_, valid=", ".join(names) or "no task before this one")
            parent = names.index(task.from_)
        if isinstance(task, _Raster):
            task.check_dims(base["domain"], where)
        inherited = start if parent is None else steps[parent].settings
        steps.append(Step(i, name, task, parent, {**inherited, **_changes(task)}))
        taken.add(name)
    return steps


__all__ = ["MAX_POINTS", "TASK_KINDS", "ConfigureTask", "ImageTask", "LineGeometry",
           "Linspace", "PauseTask", "PlaneGeometry", "PlotLineTask", "SampleTask", "Step",
           "TaskFile", "TaskSpec", "plan_tasks"]
