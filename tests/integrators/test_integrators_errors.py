"""Bad input of every class gets one clear error that names the stage, key, line or value."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest

from mainboard.errors import BatchError, ConfigError, MergeError
from mainboard.integrators.domain import Batch, Domain, validate
from mainboard.integrators.integrands import make_integrand
from mainboard.integrators.seeding import LatentBatch, batch_rng
from mainboard.integrators.spec import RunSpec, load_run_file, parse_run
from mainboard.integrators.stages import build_run, merge_results, process_batch

EXAMPLE = '''name = "gauss-8d"
seed = 7
[domain]
continuous = 8
discrete = []            # cardinalities of discrete dimensions
[integrand]
kind = "genz.gaussian"   # genz.{oscillatory,product_peak,corner_peak,gaussian,continuous,discontinuous}
a = [5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0]
u = [0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]
[sampler]
kind = "vegas"
bins = 64
alpha = 0.5
[accumulator]
kind = "scalar"
[stop]
max_samples = 10_000_000
relative_error = 1e-4
[batching]
batch_size = 100_000
batches_per_iteration = 10
fuse = true
'''


def returns_wrong_shape(x: np.ndarray) -> np.ndarray:
    return np.ones((x.shape[0], 2))


def returns_strings(x: np.ndarray) -> np.ndarray:
    return np.array(["a"] * x.shape[0])


def returns_list(x: np.ndarray) -> list[float]:
    return [1.0] * x.shape[0]


def returns_complex(x: np.ndarray) -> np.ndarray:
    return np.ones(x.shape[0]) * 1j


def raises(x: np.ndarray) -> np.ndarray:
    raise ZeroDivisionError("model blew up")


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "RUN.toml"
    path.write_text(text)
    return path


def test_issue_example_parses_as_written(tmp_path: Path) -> None:
    spec = load_run_file(write(tmp_path, EXAMPLE))
    assert spec.name == "gauss-8d" and spec.seed == 7 and spec.batching.fuse
    assert spec.integrand.kind == "genz.gaussian" and spec.sampler.bins == 64
    assert spec.stop.max_samples == 10_000_000 and spec.stop.relative_error == 1e-4
    run = build_run(spec)
    assert run.integrand.exact == pytest.approx(0.000248556584, rel=1e-9)
    assert spec.run_id() == load_run_file(write(tmp_path, EXAMPLE)).run_id()


@pytest.mark.parametrize(("edit", "key", "line", "needle"), [
    (("bins = 64", "bins = 64\nbogus = 1"), "sampler.bogus", 13, "valid: alpha, beta, bins, kind"),
    (('kind = "vegas"', 'kind = "vegass"'), "sampler.kind", 11, "valid: naive, vegas, discrete"),
    (("batch_size = 100_000", 'batch_size = "big"'), "batching.batch_size", 20, "'big'"),
    (("a = [5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0]", "a = [5.0]"), "integrand.a", 8,
     "needs 8 entries"),
    (("max_samples = 10_000_000\nrelative_error = 1e-4", "min_samples = 5"), "stop", 16,
     "at least one stop condition; valid: max_samples, max_iterations, absolute_error, "
     "relative_error (min_samples only delays a stop)"),
    (("max_samples = 10_000_000\nrelative_error = 1e-4", ""), "stop", 16,
     "valid: max_samples, max_iterations, absolute_error, relative_error"),
    (("seed = 7\n", ""), "seed", None, "missing required key"),
    (("continuous = 8", "continuous = 0"), "domain.continuous", 4, "greater than or equal"),
    (('name = "gauss-8d"', 'name = "a b/../c"'), "name", 1, "letters, digits"),
    (('kind = "genz.gaussian"', 'kind = "genz.gauss"'), "integrand.kind", 7, "genz.gaussian"),
    (('kind = "scalar"', 'kind = "complex"'), "accumulator.kind", 15, "must be 'scalar'"),
    (('kind = "vegas"', 'kind = "discrete"'), "sampler.kind", 11, "domain.discrete"),
])
def test_bad_run_files_name_key_and_line(tmp_path: Path, edit: tuple[str, str], key: str,
                                         line: int | None, needle: str) -> None:
    assert edit[0] in EXAMPLE
    path = write(tmp_path, EXAMPLE.replace(edit[0], edit[1], 1))
    with pytest.raises(ConfigError) as info:
        build_run(load_run_file(path))
    err = info.value
    assert err.key == key and needle in str(err)
    if line is not None:
        assert err.line == line and err.file == str(path)


def test_bad_transforms_are_named(tmp_path: Path) -> None:
    text = EXAMPLE + '[[transforms]]\nkind = "affine"\n[[transforms]]\nkind = "unit_ball"\n'
    with pytest.raises(ConfigError) as info:
        load_run_file(write(tmp_path, text))
    assert info.value.key == "transforms[1].kind" and info.value.line == 26
    assert "must come before any unit_ball" in str(info.value)
    text = EXAMPLE + '[[transforms]]\nkind = "affine"\nscale = [1.0, 2.0]\n'
    with pytest.raises(ConfigError, match=r"transforms\[0\]\.scale: scale needs 8 entries"):
        load_run_file(write(tmp_path, text))


def test_toml_syntax_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_run_file(write(tmp_path, EXAMPLE.replace("bins = 64", "bins = = 64")))
    assert info.value.line == 12 and "invalid TOML" in str(info.value)
    with pytest.raises(ConfigError, match="run file not found"):
        load_run_file(tmp_path / "nope.toml")


@pytest.mark.parametrize(("target", "needle"), [
    ("no_such_module_xyz:f", "cannot import module 'no_such_module_xyz': ModuleNotFoundError"),
    (f"{__name__}:missing", "has no attribute 'missing'"),
    (f"{__name__}:EXAMPLE", "is not callable"),
])
def test_bad_python_targets(target: str, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        make_integrand({"kind": "python", "target": target}, 2)
    assert info.value.key == "integrand.target" and needle in str(info.value)


def _python_run(target: str) -> object:
    return build_run({"name": "bad", "seed": 1, "domain": {"continuous": 2},
                      "integrand": {"kind": "python",
                                    "target": f"{__name__}:{target}"},
                      "stop": {"max_iterations": 1}})


@pytest.mark.parametrize(("target", "needle"), [
    ("returns_wrong_shape", "returned shape (10, 2), expected (10,)"),
    ("returns_strings", "returned dtype str"),
    ("returns_list", "returned list, expected a numpy array"),
    ("returns_complex", "set components = \"complex\""),
    ("raises", "raised ZeroDivisionError: model blew up"),
])
def test_bad_integrand_output_fails_the_batch_at_evaluate(target: str, needle: str) -> None:
    run = _python_run(target)
    with pytest.raises(BatchError) as info:
        process_batch(run, run.new_sampler(), 0, 0, 10)
    assert info.value.stage == "evaluate" and needle in str(info.value)
    assert info.value.args == ("evaluate", info.value.message)  # rebuildable as cls(*args)


def _batch(n: int = 4, d: int = 2, k: int = 0) -> Batch:
    return Batch(x=np.full((n, d), 0.5), idx=np.zeros((n, k), np.int64), weights=np.ones(n))


@pytest.mark.parametrize(("mutate", "needle"), [
    (lambda b: setattr(b, "x", np.full((4, 3), 0.5)), "x must have shape (4, 2)"),
    (lambda b: setattr(b, "x", np.full((4, 2), 0.5, np.float32)), "dtype float64, got float32"),
    (lambda b: b.x.__setitem__((2, 1), 1.0), "1 of 4 points outside the unit cube"),
    (lambda b: b.x.__setitem__((0, 0), np.nan), "outside the unit cube"),
    (lambda b: b.weights.__setitem__(3, np.inf), "1 of 4 weights are not finite"),
    (lambda b: b.weights.__setitem__(1, -1.0), "weights must be >= 0"),
    (lambda b: setattr(b, "idx", np.zeros((4, 1), np.int32)), "idx must have dtype int64"),
    (lambda b: setattr(b, "aux", {"bins": np.zeros(3)}), "aux['bins'] must be an array with 4"),
    (lambda b: setattr(b, "weights", [1.0] * 4), "weights must be a 1-d numpy array"),
])
def test_validate_names_stage_and_problem(mutate: object, needle: str) -> None:
    batch = _batch()
    mutate(batch)  # type: ignore[operator]
    with pytest.raises(BatchError) as info:
        validate(batch, Domain(2), "materialize")
    assert info.value.stage == "materialize" and needle in str(info.value)
    assert "after stage 'materialize'" in str(info.value)


def test_discrete_indices_are_checked() -> None:
    batch = _batch(k=2)
    batch.idx[1, 1] = 5
    with pytest.raises(BatchError, match=r"discrete index column 1 outside \[0, 3\)"):
        validate(batch, Domain(2, [4, 3]), "transform[0]:affine")


def test_bad_domains() -> None:
    with pytest.raises(ValueError, match="continuous must be an integer >= 1"):
        Domain(0)
    with pytest.raises(ValueError, match="cardinalities must be >= 1"):
        Domain(2, [3, 0])
    with pytest.raises(ValueError, match="channels"):
        Domain(2, [1 << 11, 1 << 11])


def test_merge_refuses_duplicates_gaps_and_mixed_iterations() -> None:
    run = build_run(
        {"name": "m", "seed": 1, "domain": {"continuous": 2},
         "integrand": {"kind": "constant"}, "stop": {"max_iterations": 1}})
    sampler = run.new_sampler()
    r0, r1 = (process_batch(run, sampler, 0, i, 10) for i in range(2))
    with pytest.raises(MergeError, match=r"duplicates \[0\]"):
        merge_results([r0, r0, r1])
    with pytest.raises(MergeError, match=r"missing \[2\]"):
        merge_results([r0, r1], expected=3)
    with pytest.raises(MergeError, match="several iterations"):
        merge_results([r0, process_batch(run, sampler, 1, 1, 10)])
    with pytest.raises(MergeError, match="no batch results"):
        merge_results([])


def test_bad_seeds_and_latent_batches() -> None:
    with pytest.raises(ValueError, match="run_seed must be a non-negative integer"):
        batch_rng(-1, 0, 0)
    with pytest.raises(ValueError, match="at most 2\\*\\*63-1"):
        batch_rng(2**64, 0, 0)
    with pytest.raises(ValueError, match="at least one sample"):
        LatentBatch(1, 0, 0, 0)
    assert (batch_rng(5, 1, 2).random(3) == batch_rng(5, 1, 2).random(3)).all()
    assert (batch_rng(5, 1, 2).random(3) != batch_rng(5, 2, 1).random(3)).all()


PROCESS_RUN = '''name = "proc"
seed = 3
[domain]
continuous = 2
[integrand]
kind = "process"
command = ["python3", "evaluator.py"]
args = { scale = 2.0 }
[sampler]
kind = "naive"
[sampler.materializer]
kind = "process"
command = ["python3", "materializer.py"]
[[transforms]]
kind = "process"
command = ["./shift"]
[stop]
max_iterations = 2
'''


def test_process_tables_parse_and_leave_unset_keys_out(tmp_path: Path) -> None:
    spec = load_run_file(write(tmp_path, PROCESS_RUN))
    dumped = spec.model_dump(mode="json")
    assert dumped["integrand"] == {"kind": "process", "command": ["python3", "evaluator.py"],
                                   "env": {}, "args": {"scale": 2.0}, "components": 1}
    assert "request_timeout" not in dumped["integrand"] and "exact" not in dumped["integrand"]
    assert dumped["sampler"]["materializer"]["command"] == ["python3", "materializer.py"]
    assert dumped["transforms"][0]["kind"] == "process"
    assert "materializer" not in parse_run_text(EXAMPLE).model_dump(mode="json")["sampler"]


@pytest.mark.parametrize(("edit", "key", "line"), [
    (("command = [\"./shift\"]", "command = []"), "transforms[0].command", 16),
    (("command = [\"python3\", \"materializer.py\"]",
      "command = [\"python3\", \"materializer.py\"]\nrequest_timeout = 0"),
     "sampler.materializer.request_timeout", 14),
    (("args = { scale = 2.0 }", "argz = 1"), "integrand.argz", 8),
])
def test_bad_process_tables(tmp_path: Path, edit: tuple[str, str], key: str, line: int) -> None:
    with pytest.raises(ConfigError) as info:
        load_run_file(write(tmp_path, PROCESS_RUN.replace(*edit)))
    assert info.value.key == key and info.value.line == line


def parse_run_text(text: str) -> RunSpec:
    return parse_run(tomllib.loads(text))


def test_run_id_is_content_derived() -> None:
    a, b = parse_run_text(EXAMPLE), parse_run_text(EXAMPLE.replace("bins = 64\n", ""))
    assert a.run_id() == b.run_id()  # an explicit default is the same definition
    assert a.run_id() != parse_run_text(EXAMPLE.replace("seed = 7", "seed = 8")).run_id()
