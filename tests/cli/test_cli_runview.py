"""How `integrate` and `runs` write numbers (cli/runview.py), for the values a run can have:
complex (and complex read back from receipts as {"real", "imag"}), vectors, an exact value
that gives no pull, a sampler's diagnostics, histograms of several components, and the bar's
distance to an error target. Pure functions: the text is what the user reads.
"""

from __future__ import annotations

import math

import numpy as np

from mainboard.cli.runview import (
    StopLimits,
    diagnostics_text,
    eta_by_rate,
    histograms_text,
    pm,
    result_text,
)
from mainboard.integrators.driver import RunResult
from mainboard.tasks.coordinator import Progress


def _result(estimate: object, error: object, exact: object, wall_s: float | None) -> RunResult:
    return RunResult("r1", "shape", "complex", estimate, error, None, math.nan, 4000, 2, 0,
                     exact, "max_samples", wall_s, ())


def test_complex_and_vector_values_are_written_part_by_part() -> None:
    assert pm(complex(1.5, -0.25), complex(0.01, 0.02)) == "(1.5 ± 0.01) + (-0.25 ± 0.02)i"
    assert pm({"real": 1.5, "imag": -0.25}, {"real": 0.01, "imag": 0.02}) == \
        "(1.5 ± 0.01) + (-0.25 ± 0.02)i"  # as receipts hold it
    assert pm([1.0, 2.0], [0.1, 0.2]) == "[1 ± 0.1, 2 ± 0.2]"
    text = result_text(_result(complex(1.5, -0.25), complex(0.01, 0.02), complex(1.5, -0.25),
                               None)).splitlines()
    assert text[2] == "exact     1.5 - 0.25i"  # no pull: a complex value has no sigma
    assert text[3] == "chi2/dof  -   Q -" and not text[-1].startswith("wall")
    vector = result_text(_result([1.0, 2.0], [0.1, 0.2], [1.0, 2.0], 2.0)).splitlines()
    assert vector[2] == "exact     [1, 2]" and vector[-1] == "wall      2.00 s (2,000 samples/s)"
    exact_error = result_text(_result(1.0, 0.0, 1.0, 1.0)).splitlines()
    assert exact_error[2] == "exact     1"  # a zero error gives no pull either


def test_diagnostics_and_histograms_of_several_components() -> None:
    assert diagnostics_text({"kind": "havana", "version": 2, "grid": None,
                             "channel_weights": {"top": {"0": 0.75, "3": 0.25}},
                             "process": {"b": 1, "a": "x"}}) == \
        'havana v2, channels 0:0.750 3:0.250, {"a": "x", "b": 1}'
    text = histograms_text({"components": ["re", "im"], "histograms": [
        {"name": "h", "of": "x0", "bins": 1, "range": [0.0, 1.0], "edges": [0.0, 1.0],
         "hits": [10], "estimate": [[1.0], [2.0]], "error": [[0.1], [0.2]]}]})
    assert text.splitlines() == [
        "histogram  h of x0: 1 bins on [0, 1], 10 hits",
        "  [           0,            1]  re 1 ± 0.1, im 2 ± 0.2  (10)"]


def test_the_bar_reads_every_shape_of_estimate_and_the_nearest_limit() -> None:
    assert eta_by_rate(0, 10, 5.0) is None  # nothing done yet: no rate
    relative = StopLimits.of({"relative_error": 0.01, "max_iterations": 8})
    vector = Progress("r", 2, 4000, None, np.array([1.0, 2.0]), np.array([0.02, 0.02]), 0.0,
                      1.0)
    assert relative.samples_needed(vector) == 16_000  # the worse part: 0.02 / (0.01 * 1)
    assert relative.progress(vector) == (0.25, None)  # no rate yet: no time left
    complex_now = Progress("r", 1, 1000, None, {"real": 3.0, "imag": 4.0},
                           {"real": 0.03, "imag": 0.04}, 100.0, 1.0)
    assert relative.samples_needed(complex_now) == 1000  # |err| / |estimate| = 1% already
    listed = Progress("r", 1, 1000, None, [1.0, math.inf], [0.1, 0.1], 100.0, 1.0)
    assert relative.samples_needed(listed) is None  # not finite: no forecast
