"""The independent oracle for transpose: inputs arrive as float64, so is the result."""
import numpy as np


def reference(x, *, rows, cols):
    assert x.shape == (rows, cols)
    return np.ascontiguousarray(x.T)
