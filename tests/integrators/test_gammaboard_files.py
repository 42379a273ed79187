"""gammaboard run files accepted by `mainboard integrate` (issue #26 item 2).

Parse level: each gammaboard shape and its older spelling maps onto mainboard's run tables
(or ``[[tasks]]`` of the tasks contract); kinds mainboard does not have are refused in one
line, exit 2, nothing started; keys with no meaning here are named in one warning line.
End to end: a Python-class evaluator with havana_training and a process evaluator run to
the end on the embedded broker with two local workers, within 4 sigma of the exact value.
"""

from __future__ import annotations

import json
import math
import shutil
import sys
import tomllib
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mainboard.errors import ConfigError
from mainboard.integrators.gammaboard import IgnoredKeys, is_gammaboard, translate
from mainboard.integrators.spec import load_run_file, parse_run
from tests.support.gammaboard_cases import MULTI, PYTHON_RUN, SIN_CLASS, UNIT_NEW, UNIT_OLD
from tests.support.integration import subprocess_env
from tests.support.services import require
from tests.support.workspace import run_cli

REPO = Path(__file__).resolve().parents[2]
PY = json.dumps(sys.executable)


def gb(text: str) -> dict[str, Any]:
    """translate() of a gammaboard document, failing on any warning (none expected)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return translate(tomllib.loads(text))


def refused(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        translate(tomllib.loads(text))
    return info.value


def test_older_and_newest_spellings_give_the_same_run_and_run_id() -> None:
    old, new = gb(UNIT_OLD), gb(UNIT_NEW)
    assert old == {"name": "unit-old", "seed": 0, "domain": {"continuous": 2},
                   "integrand": {"kind": "constant", "value": 1.0},
                   "sampler": {"kind": "naive"}, "stop": {"max_samples": 50_000},
                   "accumulator": {"kind": "scalar"}}
    assert new == old
    native = parse_run({**old, "sampler": {"kind": "naive"}})
    assert parse_run(new).run_id() == parse_run(old).run_id() == native.run_id()
    assert is_gammaboard(tomllib.loads(UNIT_OLD)) and not is_gammaboard(
        {"integrand": {}, "task_queue": []})


@pytest.mark.parametrize(("shape", "domain"), [
    ("{ continuous = { dims = 3 } }", {"continuous": 3}),
    ("{ rectangular = { discrete_cardinalities = [2, 3], continuous_dims = 2 } }",
     {"continuous": 2, "discrete": [2, 3]}),
    ("{ discrete = { axis_label = 'channel', branches = [{ index = 0, domain = { continuous "
     "= { dims = 2 } } }, { index = 1, domain = { continuous = { dims = 2 } } }] } }",
     {"continuous": 2, "discrete": [2]}),
])
def test_domain_shapes(shape: str, domain: dict[str, Any]) -> None:
    text = UNIT_NEW.replace("{ continuous = { dims = 2 } }", shape)
    assert gb(text)["domain"] == domain


def test_an_inhomogeneous_domain_and_dims_without_cardinalities_are_refused() -> None:
    shape = ("{ discrete = { branches = [{ domain = { continuous = { dims = 2 } } }, "
             "{ domain = { continuous = { dims = 3 } } }] } }")
    err = refused(UNIT_NEW.replace("{ continuous = { dims = 2 } }", shape))
    assert err.key == "evaluator.domain.discrete.branches" and "inhomogeneous" in str(err)
    err = refused(UNIT_OLD.replace("discrete_dims = 0", "discrete_dims = 2"))
    assert err.key == "evaluator.discrete_dims" and "rectangular" in str(err)


def process_file(resources: str = "$resources") -> str:
    return f'''name = "proc"
target = {{ kind = "scalar", value = 0.5 }}
[evaluator]
kind = "process_evaluator"
command = [{PY}, "{resources}/worker.py"]
domain = {{ rectangular = {{ discrete_cardinalities = [2], continuous_dims = 2 }} }}
components = ["value"]
args = {{ scale = 1.0 }}
[[task_queue]]
kind = "sample"
stop_condition = {{ max_samples = 10_000, relative_error = 0.01 }}
accumulator = {{ kind = "vector" }}
sampler_aggregator = {{ config = {{ kind = "process_sampler", command = [{PY}, "s.py"], cwd = "/tmp", args = {{ seed = 1 }}, materializer = {{ kind = "process", command = [{PY}, "m.py"] }} }} }}
'''


def test_process_evaluator_sampler_and_materializer() -> None:
    out = translate(tomllib.loads(process_file()), resources="/data/run")
    assert out["integrand"] == {"kind": "process", "command": [sys.executable,
                                                                "/data/run/worker.py"],
                                "cwd": "/data/run", "args": {"scale": 1.0},
                                "components": ["value"], "exact": 0.5}
    assert out["sampler"] == {"kind": "process", "command": [sys.executable, "s.py"],
                              "cwd": "/tmp", "args": {"seed": 1},
                              "materializer": {"kind": "process", "cwd": "/data/run",
                                               "command": [sys.executable, "m.py"]}}
    assert out["domain"] == {"continuous": 2, "discrete": [2]}
    assert out["stop"] == {"max_samples": 10_000, "relative_error": 0.01}
    assert out["accumulator"] == {}        # vector: the integrand's kind (one name: scalar)
    spec = parse_run(out)
    assert spec.accumulator_kind == "scalar" and spec.sampler.materializer is not None


def test_havana_training_maps_onto_vegas_or_discrete_with_its_update_interval() -> None:
    text = UNIT_NEW.replace('{ kind = "naive_monte_carlo" }', '{ kind = "havana_training", '
                            'seed = 7, bins = 32, samples_for_update = 16_384 }')
    out = gb(text)
    assert out["sampler"] == {"kind": "vegas", "bins": 32} and out["seed"] == 7
    assert out["batching"] == {"batch_size": 1639, "batches_per_iteration": 10}
    capped = gb(text + "[sampler_aggregator_runner_params]\nmax_batch_size = 4096\n"
                "target_batch_eval_ms = 400.0\n")
    assert capped["batching"] == {"batch_size": 4096, "batches_per_iteration": 4, "fuse": True}
    discrete = gb(text.replace("{ continuous = { dims = 2 } }", "{ rectangular = { "
                               "discrete_cardinalities = [3], continuous_dims = 2 } }"))
    assert discrete["sampler"] == {"kind": "discrete", "bins": 32}
    assert parse_run(discrete).sampler.kind == "discrete"


def test_a_lone_inference_task_samples_with_adaptation_off() -> None:
    out = gb(UNIT_NEW.replace("naive_monte_carlo", "havana_inference"))
    assert out["sampler"] == {"kind": "vegas", "alpha": 0.0, "beta": 0.0}


def test_a_task_queue_becomes_the_contract_s_tasks() -> None:
    out = gb(MULTI)
    assert out["sampler"] == {"kind": "vegas", "bins": 64}       # the run starts as task 1
    assert out["stop"] == {"max_samples": 100_000}
    assert out["tasks"] == [
        {"kind": "sample", "name": "train-initial", "stop": {"max_samples": 100_000},
         "sampler": {"kind": "vegas", "bins": 64}, "frozen": False,
         "accumulator": {"kind": "scalar"}, "transforms": [{"kind": "unit_ball"}]},
        {"kind": "sample", "name": "sample-initial", "stop": {"max_samples": 100_000},
         "frozen": True},
        {"kind": "plot_line", "transforms": [], "observable": "scalar", "geometry": {
            "offset": [0.0, 0.0, 0.0], "direction": [1.0, 0.0, 0.0],
            "linspace": {"start": -10.0, "stop": 10.0, "count": 1024}, "discrete": []}},
        {"kind": "image", "observable": "scalar", "geometry": {
            "offset": [0.0, 0.0, 0.0], "u_vector": [1.0, 0.0, 0.0],
            "v_vector": [0.0, 0.0, 1.0],
            "u_linspace": {"start": -50.0, "stop": 50.0, "count": 512},
            "v_linspace": {"start": -50.0, "stop": 50.0, "count": 512}}},
        {"kind": "pause"},
        {"kind": "configure", "batching": {"batch_size": 1000}, "from": "sample-initial"},
        {"kind": "sample", "name": "train-resume", "stop": {"max_samples": 100_000}},
    ]


@pytest.mark.parametrize(("old", "new", "key"), [
    ('kind = "naive_monte_carlo"', 'kind = "python_homogeneous_monte_carlo"',
     "task_queue.1.sampler_aggregator.config.kind"),
    ('kind = "naive_monte_carlo"', 'kind = "raster_plane"',
     "task_queue.1.sampler_aggregator.config.kind"),
    ('accumulator = "scalar"', 'accumulator = "gammaloop"', "task_queue.0.accumulator"),
    ('kind = "set_accumulator"', 'kind = "pdf_adaptation_image"', "task_queue.0.kind"),
    ('kind = "unit"', 'kind = "symbolica"', "evaluator.kind"),
    ("stop_condition = {", "nr_samples = 5\nstop_condition = {", "task_queue.1.nr_samples"),
    ('{ kind = "naive_monte_carlo" }', '{ kind = "havana_inference", source = { snapshot = '
     '{ snapshot_id = 4 } } }', "task_queue.1.sampler_aggregator.config.source"),
])
def test_kinds_mainboard_does_not_have_are_refused_naming_the_key(old: str, new: str,
                                                                  key: str) -> None:
    err = refused(UNIT_NEW.replace(old, new, 1))
    assert err.key == key and "valid:" in str(err) and "\n" not in str(err)


def test_a_task_changing_the_evaluator_and_a_file_without_one_are_refused() -> None:
    err = refused(UNIT_NEW.replace('kind = "sample"\n', 'kind = "sample"\nevaluator = '
                                   '{ config = { kind = "unit", continuous_dims = 2 } }\n'))
    assert err.key == "task_queue.1.evaluator" and "one integrand" in str(err)
    err = refused(UNIT_NEW.split("[[task_queue]]", 1)[1].join(["[[task_queue]]", ""]))
    assert err.key == "evaluator" and "runs append" in str(err)


def test_resources_is_the_run_file_s_folder_whatever_its_name() -> None:
    hostile = "/tmp/a b/'$(touch x)';\"`id`"
    out = translate(tomllib.loads(process_file()), resources=hostile)
    assert out["integrand"]["command"] == [sys.executable, f"{hostile}/worker.py"]
    assert out["integrand"]["cwd"] == hostile      # one argv element each: no shell between


def test_older_task_nesting_and_parametrization() -> None:
    old = UNIT_OLD.replace("[sampler_aggregator]\nkind = \"naive_monte_carlo\"\n", "") + \
        '[task_queue.config.sampler_aggregator]\nkind = "havana_training"\nbins = 16\n' \
        '[task_queue.parametrization]\nkind = "havana_inference"\n' \
        '[task_queue.parametrization.inner]\nkind = "identity"\n'
    assert gb(old)["sampler"] == {"kind": "vegas", "bins": 16}
    err = refused(old.replace('kind = "identity"', 'kind = "spherical"'))
    assert err.key == "task_queue.0.parametrization.inner.kind"


def test_transforms_as_an_array_of_tables() -> None:
    text = UNIT_NEW + '[[task_queue.batch_transforms]]\nkind = "unit_ball"\n'
    assert gb(text)["transforms"] == [{"kind": "unit_ball"}]


def test_spherical_is_refused_and_identity_dropped() -> None:
    text = UNIT_OLD.replace("nr_samples", 'batch_transforms = [{ kind = "identity" }]\n'
                            "nr_samples")
    assert gb(text)["transforms"] == []
    err = refused(text.replace('"identity"', '"spherical"'))
    assert err.key == "task_queue.0.batch_transforms.0.kind" and "R^3" in str(err)


def test_keys_with_no_meaning_here_are_named_in_one_warning() -> None:
    text = UNIT_OLD.replace('[sampler_aggregator]', '''evaluator_requirements = { gpu = 1 }
[evaluator_runner_params]
min_tick_time_ms = 50
[sampler_aggregator_runner_params]
max_batch_size = 5000
frontend_sync_interval_ms = 2000
[sampler_aggregator_runner_params.queue]
queue_buffer = 10.0
[sampler_aggregator]''')
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = translate(tomllib.loads(text))
    assert out["batching"] == {"batch_size": 5000}
    assert [w.category for w in caught] == [IgnoredKeys]
    message = str(caught[0].message)
    for path in ("evaluator_requirements", "evaluator_runner_params.min_tick_time_ms",
                 "sampler_aggregator_runner_params.frontend_sync_interval_ms",
                 "sampler_aggregator_runner_params.queue.queue_buffer"):
        assert path in message
    assert "max_batch_size" not in message
    with pytest.warns(IgnoredKeys, match=r"ignored: target \("):
        translate(tomllib.loads('target = { kind = "scalar", value = 1.0 }\n' + UNIT_OLD))


def test_template_replacements() -> None:
    text = ("replacements = { samples = 20_000 }\n" + UNIT_NEW
            .replace("max_samples = 50_000", 'max_samples = "$(samples:10_000)"')
            .replace('name = "unit-old"', "name = '$(run_name:\"tmpl\")'"))
    out = gb(text)
    assert out["stop"] == {"max_samples": 20_000} and out["name"] == "tmpl"


# ---------------------------------------------------------------- through the CLI
@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A workspace that names no broker: `integrate` starts the embedded one (downed after)."""
    from mainboard.config import load_config
    from mainboard.services.broker import EmbeddedBroker

    root = tmp_path_factory.mktemp("gbws")
    config = root / "mainboard.toml"
    config.write_text('[workspace]\nname = "gb"\n')
    yield config
    EmbeddedBroker(load_config(config).state_dir).down()


