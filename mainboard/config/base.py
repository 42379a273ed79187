"""Building blocks of the mainboard.toml models: the strict base model, validation errors
that survive pydantic with their hint, durations, and the per-host job tables
(``[hosts.NAME.defaults]`` and ``[hosts.NAME.queues.Q]``). Import from ``mainboard.config``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Annotated, Any, get_args

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError

from mainboard.config import expr
from mainboard.config.durations import DURATION_FORMS, parse_duration, positive_duration
from mainboard.config.interpolate import local_num_cpus
from mainboard.errors import ConfigError, ExpressionError


def custom_error(detail: str, valid: str | None = None, loc: tuple[str | int, ...] = (),
                 expression: bool = False, **value: Any) -> PydanticCustomError:
    """A validation error that mainboard.config turns back into a precise ConfigError.

    ``loc`` extends the error's location (for model-level checks); pass ``value=`` to
    show a value other than the validator's input.
    """
    return PydanticCustomError("mainboard", "{detail}", {
        "detail": detail, "valid": valid, "loc": loc, "expression": expression, **value})


def reraise(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Let helpers that raise ConfigError run inside pydantic validators."""
    def wrapper(value: Any, *args: Any) -> Any:
        try:
            return fn(value, *args)
        except ConfigError as exc:
            raise custom_error(exc.detail, exc.valid,
                               expression=isinstance(exc, ExpressionError)) from None
    wrapper.__doc__ = fn.__doc__
    return wrapper


PositiveDuration = Annotated[int, BeforeValidator(reraise(positive_duration))]


def _plain_number(field: FieldInfo) -> type | None:
    """int or float when a field takes exactly that (optionally None) and no validator of its
    own reads the raw value (durations and expressions refuse booleans themselves)."""
    if any(isinstance(m, BeforeValidator) for m in field.metadata):
        return None
    members = set(get_args(field.annotation)) - {type(None)} or {field.annotation}
    return members.pop() if len(members) == 1 and members <= {int, float} else None


class ConfigModel(BaseModel):
    """Base: unknown keys are errors; `-` and `_` are interchangeable in keys; a TOML boolean
    is never a number and a TOML float never an integer."""

    model_config = ConfigDict(extra="forbid", alias_generator=lambda name: name.replace("_", "-"),
                              validate_by_name=True, validate_by_alias=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _toml_types(cls, data: Any) -> Any:
        """Refuse what pydantic's lax mode would coerce (``port = true`` is 1, ``22.0`` is 22).
        Lax mode stays for strings, so an interpolated ``"{{ env('PORT') }}"`` is a number.
        (A model validator: pydantic allows no field validator on the hosts' ``kind``.)"""
        for key, value in data.items() if isinstance(data, dict) else ():
            field = cls.model_fields.get(str(key).replace("-", "_"))
            if field is None or not isinstance(value, bool | float):
                continue
            want = _plain_number(field)
            if want is int or (want is float and isinstance(value, bool)):
                noun = "an integer" if want is int else "a number"
                raise custom_error(f"wrong type: expected {noun}", field.description or noun,
                                   (key,), value=value)
        return data


class QueuePolicy(ConfigModel):
    """[hosts.NAME.queues.Q]: limits checked at submit time, before any ssh."""

    max_walltime: PositiveDuration
    mem_ceiling_gb: float = Field(gt=0, description="a number of GB greater than 0")
    max_nodes: int | None = Field(default=None, gt=0, description="an integer >= 1")
    max_gpus: int | None = Field(default=None, ge=0, description="an integer >= 0")


_NO_WALLTIME = tuple(n for n in expr.ALLOWED_NAMES if n != "walltime_s")
_MINIMUM = {"walltime": 1, "mem_gb": 1e-9, "cpus": 1, "gpus": 0}


class JobDefaults(ConfigModel):
    """[hosts.NAME.defaults]: numbers, durations, or expressions over attempt/walltime_s/num_cpus."""

    walltime: int | str | None = None
    mem_gb: float | str | None = None
    cpus: int | str | None = None
    gpus: int | str | None = None
    queue: str | None = None

    @field_validator("walltime", "mem_gb", "cpus", "gpus", mode="before")
    @classmethod
    def _number_or_expression(cls, value: Any, info: ValidationInfo) -> Any:
        """Numbers are range-checked now; strings must be durations or whitelisted expressions."""
        name = info.field_name or ""
        allowed = _NO_WALLTIME if name == "walltime" else expr.ALLOWED_NAMES
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise custom_error("must be a number or an expression string",
                               f"e.g. 4, or an expression with {expr.describe_allowed(allowed)}")
        if name == "walltime":
            try:
                return _check_range(name, parse_duration(value))
            except ConfigError as exc:
                if not isinstance(value, str):
                    raise custom_error(exc.detail, exc.valid) from None
        elif not isinstance(value, str):
            return _check_range(name, value)
        else:
            try:
                return _check_range(name, float(value))
            except ValueError:
                pass
        try:
            expr.check(value, allowed)
        except ExpressionError as exc:
            if name != "walltime":
                raise custom_error(exc.detail, exc.valid, expression=True) from None
            raise custom_error(f"neither a duration nor a valid expression ({exc.detail})",
                               f"a duration: {DURATION_FORMS}; or an expression with "
                               f"{exc.valid}", expression=True) from None
        return value

    def evaluate(self, attempt: int = 1, walltime_s: float | None = None,
                 num_cpus: int | None = None) -> dict[str, float | int | str]:
        """Concrete values for one attempt; resources round up to whole units."""
        names: dict[str, float] = {"attempt": attempt, "num_cpus": num_cpus or local_num_cpus()}
        out: dict[str, float | int | str] = {}
        if self.walltime is not None:
            out["walltime"] = _evaluated("walltime", self.walltime, names)
        seconds = walltime_s if walltime_s is not None else out.get("walltime")
        for name in ("mem_gb", "cpus", "gpus"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, str) and "walltime_s" in expr.names_used(value):
                if seconds is None:
                    key = name.replace("_", "-")
                    raise ExpressionError(f"defaults.{key} uses walltime_s but no walltime is "
                                          "known", value=value,
                                          valid="set defaults.walltime or pass walltime_s")
                names["walltime_s"] = float(seconds)
            out[name] = _evaluated(name, value, names)
        if self.queue is not None:
            out["queue"] = self.queue
        return out


def _check_range(name: str, value: float) -> float | int:
    """Whole units for walltime/cpus/gpus, and no zero or negative memory or cpus."""
    key = name.replace("_", "-")  # as written in mainboard.toml
    if not math.isfinite(value):
        raise custom_error(f"{key} must be a finite number", "a number or an expression")
    if name != "mem_gb":
        if value != int(value):
            raise custom_error(f"{key} must be a whole number", f"an integer >= {_MINIMUM[name]}")
        value = int(value)
    if value < _MINIMUM[name]:
        low = "greater than 0" if name == "mem_gb" else f">= {_MINIMUM[name]}"
        raise custom_error(f"{key} must be {low}", f"a number {low} or an expression")
    return value


def _evaluated(name: str, value: float | str, names: dict[str, float]) -> float | int:
    """Evaluate one default and check the result is a sensible amount."""
    result = expr.evaluate(value, names) if isinstance(value, str) else float(value)
    if result < _MINIMUM[name]:
        key = name.replace("_", "-")
        raise ExpressionError(f"defaults.{key} evaluated to {result:g}, below {_MINIMUM[name]}",
                              value=value, valid=f"an expression giving >= {_MINIMUM[name]}")
    return result if name == "mem_gb" else math.ceil(result)
