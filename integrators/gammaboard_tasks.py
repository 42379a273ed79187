"""gammaboard's sampler aggregators, observables, stop conditions and task queue, as
mainboard run data (the tables of ``integrators/spec.py`` and ``[[tasks]]`` of
``integrators/spec_tasks.py``).

Why apart from :mod:`~mainboard.integrators.gammaboard`: that module reads the run as a
whole (evaluator, domain, runner params); this one reads what a task changes. Every key
is either mapped, refused in one line (:func:`refuse`: the key path, the value, what is
supported), or recorded in :class:`Notes` as having no meaning here, so nothing is dropped
without a word. Key-by-key table: docs/gammaboard.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn

from mainboard.errors import ConfigError

SAMPLERS = ("naive_monte_carlo", "havana_training", "havana_inference", "process_sampler")
# gammaboard's process evaluators always ask for a "vector" accumulator; here the
# integrand's components decide (one component name: scalar), so vector sets no kind.
OBSERVABLES = {"scalar": "scalar", "full_scalar": "scalar", "complex": "complex",
               "full_complex": "complex", "vector": None}
TASK_KINDS = ("sample", "set_accumulator", "configure", "plot_line", "image", "pause")
STOP_KEYS = ("max_samples", "absolute_error", "relative_error")
RASTER_KEYS = ("offset", "direction", "linspace", "u_vector", "v_vector", "u_linspace",
               "v_linspace", "discrete")
ITERATION_BATCHES = 10  # batches per iteration when only samples_for_update is given


def refuse(key: str, message: str, value: Any = None, valid: str | None = None) -> NoReturn:
    """One line naming the gammaboard key path, the value and what mainboard supports."""
    raise ConfigError(message, key=key, value=value, valid=valid)


@dataclass
class Notes:
    """What the translation met on the way: key paths with no meaning here (for the one
    warning line), the run's seed and the batching the runner params ask for."""

    ignored: list[str] = field(default_factory=list)
    seed: int | None = None
    batching: dict[str, Any] = field(default_factory=dict)
    resources: str | None = None

    def ignore(self, path: str, table: Mapping[str, Any] | None = None,
               keep: tuple[str, ...] = ()) -> None:
        """Record ``path`` (or each key of ``table`` under it not in ``keep``)."""
        if table is None:
            self.ignored.append(path)
            return
        self.ignored.extend(f"{path}.{k}" for k in table if k not in keep)

    def take_seed(self, path: str, value: Any) -> None:
        """A sampler's seed becomes the run's ``seed`` (the first one wins)."""
        if self.seed is None and type(value) is int and value >= 0:
            self.seed = value
        elif self.seed != value:
            self.ignore(path)


def table(value: Any, key: str) -> dict[str, Any]:
    """``value`` as a table, or a refusal naming ``key``."""
    if not isinstance(value, dict):
        refuse(key, "must be a table", value, "a table { ... }")
    return value


def expand(value: Any, notes: Notes) -> Any:
    """gammaboard's ``$resources`` (its resource root) is the run file's folder here."""
    if isinstance(value, str) and "$resources" in value and notes.resources is not None:
        return value.replace("$resources", notes.resources)
    if isinstance(value, list):
        return [expand(v, notes) for v in value]
    return value


def process_table(cfg: Mapping[str, Any], key: str, notes: Notes,
                  own: tuple[str, ...] = ()) -> dict[str, Any]:
    """command/cwd/env/args of a gammaboard process config (``$resources`` expanded)."""
    if "command" not in cfg:
        refuse(f"{key}.command", "is required: the process argv", None,
               'command = ["python", "-u", "worker.py"]')
    out: dict[str, Any] = {"command": expand(cfg["command"], notes)}
    if cfg.get("cwd") not in (None, "$resources"):
        out["cwd"] = expand(cfg["cwd"], notes)
    elif notes.resources is not None:
        out["cwd"] = notes.resources  # gammaboard's default cwd is $resources
    for k in ("env", "args", "request_timeout"):
        if k in cfg:
            out[k] = cfg[k]
    notes.ignore(key, cfg, keep=("kind", "command", "cwd", "env", "args", "request_timeout",
                                 *own))
    return out


