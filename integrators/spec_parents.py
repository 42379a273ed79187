"""Parent run files: ``[scan]``, ``[tune]`` or ``[campaign]`` beside the child definition.

Why pydantic models here too: a bad parent file is refused in one line naming file, key,
value and what is valid (exit 2) before a broker, worker or receipt exists, like a run file.
Every child a parent can spawn is validated up front (each scan point, each campaign child;
a tuning study checks its parameters' bounds against the child), so a wrong value surfaces
before the first child runs. The parent's id is derived from its content with the children
resolved (``child = "other.toml"`` is read and inlined), so editing the child file makes a
new parent.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from mainboard.errors import ConfigError, SpecError
from mainboard.integrators.spec import RunSpec, parse_run, read_toml
from mainboard.integrators.spec_errors import to_config_error
from mainboard.integrators.spec_types import Count, Int, NonNegativeInt, PositiveReal, Real, Text

PARENT_KINDS = ("scan", "tune", "campaign")
PATH_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
MAX_CHILDREN = 10_000
Concurrency = Annotated[Int, Field(ge=1, le=64)]
Path_ = Annotated[Text, Field(pattern=PATH_PATTERN)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# ---------------------------------------------------------------- scan
class ScanParameter(_Model):
    """One axis of the grid: a dotted path into the child definition and its values."""

    name: Path_
    values: list[Any] = Field(min_length=1)


class ScanSpec(_Model):
    """``[scan]``: the full grid of every parameter's values, ``max_concurrent_runs`` at once."""

    parameters: list[ScanParameter] = Field(min_length=1)
    max_concurrent_runs: Concurrency = 1

    @model_validator(mode="after")
    def _distinct(self) -> ScanSpec:
        names = [p.name for p in self.parameters]
        if len(set(names)) != len(names):
            raise SpecError("parameters", "names a parameter twice", names,
                            valid="distinct dotted paths")
        size = 1
        for p in self.parameters:
            size *= len(p.values)
        if size > MAX_CHILDREN:
            raise SpecError("parameters", f"make a grid of {size} points", size,
                            valid=f"at most {MAX_CHILDREN} points")
        return self

    def points(self) -> list[dict[str, Any]]:
        """Every grid point, the last parameter varying fastest."""
        names = [p.name for p in self.parameters]
        return [dict(zip(names, combo, strict=True))
                for combo in itertools.product(*(p.values for p in self.parameters))]


# ---------------------------------------------------------------- tune
class FloatParameter(_Model):
    """A real parameter in [min, max], sampled on a log scale when ``log``."""

    kind: Literal["float"]
    name: Path_
    min: Real
    max: Real
    log: bool = False

    @model_validator(mode="after")
    def _bounds(self) -> FloatParameter:
        if self.max <= self.min or (self.log and self.min <= 0):
            raise SpecError("max", "needs min < max (and min > 0 when log = true)",
                            [self.min, self.max], valid="min < max")
        return self

    def grid_count(self, grid_points: int) -> int:
        """How many values a grid visits: ``grid_points``."""
        return grid_points

    def grid_value(self, k: int, grid_points: int) -> float:
        """The k-th of ``grid_points`` values, evenly spaced (geometrically when ``log``)."""
        space = np.geomspace if self.log else np.linspace
        return float(space(self.min, self.max, grid_points)[k])


class IntegerParameter(_Model):
    """An integer parameter: min, min + step, ..., up to max."""

    kind: Literal["integer"]
    name: Path_
    min: Int
    max: Int
    step: Annotated[Int, Field(ge=1)] = 1

    @model_validator(mode="after")
    def _bounds(self) -> IntegerParameter:
        if self.max < self.min:
            raise SpecError("max", "needs min <= max", [self.min, self.max], valid="min <= max")
        return self

    def grid_count(self, grid_points: int) -> int:
        """Every value from min to max by step (integers by arithmetic: ranges may be huge)."""
        return (int(self.max) - int(self.min)) // int(self.step) + 1

    def grid_value(self, k: int, grid_points: int) -> int:
        """The k-th value: min + k x step."""
        return int(self.min) + k * int(self.step)


class CategoricalParameter(_Model):
    """One of ``values``."""

    kind: Literal["categorical"]
    name: Path_
    values: list[Any] = Field(min_length=1)

    def grid_count(self, grid_points: int) -> int:
        """Every value, whatever ``grid_points``."""
        return len(self.values)

    def grid_value(self, k: int, grid_points: int) -> Any:
        """The k-th of ``values``."""
        return self.values[k]


TuneParameter = Annotated[FloatParameter | IntegerParameter | CategoricalParameter,
                          Field(discriminator="kind")]
ALGORITHMS = ("random", "grid", "tpe")
METRICS = ("relative_error", "variance", "time_normalized_variance", "error", "wall_s")


class OptimizerSpec(_Model):
    """``optimizer``: random and grid are seeded here; tpe is Optuna's TPE sampler."""

    algorithm: Literal[ALGORITHMS]  # type: ignore[valid-type]
    seed: NonNegativeInt = 0
    max_trials: Annotated[Int, Field(ge=1, le=MAX_CHILDREN)]
    grid_points: Annotated[Int, Field(ge=2, le=1000)] = 5  # per float parameter (grid)


