"""The independent oracle for rowsum: inputs arrive as float64, so is the result."""
import numpy as np


def reference(x, *, rows, cols):
    assert x.shape == (rows, cols)
    return np.sum(x, axis=1, dtype=np.float64)