def sampler(cfg: Mapping[str, Any], key: str, notes: Notes,
            discrete: bool) -> tuple[dict[str, Any] | None, bool]:
    """A sampler aggregator config -> (our [sampler] table or None to keep it, frozen)."""
    kind = cfg.get("kind")
    if kind == "naive_monte_carlo":
        if "seed" in cfg:
            notes.take_seed(f"{key}.seed", cfg["seed"])
        out: dict[str, Any] = {"kind": "naive"}
        if "materializer" in cfg:
            out["materializer"] = materializer(cfg["materializer"], f"{key}.materializer",
                                               notes)
        notes.ignore(key, cfg, keep=("kind", "seed", "materializer"))
        return out, False
    if kind == "havana_training":
        if "seed" in cfg:
            notes.take_seed(f"{key}.seed", cfg["seed"])
        out = {"kind": "discrete" if discrete else "vegas"}
        if "bins" in cfg:
            out["bins"] = cfg["bins"]
        if "samples_for_update" in cfg:
            iteration_size(cfg["samples_for_update"], f"{key}.samples_for_update", notes)
        notes.ignore(key, cfg, keep=("kind", "seed", "bins", "samples_for_update"))
        return out, False
    if kind == "havana_inference":
        if cfg.get("source", "latest_training_sampler_aggregator") != \
                "latest_training_sampler_aggregator":
            refuse(f"{key}.source", "mainboard infers from the sampler the task before left "
                   "(or the task named by sampler_aggregator.from_name)", cfg["source"],
                   '"latest_training_sampler_aggregator"')
        notes.ignore(key, cfg, keep=("kind", "source"))
        return None, True
    if kind == "process_sampler":
        out = {"kind": "process", **process_table(
            cfg, key, notes, own=("materializer", "requires_training_values"))}
        if "materializer" in cfg:
            out["materializer"] = materializer(cfg["materializer"], f"{key}.materializer",
                                               notes)
        if "requires_training_values" in cfg:
            notes.ignore(f"{key}.requires_training_values")  # mainboard always sends them
        return out, False
    refuse(f"{key}.kind", f"gammaboard's {kind!r} sampler has no mainboard counterpart", kind,
           ", ".join(SAMPLERS))


def materializer(value: Any, key: str, notes: Notes) -> dict[str, Any]:
    """A process materializer (``kind = "process"``, or gammaboard's ``process_materializer``)."""
    cfg = table(value, key)
    if cfg.get("kind", "process") not in ("process", "process_materializer"):
        refuse(f"{key}.kind", "only a process materializer can be given here", cfg.get("kind"),
               '"process" (with command, cwd, args)')
    return {"kind": "process", **process_table(cfg, key, notes)}


def iteration_size(samples: Any, key: str, notes: Notes) -> None:
    """Havana updates its grid every ``samples_for_update`` samples; mainboard adapts once
    per iteration, so the iteration (batch_size x batches_per_iteration) is made that big."""
    if type(samples) is not int or samples < 1:
        refuse(key, "must be a positive integer", samples, "a count of samples")
    size = notes.batching.get("batch_size") or math.ceil(samples / ITERATION_BATCHES)
    size = min(size, samples)
    notes.batching["batch_size"] = size
    notes.batching["batches_per_iteration"] = math.ceil(samples / size)


def sampler_source(value: Any, key: str, notes: Notes, discrete: bool
                   ) -> tuple[dict[str, Any] | None, bool | None, str | None]:
    """``{config = ...}``, ``{from_name = ...}``, ``"latest"`` or a bare config table ->
    (sampler or None, frozen or None, from)."""
    if value is None or value == "latest":
        return None, None, None
    cfg = table(value, key)
    if "from_name" in cfg:
        return None, None, cfg["from_name"]
    if "config" in cfg:
        return (*sampler(table(cfg["config"], f"{key}.config"), f"{key}.config", notes,
                         discrete), None)
    return (*sampler(cfg, key, notes, discrete), None)


