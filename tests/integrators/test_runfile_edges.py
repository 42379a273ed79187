"""Run-file edges tests/integrators/test_runfile_validation.py leaves out: each bad value is one line
naming its key and what is valid; and the small pure pieces a notebook calls directly
(domains, samplers, accumulators, the run state) refuse what they cannot use in words."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mainboard.errors import ConfigError
from mainboard.integrators.accumulators import combine
from mainboard.integrators.discrete import DiscreteSampler
from mainboard.integrators.domain import Domain
from mainboard.integrators.plain import to_plain
from mainboard.integrators.samplers import NaiveSampler, VegasSampler
from mainboard.integrators.spec import load_run_file, parse_run

BASE: dict[str, Any] = {
    "name": "t", "seed": 3, "domain": {"continuous": 2},
    "integrand": {"kind": "genz.gaussian", "a": [2.0, 2.0], "u": [0.5, 0.5]},
    "stop": {"max_samples": 1000}}
HISTOGRAM = {"name": "h", "of": "x0", "bins": 4, "range": [0, 1]}


def run_with(**tables: Any) -> dict[str, Any]:
    return {**copy.deepcopy(BASE), **tables}


BAD: dict[str, tuple[dict[str, Any], str]] = {
    "corner-peak-a": (run_with(integrand={"kind": "genz.corner_peak", "a": [1.0, 0.0]}),
                      "integrand.a: genz.corner_peak needs every a > 0"),
    "ball-center": (run_with(transforms=[{"kind": "unit_ball", "center": [0.0]}]),
                    "transforms[0].center: center needs 2 entries"),
    "complex-exact": (run_with(integrand={"kind": "python", "target": "m:f",
                                          "components": "complex", "exact": 1.0}),
                      "integrand.exact: exact for a complex integrand is [real, imag]"),
    "scalar-exact": (run_with(integrand={"kind": "python", "target": "m:f", "exact": [1.0]}),
                     "integrand.exact: exact for a scalar integrand is one number"),
    "vector-exact": (run_with(integrand={"kind": "python", "target": "m:f", "components": 2,
                                         "exact": [1.0]}),
                     "integrand.exact: exact needs 2 numbers"),
    "no-kind": (run_with(integrand={"a": [1.0]}),
                "integrand.kind: missing key 'kind'; valid: genz.oscillatory"),
    "two-problems": (run_with(sampler={"kind": "vegas", "bins": "x", "alpha": "y"}),
                     "sampler.bins: wrong type: expected an integer (and 1 more problem)"),
    "long-value": (run_with(domain={"continuous": list(range(40))}),
                   "domain.continuous: wrong type: expected an integer; valid"),
    "params-not-a-table": (run_with(integrand={"kind": "python", "target": "m:f",
                                               "params": 3}),
                           "integrand.params: wrong type: expected a table (got 3); valid: "
                           "a table"),
    "an-entry-of-u": (run_with(integrand={"kind": "genz.gaussian", "a": [2.0, 2.0],
                                          "u": ["a", 0.5]}),
                      "integrand.u[0]: wrong type: expected a number (got 'a'); valid: a "
                      "finite number"),
    "histogram-twice": (run_with(accumulator={"kind": "scalar",
                                              "histograms": [HISTOGRAM, HISTOGRAM]}),
                        "accumulator.histograms[1].name: histogram name 'h' is used twice"),
}


@pytest.mark.parametrize("data,says", BAD.values(), ids=list(BAD))
def test_a_bad_run_table_is_one_line(data: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_run(data)
    message = str(info.value)
    assert message.startswith("<config>: " + says) and "\n" not in message, message


def test_a_vector_integrand_takes_one_exact_value_per_component() -> None:
    spec = parse_run(run_with(integrand={"kind": "python", "target": "m:f", "components": 2,
                                         "exact": [1.0, 2.0]}))
    assert spec.integrand.exact == [1.0, 2.0]


def test_a_run_file_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "run.toml"
    path.write_bytes(b'name = "\xff"\n')
    with pytest.raises(ConfigError, match=r"run\.toml: cannot read run file: 'utf-8' codec"):
        load_run_file(path)


def test_pure_pieces_refuse_what_they_cannot_use() -> None:
    domain = Domain(2, (3,))
    for kwargs, says in (({"grids": "each"}, "grids must be 'shared' or 'per_channel'"),
                         ({"train_on": "max"}, "train_on must be 'rms' or 'abs'"),
                         ({"floor": 1.0}, "need 0 < floor < 1 and 0 < learning_rate <= 1")):
        with pytest.raises(ValueError, match=says):
            DiscreteSampler(domain, **kwargs)
    sampler = DiscreteSampler(domain, bins=4)
    other = DiscreteSampler(Domain(2, (4,)), bins=4).snapshot()
    with pytest.raises(ValueError, match=r"discrete snapshot shapes .* do not match"):
        sampler.restore(other)
    with pytest.raises(ValueError, match="snapshot is of a 'naive' sampler, not 'vegas'"):
        VegasSampler(Domain(2)).restore(NaiveSampler(Domain(2)).snapshot())
    with pytest.raises(ValueError, match="no iterations to combine"):
        combine([])


def test_a_domain_without_discrete_axes_has_no_index_columns() -> None:
    assert Domain(2).unflatten(np.arange(3)).shape == (3, 0)


def test_plain_data_for_json_keeps_numbers_and_names_non_finite_ones() -> None:
    assert to_plain({"a": np.float64(1.5), "b": [np.int64(2), float("inf")],
                     "c": float("nan")}) == {"a": 1.5, "b": [2, "inf"], "c": "nan"}
