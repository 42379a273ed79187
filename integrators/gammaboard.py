"""gammaboard run files read as mainboard run files: :func:`translate` maps one onto the
tables of ``integrators/spec.py`` before validation (``load_run_file`` calls it when
:func:`is_gammaboard` says the document is one).

Why a translation and not a second model: mainboard keeps one run model and one run id
rule, so a translated file is a run like any other (same validation, same deterministic
id). gammaboard's shapes changed over its history; the newest and the older spellings are
both read where they do not conflict. A kind mainboard does not have (GammaLoop,
Symbolica, an unknown sampler) is refused in one line; a key with no meaning here is
named in one warning (:class:`IgnoredKeys`). The key-by-key table is docs/gammaboard.md.
"""

from __future__ import annotations

import re
import tomllib
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mainboard.errors import ConfigError
from mainboard.integrators.gammaboard_tasks import (
    Notes,
    accumulator,
    parametrization,
    process_table,
    refuse,
    runner_batching,
    sampler_source,
    table,
    task,
    transforms,
)

EVALUATORS = ("process_evaluator", "python_scalar", "unit")
NOT_HERE = {"gammaloop": "GammaLoop", "symbolica": "Symbolica",
            "sin_evaluator": "gammaboard's built-in test integrand",
            "sinc_evaluator": "gammaboard's built-in test integrand"}
ADAPTER = "mainboard.integrators.gammaboard_python:evaluate"
MARKERS = ("evaluator", "sampler_aggregator", "task_queue", "evaluator_runner_params",
           "sampler_aggregator_runner_params")
PLACEHOLDER = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)(?::([^)]*))?\)")


class IgnoredKeys(UserWarning):
    """gammaboard keys with no meaning in mainboard (one warning, listing their paths)."""


def is_gammaboard(doc: Mapping[str, Any]) -> bool:
    """A gammaboard run file: its own tables, and no mainboard ``[integrand]``."""
    return "integrand" not in doc and any(k in doc for k in MARKERS)


def translate(doc: dict[str, Any], *, resources: str | None = None) -> dict[str, Any]:
    """A gammaboard run document -> mainboard run data (validated afterwards by the caller).

    ``resources`` stands for gammaboard's ``$resources`` (its resource root; the run file's
    folder here). Ignored key paths are reported once as an :class:`IgnoredKeys` warning.
    """
    doc = replace(doc)
    notes = Notes(resources=resources)
    if "evaluator" not in doc:
        refuse("evaluator", "is required: a gammaboard run file names its evaluator (a file "
               "of tasks alone is appended to a run with `mainboard runs append`)", None,
               '[evaluator] with kind = "process_evaluator", "python_scalar" or "unit"')
    evaluator = table(doc["evaluator"], "evaluator")
    out: dict[str, Any] = {"name": doc.get("name")} if "name" in doc else {}
    out["integrand"] = integrand(evaluator, doc.get("target"), notes)  # kind refused first
    out["domain"] = domain(evaluator, notes)
    runner_params(doc, notes)
    discrete = bool(out["domain"].get("discrete"))
    base = run_level(doc, notes, discrete)
    queue = doc.get("task_queue", [])
    if not isinstance(queue, list):
        refuse("task_queue", "must be an array of tables", queue, "[[task_queue]] entries")
    tasks = [task(raw, i, notes, discrete) for i, raw in enumerate(queue)]
    out.update(fold(base, tasks))
    if notes.batching:
        out["batching"] = {**notes.batching, **out.get("batching", {})}
    out["seed"] = notes.seed if notes.seed is not None else 0
    notes.ignored.extend(k for k in doc if k not in USED)  # e.g. [observable_params]
    if notes.ignored:
        warnings.warn(IgnoredKeys(f"gammaboard keys with no meaning in mainboard, ignored: "
                                  f"{', '.join(notes.ignored)} (see docs/gammaboard.md)"),
                      stacklevel=2)
    return out


def runner_params(doc: Mapping[str, Any], notes: Notes) -> None:
    """The sampler runner's batch knobs (top level in older files, under ``.queue`` in newer
    ones) into ``notes.batching``; every other runner key named as ignored."""
    for key in ("sampler_aggregator_runner_params", "evaluator_runner_params"):
        if key not in doc:
            continue
        params = dict(table(doc[key], key))
        queue = table(params.pop("queue", {}), f"{key}.queue")
        if key.startswith("sampler"):
            runner_batching(params, key, notes, notes.batching)
            runner_batching(queue, f"{key}.queue", notes, notes.batching)
        else:
            notes.ignore(key, params)
            notes.ignore(f"{key}.queue", queue)


def translate_file(doc: dict[str, Any], file: str) -> dict[str, Any]:
    """:func:`translate` for ``load_run_file``: ``$resources`` is the file's folder, and a
    refusal names the file."""
    try:
        return translate(doc, resources=str(Path(file).resolve().parent))
    except ConfigError as exc:  # translate's refusals name no file
        raise ConfigError(exc.detail, file=file, key=exc.key, value=exc.value,
                          valid=exc.valid) from None


