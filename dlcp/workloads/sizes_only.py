"""A workload that is only a layer profile's message sizes (`workload.payload = "sizes"`).

For a model that exists here only as a timing profile (e.g. ResNet-50 at 128 workers on ns-3) the
simulated hosts need to know what to send, not what it holds: the messages (the profile's tensors,
bucketed as the synthetic workload buckets them) and their layer ids. Nothing is trained, so there
are no gradients, parameters, losses or accuracy; `evaluate` says so with None. The collectives
build packets of the right lengths with `dlcp.comm.packets.sized_packets` instead of from values.
It keeps O(messages) numbers, none per value: memory does not grow with the model's size.
"""

from __future__ import annotations

from collections.abc import Iterator

from dlcp.workloads.contract import Aggregate, GradMessage, MessageLayout, ParamChunk, message_layouts
from dlcp.workloads.profiled import workload_profile
from dlcp.workloads.settings import WorkloadConfig


class SizesOnlyWorkload:
    """Worker and parameter-server side at once (both protocols of dlcp/workloads/contract.py):
    every method that would touch values does nothing."""

    def __init__(self, config: WorkloadConfig):
        profile = workload_profile(config)
        if profile is None:
            raise ValueError("workload.payload: 'sizes' needs compute = 'profile' (the sizes come from the profile)")
        self.profile = profile
        self.n_layers = len(profile)
        self._layouts = [lay for lay, _ in message_layouts(list(profile.sizes), config.bucket_values)]

    def layouts(self) -> list[MessageLayout]:
        return list(self._layouts)

    def compute(self, iteration: int) -> Iterator[GradMessage]:
        for layout in self._layouts:
            yield GradMessage(layout, None, self.n_layers)

    def apply_gradients(self, iteration: int, aggregates: dict[int, Aggregate]) -> None:
        pass

    def apply_parameters(self, iteration: int, msg_id: int, chunk: ParamChunk) -> None:
        pass

    def update(self, iteration: int, aggregates: dict[int, Aggregate]) -> None:
        pass

    def evaluate(self, iteration: int) -> dict | None:
        return None
