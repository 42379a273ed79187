"""A process evaluator: sin of the first continuous coordinate (exact integral 1 - cos 1).

Run it under mainboard with ``[integrand] kind = "process"``,
``command = ["python3", "examples/process/sin_evaluator.py"]``. Needs only numpy and
the helper (``gammaboard_process``), so it also runs under gammaboard.
"""

import numpy as np

from gammaboard_process import Evaluator, log, run_evaluator


class Sin(Evaluator):
    """f(x) = sin(x0) * scale; ``scale`` comes from the run's ``args``."""

    def __init__(self, *, discrete_cardinalities, continuous_dims, scale=1.0):
        super().__init__(discrete_cardinalities=discrete_cardinalities,
                         continuous_dims=continuous_dims)
        self.scale = float(scale)
        log(f"sin evaluator ready: {continuous_dims} continuous dims, scale {self.scale}")

    def eval(self, xs_discrete, xs_continuous):
        return self.scale * np.sin(xs_continuous[:, 0])


if __name__ == "__main__":
    run_evaluator(Sin)