USED = {"name", "evaluator", "target", "sampler_aggregator", "task_queue", "observable",
        "observable_implementation", "observable_kind", "batch_transforms",
        "sampler_aggregator_runner_params", "evaluator_runner_params", "replacements",
        "parametrization"}


def replace(doc: dict[str, Any]) -> dict[str, Any]:
    """gammaboard's template placeholders ``$(name:default)`` filled from the top-level
    ``replacements`` table (which is used up here)."""
    values = doc.get("replacements", {})
    if not isinstance(values, dict):
        refuse("replacements", "must be a table", values, "replacements = { name = value }")
    return {k: _fill(v, values) for k, v in doc.items() if k != "replacements"}


def _fill(doc: Any, values: Mapping[str, Any]) -> Any:
    """A whole-string placeholder takes the value (or its default read as TOML); one inside
    a string is interpolated as text."""
    if isinstance(doc, dict):
        return {k: _fill(v, values) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_fill(v, values) for v in doc]
    if not isinstance(doc, str) or "$(" not in doc:
        return doc
    whole = PLACEHOLDER.fullmatch(doc)
    if whole:
        name, default = whole.group(1), whole.group(2)
        return values[name] if name in values else _toml_value(default)
    return PLACEHOLDER.sub(lambda m: str(values.get(m.group(1), m.group(2) or "")), doc)


def _toml_value(text: str | None) -> Any:
    """A placeholder's default as TOML (``10_000``, ``"name"``), else the raw text."""
    if text is None:
        return ""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def domain(evaluator: Mapping[str, Any], notes: Notes) -> dict[str, Any]:
    """``domain = {...}`` (newest) or ``continuous_dims``/``discrete_dims`` (older)."""
    old = {k: evaluator[k] for k in ("continuous_dims", "discrete_dims") if k in evaluator}
    if "domain" in evaluator:
        new = domain_shape(evaluator["domain"], "evaluator.domain")
        if old and (old.get("continuous_dims", new["continuous"]) != new["continuous"]
                    or old.get("discrete_dims", len(new.get("discrete", [])))
                    != len(new.get("discrete", []))):
            refuse("evaluator.continuous_dims", "disagrees with evaluator.domain", old,
                   "domain alone (continuous_dims/discrete_dims are its older spelling)")
        return new
    if old.get("discrete_dims", 0) not in (0, None):
        refuse("evaluator.discrete_dims", "gives no cardinalities, which mainboard needs",
               old["discrete_dims"], "domain = { rectangular = { discrete_cardinalities = "
               "[...], continuous_dims = N } }")
    if "continuous_dims" not in old:
        refuse("evaluator.domain", "is required (or the older continuous_dims)", None,
               "domain = { continuous = { dims = N } }")
    return {"continuous": old["continuous_dims"]}


def domain_shape(value: Any, key: str) -> dict[str, Any]:
    """continuous / rectangular / homogeneous discrete -> our [domain] table."""
    shape = table(value, key)
    if len(shape) != 1:
        refuse(key, "must have exactly one variant", list(shape),
               "continuous, rectangular, discrete")
    (variant, body), = shape.items()
    body = table(body, f"{key}.{variant}")
    if variant == "continuous":
        return {"continuous": body.get("dims")}
    if variant == "rectangular":
        out: dict[str, Any] = {"continuous": body.get("continuous_dims")}
        if body.get("discrete_cardinalities"):
            out["discrete"] = body["discrete_cardinalities"]
        return out
    if variant == "discrete":
        branches = body.get("branches")
        if not isinstance(branches, list) or not branches:
            refuse(f"{key}.discrete.branches", "must be a non-empty array", branches,
                   "[{ index = 0, domain = {...} }, ...]")
        shapes = [domain_shape(table(b, f"{key}.discrete.branches.{i}").get("domain"),
                               f"{key}.discrete.branches.{i}.domain")
                  for i, b in enumerate(branches)]
        if any(s != shapes[0] for s in shapes):
            refuse(f"{key}.discrete.branches", "branches of different shapes (an "
                   "inhomogeneous domain) are not supported", None,
                   "branches that all have the same domain")
        return {"continuous": shapes[0]["continuous"],
                "discrete": [len(shapes), *shapes[0].get("discrete", [])]}
    refuse(key, "is not a gammaboard domain variant", variant,
           "continuous, rectangular, discrete")


