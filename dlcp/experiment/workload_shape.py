"""The shape of an experiment's workload as a run computes it: its layers with their forward and
backward times (profile compute, `compute_scale` included, in the system's time: no dilation) and
its messages (which layers each holds, its bytes). What a run's Chakra export and its timeline
are drawn from (dlcp/experiment/chakra_export.py, dlcp/reporting/trace.py).

The layers are those the workers time: one per profile tensor for the synthetic model, a torch
model's own layers (`parameter_layers`, each the sum of its tensors' times) otherwise; the messages
are the workload's (`message_layouts`, `workload.bucket_values`).
"""

from __future__ import annotations

from dataclasses import dataclass

from dlcp.experiment.config import Experiment
from dlcp.workloads.compute_model import layer_times
from dlcp.workloads.contract import message_layouts
from dlcp.workloads.profile import BYTES_PER_ELEMENT
from dlcp.workloads.profiled import workload_profile
from dlcp.workloads.settings import TORCH_MODELS


@dataclass(frozen=True)
class Layer:
    name: str
    forward_s: float
    backward_s: float


@dataclass(frozen=True)
class Message:
    msg_id: int
    layers: tuple[int, ...]
    nbytes: int


@dataclass(frozen=True)
class WorkloadShape:
    profile: str  # the profile's name (its note is in the profile)
    compute_scale: float
    layers: tuple[Layer, ...]
    messages: tuple[Message, ...]


def workload_shape(config: dict) -> WorkloadShape:
    """The workload of an experiment config (a run's config.toml, as a dict). ValueError with one
    line when its compute is real (no per-layer times before it runs)."""
    w = Experiment.parse(config).workload
    profile = workload_profile(w)
    if profile is None:
        raise ValueError(
            "workload.compute = 'real': per-layer times exist only with compute = 'profile' "
            "(the CPU's own times are not recorded per layer)"
        )
    if w.model in TORCH_MODELS:
        from dlcp.workloads.trainer.data import load_dataset
        from dlcp.workloads.trainer.models import build_model, parameter_layers

        data = load_dataset(w.dataset)
        net = build_model(w.model, data.in_shape, data.n_classes, 0)
        index = {id(p): i for i, p in enumerate(net.parameters())}
        groups = [[index[id(p)] for p in group] for group in parameter_layers(net)]
    else:
        groups = [[i] for i in range(len(profile))]
    fwd, bwd = layer_times(profile.forward_s, groups), layer_times(profile.backward_s, groups)
    names = [_layer_name(profile.names[g[0]]) if len(g) > 1 else profile.names[g[0]] for g in groups]
    if len(set(names)) != len(names):
        names = [f"layer{i}" for i in range(len(groups))]
    sizes = [sum(profile.sizes[i] for i in g) for g in groups]
    messages = tuple(
        Message(lay.msg_id, lay.layer_ids, lay.n_values * BYTES_PER_ELEMENT)
        for lay, _ in message_layouts(sizes, w.bucket_values)
    )
    return WorkloadShape(
        profile.name,
        w.compute_scale,
        tuple(Layer(n, f, b) for n, f, b in zip(names, fwd, bwd)),
        messages,
    )


def _layer_name(tensor_name: str) -> str:
    """`features.0.weight` -> `features.0`: a layer is named after its first tensor's module."""
    return tensor_name.rsplit(".", 1)[0] if "." in tensor_name else tensor_name
