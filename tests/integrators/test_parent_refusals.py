"""Parent run files refused up front (integrators/spec_parents.py): each refusal is one line
naming the key and what is valid (exit code 2) before anything runs; a scan may set a key
in a table its child does not have; run-file errors about the file as a whole, a child
value described as "any value", and a channel sigma that is not finite."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from mainboard.errors import ConfigError
from mainboard.integrators.runfile import load_run
from mainboard.integrators.spec import parse_run
from mainboard.integrators.spec_parents import parse_parent

CHILD: dict[str, Any] = {
    "name": "child", "seed": 1, "domain": {"continuous": 1},
    "integrand": {"kind": "genz.gaussian", "a": [1.0]}, "stop": {"max_samples": 100}}
TUNE: dict[str, Any] = {"optimizer": {"algorithm": "random", "max_trials": 2},
                        "objective": {"metric": "error"}}


def _campaign(*names: str, run: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"children": [{"name": n, "coefficient": 1.0, "run": run or CHILD} for n in names],
            "stop": {"max_total_samples": 100}, "min_samples_per_child": 10}


def _values(count: int) -> list[int]:
    return list(range(count))


REFUSED: dict[str, tuple[dict[str, Any], str | None, str, str | None]] = {
    # case: (parent data, key, message part, valid part)
    "scan names twice": (
        {"name": "p", "child": CHILD, "scan": {"parameters": [
            {"name": "seed", "values": [1]}, {"name": "seed", "values": [2]}]}},
        "scan.parameters", "names a parameter twice", "distinct dotted paths"),
    "scan grid too big": (
        {"name": "p", "child": CHILD, "scan": {"parameters": [
            {"name": "seed", "values": _values(101)},
            {"name": "stop.max_samples", "values": _values(101)}]}},
        "scan.parameters", "make a grid of 10201 points", "at most 10000 points"),
    "float bounds": (
        {"name": "p", "child": CHILD, "tune": {**TUNE, "parameters": [
            {"kind": "float", "name": "x", "min": 1.0, "max": 1.0}]}},
        "tune.parameters[0].max", "needs min < max (and min > 0 when log = true)", "min < max"),
    "log float from zero": (
        {"name": "p", "child": CHILD, "tune": {**TUNE, "parameters": [
            {"kind": "float", "name": "x", "min": 0.0, "max": 1.0, "log": True}]}},
        "tune.parameters[0].max", "min > 0 when log = true", "min < max"),
    "integer bounds": (
        {"name": "p", "child": CHILD, "tune": {**TUNE, "parameters": [
            {"kind": "integer", "name": "seed", "min": 5, "max": 1}]}},
        "tune.parameters[0].max", "needs min <= max", "min <= max"),
    "tune names twice": (
        {"name": "p", "child": CHILD, "tune": {**TUNE, "parameters": [
            {"kind": "integer", "name": "seed", "min": 1, "max": 2},
            {"kind": "categorical", "name": "seed", "values": [3]}]}},
        "tune.parameters", "names a parameter twice", "distinct dotted paths"),
    "campaign names twice": (
        {"name": "p", "campaign": _campaign("a", "a")},
        "campaign.children", "names a child twice", "distinct names"),
    "two kinds": (
        {"name": "p", "child": CHILD, "scan": {"parameters": [{"name": "seed", "values": [1]}]},
         "tune": {**TUNE, "parameters": [{"kind": "integer", "name": "seed", "min": 1,
                                          "max": 2}]}},
        None, "needs exactly one of scan, tune, campaign (got scan, tune)",
        "scan, tune, campaign"),
    "scan without a child": (
        {"name": "p", "scan": {"parameters": [{"name": "seed", "values": [1]}]}},
        "child", "scan needs a child run", "a [child] table"),
    "campaign with a child": (
        {"name": "p", "child": CHILD, "campaign": _campaign("a")},
        "child", "a campaign takes no child run", "[[campaign.children]]"),
    "child is a parent": (
        {"name": "p", "child": {"scan": {}},
         "scan": {"parameters": [{"name": "seed", "values": [1]}]}},
        "child", "a child run cannot itself be a scan, tune or campaign",
        "a plain run definition"),
    "tune without a fixed budget": (
        {"name": "p", "child": {**CHILD, "stop": {"relative_error": 0.1}},
         "tune": {**TUNE, "parameters": [{"kind": "integer", "name": "seed", "min": 1,
                                          "max": 2}]}},
        "tune.samples_per_trial", "trials need a fixed sample budget",
        "[stop] max_samples in the child"),
    "campaign of a complex child": (
        {"name": "p", "campaign": _campaign("c", run={
            **CHILD, "domain": {"continuous": 2},
            "integrand": {"kind": "complex_exponential", "a": [1.0, 2.0]}})},
        "campaign.children[0].run", "a campaign sums scalar integrals; child 'c' gives "
        "complex values", "a run whose integrand gives one real number"),
    "scan values empty": (
        {"name": "p", "child": CHILD, "scan": {"parameters": [{"name": "seed", "values": []}]}},
        "scan.parameters[0].values", "needs at least 1 entry", "an array of any value"),
}


@pytest.mark.parametrize("data,key,says,valid", REFUSED.values(), ids=list(REFUSED))
def test_a_bad_parent_is_refused_in_one_line_naming_key_and_valid(
        data: dict[str, Any], key: str | None, says: str, valid: str | None) -> None:
    with pytest.raises(ConfigError) as info:
        parse_parent(copy.deepcopy(data), file="parent.toml")
    err = info.value
    assert err.key == key and says in str(err), str(err)
    assert valid is None or valid in (err.valid or ""), err.valid
    assert err.exit_code == 2 and "\n" not in str(err)


def test_a_scan_may_set_a_key_in_a_table_its_child_lacks() -> None:
    parent = parse_parent({"name": "p", "child": copy.deepcopy(CHILD), "scan": {"parameters": [
        {"name": "accumulator.kind", "values": ["scalar"]}]}})
    assert "accumulator" not in parent.child
    assert parent.child_spec({"accumulator.kind": "scalar"}).accumulator.kind == "scalar"


def test_a_parent_file_refuses_overrides_and_names_no_line_for_the_whole_file(
        tmp_path: Path) -> None:
    path = tmp_path / "scan.toml"
    path.write_text('name = "p"\n[child]\nname = "c"\nseed = 1\ndomain = { continuous = 1 }\n'
                    'integrand = { kind = "genz.gaussian", a = [1.0] }\n'
                    'stop = { max_samples = 100 }\n'
                    '[scan]\nparameters = [{ name = "seed", values = [1, 2] }]\n')
    assert load_run(path).kind == "scan"
    with pytest.raises(ConfigError, match=r"applies to one run, not to a scan, tune or "
                                          r"campaign; valid: the children's budgets") as info:
        load_run(path, {"stop.max_samples": 5})
    assert info.value.key == "stop.max_samples" and info.value.file == str(path)
    path.write_text(path.read_text() + '[campaign]\nmin_samples_per_child = 1\n'
                    'stop = { max_total_samples = 10 }\n'
                    'children = [{ name = "a", coefficient = 1.0, run = "scan.toml" }]\n')
    with pytest.raises(ConfigError, match=r"needs exactly one of scan, tune, campaign") as info:
        load_run(path)
    assert (info.value.file, info.value.key, info.value.line) == (str(path), None, None)


def test_a_channel_sigma_that_is_not_finite_is_named_by_its_entry() -> None:
    with pytest.raises(ConfigError) as info:
        parse_run({"name": "s", "seed": 1, "domain": {"continuous": 1, "discrete": [2]},
                   "integrand": {"kind": "channels", "coefficients": [1.0, 2.0],
                                 "sigma": [0.1, float("nan")]},
                   "stop": {"max_samples": 10}})
    err = info.value
    assert err.key == "integrand.sigma[1]", str(err)
    assert "must be a finite number, not nan or inf" in str(err)
    assert err.valid == "a finite number greater than 0"
