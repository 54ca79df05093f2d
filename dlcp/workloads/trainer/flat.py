"""A model's parameters and gradients as one flat fp32 buffer per message.

Messages are planned once: layers are taken in backward order (output side first, the order their
gradients become ready) and packed into messages, either one layer per message
(`bucket_values = 0`) or consecutive layers until a message holds at least `bucket_values` values
(a layer is never split). Inside a message the layer segments are in ascending layer order, so
`MessageLayout.layer_starts` increases with the layer id; msg_id is the position in backward order.

Each message owns three flat CPU float32 buffers of the same layout:
- `params`: the parameters themselves (every nn.Parameter is rebound to a view of it), so the
  values a PS sends or a worker pulls are a numpy view, never a copy;
- `send`: this process's gradient, copied there by the backward hooks (what a worker sends);
- `avg`: the filled, averaged gradient; the parameters' `.grad` are views of it when the optimizer
  steps, and it is the previous value for the `stale` fill.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from dlcp.workloads.contract import Aggregate, MessageLayout, plan_messages
from dlcp.workloads.trainer.fill import fill_average
from dlcp.workloads.trainer.models import parameter_layers


@dataclass
class FlatMessage:
    layout: MessageLayout
    params: torch.Tensor
    send: torch.Tensor
    avg: torch.Tensor
    slices: list[tuple[nn.Parameter, slice]]

    def __post_init__(self):
        self.params_np = self.params.numpy()
        self.send_np = self.send.numpy()


class FlatModel:
    """Rebinds `model`'s parameters into per-message flat buffers (see the module docstring)."""

    def __init__(self, model: nn.Module, bucket_values: int = 0):
        self.model = model
        layers = parameter_layers(model)
        self.n_layers = len(layers)
        sizes = [sum(p.numel() for p in group) for group in layers]
        self.messages: list[FlatMessage] = []
        self.message_of: dict[int, tuple[int, slice]] = {}  # id(param) -> (message index, values)
        for msg_id, layer_ids in enumerate(plan_messages(sizes, bucket_values)):
            n = sum(sizes[layer] for layer in layer_ids)
            params = torch.empty(n, dtype=torch.float32)
            starts, slices, offset = [], [], 0
            for layer in layer_ids:
                starts.append(offset)
                for p in layers[layer]:
                    if p.dtype != torch.float32 or p.device.type != "cpu":
                        raise ValueError(f"{type(model).__name__}: parameters must be float32 on the CPU")
                    sl = slice(offset, offset + p.numel())
                    params[sl].copy_(p.detach().reshape(-1))
                    p.data = params[sl].view_as(p)
                    slices.append((p, sl))
                    self.message_of[id(p)] = (msg_id, sl)
                    offset += p.numel()
            layout = MessageLayout(msg_id, n, tuple(starts), tuple(layer_ids))
            self.messages.append(FlatMessage(layout, params, torch.zeros(n), torch.zeros(n), slices))

    def layouts(self) -> list[MessageLayout]:
        return [m.layout for m in self.messages]

    def message(self, msg_id: int) -> FlatMessage:
        if not 0 <= msg_id < len(self.messages):
            raise ValueError(f"msg_id {msg_id}: this model has messages 0..{len(self.messages) - 1}")
        return self.messages[msg_id]

    def parameter_vector(self) -> torch.Tensor:
        """All parameters in model order (a copy), to compare models."""
        return torch.cat([p.detach().reshape(-1) for p in self.model.parameters()])

    def install_gradients(
        self, iteration: int, aggregates: dict[int, Aggregate], fill: str, use_own: bool, decode=None
    ) -> int:
        """Fill every message's aggregate into its `avg` buffer and point the parameters' .grad
        at it. `use_own`: `send` holds this process's gradient (for the local fill). `decode(values,
        iteration, msg_id)`: transforms a filled average back in place (the Hadamard transform,
        dlcp/workloads/hadamard.py). Returns the number of values that missed at least one
        contribution."""
        missing = [m.layout.msg_id for m in self.messages if m.layout.msg_id not in aggregates]
        if missing:
            raise ValueError(f"iteration {iteration}: no aggregate for message(s) {missing}")
        lost = 0
        for m in self.messages:
            agg = aggregates[m.layout.msg_id]
            if np.size(agg.total) != m.layout.n_values:
                raise ValueError(
                    f"iteration {iteration}: aggregate of message {m.layout.msg_id} has "
                    f"{np.size(agg.total)} values, its layout {m.layout.n_values}"
                )
            fill_average(agg, fill, previous=m.avg, own=m.send if use_own else None, out=m.avg)
            if decode is not None:
                decode(m.avg.numpy(), iteration, m.layout.msg_id)
            lost += int(np.count_nonzero(np.asarray(agg.count) < agg.world))
            for p, sl in m.slices:
                p.grad = m.avg[sl].view_as(p)
        return lost

    def install_parameters(self, msg_id: int, values: np.ndarray, lost: np.ndarray) -> int:
        """Overwrite the parameters of a message except where `lost`; returns the values kept."""
        m = self.message(msg_id)
        values, lost = np.asarray(values).reshape(-1), np.asarray(lost, dtype=bool).reshape(-1)
        if values.size != m.layout.n_values or lost.size != m.layout.n_values:
            raise ValueError(
                f"parameters of message {msg_id}: {values.size} values and {lost.size} loss "
                f"flags, its layout has {m.layout.n_values}"
            )
        np.copyto(m.params_np, values, where=~lost, casting="same_kind")
        return int(np.count_nonzero(lost))
