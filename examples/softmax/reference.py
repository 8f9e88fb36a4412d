"""The independent oracle for softmax: inputs arrive as float64, so is the result."""
import numpy as np


def reference(x, *, rows, cols):
    assert x.shape == (rows, cols)
    # Subtracting the row max keeps exp() in range; it does not change the result.
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)
