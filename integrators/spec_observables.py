"""``[[accumulator.histograms]]`` and ``moments``: the run file's observables beyond the total.

A histogram bins an observable of the point the integrand sees (a coordinate ``x<i>``, a
discrete coordinate ``d<j>``, or a Python ``module:function`` of the point) and sums the
weighted values w f per bin; ``moments = K`` estimates the integrals of f^1 .. f^K. The
numerics are in :mod:`~mainboard.integrators.observables`.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from mainboard.errors import SpecError
from mainboard.integrators.spec_types import Int, Real, Text

COORDINATE = re.compile(r"^(x|d)([0-9]{1,4})$")
TARGET = r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_.]*"
OF_PATTERN = rf"^(x[0-9]{{1,4}}|d[0-9]{{1,4}}|{TARGET})$"
MAX_BINS = 100_000
MAX_MOMENT = 4


class HistogramSpec(BaseModel):
    """One histogram: ``bins`` equal bins over ``range`` = [low, high] of the observable ``of``
    (points outside the range are not binned; ``high`` falls in the last bin)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Text = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    of: Text = Field(pattern=OF_PATTERN)
    bins: Annotated[Int, Field(ge=1, le=MAX_BINS)]
    range: list[Real] = Field(min_length=2, max_length=2)

    @model_validator(mode="after")
    def _ordered(self) -> HistogramSpec:
        low, high = self.range
        if not low < high:
            raise SpecError("range", "range must be [low, high] with low < high", self.range,
                            valid="an array of 2 finite numbers, the first below the second")
        return self

    @property
    def coordinate(self) -> tuple[str, int] | None:
        """("x", i) or ("d", j) for a coordinate of the point; None for a Python target."""
        found = COORDINATE.match(self.of)
        return None if found is None else (found.group(1), int(found.group(2)))


def check_observables(histograms: list[HistogramSpec], dim: int, discrete: list[int]) -> None:
    """Names unique; coordinates within the point the integrand sees."""
    seen: set[str] = set()
    for i, h in enumerate(histograms):
        if h.name in seen:
            raise SpecError(f"accumulator.histograms.{i}.name", f"histogram name {h.name!r} "
                            "is used twice", h.name, valid="a name no other histogram has")
        seen.add(h.name)
        where = h.coordinate
        if where is None:
            continue
        axis, index = where
        size, what = (dim, "continuous coordinates x0..") if axis == "x" else \
            (len(discrete), "discrete coordinates d0..")
        if index >= size:
            valid = (f"{what}{axis}{size - 1} (the point the integrand sees), or "
                     if size else "x<i> (the domain has no discrete coordinates) or ")
            raise SpecError(f"accumulator.histograms.{i}.of", f"{h.of} is not a coordinate of "
                            "the point", h.of, valid=f"{valid}'package.module:function'")


def drop_defaults(data: dict[str, Any]) -> dict[str, Any]:
    """``[accumulator]`` without observables dumps as before, so run ids do not change."""
    if not data.get("histograms"):
        data.pop("histograms", None)
    if not data.get("moments"):
        data.pop("moments", None)
    return data
