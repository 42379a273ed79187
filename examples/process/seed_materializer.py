"""A process materializer: draws a compact latent batch's points from its own seed.

mainboard's latent batch is ``{run_seed, iteration, batch_index, n}``; this draws uniform
points from the batch's own stream ``SeedSequence(run_seed, spawn_key=(iteration,
batch_index))``, so every batch is reproducible wherever it runs. Run as
``[sampler.materializer] kind = "process"`` under ``[sampler] kind = "naive"``.
"""

import numpy as np

from gammaboard_process import MaterializedBatch, Materializer, run_materializer


class SeededUniform(Materializer):
    def materialize_batch(self, latent_batch):
        seq = np.random.SeedSequence(entropy=int(latent_batch["run_seed"]),
                                     spawn_key=(int(latent_batch["iteration"]),
                                                int(latent_batch["batch_index"])))
        rng = np.random.Generator(np.random.PCG64(seq))
        n, cards = int(latent_batch["n"]), self.discrete_cardinalities
        channels = int(np.prod(cards)) if cards else 1
        if channels > 1:
            flat = rng.integers(0, channels, size=n, dtype=np.int64)
            xs_discrete = np.stack(np.unravel_index(flat, cards), axis=1)
        else:
            xs_discrete = np.zeros((n, len(cards)), dtype=np.int64)
        xs_continuous = rng.random((n, self.continuous_dims))
        return MaterializedBatch(xs_discrete, xs_continuous, np.full(n, float(channels)))


if __name__ == "__main__":
    run_materializer(SeededUniform)
