"""In-process twins of the example process integrands, for "same result" comparisons."""

import numpy as np


def sin_x0(x: np.ndarray) -> np.ndarray:
    """sin of the first coordinate, the function examples/process/sin_evaluator.* compute."""
    return np.sin(x[:, 0])


def cexp_3x0(x: np.ndarray) -> np.ndarray:
    """exp(3i x0): complex values, for the training-projection tests."""
    return np.exp(3j * x[:, 0])
