"""A user's own model for `dlcp profile module:factory` (tests): a small two-layer MLP."""

import torch
from torch import nn


def make_mlp():
    """(module, make_inputs): what a factory given to `dlcp profile` returns."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))

    def make_inputs(batch_size, device):
        return (torch.randn(batch_size, 64, device=device),)

    return model, make_inputs


def module_only():
    return nn.Linear(3, 4)
