import torch
import torch.nn as nn


class Model(nn.Module):
    """2D max pooling: a 4x4 window, stride 1, padding 1."""

    def __init__(self, kernel_size: int, stride: int, padding: int):
        super().__init__()
        self.maxpool = nn.MaxPool2d(kernel_size=kernel_size, stride=stride, padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.maxpool(x)


batch_size = 8
channels = 32
height = 256
width = 256
kernel_size = 4
stride = 1
padding = 1


def get_inputs():
    x = torch.rand(batch_size, channels, height, width)
    return [x]


def get_init_inputs():
    return [kernel_size, stride, padding]
