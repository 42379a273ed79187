"""In-process twins of the example process integrands, for "same result" comparisons."""

import numpy as np


def sin_x0(x: np.ndarray) -> np.ndarray:
    """sin of the first coordinate, the function examples/process/sin_evaluator.* compute."""
    return np.sin(x[:, 0])