def accumulator(value: Any, key: str, notes: Notes) -> tuple[dict[str, Any] | None, str | None]:
    """An observable/accumulator (a name, ``{config = ...}``, ``{from_name}``, ``"latest"``
    or a ``{kind = ...}`` table) -> (our [accumulator] table or None, from)."""
    if value is None or value == "latest":
        return None, None
    if isinstance(value, dict):
        if "from_name" in value:
            return None, value["from_name"]
        if "config" in value:
            return accumulator(value["config"], f"{key}.config", notes)
        notes.ignore(key, value, keep=("kind", "components"))  # components: the evaluator's
        return accumulator(value.get("kind"), f"{key}.kind", notes)
    if value == "gammaloop":
        refuse(key, "the gammaloop observable needs GammaLoop, which mainboard does not run",
               value, ", ".join(OBSERVABLES))
    if value not in OBSERVABLES:
        refuse(key, "is not a gammaboard observable mainboard knows", value,
               ", ".join(OBSERVABLES))
    kind = OBSERVABLES[value]
    return ({"kind": kind} if kind else {}), None


def stop(task: Mapping[str, Any], key: str, notes: Notes) -> dict[str, Any] | None:
    """``nr_samples = N`` (older) or ``stop_condition = { max_samples = N, ... }``."""
    if "nr_samples" in task and "stop_condition" in task:
        refuse(f"{key}.nr_samples", "give nr_samples or stop_condition, not both",
               task["nr_samples"], "stop_condition = { max_samples = N }")
    if "nr_samples" in task:
        return {"max_samples": task["nr_samples"]}
    if "stop_condition" not in task:
        return None
    cond = table(task["stop_condition"], f"{key}.stop_condition")
    notes.ignore(f"{key}.stop_condition", cond, keep=STOP_KEYS)
    return {k: cond[k] for k in STOP_KEYS if k in cond}


def transforms(value: Any, key: str, notes: Notes) -> list[dict[str, Any]]:
    """``batch_transforms``: unit_ball as ours; identity/none dropped; spherical refused
    (gammaboard's maps the cube onto R^3, ours onto a sphere's surface)."""
    if not isinstance(value, list):
        refuse(key, "must be an array of tables", value, '[{ kind = "unit_ball" }]')
    out = []
    for i, item in enumerate(value):
        cfg = table(item, f"{key}.{i}")
        kind = cfg.get("kind")
        if kind == "unit_ball":
            out.append({"kind": "unit_ball"})
        elif kind not in ("identity", "none"):
            refuse(f"{key}.{i}.kind", f"gammaboard's {kind!r} transform has no mainboard "
                   "counterpart (mainboard's spherical maps onto a sphere's surface, not "
                   "R^3)", kind, "unit_ball, identity, none")
        notes.ignore(f"{key}.{i}", cfg, keep=("kind",))
    return out


def parametrization(value: Any, key: str) -> None:
    """Older files' ``parametrization`` (``inner`` nested): identity means none here; any
    other one would change the integral, so it is refused rather than ignored."""
    cfg = table(value, key)
    if cfg.get("kind") not in ("identity", "none", "havana_inference"):
        refuse(f"{key}.kind", "has no mainboard counterpart", cfg.get("kind"),
               '"identity" (or batch_transforms = [{ kind = "unit_ball" }])')
    if "inner" in cfg:
        parametrization(cfg["inner"], f"{key}.inner")


