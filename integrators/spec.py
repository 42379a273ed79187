"""The run file (``RUN.toml``) as pydantic models: a user-facing contract with clear errors.

Every table forbids unknown keys; ``kind`` selects the model of ``[integrand]``, ``[sampler]``
and each ``[[transforms]]``. Values are strict (:mod:`~mainboard.integrators.spec_types`): no
``true`` or "3" for a count, integers within int64, finite numbers, so a bad file is refused
here, before a broker or worker starts. :func:`read_toml` is the only function here that
reads a file; errors come back as :class:`mainboard.errors.ConfigError` naming file, key, line
and what is valid.
"""

from __future__ import annotations

import hashlib
import json
import math
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from mainboard.errors import ConfigError, SpecError
from mainboard.integrators.domain import MAX_CHANNELS, too_many_channels
from mainboard.integrators.gammaboard import is_gammaboard, translate_file
from mainboard.integrators.goal import parse_deadline
from mainboard.integrators.projection import check_training
from mainboard.integrators.spec_checks import (
    check_integrand,
    check_transforms,
    integrand_components,
)
from mainboard.integrators.spec_errors import to_config_error, toml_error
from mainboard.integrators.spec_observables import (
    MAX_MOMENT,
    HistogramSpec,
    check_observables,
    drop_defaults,
)
from mainboard.integrators.spec_process import (
    MaterializerSpec,
    ProcessSamplerSpec,
    ProcessTable,
    ProcessTransformSpec,
)
from mainboard.integrators.spec_tasks import Step, TaskSpec, plan_tasks
from mainboard.integrators.spec_types import (
    Count,
    Flag,
    Int,
    NonNegativeInt,
    PositiveReal,
    Real,
    Text,
)

GENZ_KINDS = ("genz.oscillatory", "genz.product_peak", "genz.corner_peak", "genz.gaussian",
              "genz.continuous", "genz.discontinuous")
TARGET_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_.]*$"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DomainSpec(_Model):
    """``[domain]``: continuous dimensions and discrete cardinalities."""

    continuous: Int = Field(ge=1, le=1000)
    discrete: list[Count] = []

    @model_validator(mode="after")
    def _channels(self) -> DomainSpec:
        why = too_many_channels(self.discrete)
        if why:
            raise SpecError("discrete", f"has {why}", self.discrete,
                            valid=f"cardinalities whose product is at most {MAX_CHANNELS}")
        return self


# ---------------------------------------------------------------- integrands
class GenzSpec(_Model):
    """The six Genz families; ``a`` is the difficulty, ``u`` the shift (default 0.5)."""

    kind: Literal[GENZ_KINDS]  # type: ignore[valid-type]
    a: list[Real] = Field(min_length=1)
    u: list[Real] | None = None

    @model_validator(mode="after")
    def _check(self) -> GenzSpec:
        if self.kind == "genz.corner_peak" and min(self.a) <= 0:
            raise SpecError("a", "genz.corner_peak needs every a > 0", self.a,
                            valid="an array of finite numbers greater than 0")
        return self


class ConstantSpec(_Model):
    """f = value."""

    kind: Literal["constant"]
    value: Real = 1.0


class PolynomialSpec(_Model):
    """f = prod_i p(x_i) with p(t) = sum_k coefficients[k] t^k."""

    kind: Literal["polynomial"]
    coefficients: list[Real] = Field(min_length=1)


class GaussianPeakSpec(_Model):
    """A normalised Gaussian of width ``sigma`` centred at ``u`` (default 0.5)."""

    kind: Literal["gaussian_peak"]
    sigma: PositiveReal = 0.1
    u: list[Real] | None = None


class RidgeSpec(_Model):
    """The mean of ``peaks`` normalised Gaussians of width ``sigma`` centred on the diagonal
    from (low, ..., low) to (high, ..., high): the vegas package's VEGAS+ showcase."""

    kind: Literal["ridge"]
    peaks: Annotated[Int, Field(ge=1, le=10_000)] = 100
    sigma: PositiveReal = 0.1 / math.sqrt(2.0)
    low: Real = 0.4
    high: Real = 0.6


class ComplexExponentialSpec(_Model):
    """f = exp(i sum a_j x_j): a complex-valued integrand with a known answer."""

    kind: Literal["complex_exponential"]
    a: list[Real] = Field(min_length=1)


class MomentsSpec(_Model):
    """Vector integrand f_k = prod_i x_i^powers[k]."""

    kind: Literal["moments"]
    powers: list[Annotated[Int, Field(ge=0, le=64)]] = Field(min_length=1)


