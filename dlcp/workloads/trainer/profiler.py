"""Measure a per-tensor compute profile (dlcp/workloads/profile.py format) of one of our torch
models, layer by layer, in isolation: what `dlcp profile MODEL` writes.

One repeat = one training step of one worker's batch: forward, loss, backward (no optimizer step:
PS-mode workers never step, and the profile is forward + backward). Per layer (a group of
`parameter_layers`, layer 0 = input side):

- forward: from the moment the module owning the layer's first parameter is called (a forward
  pre-hook) to the moment the next layer's is (the last layer: to the loss), so the
  parameter-free operations after a layer (activations, pooling, residual adds) count with it and
  the layers add up to the whole forward;
- backward: from the moment the layer above had all its gradients (post-accumulate-grad hooks;
  the top layer: from the start of backward) to the moment this layer has all of its own.

Each layer's time is the median over the repeats (after warm-up repeats that are not counted),
and is split over the layer's tensors in proportion to their sizes, so a profile lists tensors
in `named_parameters` order as the format requires. Torch runs with `threads` intra-op threads
(default 1, as the agents do).
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from datetime import datetime, timezone
from typing import cast

import torch
import torch.nn.functional as F

from dlcp.workloads.profiled import default_profile_name
from dlcp.workloads.trainer.data import BatchSchedule, load_dataset
from dlcp.workloads.trainer.models import build_model, parameter_layers


def _one_step(model, x, y, layer_of_module: dict, layer_params: list[set], n_layers: int) -> tuple[list, list]:
    """(forward seconds per layer, backward seconds per layer) of one step."""
    starts: list[float | None] = [None] * n_layers
    pending = [len(p) for p in layer_params]
    ready: list[float | None] = [None] * n_layers
    clock = time.perf_counter

    def pre_hook(module, args):
        layer = layer_of_module[id(module)]
        if starts[layer] is None:
            starts[layer] = clock()

    def grad_hook(p):
        layer = param_layer[id(p)]
        pending[layer] -= 1
        if pending[layer] == 0:
            ready[layer] = clock()
        p.grad = None

    param_layer = {pid: i for i, ps in enumerate(layer_params) for pid in ps}
    handles = [m.register_forward_pre_hook(pre_hook) for m in model.modules() if id(m) in layer_of_module]
    handles += [p.register_post_accumulate_grad_hook(grad_hook) for p in model.parameters()]
    try:
        model.zero_grad(set_to_none=True)
        t0 = clock()
        loss = F.cross_entropy(model(x), y)
        t_fwd = clock()
        loss.backward()
    finally:
        for h in handles:
            h.remove()
    if any(s is None for s in starts) or any(r is None for r in ready):
        raise RuntimeError("profile: a layer was not reached in forward or backward (unused parameters?)")
    started, done = cast(list[float], starts), cast(list[float], ready)  # no None left (checked above)
    bounds = [t0] + started[1:] + [t_fwd]  # layer 0's forward includes preparing the input
    fwd = [max(0.0, bounds[i + 1] - bounds[i]) for i in range(n_layers)]
    bwd, prev = [0.0] * n_layers, t_fwd
    for layer in reversed(range(n_layers)):
        bwd[layer] = max(0.0, done[layer] - prev)
        prev = max(prev, done[layer])
    return fwd, bwd


def measure_profile(
    model_name: str,
    dataset: str = "digits",
    batch_size: int = 32,
    repeats: int = 100,
    warmup: int = 10,
    threads: int = 1,
    seed: int = 1,
) -> dict:
    """The profile JSON (a dict) of `model_name` training `dataset` at `batch_size` per worker."""
    if repeats < 1 or warmup < 0 or batch_size < 1 or threads < 1:
        raise ValueError("profile: repeats, batch size and threads must be >= 1, warm-up >= 0")
    torch.set_num_threads(threads)
    data = load_dataset(dataset)
    model = build_model(model_name, data.in_shape, data.n_classes, seed)
    model.train()
    layers = parameter_layers(model)
    owner = {id(p): m for m in model.modules() for p in m.parameters(recurse=False)}
    layer_of_module = {id(owner[id(group[0])]): i for i, group in enumerate(layers)}
    layer_params = [{id(p) for p in group} for group in layers]
    schedule = BatchSchedule(data.n_train, batch_size, seed)
    per_fwd, per_bwd = [], []
    for r in range(warmup + repeats):
        x, y = data.train_batch(schedule.shard(r, 0, 1))
        fwd, bwd = _one_step(model, x, y, layer_of_module, layer_params, len(layers))
        if r >= warmup:
            per_fwd.append(fwd)
            per_bwd.append(bwd)
    layer_fwd = [statistics.median(rep[i] for rep in per_fwd) for i in range(len(layers))]
    layer_bwd = [statistics.median(rep[i] for rep in per_bwd) for i in range(len(layers))]
    names = [n for n, _ in model.named_parameters()]
    index = {id(p): i for i, p in enumerate(model.parameters())}
    sizes = [p.numel() for p in model.parameters()]
    fwd_s, bwd_s = [0.0] * len(sizes), [0.0] * len(sizes)
    for i, group in enumerate(layers):
        total = sum(p.numel() for p in group)
        for p in group:
            fwd_s[index[id(p)]] = layer_fwd[i] * p.numel() / total
            bwd_s[index[id(p)]] = layer_bwd[i] * p.numel() / total
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    note = (
        f"Measured by `dlcp profile {model_name} --dataset {dataset} --batch-size {batch_size}` on "
        f"{platform.node()} ({platform.machine()}, {os.cpu_count()} CPUs, load average {load}) at "
        f"{datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}, torch {torch.__version__}, "
        f"{threads} intra-op thread(s): median of {repeats} steps after {warmup} warm-up steps. Per layer "
        "(forward: from the layer's first module to the next layer's, parameter-free operations "
        "included; backward: from the layer above having its gradients to this layer having all of "
        "its own), split over the layer's tensors in proportion to their sizes. Forward + backward "
        f"per step: {1e3 * (sum(layer_fwd) + sum(layer_bwd)):.3g} ms."
    )
    return {
        "model": default_profile_name(model_name, dataset, batch_size),
        "note": note,
        "names": names,
        "sizes": sizes,
        "forward_s": fwd_s,
        "backward_s": bwd_s,
        "tensors": len(sizes),
        "parameters": sum(sizes),
    }