def task(raw: Any, i: int, notes: Notes, discrete: bool) -> dict[str, Any]:
    """One ``[[task_queue]]`` entry -> one ``[[tasks]]`` entry of the contract (``from``
    is checked against the earlier tasks' names with the task list, spec_tasks.py)."""
    key = f"task_queue.{i}"
    cfg = table(raw, key)
    if "config" in cfg:  # older: [task_queue.config.sampler_aggregator] and friends
        cfg = {**{k: v for k, v in cfg.items() if k != "config"},
               **table(cfg["config"], f"{key}.config")}
    kind = cfg.get("kind")
    if kind not in TASK_KINDS:
        refuse(f"{key}.kind", "is not a gammaboard task kind mainboard runs", kind,
               ", ".join(TASK_KINDS))
    if cfg.get("evaluator", "latest") != "latest":
        refuse(f"{key}.evaluator", "a task cannot change the evaluator: a mainboard run has "
               "one integrand", cfg["evaluator"], '"latest" (or no evaluator key)')
    out: dict[str, Any] = {"kind": "configure" if kind == "set_accumulator" else kind}
    if "name" in cfg:
        out["name"] = cfg["name"]
    sources: list[str] = []
    used = {"kind", "name", "evaluator", "parametrization"}
    if "parametrization" in cfg:
        parametrization(cfg["parametrization"], f"{key}.parametrization")
    if kind == "sample":
        used |= {"nr_samples", "stop_condition", "sampler_aggregator", "observable",
                 "accumulator", "batch_transforms", "queue_tuning", "materializer"}
        if (budget := stop(cfg, key, notes)) is not None:
            out["stop"] = budget
        smp, frozen, src = sampler_source(cfg.get("sampler_aggregator"),
                                          f"{key}.sampler_aggregator", notes, discrete)
        if smp is not None:
            out["sampler"] = smp
        if frozen is not None:
            out["frozen"] = frozen
        sources += [src] if src else []
        if "materializer" in cfg:  # older: havana's own latent -> point map
            notes.ignore(f"{key}.materializer")
    if kind in ("sample", "set_accumulator", "configure"):
        used |= {"observable", "accumulator"}
        for name in ("observable", "accumulator"):
            acc, src = accumulator(cfg.get(name), f"{key}.{name}", notes)
            if acc is not None:
                out["accumulator"] = acc
            sources += [src] if src else []
    if kind in ("sample", "plot_line", "image") and "batch_transforms" in cfg:
        out["transforms"] = transforms(cfg["batch_transforms"], f"{key}.batch_transforms",
                                       notes)
        used.add("batch_transforms")
    if kind in ("plot_line", "image"):
        used |= {"geometry", "observable", "accumulator"}
        geometry = table(cfg.get("geometry"), f"{key}.geometry")
        notes.ignore(f"{key}.geometry", geometry, keep=RASTER_KEYS)
        out["geometry"] = {k: v for k, v in geometry.items() if k in RASTER_KEYS}
        name = "observable" if "observable" in cfg else "accumulator"
        observable = cfg.get(name)
        if isinstance(observable, dict) and isinstance(observable.get("config"), str):
            observable = observable["config"]
        if isinstance(observable, str) and observable != "latest":
            out["observable"] = observable
        elif observable not in (None, "latest"):
            notes.ignore(f"{key}.{name}")
    if "queue_tuning" in cfg:
        batching = runner_batching(table(cfg["queue_tuning"], f"{key}.queue_tuning"),
                                   f"{key}.queue_tuning", notes, {})
        if batching and out["kind"] in ("sample", "configure"):
            out["batching"] = batching
    if len(set(sources)) > 1:
        refuse(f"{key}", "sampler and observable start from different tasks", sources,
               "one from_name for both (mainboard's from names one snapshot)")
    if sources:
        out["from"] = sources[0]
    notes.ignore(key, cfg, keep=tuple(used))
    return out


def runner_batching(params: Mapping[str, Any], key: str, notes: Notes,
                    into: dict[str, Any]) -> dict[str, Any]:
    """``max_batch_size`` -> batch_size; ``target_batch_eval_ms`` -> fuse (mainboard sizes
    each task from measured compute time instead); every other queue knob is named."""
    if "max_batch_size" in params:
        into["batch_size"] = params["max_batch_size"]
    if "target_batch_eval_ms" in params:
        into["fuse"] = True
    notes.ignore(key, params, keep=("max_batch_size", "target_batch_eval_ms"))
    return into


__all__ = ["Notes", "accumulator", "expand", "process_table", "refuse",
           "runner_batching", "sampler", "sampler_source", "stop", "table", "task",
           "transforms"]
