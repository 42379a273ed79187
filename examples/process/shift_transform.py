"""A process batch transform: x -> (x + shift) mod 1 on the continuous axes.

A rotation of the unit torus: it stays in the unit cube and has Jacobian 1, so integrals
of periodic and non-periodic integrands alike are unchanged. Run as
``[[transforms]] kind = "process"`` with ``args = { shift = [0.25] }``.
"""

import numpy as np

from gammaboard_process import BatchTransform, TransformedBatch, run_batch_transform


class Shift(BatchTransform):
    def __init__(self, *, discrete_cardinalities, continuous_dims, shift=0.5):
        super().__init__(discrete_cardinalities=discrete_cardinalities,
                         continuous_dims=continuous_dims)
        self.shift = np.broadcast_to(np.asarray(shift, dtype=np.float64), (continuous_dims,))

    def transform_batch(self, xs_discrete, xs_continuous, weights):
        shifted = np.mod(xs_continuous + self.shift, 1.0)
        shifted[shifted >= 1.0] = 0.0      # mod can round up to exactly 1.0
        return TransformedBatch(xs_discrete, shifted, weights)


if __name__ == "__main__":
    run_batch_transform(Shift)
