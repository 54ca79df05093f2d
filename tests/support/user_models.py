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


class _Shortcut(nn.Module):
    """Owns no parameter and never calls its child: it uses the child's weight directly."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 16)

    def forward(self, x):
        return torch.nn.functional.linear(x, self.proj.weight, self.proj.bias)


class _Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(8, 16)
        self.attn = nn.MultiheadAttention(16, 2, batch_first=True)  # its out_proj is never called
        self.shortcut = _Shortcut()
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        h = self.embed(x)
        h = self.attn(h, h, h, need_weights=False)[0]
        return self.head(self.shortcut(h).mean(dim=1))


def make_attention():
    """A model with layers whose modules are never called (as in torchvision's vit_b_16)."""
    torch.manual_seed(0)

    def make_inputs(batch_size, device):
        return (torch.randn(batch_size, 4, 8, device=device),)

    return _Attention(), make_inputs


class _Tied(nn.Module):
    """An embedding whose weight the output head shares (as GPT-2's lm_head)."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(4000, 64)
        self.mid = nn.Linear(64, 64)
        self.head = nn.Linear(64, 4000, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, tokens):
        return torch.nn.functional.cross_entropy(self.head(self.mid(self.emb(tokens))).flatten(0, 1), tokens.flatten())


def make_tied():
    torch.manual_seed(0)

    def make_inputs(batch_size, device):
        return (torch.randint(0, 4000, (batch_size, 64), device=device),)

    return _Tied(), make_inputs
