"""``[tune]``: a hyperparameter study; each trial a child run with the same sample budget.

Why trial parameters are recorded when a trial starts (``parent.child`` with its point):
a resumed study must run exactly the trials it had in hand, and a model-based optimizer
(Optuna's TPE) is rebuilt by telling it every ended trial again, in trial order. random
draws trial n from a generator seeded with (seed, n), so it is the same in any order;
grid walks the product of the parameters' values (``grid_points`` per float).
A trial that fails is recorded with its error, told to the optimizer as failed, and the
study goes on.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from mainboard.errors import MissingDependency, UserError, first_line
from mainboard.integrators.spec_parents import (
    CategoricalParameter,
    FloatParameter,
    IntegerParameter,
    TuneSpec,
)
from mainboard.parents.children import Child, Children, Outcome, child_id
from mainboard.parents.context import Context
from mainboard.parents.table import objective, view
from mainboard.receipts import ChildDone, ChildStarted


class Optimizer:
    """random or grid: trial n's parameters depend on n alone."""

    def __init__(self, tune: TuneSpec) -> None:
        self.tune = tune
        self.points = tune.optimizer.grid_points
        self.sizes = [p.grid_count(self.points) for p in tune.parameters]

    @property
    def trials(self) -> int:
        """How many trials the study runs (a grid: at most its size)."""
        cap = self.tune.optimizer.max_trials
        return min(cap, math.prod(self.sizes)) if self.tune.optimizer.algorithm == "grid" \
            else cap

    def params(self, number: int) -> dict[str, Any]:
        """Trial ``number``'s parameters: the grid in order (the last parameter fastest),
        or random draws seeded with (seed, number)."""
        out: dict[str, Any] = {}
        if self.tune.optimizer.algorithm == "grid":
            for p, size in reversed(list(zip(self.tune.parameters, self.sizes, strict=True))):
                number, k = divmod(number, size)
                out[p.name] = p.grid_value(k, self.points)
            return {p.name: out[p.name] for p in self.tune.parameters}
        rng = np.random.default_rng([self.tune.optimizer.seed, number])
        for p in self.tune.parameters:
            if isinstance(p, FloatParameter):
                u = rng.random()
                out[p.name] = float(math.exp(math.log(p.min) + u * (math.log(p.max)
                                                                      - math.log(p.min)))
                                    if p.log else p.min + u * (p.max - p.min))
            else:
                out[p.name] = p.grid_value(int(rng.integers(p.grid_count(2))), 2)
        return out

    def tell(self, number: int, params: dict[str, Any], value: float | None) -> None:
        """random and grid learn nothing."""


class TPE(Optimizer):
    """Optuna's TPE sampler over the same parameters (categories by index)."""

    def __init__(self, tune: TuneSpec) -> None:
        super().__init__(tune)
        try:
            # lazy: optuna is optional (mainboard[tune]), asked for by `sampler = "tpe"` only
            import optuna
        except ImportError:
            raise MissingDependency("optimizer algorithm \"tpe\" needs optuna: pip install "
                                    "'mainboard[tune]' (or use \"random\" or \"grid\")"
                                    ) from None
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.optuna = optuna
        self.study = optuna.create_study(
            direction=tune.objective.mode,
            sampler=optuna.samplers.TPESampler(seed=tune.optimizer.seed))
        d = optuna.distributions
        self.dists = {p.name: (d.FloatDistribution(p.min, p.max, log=p.log)
                               if isinstance(p, FloatParameter) else
                               d.IntDistribution(int(p.min), int(p.max), step=int(p.step))
                               if isinstance(p, IntegerParameter) else
                               d.CategoricalDistribution(list(range(len(p.values)))))
                      for p in tune.parameters}
        self.asked: dict[int, Any] = {}

    def params(self, number: int) -> dict[str, Any]:
        trial = self.study.ask(self.dists)
        self.asked[number] = trial
        return {p.name: (p.values[trial.params[p.name]] if isinstance(p, CategoricalParameter)
                         else trial.params[p.name]) for p in self.tune.parameters}

    def _raw(self, params: dict[str, Any]) -> dict[str, Any]:
        return {p.name: (p.values.index(params[p.name]) if isinstance(p, CategoricalParameter)
                         else params[p.name]) for p in self.tune.parameters}

    def tell(self, number: int, params: dict[str, Any], value: float | None) -> None:
        state = self.optuna.trial.TrialState
        trial = self.asked.pop(number, None)
        if trial is not None:
            self.study.tell(trial, value, state=state.COMPLETE if value is not None
                            else state.FAIL)
            return
        self.study.add_trial(self.optuna.trial.create_trial(
            params=self._raw(params), distributions=self.dists, value=value,
            state=state.COMPLETE if value is not None else state.FAIL))


def optimizer(tune: TuneSpec) -> Optimizer:
    """The study's optimizer."""
    return TPE(tune) if tune.optimizer.algorithm == "tpe" else Optimizer(tune)


def _number(label: str) -> int:
    return int(label[1:])


def drive(ctx: Context) -> dict[str, Any]:
    """Run the study: trials in number order, ``max_concurrent_trials`` at a time."""
    tune = ctx.spec.tune
    assert tune is not None
    opt = optimizer(tune)
    metric = tune.objective.metric
    ended = {d.label: d for d in ctx.prior}
    history = ctx.s.store.history(ctx.parent_id)
    started = {c.label: dict(c.point) for c in (history.children if history else [])
               if isinstance(c, ChildStarted)}
    for label in sorted(ended, key=_number):  # the optimizer learns what ended before
        done = ended[label]
        opt.tell(_number(label), dict(done.point),
                 objective(done.result, metric) if done.status == "finished" else None)
    in_hand = sorted((n for n in started if n not in ended), key=_number)  # were running
    next_number = max((_number(n) for n in (*started, *ended)), default=-1) + 1
    def learn(outcome: Outcome) -> None:
        value = objective(outcome.row, metric) if outcome.status == "finished" else None
        opt.tell(_number(outcome.child.label), outcome.child.point, value)

    with Children(ctx.s, ctx.parent_id, tune.max_concurrent_trials, ctx.report) as pool:
        while True:
            while pool.free > 0 and (in_hand or next_number < opt.trials):
                if in_hand:
                    label = in_hand.pop(0)
                    params = started[label]
                else:
                    label, next_number = f"t{next_number}", next_number + 1
                    params = opt.params(_number(label))
                outcome = _start(ctx, pool, label, params)
                if outcome is not None:
                    learn(outcome)
            if not pool.active:
                break
            for outcome in pool.wait():
                learn(outcome)
    done = ctx.s.store.history(ctx.parent_id)
    assert done is not None  # its run.created came first
    return {"trials": opt.trials, "metric": metric, "mode": tune.objective.mode,
            "best": view(done).get("best")}


def _start(ctx: Context, pool: Children, label: str, params: dict[str, Any]
           ) -> Outcome | None:
    """Start one trial; parameters its child refuses make a failed trial, recorded."""
    try:
        spec = ctx.spec.child_spec(params, samples=ctx.spec.trial_samples(),
                                   name=ctx.child_name(label), file=ctx.file)
    except UserError as exc:
        ctx.s.store.record(ChildDone(run_id=ctx.parent_id, child=child_id(ctx.parent_id, label),
                                     label=label, point=params, status="failed",
                                     error=first_line(str(exc))))
        return Outcome(Child(label, params, ctx.spec.child_spec(file=ctx.file)),
                       child_id(ctx.parent_id, label), "failed", error=str(exc))
    return pool.start(Child(label, params, spec))


__all__ = ["Optimizer", "TPE", "drive", "optimizer"]
