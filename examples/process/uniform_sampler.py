"""A process sampler: uniform points, with a trivial adaptation (it learns a batch size).

It keeps the mean training value real(f) * w it has been sent and grows its batch size while the
estimate of that mean is still noisy: enough to show the whole sampler cycle (plan, produce,
ingest, snapshot, restore) in a few lines. Run as ``[sampler] kind = "process"``.
"""

import numpy as np

from gammaboard_process import SampleBatch, Sampler, log, run_sampler


class Uniform(Sampler):
    """Uniform in the unit cube, uniform discrete channels (weight = number of channels)."""

    def __init__(self, *, discrete_cardinalities, continuous_dims, batch_size=1000,
                 training_samples=None):
        super().__init__(discrete_cardinalities=discrete_cardinalities,
                         continuous_dims=continuous_dims)
        self.batch_size = int(batch_size)
        self.training_samples = training_samples
        self.seen = 0
        self.total = 0.0
        self.rng = np.random.default_rng()

    @classmethod
    def from_snapshot(cls, *, snapshot, discrete_cardinalities, continuous_dims, init_args):
        sampler = cls(discrete_cardinalities=discrete_cardinalities,
                      continuous_dims=continuous_dims, **init_args)
        sampler.batch_size = int(snapshot["batch_size"])
        sampler.seen, sampler.total = int(snapshot["seen"]), float(snapshot["total"])
        log(f"restored after {sampler.seen} training values")
        return sampler

    def sample_plan(self):
        return {"kind": "produce", "nr_samples": self.batch_size}

    def training_samples_remaining(self):
        if self.training_samples is None:
            return None
        return max(0, int(self.training_samples) - self.seen)

    def produce_latent_batch(self, nr_samples, seed=None):
        rng = np.random.default_rng(seed) if seed is not None else self.rng
        cards = self.discrete_cardinalities
        xs_discrete = np.stack([rng.integers(0, c, nr_samples) for c in cards], axis=1) \
            if cards else np.zeros((nr_samples, 0), dtype=np.int64)
        xs_continuous = rng.random((nr_samples, self.continuous_dims))
        weights = np.full(nr_samples, float(np.prod(cards)) if cards else 1.0)
        return SampleBatch(xs_discrete, xs_continuous, weights)

    def ingest_training_values(self, values):
        self.seen += len(values)
        self.total += float(np.sum(values))
        if self.seen < 100_000:            # the "adaptation": bigger batches once warmed up
            self.batch_size = min(self.batch_size * 2, 100_000)

    def snapshot(self):
        return {"batch_size": self.batch_size, "seen": self.seen, "total": self.total}

    def get_diagnostics(self):
        return {"mean_training_value": self.total / self.seen if self.seen else None,
                "batch_size": self.batch_size}


if __name__ == "__main__":
    run_sampler(Uniform)
