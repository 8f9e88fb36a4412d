"""The independent oracle for layernorm: inputs arrive as float64, so is the result."""
import numpy as np

EPS = 1e-5


def reference(x, weight, bias, *, rows, cols):
    assert x.shape == (rows, cols) and weight.shape == (cols,) and bias.shape == (cols,)
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)  # population variance (divide by cols)
    return (x - mean) / np.sqrt(var + EPS) * weight + bias
