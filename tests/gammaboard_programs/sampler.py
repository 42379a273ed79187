# gammaboard's minimal sampler (its README, "Process API"), completed only where the docs
# elide the arrays: uniform points in the unit cube, weight 1 (no discrete axes).
import numpy as np

from gammaboard_process import SampleBatch, Sampler, run_sampler

rng = np.random.default_rng(7)


class MySampler(Sampler):  # ABC inheritance is optional.
    def sample_plan(self):
        return {"kind": "produce", "nr_samples": 1024}

    def produce_latent_batch(self, nr_samples):
        xs_discrete = np.zeros((nr_samples, 0), dtype=np.int64)
        xs_continuous = rng.random((nr_samples, self.continuous_dims))
        weights = np.ones(nr_samples)
        return SampleBatch(xs_discrete, xs_continuous, weights)

    def ingest_training_values(self, training_values):
        pass

    def snapshot(self):
        return {}

run_sampler(MySampler)