@pytest.mark.parametrize(("old", "new", "key", "kind"), [
    ('kind = "unit"', 'kind = "gammaloop"\nstate_folder = "../gl/state"', "evaluator.kind",
     "gammaloop"),
    ('kind = "naive_monte_carlo"', 'kind = "madnis"', "sampler_aggregator.kind", "madnis"),
])
def test_refusals_are_one_line_exit_2_and_start_nothing(tmp_path: Path, old: str, new: str,
                                                        key: str, kind: str) -> None:
    config = tmp_path / "mainboard.toml"
    config.write_text('[workspace]\nname = "gb"\n')     # the embedded broker, not started
    path = tmp_path / f"{kind}.toml"
    path.write_text(UNIT_OLD.replace(old, new))
    done = run_cli(config, "integrate", str(path), "--workers", "2", env=subprocess_env())
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"mainboard: error: {path}: {key}:")
    assert f"(got '{kind}')" in lines[0] and "valid:" in lines[0]
    state = tmp_path / ".mainboard"
    assert not (state / "broker.json").exists() and not (state / "runs").exists()
    assert not (state / "workers").exists()                 # no broker, worker or run


def test_an_evaluator_class_that_cannot_be_imported_is_refused_before_start(
        tmp_path: Path) -> None:
    config = tmp_path / "mainboard.toml"
    config.write_text('[workspace]\nname = "gb"\n')
    path = tmp_path / "run.toml"
    path.write_text(PYTHON_RUN.replace('"gb_half_sine"', '"gb_not_there"'))
    done = run_cli(config, "integrate", str(path), "--workers", "2", env=subprocess_env())
    assert done.returncode == 2 and done.stdout == ""
    error = [x for x in done.stderr.splitlines() if "error" in x]
    assert error == [f"mainboard: error: {path}: evaluator.class: cannot load the gammaboard "
                     "evaluator class gb_not_there.HalfSine: ModuleNotFoundError: No module "
                     "named 'gb_not_there' (got 'HalfSine'); valid: a class in a module next "
                     "to the run file or in the workspace"]
    assert not (tmp_path / ".mainboard" / "broker.json").exists()