class ObjectiveSpec(_Model):
    """``objective``: what a trial scores; time_normalized_variance = variance x wall s."""

    metric: Literal[METRICS]  # type: ignore[valid-type]
    mode: Literal["minimize", "maximize"] = "minimize"


class TuneSpec(_Model):
    """``[tune]``: a study of ``max_trials`` child runs, each with the same sample budget."""

    optimizer: OptimizerSpec
    objective: ObjectiveSpec
    parameters: list[TuneParameter] = Field(min_length=1)
    max_concurrent_trials: Concurrency = 1
    samples_per_trial: Count | None = None  # default: the child's [stop] max_samples

    @model_validator(mode="after")
    def _distinct(self) -> TuneSpec:
        names = [p.name for p in self.parameters]
        if len(set(names)) != len(names):
            raise SpecError("parameters", "names a parameter twice", names,
                            valid="distinct dotted paths")
        return self

    def corners(self) -> list[dict[str, Any]]:
        """Points that reach every parameter's extremes and every category (one parameter
        moved at a time from the lowest corner): enough to find a bound the child refuses."""
        low = {p.name: p.grid_value(0, 2) for p in self.parameters}
        out = [low]
        for p in self.parameters:
            last = p.grid_count(2) - 1
            ks = range(1, last + 1) if isinstance(p, CategoricalParameter) else [last]
            out += [{**low, p.name: p.grid_value(k, 2)} for k in ks if k > 0]
        return out


# ---------------------------------------------------------------- campaign
class CampaignChild(_Model):
    """One term of the total: ``coefficient`` x the integral of ``run``."""

    name: Text = Field(pattern=NAME_PATTERN)
    coefficient: Real
    run: Text | dict[str, Any]


class CampaignStop(_Model):
    """The total's stop rule: at least one of absolute_error, max_total_samples."""

    absolute_error: PositiveReal | None = None
    max_total_samples: Count | None = None

    @model_validator(mode="after")
    def _one(self) -> CampaignStop:
        if self.absolute_error is None and self.max_total_samples is None:
            raise SpecError("", "needs a stop condition", None,
                            valid="absolute_error, max_total_samples")
        return self


class CampaignSpec(_Model):
    """``[campaign]``: the weighted sum of child runs, next samples where the variance is."""

    children: list[CampaignChild] = Field(min_length=1, max_length=1000)
    stop: CampaignStop
    allocation: Literal["largest_variance"] = "largest_variance"
    max_active_runs: Concurrency = 1
    min_samples_per_child: Count
    step_samples: Count | None = None  # samples one allocation adds (default: min_samples)

    @model_validator(mode="after")
    def _distinct(self) -> CampaignSpec:
        names = [c.name for c in self.children]
        if len(set(names)) != len(names):
            raise SpecError("children", "names a child twice", names, valid="distinct names")
        return self

    @property
    def step(self) -> int:
        """Samples one allocation gives a child."""
        return int(self.step_samples or self.min_samples_per_child)


# ---------------------------------------------------------------- the file
class ParentSpec(_Model):
    """A parent run file: ``name``, one of scan/tune/campaign, and (scan, tune) ``child``."""

    name: Text = Field(pattern=NAME_PATTERN)
    scan: ScanSpec | None = None
    tune: TuneSpec | None = None
    campaign: CampaignSpec | None = None
    child: dict[str, Any] | Text | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> ParentSpec:
        given = [k for k in PARENT_KINDS if getattr(self, k) is not None]
        if len(given) != 1:
            raise SpecError("", f"needs exactly one of {', '.join(PARENT_KINDS)} (got "
                            f"{', '.join(given) or 'none'})", None, valid=", ".join(PARENT_KINDS))
        if given[0] != "campaign" and self.child is None:
            raise SpecError("child", f"{given[0]} needs a child run", None,
                            valid="a [child] table or child = \"other.toml\"")
        if given[0] == "campaign" and self.child is not None:
            raise SpecError("child", "a campaign takes no child run: each child names its own",
                            None, valid="[[campaign.children]] with name, coefficient, run")
        return self

    @property
    def kind(self) -> str:
        """scan, tune or campaign."""
        return next(k for k in PARENT_KINDS if getattr(self, k) is not None)

    def run_id(self) -> str:
        """Content-derived, children resolved (see :func:`load_parent`)."""
        text = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(("parent:" + text).encode()).hexdigest()[:16]

    def trial_samples(self) -> int:
        """A tuning trial's fixed budget: ``samples_per_trial``, else the child's
        max_samples (then its only stop condition: every trial draws as many)."""
        assert self.tune is not None and isinstance(self.child, dict)
        if self.tune.samples_per_trial is not None:
            return int(self.tune.samples_per_trial)
        return int(self.child["stop"]["max_samples"])

    def child_spec(self, point: dict[str, Any] | None = None, *, samples: int | None = None,
                   name: str | None = None, file: str = "<parent>") -> RunSpec:
        """The child definition with ``point`` applied (and ``samples`` as its sole stop)."""
        assert isinstance(self.child, dict), "load_parent resolves child files"
        return apply_point(self.child, point or {}, samples=samples, name=name, file=file)


