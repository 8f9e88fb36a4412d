"""PyTorch's own layer norm over the last dimension: what a hand-written kernel has to beat."""


def baseline(x, weight, bias, *, rows, cols):
    import torch
    return torch.nn.functional.layer_norm(x, (cols,), weight, bias, eps=1e-5)