def integrand(evaluator: Mapping[str, Any], target: Any, notes: Notes) -> dict[str, Any]:
    """``[evaluator]`` -> our ``[integrand]``."""
    kind = evaluator.get("kind")
    shape = ("kind", "domain", "continuous_dims", "discrete_dims")
    if kind in NOT_HERE:
        refuse("evaluator.kind", f"needs {NOT_HERE[kind]}, which mainboard does not run",
               kind, ", ".join(EVALUATORS))
    if kind == "unit":
        notes.ignore("evaluator", evaluator, keep=shape)
        if target is not None:  # f = 1: mainboard knows its exact value itself
            notes.ignore("target")
        return {"kind": "constant", "value": 1.0}
    if kind == "process_evaluator":
        out = {"kind": "process", **process_table(evaluator, "evaluator", notes,
                                                  own=(*shape, "components"))}
        if "components" in evaluator:
            out["components"] = evaluator["components"]
    elif kind == "python_scalar":
        for k in ("module", "class"):
            if not isinstance(evaluator.get(k), str):
                refuse(f"evaluator.{k}", "is required: the evaluator class's "
                       + ("module" if k == "module" else "name"), evaluator.get(k),
                       "a string")
        params: dict[str, Any] = {"module": evaluator["module"], "class": evaluator["class"],
                                  "init_args": evaluator.get("init_args", {})}
        out = {"kind": "python", "target": ADAPTER, "params": params}
        notes.ignore("evaluator", evaluator, keep=(*shape, "module", "class", "init_args"))
    else:
        refuse("evaluator.kind", "is not a gammaboard evaluator mainboard runs", kind,
               ", ".join(EVALUATORS))
    exact = exact_value(target, notes)
    if exact is not None:
        out["exact"] = exact
    return out


def exact_value(target: Any, notes: Notes) -> float | None:
    """``target = { kind = "scalar", value = X }`` is the exact answer; other forms are named."""
    if target is None:
        return None
    if isinstance(target, dict) and target.get("kind") == "scalar" and "value" in target:
        return target["value"]
    notes.ignore("target")
    return None


def run_level(doc: Mapping[str, Any], notes: Notes, discrete: bool) -> dict[str, Any]:
    """The run's own sampler aggregator, observable and batch transforms (older files)."""
    out: dict[str, Any] = {}
    if "sampler_aggregator" in doc:
        smp, frozen, src = sampler_source(doc["sampler_aggregator"], "sampler_aggregator",
                                          notes, discrete)
        if src is not None:
            refuse("sampler_aggregator.from_name", "a run has no earlier task", src,
                   "from_name inside a [[task_queue]] entry")
        if smp is not None:
            out["sampler"] = smp
        if frozen:
            out["frozen"] = True
    for key in ("observable", "observable_implementation", "observable_kind"):
        if key in doc:
            value = doc[key]
            acc, _ = accumulator(value, key, notes)
            out["accumulator"] = acc
    if "parametrization" in doc:
        parametrization(doc["parametrization"], "parametrization")
    if "batch_transforms" in doc:
        out["transforms"] = transforms(doc["batch_transforms"], "batch_transforms", notes)
    return out


def fold(base: dict[str, Any], tasks: list[dict[str, Any]]) -> dict[str, Any]:
    """The run's tables, and ``tasks`` only when there is more than one sample to run:
    configure tasks before the first sample fold into the run, and so does a lone sample
    task (a single-task file is a plain run, with the run id a plain run gets)."""
    run = {k: v for k, v in base.items() if k != "frozen"}
    frozen = bool(base.get("frozen"))
    rest = list(tasks)
    while rest and rest[0]["kind"] == "configure" and "from" not in rest[0]:
        head = rest.pop(0)
        run.update({k: v for k, v in head.items() if k in ("accumulator", "batching", "stop")})
    first = next((t for t in rest if t["kind"] == "sample"), None)
    if first is not None:
        run.update({k: first[k] for k in ("sampler", "stop", "transforms", "accumulator",
                                          "batching") if k in first})
        frozen = frozen or bool(first.get("frozen"))
    if "stop" not in run:
        refuse("task_queue", "no sample task gives a budget (an idle gammaboard run); "
               "mainboard runs what the file asks for", None,
               "a [[task_queue]] sample task with nr_samples or stop_condition = "
               "{ max_samples = N }")
    if frozen and "sampler" not in run:
        run["sampler"] = {"kind": "vegas"}
    if len(rest) == 1 and first is rest[0] and "from" not in first:
        if frozen and run["sampler"]["kind"] in FREEZE:  # inference from an untrained grid
            run["sampler"] = {**run["sampler"], **FREEZE[run["sampler"]["kind"]]}
        return run
    # rest is never empty here: only a sample task gives a budget (refused above without one)
    run["tasks"] = [t for item in rest for t in split_batching(item)]
    return run


FREEZE = {"vegas": {"alpha": 0.0, "beta": 0.0}, "discrete": {"alpha": 0.0}}


def split_batching(item: dict[str, Any]) -> list[dict[str, Any]]:
    """A sample task's ``queue_tuning`` goes into a configure task just before it (a sample
    task of the contract changes no batching)."""
    if item["kind"] != "sample" or "batching" not in item:
        return [item]
    rest = {k: v for k, v in item.items() if k not in ("batching", "from")}
    configure = {"kind": "configure", "batching": item["batching"]}
    if "from" in item:  # the branch starts at the configure task, the sample follows it
        configure["from"] = item["from"]
    return [configure, rest]


__all__ = ["ADAPTER", "IgnoredKeys", "is_gammaboard", "replace", "translate",
           "translate_file"]
