import torch
import torch.nn as nn


class Model(nn.Module):
    """Prefix sum along one dimension of the elements a boolean mask keeps (the others count as 0)."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x * mask, dim=self.dim)


batch_size = 128
length = 4096
scan_dim = 1


def get_inputs():
    x = torch.rand(batch_size, length)
    mask = torch.rand(batch_size, length) < 0.3
    return [x, mask]


def get_init_inputs():
    return [scan_dim]