class ChannelsSpec(_Model):
    """f(x, c) = coefficients[c] * gaussian_peak(x; u, sigma[c]) over the flat discrete channel c."""

    kind: Literal["channels"]
    coefficients: list[Real] = Field(min_length=1)
    sigma: PositiveReal | list[PositiveReal] = 0.1
    u: list[Real] | None = None


MAX_COMPONENTS = 4096
Components = Annotated[Int, Field(ge=1, le=MAX_COMPONENTS)] | Literal["complex"]


class PythonSpec(_Model):
    """A Python ``module:function`` taking x (n, d) [and idx (n, k) when the domain has some]."""

    kind: Literal["python"]
    target: Text = Field(pattern=TARGET_PATTERN)
    params: dict[str, Any] = {}
    components: Components = 1
    exact: Real | list[Real] | None = None


class ProcessSpec(ProcessTable):
    """An integrand in an external process; ``components`` is a count, "complex", or a list
    of component names (sent to the process; one name gives a scalar integrand)."""

    kind: Literal["process"]
    components: int | Literal["complex"] | list[str] = 1
    exact: Real | list[Real] | None = None

    @field_validator("components", mode="before")
    @classmethod
    def _components(cls, value: Any) -> Any:
        names = (isinstance(value, list) and bool(value)
                 and all(isinstance(v, str) and v for v in value)
                 and len(set(value)) == len(value))
        count = type(value) is int and 1 <= value <= MAX_COMPONENTS
        if not (names or count or value == "complex"):
            raise SpecError("", f"components must be a count 1..{MAX_COMPONENTS}, \"complex\", "
                            "or a list of distinct non-empty names", value,
                            valid=f"a count from 1 to {MAX_COMPONENTS}, \"complex\", or an "
                                  "array of distinct names")
        return value


IntegrandSpec = Annotated[
    GenzSpec | ConstantSpec | PolynomialSpec | GaussianPeakSpec | ComplexExponentialSpec
    | MomentsSpec | ChannelsSpec | PythonSpec | ProcessSpec | RidgeSpec,
    Field(discriminator="kind")]


# ---------------------------------------------------------------- samplers
class _Trained(_Model):
    """A sampler's training phase: its first ``training_samples`` samples adapt it and are
    not part of the estimate (unset keys stay out of dumps, so run ids do not change)."""

    training_samples: Annotated[NonNegativeInt, Field(gt=0)] | None = None

    @model_serializer(mode="wrap")
    def _drop_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {k: v for k, v in handler(self).items() if v is not None}


class NaiveSpec(_Trained):
    """Uniform sampling (optionally with points from a process materializer)."""

    kind: Literal["naive"]
    materializer: MaterializerSpec | None = None


class VegasSpec(_Trained):
    """Lepage's VEGAS map: ``bins`` per dimension, damping ``alpha`` (0 freezes the grid);
    VEGAS+ adaptive stratification damped by ``beta`` (0: classic VEGAS, 1: optimal)."""

    kind: Literal["vegas"]
    bins: Int = Field(default=64, ge=2, le=100_000)
    alpha: Real = Field(default=0.5, ge=0, le=10)
    beta: Real = Field(default=0.75, ge=0, le=1)


class DiscreteSpec(_Trained):
    """Havana-style adaptive channel probabilities plus VEGAS grids (shared or per channel)."""

    kind: Literal["discrete"]
    bins: Int = Field(default=64, ge=2, le=100_000)
    alpha: Real = Field(default=0.5, ge=0, le=10)
    grids: Literal["shared", "per_channel"] = "shared"
    learning_rate: Real = Field(default=0.5, gt=0, le=1)  # a probability step
    floor: Real = Field(default=0.05, gt=0, lt=1)  # a probability
    train_on: Literal["rms", "abs"] = "rms"


SamplerSpec = Annotated[NaiveSpec | VegasSpec | DiscreteSpec | ProcessSamplerSpec,
                        Field(discriminator="kind")]


# ---------------------------------------------------------------- transforms
class _Centred(_Model):
    radius: PositiveReal = 1.0
    center: list[Real] | None = None


class UnitBallSpec(_Centred):
    """Unit cube of dimension d -> ball of ``radius`` in R^d (volume measure)."""

    kind: Literal["unit_ball"]

    def output_dim(self, d: int) -> int:
        """Same dimension."""
        return d


class SphericalSpec(_Centred):
    """Unit cube of dimension d -> sphere of ``radius`` in R^(d+1) (surface measure)."""

    kind: Literal["spherical"]

    def output_dim(self, d: int) -> int:
        """One more dimension than the cube."""
        return d + 1


