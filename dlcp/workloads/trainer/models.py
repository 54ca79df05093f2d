"""Model registry: `mlp`, `cnn` (LeNet-style), `resnet` (ResNet-20 for small images).

Every model lists its layers (`dlcp_layers()`): groups of parameters in forward order, layer 0 on the
input side. A layer is what the tagging policies give one priority (a conv and the norm right after
it form one layer). `parameter_layers(model)` works for any module: models without `dlcp_layers`
get one layer per module that owns parameters, in registration order.

No model uses dropout or batch statistics (ResNet uses GroupNorm), so a forward pass depends on
its input only: N workers on N shards compute exactly the gradient of one process on the whole
batch, which the correctness tests rely on.
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F
from torch import nn


class MLP(nn.Module):
    """Flatten, then four fully connected layers (256, 128, 64, classes) with ReLU."""

    def __init__(self, in_shape, n_classes, widths=(256, 128, 64)):
        super().__init__()
        n_in = in_shape[0] * in_shape[1] * in_shape[2]
        dims = [n_in, *widths, n_classes]
        self.fcs = nn.ModuleList(nn.Linear(a, b) for a, b in itertools.pairwise(dims))

    def forward(self, x):
        x = x.flatten(1)
        for fc in self.fcs[:-1]:
            x = F.relu(fc(x))
        return self.fcs[-1](x)

    def dlcp_layers(self):
        return [list(fc.parameters()) for fc in self.fcs]


class LeNet(nn.Module):
    """LeNet-5 shape: conv5x5(6) - pool - conv5x5(16) - pool - fc120 - fc84 - fc(classes).
    'Same' padding so it also fits 8x8 digits (8 -> 4 -> 2)."""

    def __init__(self, in_shape, n_classes):
        super().__init__()
        c, h, w = in_shape
        self.conv1 = nn.Conv2d(c, 6, 5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, 5, padding=2)
        self.fc1 = nn.Linear(16 * (h // 4) * (w // 4), 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, n_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc3(F.relu(self.fc2(x)))

    def dlcp_layers(self):
        return [list(m.parameters()) for m in (self.conv1, self.conv2, self.fc1, self.fc2, self.fc3)]


def _conv_norm(cin, cout, stride=1, groups=4):
    return nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.GroupNorm(groups, cout)


class BasicBlock(nn.Module):
    """Two 3x3 convs; the shortcut is parameter-free (He et al.'s option A: subsample and pad
    channels with zeros), so the whole net has exactly 20 weight layers."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1, self.norm1 = _conv_norm(cin, cout, stride)
        self.conv2, self.norm2 = _conv_norm(cout, cout)
        self.stride, self.pad = stride, cout - cin

    def forward(self, x):
        out = F.relu(self.norm1(self.conv1(x)))
        out = self.norm2(self.conv2(out))
        short = x[:, :, :: self.stride, :: self.stride] if self.stride > 1 else x
        if self.pad:
            short = F.pad(short, (0, 0, 0, 0, 0, self.pad))
        return F.relu(out + short)

    def dlcp_layers(self):
        return [[self.conv1.weight, *self.norm1.parameters()], [self.conv2.weight, *self.norm2.parameters()]]


class ResNet20(nn.Module):
    """ResNet-20 (stem conv, 3 stages x 3 blocks x 2 convs, fc): 20 layers, ~270k parameters at
    width 16."""

    def __init__(self, in_shape, n_classes, width=16, blocks_per_stage=3):
        super().__init__()
        self.stem, self.stem_norm = _conv_norm(in_shape[0], width)
        blocks, cin = [], width
        for stage, cout in enumerate((width, 2 * width, 4 * width)):
            for b in range(blocks_per_stage):
                blocks.append(BasicBlock(cin, cout, 2 if stage > 0 and b == 0 else 1))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, n_classes)

    def forward(self, x):
        x = self.blocks(F.relu(self.stem_norm(self.stem(x))))
        return self.fc(x.mean(dim=(2, 3)))

    def dlcp_layers(self):
        layers = [[self.stem.weight, *self.stem_norm.parameters()]]
        for block in self.blocks:
            assert isinstance(block, BasicBlock)  # what __init__ put there (Sequential yields Modules)
            layers += block.dlcp_layers()
        return layers + [list(self.fc.parameters())]


MODELS = {"mlp": MLP, "cnn": LeNet, "resnet": ResNet20}


def build_model(name: str, in_shape, n_classes: int, seed: int) -> nn.Module:
    """A freshly initialised model; the same (name, shape, seed) gives the same weights anywhere.
    The global torch RNG is left as it was."""
    if name not in MODELS:
        raise ValueError(f"workload.model: unknown model {name!r} (one of {', '.join(MODELS)})")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return MODELS[name](tuple(in_shape), n_classes)


def parameter_layers(model: nn.Module) -> list[list[nn.Parameter]]:
    """Layers of `model` (parameters grouped, input side first), every trainable parameter once."""
    dlcp_layers = getattr(model, "dlcp_layers", None)  # a model may list its own layers
    if dlcp_layers is not None:
        layers = [list(group) for group in dlcp_layers()]
    else:  # one layer per module owning parameters; a tied parameter belongs to its first owner
        seen: set[int] = set()
        layers = []
        for m in model.modules():
            layers.append([p for p in m.parameters(recurse=False) if id(p) not in seen])
            seen.update(id(p) for p in layers[-1])
    layers = [[p for p in group if p.requires_grad] for group in layers]
    layers = [group for group in layers if group]
    listed = [id(p) for group in layers for p in group]
    trainable = [id(p) for p in model.parameters() if p.requires_grad]
    if sorted(listed) != sorted(trainable):
        raise ValueError(f"{type(model).__name__}: its layers must list every trainable parameter exactly once")
    return layers
