"""The contract between what is trained (trainer, synthetic workloads) and what moves gradients
(collectives over the transport). Worker and PS agents drive a Workload; collectives only see
GradMessage in and Aggregate / parameter chunks out.

Per iteration, allreduce mode:
    for msg in workload.compute(it):          # backward order, yielded as gradients become ready
        collective.submit(it, msg)             # sending starts at once (wait-free backprop)
    workload.apply_gradients(it, collective.wait(it))    # fill rule + optimizer step

PS mode, worker side:
    for msg in workload.compute(it): ps_client.push(it, msg)
    for msg_id, chunk in ps_client.pull(it).items(): workload.apply_parameters(it, msg_id, chunk)
PS side:
    aggregates = ps_server.gather(it)                        # every worker's push, complete or forced
    server_workload.update(it, aggregates)                    # fill rule + optimizer step
    ps_server.scatter(it, {m: server_workload.parameters(m) for m in ...})
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np


def plan_messages(layer_sizes: list[int], bucket_values: int) -> list[list[int]]:
    """Layer ids of each message, messages in backward order, layers ascending inside."""
    groups, current, size = [], [], 0
    for layer in reversed(range(len(layer_sizes))):
        current.append(layer)
        size += layer_sizes[layer]
        if size >= bucket_values:
            groups.append(sorted(current))
            current, size = [], 0
    if current:
        groups.append(sorted(current))
    return groups


def message_layouts(layer_sizes: list[int], bucket_values: int) -> list[tuple[MessageLayout, slice]]:
    """Every message of a model with these layer sizes (`plan_messages`) and the slice of the
    flat model (layer 0 first) it covers."""
    offsets = np.concatenate([[0], np.cumsum(np.asarray(layer_sizes, dtype=np.int64))])
    out = []
    for msg_id, layers in enumerate(plan_messages(list(layer_sizes), bucket_values)):
        lo, hi = int(offsets[layers[0]]), int(offsets[layers[-1] + 1])
        starts = tuple(int(offsets[layer]) - lo for layer in layers)
        out.append((MessageLayout(msg_id, hi - lo, starts, tuple(layers)), slice(lo, hi)))
    return out


@dataclass(frozen=True)
class MessageLayout:
    """A message's fixed shape: the same msg_id covers the same values every iteration."""

    msg_id: int
    n_values: int
    layer_starts: tuple[int, ...]  # value offset where each layer segment begins; first is 0
    layer_ids: tuple[int, ...]  # model layer (0 = input side) of each segment

    @property
    def layer_first(self) -> int:
        return min(self.layer_ids)

    @property
    def layer_last(self) -> int:
        return max(self.layer_ids)


@dataclass
class GradMessage:
    """One message of an iteration: a flat fp32 vector of consecutive layer segments."""

    layout: MessageLayout
    values: np.ndarray | None  # flat float32 (a numpy view of a torch tensor is fine); None: sizes only
    n_layers: int  # layers in the whole model, for the priority mapping

    @property
    def msg_id(self) -> int:
        return self.layout.msg_id


@dataclass
class Aggregate:
    """What arrived of a message summed over workers.

    `total[v]` is the sum of the contributions received for value v and `count[v]` how many
    contributions that is (0..world). Lossless: count == world everywhere.
    """

    msg_id: int
    total: np.ndarray  # float32
    count: np.ndarray  # uint16
    world: int


@dataclass
class ParamChunk:
    """Parameters of one message pulled from the PS; `lost[v]` marks values that did not arrive
    (the worker keeps its previous value there)."""

    values: np.ndarray  # float32
    lost: np.ndarray  # bool


class Workload(Protocol):
    """Worker side of what is trained."""

    n_layers: int

    def layouts(self) -> list[MessageLayout]:
        """Messages of every iteration, in the order `compute` yields them."""

    def compute(self, iteration: int) -> Iterator[GradMessage]:
        """Forward + backward of one iteration; yields each message as soon as it is ready."""

    def apply_gradients(self, iteration: int, aggregates: dict[int, Aggregate]) -> None:
        """Allreduce mode: fill missing contributions, then take the optimizer step."""

    def apply_parameters(self, iteration: int, msg_id: int, chunk: ParamChunk) -> None:
        """PS mode: install pulled parameters (keeping previous values where lost)."""

    def evaluate(self, iteration: int) -> dict | None:
        """Metrics at evaluation iterations (e.g. {"train_loss", "test_loss", "test_accuracy"}),
        else None. Always returns {"train_loss": ...} at least when it has one."""

    # Optional: `parameters(msg_id) -> np.ndarray`, this replica's current parameters of a message
    # (flat float32, same layout as its gradient). All-reduce re-sync (dlcp.collectives) needs it;
    # a workload without it skips re-sync.


class ServerWorkload(Protocol):
    """PS side: holds the authoritative parameters and the optimizer."""

    def layouts(self) -> list[MessageLayout]: ...

    def update(self, iteration: int, aggregates: dict[int, Aggregate]) -> None:
        """Fill missing contributions, then take the optimizer step."""

    def parameters(self, msg_id: int) -> np.ndarray:
        """Current parameters of message `msg_id` (flat float32, same layout as its gradient)."""