class AffineSpec(_Model):
    """x -> shift + scale * x per dimension (scalar or per-dimension lists)."""

    kind: Literal["affine"]
    scale: Real | list[Real] = 1.0
    shift: Real | list[Real] = 0.0

    def output_dim(self, d: int) -> int:
        """Same dimension."""
        return d


TransformSpec = Annotated[UnitBallSpec | SphericalSpec | AffineSpec | ProcessTransformSpec,
                          Field(discriminator="kind")]


def component_count(spec: Any) -> int | str:
    """The integrand's value width: a count, or "complex"; a list of names counts its entries."""
    comps = integrand_components(spec)
    return len(comps) if isinstance(comps, list) else comps


class AccumulatorSpec(_Model):
    """``[accumulator]``: value kind (default: what the integrand gives); ``discard`` leaves
    the first iterations out of the result; ``[[accumulator.histograms]]`` and ``moments``
    (up to order 4) are the observables (:mod:`~mainboard.integrators.spec_observables`)."""

    kind: Literal["scalar", "complex", "vector"] | None = None
    discard: NonNegativeInt = 0
    histograms: list[HistogramSpec] = []
    moments: Annotated[Int, Field(ge=0, le=MAX_MOMENT)] = 0

    @model_serializer(mode="wrap")
    def _drop_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return drop_defaults(handler(self))


class StopSpec(_Model):
    """``[stop]``: at least one of max_samples, max_iterations, absolute_error, relative_error;
    with an error target, a goal the fleet keeper sizes pools for (``deadline``: a duration
    or a time of day, resolved once at run start; ``budget_usd``, ``budget_core_hours``).
    Goal keys left unset stay out of dumps, so run ids do not change."""

    max_samples: Count | None = None
    max_iterations: Count | None = None
    absolute_error: PositiveReal | None = None
    relative_error: PositiveReal | None = None
    min_samples: NonNegativeInt = 0
    deadline: Text | None = None
    budget_usd: PositiveReal | None = None
    budget_core_hours: PositiveReal | None = None

    @model_validator(mode="after")
    def _one_required(self) -> StopSpec:
        if all(getattr(self, k) is None for k in STOP_LIMITS):
            raise SpecError("", "needs at least one stop condition", None,
                            valid=", ".join(STOP_LIMITS) + " (min_samples only delays a stop)")
        if self.deadline is not None:
            parse_deadline(self.deadline)
        goal = [k for k in GOAL_KEYS if getattr(self, k) is not None]
        if goal and self.absolute_error is None and self.relative_error is None:
            raise SpecError(goal[0], f"{goal[0]} is a goal for reaching an error target, "
                            "and this run has none", getattr(self, goal[0]),
                            valid="relative_error or absolute_error beside it")
        return self

    @model_serializer(mode="wrap")
    def _drop_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {k: v for k, v in handler(self).items() if k not in GOAL_KEYS or v is not None}

    @property
    def goal(self) -> bool:
        """A deadline or a budget: the keeper sizes the run's pools for it."""
        return any(getattr(self, k) is not None for k in GOAL_KEYS)


STOP_LIMITS = ("max_samples", "max_iterations", "absolute_error", "relative_error")
GOAL_KEYS = ("deadline", "budget_usd", "budget_core_hours")


class BatchingSpec(_Model):
    """``[batching]``: samples per batch, batches per iteration, fused stages, at most
    how many batches one task of a fused run carries (``max_bundle``; unset: sized from
    measured task time), and the seconds one task needs (``time_request``: a fleet worker
    whose allocation ends sooner does not start it; unset: the measured task time). Both
    unset are left out of the definition, so run ids stay as they were."""

    batch_size: Int = Field(default=100_000, ge=1, le=100_000_000)
    batches_per_iteration: Int = Field(default=10, ge=1, le=1_000_000)
    fuse: Flag = False
    max_bundle: Int | None = Field(default=None, ge=1, le=1_000_000)
    time_request: PositiveReal | None = Field(default=None, le=366 * 86400)

    @model_serializer(mode="wrap")
    def _drop_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {k: v for k, v in handler(self).items()
                if k not in ("max_bundle", "time_request") or v is not None}