def integrate(config: Path, path: Path) -> tuple[dict[str, Any], str]:
    require("redis-server")
    done = run_cli(config, "integrate", str(path), "--workers", "2", "--json",
                   env=subprocess_env(), timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", IgnoredKeys)              # named on stderr already
        assert got["run_id"] == load_run_file(path).run_id()  # deterministic, as any run file
    assert abs(got["estimate"] - got["exact"]) < 4 * got["error"], got
    return got, done.stderr


@pytest.mark.live
def test_a_python_class_evaluator_with_havana_training_runs_to_the_end(embedded: Path) -> None:
    (embedded.parent / "gb_half_sine.py").write_text(SIN_CLASS)
    path = embedded.parent / "gb-python.toml"
    path.write_text(PYTHON_RUN)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", IgnoredKeys)
        spec = load_run_file(path)
    assert (spec.sampler.kind, spec.sampler.bins, spec.seed) == ("vegas", 32, 5)
    assert (spec.batching.batch_size, spec.batching.batches_per_iteration) == (10_000, 5)
    got, stderr = integrate(embedded, path)
    assert got["exact"] == 2.0 and got["samples"] == 200_000 and got["iterations"] == 4
    warned = [x for x in stderr.splitlines() if x.startswith("mainboard: warning:")]
    assert warned == [f"mainboard: warning: {path}: gammaboard keys with no meaning in "
                      "mainboard, ignored: evaluator.flake_ref, task_queue.0.sampler_aggregator"
                      ".config.initial_training_rate (see docs/gammaboard.md)"]


@pytest.mark.live
def test_a_process_evaluator_runs_to_the_end(embedded: Path) -> None:
    folder = embedded.parent / "proc"
    folder.mkdir()
    shutil.copy(REPO / "examples" / "process" / "sin_evaluator.py", folder / "worker.py")
    path = folder / "gb-process.toml"
    path.write_text(f'''name = "gb-process"
target = {{ kind = "scalar", value = {1 - math.cos(1)!r} }}
[evaluator]
kind = "process_evaluator"
command = [{PY}, "-u", "$resources/worker.py"]
domain = {{ continuous = {{ dims = 2 }} }}
args = {{ scale = 1.0 }}
[sampler_aggregator_runner_params.queue]
max_batch_size = 5_000
[[task_queue]]
kind = "set_accumulator"
accumulator = {{ kind = "vector", components = ["value"] }}
[[task_queue]]
kind = "sample"
stop_condition = {{ max_samples = 60_000 }}
sampler_aggregator = {{ config = {{ kind = "naive_monte_carlo", seed = 3 }} }}
''')
    spec = load_run_file(path)
    assert spec.integrand.command == [sys.executable, "-u", str(folder / "worker.py")]
    got, stderr = integrate(embedded, path)
    assert got["samples"] == 60_000 and "warning" not in stderr


def test_the_worked_example_of_the_docs_runs_as_written(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from mainboard.integrators.driver import integrate_local

    text = (REPO / "docs" / "gammaboard.md").read_text()
    run = text.split("```toml\n")[-1].split("```")[0]
    module = text.split("```python\n")[-1].split("```")[0]
    (tmp_path / "train.toml").write_text(run)
    (tmp_path / "half_sine.py").write_text(module)          # a class without from_config
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = load_run_file(tmp_path / "train.toml")
    assert spec.model_dump(mode="json", exclude={"integrand"}) == {
        "name": "half-sine", "seed": 5, "domain": {"continuous": 2, "discrete": []},
        "sampler": {"kind": "vegas", "bins": 32, "alpha": 0.5, "beta": 0.75},
        "transforms": [], "accumulator": {"kind": "scalar", "discard": 0}, "stop": {
            "max_samples": 200_000, "max_iterations": None, "absolute_error": None,
            "relative_error": None, "min_samples": 0},
        "batching": {"batch_size": 10_000, "batches_per_iteration": 5, "fuse": True}}
    result = integrate_local(spec)
    assert result.exact == 2.0 and result.iterations == 4
    assert abs(result.estimate - 2.0) < 4 * result.error
