"""Processes written with the Python helper that exercise its corners (argv[1] picks one)."""

import os
import sys

import numpy as np

from gammaboard_process import (
    Evaluator,
    SampleBatch,
    log,
    run_evaluator,
    run_sampler,
)


class Probe(Evaluator):
    """Prints, writes to fd 1 directly, logs, and answers per component from a dict."""

    def __init__(self, *, discrete_cardinalities, continuous_dims, **args):
        super().__init__(discrete_cardinalities=discrete_cardinalities,
                         continuous_dims=continuous_dims, **args)
        print(f"probe built with args {sorted(args)} and cards {discrete_cardinalities}")

    def metadata(self):
        return {"args": self.args, "cards": self.discrete_cardinalities,
                "dims": self.continuous_dims}

    def eval(self, xs_discrete, xs_continuous):
        os.write(1, b"raw write to fd 1 from native code\n")
        log("evaluating a batch", level="warning")
        xs_continuous[:, 0] += 0.0          # inputs are writable, as under gammaboard
        return {"a": np.sin(xs_continuous[:, 0]), "b": xs_discrete[:, 0].astype(float)}


class BadSampler:
    """Duck-typed (no base class) sampler whose batches have a negative weight."""

    def __init__(self, *, discrete_cardinalities, continuous_dims):
        self.d = continuous_dims

    def sample_plan(self):
        return {"kind": "produce", "nr_samples": 0}

    def produce_latent_batch(self, nr_samples):
        w = np.ones(nr_samples)
        w[0] = -1.0
        return SampleBatch(np.zeros((nr_samples, 0)), np.full((nr_samples, self.d), 0.5), w)


if __name__ == "__main__":
    if sys.argv[1] == "evaluator":
        run_evaluator(Probe)
    else:
        run_sampler(BadSampler)
