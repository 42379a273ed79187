"""gammaboard run files at their edges (tests/integrators/test_gammaboard_files.py has the main shapes):
every refusal names its key in one line with what is valid; keys that mean nothing here are
named in the one warning; template placeholders, run-level tables and queue tuning land
where mainboard reads them."""

from __future__ import annotations

import tomllib
import warnings
from pathlib import Path
from typing import Any

import pytest

from mainboard.errors import ConfigError
from mainboard.integrators.gammaboard import IgnoredKeys, translate
from mainboard.integrators.runfile import load_run
from tests.support.gammaboard_cases import MULTI, UNIT_NEW, UNIT_OLD

SAMPLER = '{ kind = "naive_monte_carlo" }'
DOMAIN = "{ continuous = { dims = 2 } }"


def translated(text: str) -> tuple[dict[str, Any], list[str]]:
    """translate() of a document and the warnings it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = translate(tomllib.loads(text))
    assert all(w.category is IgnoredKeys for w in caught)
    return out, [str(w.message) for w in caught]


REFUSED: dict[str, tuple[str, str, str]] = {
    "queue-not-an-array": ("task_queue = 1\n" + UNIT_NEW.split("[[task_queue]]")[0],
                           "task_queue", "must be an array of tables"),
    "replacements-not-a-table": ("replacements = 1\n" + UNIT_NEW, "replacements",
                                 "must be a table"),
    "dims-disagree-with-domain": (UNIT_NEW.replace("domain = {", "continuous_dims = 3\ndomain = {"),
                                  "evaluator.continuous_dims", "disagrees with evaluator.domain"),
    "no-domain": (UNIT_NEW.replace(f"domain = {DOMAIN}\n", ""), "evaluator.domain",
                  "is required (or the older continuous_dims)"),
    "two-domain-variants": (UNIT_NEW.replace(DOMAIN, "{ continuous = { dims = 2 }, "
                                             "rectangular = {} }"),
                            "evaluator.domain", "must have exactly one variant"),
    "no-branches": (UNIT_NEW.replace(DOMAIN, "{ discrete = { branches = [] } }"),
                    "evaluator.domain.discrete.branches", "must be a non-empty array"),
    "unknown-domain-variant": (UNIT_NEW.replace(DOMAIN, "{ spiral = { dims = 2 } }"),
                               "evaluator.domain", "is not a gammaboard domain variant"),
    "python-class-without-module": (UNIT_NEW.replace('kind = "unit"', 'kind = "python_scalar"\n'
                                                     'class = "X"'),
                                    "evaluator.module", "is required: the evaluator class's"),
    "unknown-evaluator": (UNIT_NEW.replace('kind = "unit"', 'kind = "process"'), "evaluator.kind",
                          "is not a gammaboard evaluator mainboard runs"),
    "run-level-from-name": (UNIT_OLD.replace('kind = "naive_monte_carlo"', 'from_name = "x"'),
                            "sampler_aggregator.from_name", "a run has no earlier task"),
    "no-budget": (UNIT_NEW.replace("stop_condition = { max_samples = 50_000 }\n", ""),
                  "task_queue", "no sample task gives a budget"),
    "configure-tasks-alone": (UNIT_NEW.split("[[task_queue]]")[0] + '[[task_queue]]\n'
                              'kind = "set_accumulator"\naccumulator = "scalar"\n',
                              "task_queue", "no sample task gives a budget"),
    "sampler-not-a-table": (UNIT_NEW.replace(f"sampler_aggregator = {{ config = {SAMPLER} }}",
                                             "sampler_aggregator = 3"),
                            "task_queue.1.sampler_aggregator", "must be a table"),
    "process-sampler": (UNIT_NEW.replace(SAMPLER, '{ kind = "process", command = ["x"] }'),
                        "task_queue.1.sampler_aggregator.config.kind",
                        "gammaboard's 'process' sampler has no mainboard counterpart"),
    "materializer-kind": (UNIT_NEW.replace(SAMPLER, '{ kind = "naive_monte_carlo", '
                                           'materializer = { kind = "lattice" } }'),
                          "task_queue.1.sampler_aggregator.config.materializer.kind",
                          "only a process materializer can be given here"),
    "samples-for-update": (UNIT_NEW.replace(SAMPLER, '{ kind = "havana_training", '
                                            "samples_for_update = 0 }"),
                           "task_queue.1.sampler_aggregator.config.samples_for_update",
                           "must be a positive integer"),
    "unknown-observable": (UNIT_NEW.replace('accumulator = "scalar"', 'accumulator = "tensor"'),
                           "task_queue.0.accumulator", "is not a gammaboard observable"),
    "transforms-not-an-array": (UNIT_NEW + "batch_transforms = 3\n",
                                "task_queue.1.batch_transforms", "must be an array of tables"),
    "process-evaluator-without-command": (
        UNIT_NEW.replace('kind = "unit"', 'kind = "process_evaluator"'),
        "evaluator.command", "is required: the process argv"),
    "sampler-and-observable-from-two-tasks": (
        MULTI.replace('observable = { from_name = "sample-initial" }',
                      'observable = { from_name = "train-initial" }'),
        "task_queue.5", "sampler and observable start from different tasks"),
}


@pytest.mark.parametrize("text,key,says", REFUSED.values(), ids=list(REFUSED))
def test_a_refusal_names_the_key_and_what_is_valid(text: str, key: str, says: str) -> None:
    with pytest.raises(ConfigError) as info:
        translate(tomllib.loads(text))
    message = str(info.value)
    assert info.value.key == key and says in message, message
    assert "valid:" in message and "\n" not in message


def test_placeholders_inside_text_and_their_defaults() -> None:
    out, _ = translated(UNIT_NEW.replace('name = "unit-old"', 'name = "run-$(n:7)-x"'))
    assert out["name"] == "run-7-x"
    out, _ = translated(UNIT_NEW.replace('name = "unit-old"', 'name = "$(n)"'))
    assert out["name"] == ""  # no value, no default: empty, as gammaboard fills it
    out, _ = translated(UNIT_NEW.replace('name = "unit-old"', 'name = "$(n:a b)"'))
    assert out["name"] == "a b"  # a default that is no TOML value is taken as text


def test_run_level_tables_of_the_older_spelling() -> None:
    out, notes = translated('observable = "complex"\nbatch_transforms = [{ kind = "unit_ball" }]\n'
                            'parametrization = { kind = "havana_inference" }\n'
                            + UNIT_OLD.replace('observable = { config = "scalar" }\n', ""))
    assert out["accumulator"] == {"kind": "complex"} and notes == []
    assert out["transforms"] == [{"kind": "unit_ball"}]
    out, _ = translated(UNIT_OLD.replace('kind = "naive_monte_carlo"', 'kind = "havana_inference"'))
    assert out["sampler"] == {"kind": "vegas", "alpha": 0.0, "beta": 0.0}  # frozen: no adapting
    out, _ = translated(UNIT_NEW.replace(DOMAIN, "{ rectangular = { continuous_dims = 2 } }"))
    assert out["domain"] == {"continuous": 2}


def test_samplers_and_evaluators_in_their_other_forms() -> None:
    out, _ = translated(UNIT_NEW.replace(SAMPLER, '{ kind = "havana_training" }'))
    assert out["sampler"] == {"kind": "vegas"}
    out, _ = translated(UNIT_NEW.replace(SAMPLER, '{ kind = "naive_monte_carlo", materializer = '
                                         '{ kind = "process", command = ["m"] } }'))
    assert out["sampler"] == {"kind": "naive", "materializer": {"kind": "process",
                                                                "command": ["m"]}}
    out, _ = translated(UNIT_NEW.replace('kind = "unit"', 'kind = "process_evaluator"\n'
                                         'command = ["w"]\ncwd = "/srv"'))
    assert out["integrand"] == {"kind": "process", "command": ["w"], "cwd": "/srv"}
    out, _ = translated(UNIT_NEW.replace('accumulator = "scalar"',
                                         'accumulator = { config = "complex" }'))
    assert out["accumulator"] == {"kind": "complex"}


def test_what_means_nothing_here_is_named_once() -> None:
    _, notes = translated('target = { kind = "complex", re = 1.0 }\n' + UNIT_NEW)
    assert notes == ["gammaboard keys with no meaning in mainboard, ignored: target "
                     "(see docs/gammaboard.md)"]
    second = ('[[task_queue]]\nkind = "sample"\nnr_samples = 10\nsampler_aggregator = '
              '{ config = { kind = "naive_monte_carlo", seed = 4 } }\n')
    out, notes = translated(UNIT_NEW.replace(SAMPLER, '{ kind = "naive_monte_carlo", seed = 3 }')
                            + second)
    assert out["seed"] == 3 and "task_queue.2.sampler_aggregator.config.seed" in notes[0]
    _, notes = translated(UNIT_NEW + 'materializer = { kind = "process" }\n')
    assert "task_queue.1.materializer" in notes[0]
    _, notes = translated(UNIT_NEW.replace('accumulator = "scalar"', "accumulator = { x = 1 }"))
    assert "task_queue.0.accumulator.x" in notes[0]
    _, notes = translated(UNIT_NEW.replace('accumulator = "scalar"', 'accumulator = "scalar"\n'
                                           "queue_tuning = { max_batch_size = 100 }"))
    assert "task_queue.0.queue_tuning" in notes[0]
    _, notes = translated(UNIT_NEW.replace(SAMPLER, '{ kind = "process_sampler", command = ["s"], '
                                           "requires_training_values = true }"))
    assert "task_queue.1.sampler_aggregator.config.requires_training_values" in notes[0]


def test_queue_tuning_of_a_sample_task_becomes_a_configure_task_before_it() -> None:
    text = MULTI.replace('name = "sample-initial"\n', 'name = "sample-initial"\n'
                         "queue_tuning = { max_batch_size = 500 }\n")
    out, _ = translated(text)
    kinds = [(t["kind"], t.get("name"), t.get("batching")) for t in out["tasks"]]
    assert kinds[1:3] == [("configure", None, {"batch_size": 500}),
                          ("sample", "sample-initial", None)]


def _task(out: dict[str, Any], kind: str) -> dict[str, Any]:
    (found,) = [t for t in out["tasks"] if t["kind"] == kind]
    return found


def test_a_plot_line_task_s_observable_forms_and_its_queue_tuning() -> None:
    """``observable = { config = NAME }`` names the observable; a table of another form and
    the queue tuning of a raster task (it sizes no samples) are named as ignored."""
    line = 'kind = "plot_line"\nobservable = "scalar"\n'
    out, notes = translated(MULTI.replace(line, 'kind = "plot_line"\n'
                                          'observable = { config = "complex" }\n'))
    assert _task(out, "plot_line")["observable"] == "complex" and notes == []
    out, notes = translated(MULTI.replace(line, 'kind = "plot_line"\nobservable = "latest"\n'))
    assert "observable" not in _task(out, "plot_line") and notes == []
    out, notes = translated(MULTI.replace(line, 'kind = "plot_line"\n'
                                          'observable = { kind = "complex" }\n'))
    assert "observable" not in _task(out, "plot_line")
    assert "task_queue.2.observable" in notes[0]
    out, notes = translated(MULTI.replace(line, line + "queue_tuning = { max_batch_size = 10 }\n"))
    assert "batching" not in _task(out, "plot_line")
    assert "task_queue.2.queue_tuning" in notes[0]


def test_a_target_that_is_no_scalar_value_is_named_and_one_seed_twice_is_no_conflict() -> None:
    python = UNIT_NEW.replace('kind = "unit"', 'kind = "python_scalar"\nmodule = "m"\n'
                              'class = "C"')
    out, notes = translated('target = { kind = "complex", re = 1.0 }\n' + python)
    assert "exact" not in out["integrand"]
    assert notes == ["gammaboard keys with no meaning in mainboard, ignored: target "
                     "(see docs/gammaboard.md)"]
    out, _ = translated('target = { kind = "scalar", value = 0.5 }\n' + python)
    assert out["integrand"]["exact"] == 0.5
    second = ('[[task_queue]]\nkind = "sample"\nnr_samples = 10\nsampler_aggregator = '
              '{ config = { kind = "naive_monte_carlo", seed = 3 } }\n')
    out, notes = translated(UNIT_NEW.replace(SAMPLER, '{ kind = "naive_monte_carlo", seed = 3 }')
                            + second)
    assert out["seed"] == 3 and notes == []


def test_a_gammaboard_file_refused_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "run.toml"
    path.write_text(UNIT_NEW.replace('kind = "unit"', 'kind = "gammaloop"'))
    with pytest.raises(ConfigError, match=r"evaluator.kind: needs GammaLoop, which mainboard "
                                          r"does not run") as info:
        load_run(path)
    assert info.value.file == str(path) and str(info.value).startswith(f"{path}: ")
