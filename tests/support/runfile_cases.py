"""The table of bad run files for tests/integrators/test_runfile_validation.py: each with the key, the line
and a fragment its one-line error must name (issue 16: bad input gets one clear line)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

BIG = "9223372036854775808"  # 2**63: one more than int64 holds

CHANNELS = '''name = "t"
seed = 7
[domain]
continuous = 2
discrete = [3]
[integrand]
kind = "channels"
coefficients = [1.0, 2.0, 3.0]
sigma = 0.2
u = [0.5, 0.5]
[sampler]
kind = "discrete"
bins = 16
alpha = 0.5
learning_rate = 0.5
floor = 0.05
[accumulator]
discard = 0
[stop]
max_samples = 1000
relative_error = 1e-3
min_samples = 0
[batching]
batch_size = 100
batches_per_iteration = 5
fuse = false
'''

GENZ = '''name = "g"
seed = 1
[domain]
continuous = 3
[integrand]
kind = "genz.gaussian"
a = [5.0, 5.0, 5.0]
u = [0.5, 0.5, 0.5]
[sampler]
kind = "vegas"
bins = 32
alpha = 0.5
[[transforms]]
kind = "affine"
scale = [1.0, 1.0, 1.0]
shift = 0.0
[stop]
max_iterations = 3
absolute_error = 1e-6
'''

PYTHON = '''name = "p"
seed = 2
[domain]
continuous = 2
[integrand]
kind = "python"
target = "tests.support.runfile_cases:two"
components = 2
[stop]
max_iterations = 1
'''

INT = "an integer"
NUMBER = "a finite number"
INT64 = "too large: counts and seeds are 64-bit integers"


@dataclass(frozen=True)
class Bad:
    """One bad run file and what its error must say."""

    text: str
    key: str
    line: int
    fragment: str


def edit(base: str, old: str, new: str) -> str:
    """``base`` with its first ``old`` replaced (which must be there)."""
    assert old in base, old
    return base.replace(old, new, 1)


def c(old: str, new: str) -> str:
    """CHANNELS with one edit."""
    return edit(CHANNELS, old, new)


def g(old: str, new: str) -> str:
    """GENZ with one edit."""
    return edit(GENZ, old, new)


BAD: dict[str, Bad] = {
    # ---------------------------------------------------------- strict types
    "seed-bool": Bad(c("seed = 7", "seed = true"), "seed", 2, INT),
    "seed-string": Bad(c("seed = 7", 'seed = "3"'), "seed", 2, INT),
    "seed-float": Bad(c("seed = 7", "seed = 7.0"), "seed", 2, INT),
    "continuous-float": Bad(c("continuous = 2", "continuous = 2.0"), "domain.continuous", 4, INT),
    "continuous-bool": Bad(c("continuous = 2", "continuous = true"), "domain.continuous", 4,
                           INT),
    "cardinality-bool": Bad(c("discrete = [3]", "discrete = [true]"), "domain.discrete[0]", 5,
                            INT),
    "cardinality-float": Bad(c("discrete = [3]", "discrete = [3.0]"), "domain.discrete[0]", 5,
                             INT),
    "bins-string": Bad(c("bins = 16", 'bins = "16"'), "sampler.bins", 13, INT),
    "fuse-int": Bad(c("fuse = false", "fuse = 1"), "batching.fuse", 26, "true or false"),
    "fuse-string": Bad(c("fuse = false", 'fuse = "yes"'), "batching.fuse", 26, "true or false"),
    "batch-size-float": Bad(c("batch_size = 100", "batch_size = 1e2"), "batching.batch_size",
                            24, INT),
    "max-samples-float": Bad(c("max_samples = 1000", "max_samples = 1e3"), "stop.max_samples",
                             20, INT),
    "name-number": Bad(c('name = "t"', "name = 5"), "name", 1, "a quoted string"),
    "coefficient-string": Bad(c("coefficients = [1.0, 2.0, 3.0]",
                                'coefficients = ["1", 2.0, 3.0]'),
                              "integrand.coefficients[0]", 8, NUMBER),
    "sigma-bool": Bad(c("sigma = 0.2", "sigma = true"), "integrand.sigma", 9, NUMBER),
    "alpha-bool": Bad(c("alpha = 0.5", "alpha = true"), "sampler.alpha", 14, NUMBER),
    "discard-bool": Bad(c("discard = 0", "discard = false"), "accumulator.discard", 18, INT),
    "max-iterations-string": Bad(g("max_iterations = 3", 'max_iterations = "3"'),
                                 "stop.max_iterations", 18, INT),
    "absolute-error-string": Bad(g("absolute_error = 1e-6", 'absolute_error = "1e-6"'),
                                 "stop.absolute_error", 19, NUMBER),
    "components-float": Bad(edit(PYTHON, "components = 2", "components = 2.0"),
                            "integrand.components", 8, "an integer from 1 to 4096"),
    "table-is-number": Bad(c("[domain]\ncontinuous = 2\ndiscrete = [3]\n", "domain = 3\n"),
                           "domain", 3, "a table"),
    # ---------------------------------------------------------- integers fit int64
    "seed-int64": Bad(c("seed = 7", f"seed = {BIG}"), "seed", 2, INT64),
    "max-samples-int64": Bad(c("max_samples = 1000", f"max_samples = {BIG}"),
                             "stop.max_samples", 20, INT64),
    "max-samples-huge": Bad(c("max_samples = 1000", "max_samples = 100000000000000000000000"),
                            "stop.max_samples", 20, INT64),
    "min-samples-int64": Bad(c("min_samples = 0", f"min_samples = {BIG}"), "stop.min_samples",
                             22, INT64),
    "max-iterations-int64": Bad(g("max_iterations = 3", "max_iterations = 18446744073709551616"),
                                "stop.max_iterations", 18, INT64),
    "discard-int64": Bad(c("discard = 0", f"discard = {BIG}"), "accumulator.discard", 18, INT64),
    # ---------------------------------------------------------- finite floats
    "coefficient-nan": Bad(c("coefficients = [1.0, 2.0, 3.0]", "coefficients = [nan, 2.0, 3.0]"),
                           "integrand.coefficients[0]", 8, NUMBER),
    "sigma-inf": Bad(c("sigma = 0.2", "sigma = inf"), "integrand.sigma", 9, NUMBER),
    "u-minus-inf": Bad(c("u = [0.5, 0.5]", "u = [0.5, -inf]"), "integrand.u[1]", 10, NUMBER),
    "alpha-nan": Bad(c("alpha = 0.5", "alpha = nan"), "sampler.alpha", 14, NUMBER),
    "learning-rate-nan": Bad(c("learning_rate = 0.5", "learning_rate = nan"),
                             "sampler.learning_rate", 15, NUMBER),
    "relative-error-nan": Bad(c("relative_error = 1e-3", "relative_error = nan"),
                              "stop.relative_error", 21, NUMBER),
    "absolute-error-inf": Bad(g("absolute_error = 1e-6", "absolute_error = inf"),
                              "stop.absolute_error", 19, NUMBER),
    "shift-nan": Bad(g("shift = 0.0", "shift = nan"), "transforms[0].shift", 16, NUMBER),
    "genz-a-nan": Bad(g("a = [5.0, 5.0, 5.0]", "a = [5.0, nan, 5.0]"), "integrand.a[1]", 7,
                      NUMBER),
    # ---------------------------------------------------------- ranges
    "seed-negative": Bad(c("seed = 7", "seed = -1"), "seed", 2, "from 0 to"),
    "continuous-zero": Bad(c("continuous = 2", "continuous = 0"), "domain.continuous", 4,
                           "greater than or equal to 1"),
    "cardinality-zero": Bad(c("discrete = [3]", "discrete = [0]"), "domain.discrete[0]", 5,
                            "greater than or equal to 1"),
    "floor-one": Bad(c("floor = 0.05", "floor = 1.0"), "sampler.floor", 16, "less than 1"),
    "floor-negative": Bad(c("floor = 0.05", "floor = -0.1"), "sampler.floor", 16,
                          "greater than 0"),
    "learning-rate-above-one": Bad(c("learning_rate = 0.5", "learning_rate = 1.5"),
                                   "sampler.learning_rate", 15, "less than or equal to 1"),
    "max-samples-zero": Bad(c("max_samples = 1000", "max_samples = 0"), "stop.max_samples", 20,
                            "greater than or equal to 1"),
    "relative-error-zero": Bad(c("relative_error = 1e-3", "relative_error = 0.0"),
                               "stop.relative_error", 21, "greater than 0"),
    "relative-error-negative": Bad(c("relative_error = 1e-3", "relative_error = -1e-3"),
                                   "stop.relative_error", 21, "greater than 0"),
    "min-samples-negative": Bad(c("min_samples = 0", "min_samples = -5"), "stop.min_samples", 22,
                                "greater than or equal to 0"),
    "batch-size-zero": Bad(c("batch_size = 100", "batch_size = 0"), "batching.batch_size", 24,
                           "greater than or equal to 1"),
    "batches-negative": Bad(c("batches_per_iteration = 5", "batches_per_iteration = -1"),
                            "batching.batches_per_iteration", 25, "greater than or equal to 1"),
    "discard-negative": Bad(c("discard = 0", "discard = -1"), "accumulator.discard", 18,
                            "greater than or equal to 0"),
    "bins-one": Bad(c("bins = 16", "bins = 1"), "sampler.bins", 13, "greater than or equal to 2"),
    "radius-zero": Bad(g('kind = "affine"\nscale = [1.0, 1.0, 1.0]\nshift = 0.0',
                         'kind = "unit_ball"\nradius = 0.0'), "transforms[0].radius", 15,
                       "greater than 0"),
    # ---------------------------------------------------------- shapes
    "u-too-short": Bad(c("u = [0.5, 0.5]", "u = [0.5]"), "integrand.u", 10, "needs 2 entries"),
    "coefficients-per-channel": Bad(c("coefficients = [1.0, 2.0, 3.0]",
                                      "coefficients = [1.0, 2.0]"),
                                    "integrand.coefficients", 8, "one coefficient per discrete"),
    "sigma-per-channel": Bad(c("sigma = 0.2", "sigma = [0.1, 0.2]"), "integrand.sigma", 9,
                             "1 or 3 entries"),
    "too-many-channels": Bad(c("discrete = [3]", "discrete = [4096, 4096]"), "domain.discrete",
                             5, "at most 1048576"),
    "genz-a-too-short": Bad(g("a = [5.0, 5.0, 5.0]", "a = [5.0, 5.0]"), "integrand.a", 7,
                            "needs 3 entries"),
    "affine-scale-length": Bad(g("scale = [1.0, 1.0, 1.0]", "scale = [1.0, 1.0]"),
                               "transforms[0].scale", 15, "needs 3 entries"),
    "discrete-sampler-no-cardinalities": Bad(c("discrete = [3]", "discrete = []"),
                                             "integrand.coefficients", 8,
                                             "one coefficient per discrete channel (1)"),
    "exact-wrong-length": Bad(edit(PYTHON, "components = 2", "components = 2\nexact = 1.0"),
                              "integrand.exact", 9, "2 numbers"),
    # ---------------------------------------------------------- whole file
    "empty-file": Bad("", "name", 1, "missing required key"),
    "missing-stop": Bad(g("[stop]\nmax_iterations = 3\nabsolute_error = 1e-6\n", ""), "stop", 1,
                        "missing required key"),
}


def two(x: Any) -> Any:
    """The PYTHON base's integrand: two components (x_0, x_1)."""
    return x[:, :2].copy()