def set_path(data: dict[str, Any], path: str, value: Any) -> None:
    """Set ``a.b.c`` in nested dicts, making tables on the way."""
    node: Any = data
    parts = path.split(".")
    for part in parts[:-1]:
        nxt = node.get(part) if isinstance(node, dict) else None
        if not isinstance(nxt, dict):
            nxt = {}
            node[part] = nxt
        node = nxt
    node[parts[-1]] = value


def apply_point(child: dict[str, Any], point: dict[str, Any], *, samples: int | None = None,
                name: str | None = None, file: str = "<parent>") -> RunSpec:
    """A validated child run for ``point`` (named ``name``); a value the child refuses names
    the point."""
    data = copy.deepcopy(child)
    for path, value in point.items():
        set_path(data, path, value)
    if samples is not None:
        data["stop"] = {"max_samples": int(samples)}
    if name is not None:
        data["name"] = name
    where = ", ".join(f"{k}={json.dumps(v)}" for k, v in point.items())
    return parse_run(data, file=f"{file} (child{' at ' + where if where else ''})")


def is_parent(data: dict[str, Any]) -> bool:
    """True for a parent run file's data (it has a scan, tune or campaign table)."""
    return any(k in data for k in PARENT_KINDS)


def _resolve_run(value: str | dict[str, Any], base: Path, key: str, file: str) -> dict[str, Any]:
    """An inline child table, or the run file a path names (relative to the parent's folder)."""
    if isinstance(value, dict):
        data = value
    else:
        data, _ = read_toml(base / value, f"child run file (from {file} {key})")
    if is_parent(data):
        raise ConfigError("a child run cannot itself be a scan, tune or campaign", file=file,
                          key=key, value=value if isinstance(value, str) else None,
                          valid="a plain run definition")
    return data


def parse_parent(data: dict[str, Any], *, file: str = "<parent dict>", text: str | None = None,
                 base: Path | None = None) -> ParentSpec:
    """Validate a parent file's data, inline its child files, validate every child it can."""
    try:
        spec = ParentSpec.model_validate(data)
    except ValidationError as exc:
        raise to_config_error(exc, ParentSpec, file=file, text=text) from None
    folder = base or Path(".")
    if spec.child is not None:
        spec = spec.model_copy(update={"child": _resolve_run(spec.child, folder, "child", file)})
    if spec.campaign is not None:
        kids = [c.model_copy(update={"run": _resolve_run(c.run, folder,
                                                         f"campaign.children[{i}].run", file)})
                for i, c in enumerate(spec.campaign.children)]
        spec = spec.model_copy(update={"campaign": spec.campaign.model_copy(
            update={"children": kids})})
    check_children(spec, file)
    return spec


def check_children(spec: ParentSpec, file: str) -> None:
    """Every child the parent will run, validated now (tune: its bounds and the budget)."""
    if spec.scan is not None:
        for point in spec.scan.points():
            spec.child_spec(point, file=file)
    elif spec.tune is not None:
        base = spec.child_spec(file=file)
        _no_timeline(base, "a tuning study sets each trial's sample budget", file, "child")
        if spec.tune.samples_per_trial is None and base.stop.max_samples is None:
            raise ConfigError("trials need a fixed sample budget", file=file,
                              key="tune.samples_per_trial",
                              valid="tune.samples_per_trial, or [stop] max_samples in the child")
        for point in spec.tune.corners():
            spec.child_spec(point, samples=spec.trial_samples(), file=file)
    else:  # a campaign: a parent is exactly one kind
        assert spec.campaign is not None
        for i, c in enumerate(spec.campaign.children):
            assert isinstance(c.run, dict)
            run = apply_point(c.run, {}, samples=spec.campaign.min_samples_per_child,
                              file=f"{file} campaign.children[{i}] ({c.name})")
            _no_timeline(run, "a campaign sends each child its samples",
                         file, f"campaign.children[{i}].run")
            if run.accumulator_kind != "scalar":
                raise ConfigError(f"a campaign sums scalar integrals; child {c.name!r} gives "
                                  f"{run.accumulator_kind} values", file=file,
                                  key=f"campaign.children[{i}].run",
                                  valid="a run whose integrand gives one real number")


def _no_timeline(run: RunSpec, why: str, file: str, key: str) -> None:
    """Tune and campaign budget their children's samples themselves: a child's own task
    timeline would fight that (a scan's children run theirs)."""
    if run.tasks:
        raise ConfigError(f"{why}: its child runs cannot carry [[tasks]]", file=file, key=key,
                          valid="a child without [[tasks]] (a scan's children may have them)")


def load_parent(path: str | Path) -> ParentSpec:
    """Read and validate a parent run file; child paths are relative to its folder."""
    p = Path(path)
    data, text = read_toml(p, "run file")
    return parse_parent(data, file=str(p), text=text, base=p.parent)


__all__ = ["PARENT_KINDS", "ParentSpec", "apply_point", "is_parent", "load_parent",
           "parse_parent", "set_path"]