class RunSpec(_Model):
    """A whole run file; immutable, with a content-derived :meth:`run_id`."""

    name: Text = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    seed: NonNegativeInt
    domain: DomainSpec
    integrand: IntegrandSpec
    sampler: SamplerSpec = VegasSpec(kind="vegas")
    transforms: list[TransformSpec] = []
    accumulator: AccumulatorSpec = AccumulatorSpec()
    stop: StopSpec
    batching: BatchingSpec = BatchingSpec()
    tasks: list[TaskSpec] = Field(default=[],
                                  validation_alias=AliasChoices("tasks", "task_queue"))

    @model_serializer(mode="wrap")
    def _drop_no_tasks(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A run without tasks dumps (and so hashes) exactly as before tasks existed.
        return {k: v for k, v in handler(self).items() if k != "tasks" or v}

    @property
    def integrand_dim(self) -> int:
        """Dimension of the points the integrand receives (after all transforms)."""
        d = self.domain.continuous
        for t in self.transforms:
            d = t.output_dim(d)
        return d

    @property
    def natural_accumulator(self) -> str:
        """The accumulator kind the integrand's values call for."""
        comps = component_count(self.integrand)
        return "complex" if comps == "complex" else ("scalar" if comps == 1 else "vector")

    @property
    def accumulator_kind(self) -> str:
        """``[accumulator] kind``, or the integrand's natural kind when it is not set."""
        return self.accumulator.kind or self.natural_accumulator

    @model_validator(mode="after")
    def _cross_check(self) -> RunSpec:
        check_transforms(self.transforms, self.domain.continuous)
        check_integrand(self.integrand, self.integrand_dim, self.domain)
        natural = self.natural_accumulator
        kind = self.accumulator.kind
        if kind is not None and kind != natural and not (kind == "vector" and natural == "scalar"):
            raise SpecError("accumulator.kind", f"the integrand gives {natural} values, so the "
                            f"accumulator kind must be {natural!r}", kind)
        check_training(self.sampler, self.stop, self.integrand)
        check_observables(self.accumulator.histograms, self.integrand_dim,
                          self.domain.discrete)
        if self.sampler.kind == "discrete" and not self.domain.discrete:
            raise SpecError("sampler.kind", "the discrete sampler needs domain.discrete "
                            "cardinalities", "discrete")
        self.task_steps()
        return self

    def task_steps(self, before: Sequence[Step] = (), tasks: Sequence[Any] | None = None
                   ) -> list[Step]:
        """The task timeline (``tasks``, default the run's own, after ``before``), every
        step's run checked as a run of its own; empty for a run without tasks."""
        todo = self.tasks if tasks is None else tasks
        if not todo:
            return list(before)
        base = self.model_dump(mode="json", exclude={"tasks"})
        steps = plan_tasks(base, todo, before)
        for step in steps[len(before):]:
            check_step(step, base, len(before))
        return steps

    def run_id(self) -> str:
        """Content-derived id: the same definition always gets the same id."""
        text = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def check_step(step: Step, base: dict[str, Any], first: int = 0) -> None:
    """A task's tables in effect must make a valid run; the first problem names the task."""
    try:
        RunSpec.model_validate(step.run_data(base))
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(part) for part in err["loc"] if not str(part).startswith(
            ("function-", "tagged-union")))
        cause = err["msg"].removeprefix("Value error, ")
        raise SpecError(f"tasks.{step.index - first}", f"task {step.name!r} ({step.kind}) "
                        f"would run with an invalid {key or 'run'}: {cause}",
                        err.get("input") if not isinstance(err.get("input"), dict) else None,
                        ) from None


def parse_run(data: dict[str, Any], *, file: str | None = None,
              text: str | None = None) -> RunSpec:
    """Validate run data; raise ConfigError naming the key (and line when ``text`` is given)."""
    try:
        return RunSpec.model_validate(data)
    except ValidationError as exc:
        raise to_config_error(exc, RunSpec, file=file, text=text) from None


def read_toml(path: Path, what: str) -> tuple[dict[str, Any], str]:
    """A TOML file's data and its text (for line numbers in errors); ``what`` names the
    file in the one-line ConfigError of a missing, unreadable or malformed one."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{what} not found", file=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {what}: {exc}", file=str(path)) from None
    try:
        return tomllib.loads(text), text
    except tomllib.TOMLDecodeError as exc:
        raise toml_error(exc, str(path)) from None


def run_from_toml(data: dict[str, Any], file: str, text: str | None = None) -> RunSpec:
    """A run file's data validated (a gammaboard file's tables mapped onto ours first)."""
    if is_gammaboard(data):
        data = translate_file(data, file)
    return parse_run(data, file=file, text=text)


def load_run_file(path: str | Path) -> RunSpec:
    """Read and validate a plain ``RUN.toml`` (``runfile.load_run`` reads parents too)."""
    p = Path(path)
    data, text = read_toml(p, "run file")
    return run_from_toml(data, str(p), text)
