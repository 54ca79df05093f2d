"""Measure a per-tensor compute profile (dlcp/workloads/profile.py format) of a model, layer by
layer, in isolation: what `dlcp profile MODEL` writes.

One step = forward, loss, backward on one worker's batch (no optimizer step: PS-mode workers
never step, and the profile is forward + backward). A *layer* is a module owning parameters (our
models group a conv and its norm: `parameter_layers`). Per layer:

- forward: each forward pre-hook of the layer's modules to the next call of any layer's (the
  first from the step's start, the last to the end of the loss), so parameter-free operations
  after a layer (activations, pooling, residual adds) count with it and the layers add up to the
  whole forward. A layer called twice (a tied weight's second owner, as GPT-2's lm_head) sums its
  calls; a layer whose modules are never called (nn.MultiheadAttention's out_proj) is timed with
  its nearest called ancestor (`timed_layers`);
- backward: a layer is ready when its last gradient is accumulated (post-accumulate-grad hooks);
  its backward runs from the previous layer's ready moment (the first: from the start of
  backward) to its own.

Time comes from a `StepTimer`: `perf_counter` on the CPU; on a GPU, CUDA events recorded in the
hooks on the compute stream and read after the step's synchronisation, so the times are the GPU's,
not the moments the CPU queued the work. Each measured step is paired with a plain step (the same
batch, no hooks), the two in alternating order (the second step on a batch ran 25 % slower than
the first for a tiny BERT here, which a fixed order would charge to the hooks), so the profile says
what the hooks cost; `repeats` pairs
after `warmup` pairs that are not counted. Per layer its median over the repeats, scaled so that the
layers add up to the median step's forward + backward (`typical_layer_times`), is split
over the layer's tensors in proportion to their sizes; `measured` carries the distribution of the
plain step, the hooked step and the forward and backward sums over the repeats. `repeats=None`
measures pairs for 30 s (20 to 200 of them).
`scale_to_plain` multiplies every time by plain / hooked step (medians), as the bundled GPU
profiles were (their note says so): where the hooks' own cost is large (a GPU waiting on kernel
launches) the sum then matches the step a run would take.
"""

from __future__ import annotations

import math
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime, timezone
from typing import Any, Protocol

import torch
from torch import nn

from dlcp.workloads.profiled import default_profile_name
from dlcp.workloads.trainer.models import parameter_layers
from dlcp.workloads.trainer.zoo import ProfiledModel, resolve_model

PRECISIONS = ("fp32", "bf16")
# repeats=None: measure pairs for AUTO_BUDGET_S of wall clock, at least AUTO_MIN_REPEATS and at
# most AUTO_MAX_REPEATS: a fast model gets many pairs, which a loaded machine's noise needs (two
# medians of 20 steps of a tiny BERT were 16 % apart at load 8 on 2 cores), a slow one 20
AUTO_BUDGET_S, AUTO_MIN_REPEATS, AUTO_MAX_REPEATS = 30.0, 20, 200


class StepTimer(Protocol):
    """Marks in a step and the seconds between two of them, read after `synchronize`."""

    def mark(self) -> Any: ...

    def synchronize(self) -> None: ...

    def seconds(self, a: Any, b: Any) -> float: ...


class CpuTimer:
    """perf_counter: the CPU runs the step, so the moment a hook runs is the moment of the work."""

    def mark(self) -> float:
        return time.perf_counter()

    def synchronize(self) -> None:
        pass

    def seconds(self, a: float, b: float) -> float:
        return b - a


class CudaEventTimer:
    """CUDA events recorded on the current stream: a mark is when the GPU reaches that point."""

    def __init__(self, device: torch.device):
        self.device = device

    def mark(self):
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)

    def seconds(self, a, b) -> float:
        return a.elapsed_time(b) / 1e3  # milliseconds


def make_timer(device: torch.device) -> StepTimer:
    return CudaEventTimer(device) if device.type == "cuda" else CpuTimer()


def step_layer_times(
    marks: dict[str, Any], calls: Sequence[tuple[int, Any]], ready: Sequence[tuple[int, Any]], n_layers: int, timer
) -> tuple[list[float], list[float]]:
    """(forward seconds per layer, backward seconds per layer) of one hooked step from its marks:
    `calls` the layers' forward calls in call order (a call runs to the next call, the last to the
    end of the loss; a layer called more than once, as a tied weight's, sums its calls), `ready` the
    layers' last gradients in the order they came, `marks` the step's `start`, `loss_end` and
    `backward_start`."""
    not_called = n_layers - len({layer for layer, _ in calls})
    if not_called or len(ready) != n_layers:
        raise RuntimeError(
            f"profile: {not_called} layer(s) not called in forward and "
            f"{n_layers - len(ready)} without a gradient in backward (unused parameters?)"
        )
    fwd, bwd = [0.0] * n_layers, [0.0] * n_layers
    bounds = [marks["start"]] + [m for _, m in calls[1:]] + [marks["loss_end"]]
    for k, (layer, _) in enumerate(calls):
        fwd[layer] += max(0.0, timer.seconds(bounds[k], bounds[k + 1]))
    prev = marks["backward_start"]
    for layer, m in ready:
        bwd[layer] = max(0.0, timer.seconds(prev, m))
        prev = m
    return fwd, bwd


def timed_layers(
    model: nn.Module, layers: list[list[nn.Parameter]], forward: Callable[[], Any]
) -> tuple[list[list[nn.Parameter]], dict[int, int]]:
    """(the layers as timed, the layer each timed module's calls are timed to, by module id). Every
    called module owning a layer's parameters times that layer (a tied weight's second owner, as
    GPT-2's lm_head, too). A layer none of whose modules is called in `forward` (nn.MultiheadAttention's
    out_proj: its parent uses the weight directly) joins the layer of its nearest called ancestor,
    or is timed by that ancestor's calls when the ancestor owns no parameters: its forward work is
    inside those calls."""
    called: set[int] = set()
    handles = [m.register_forward_pre_hook(lambda m, _args: called.add(id(m))) for m in model.modules()]
    try:
        forward()
    finally:
        for h in handles:
            h.remove()
    by_name = dict(model.named_modules())
    owners: dict[int, list[str]] = {}  # parameter id -> names of the modules owning it directly
    for name, m in by_name.items():
        for p in m.parameters(recurse=False):
            owners.setdefault(id(p), []).append(name)
    timed: list[list[nn.Parameter]] = []
    layer_of: dict[str, int] = {}  # a called module's name -> the layer its calls time
    uncalled: list[tuple[list[nn.Parameter], str]] = []
    for group in layers:
        names = list(dict.fromkeys(n for p in group for n in owners[id(p)]))
        if not any(id(by_name[n]) in called for n in names):
            uncalled.append((group, names[0]))
            continue
        for n in names:
            if id(by_name[n]) in called:
                layer_of.setdefault(n, len(timed))
        timed.append(list(group))
    for group, name in uncalled:
        while name and id(by_name[name]) not in called:
            name = name.rpartition(".")[0]
        if id(by_name[name]) not in called:
            raise ValueError(f"no module on the way to {name!r}'s parameters is called in the forward pass")
        if name in layer_of:
            timed[layer_of[name]].extend(group)
        else:
            layer_of[name] = len(timed)
            timed.append(list(group))
    return timed, {id(by_name[n]): layer for n, layer in layer_of.items()}


class _Hooks:
    """Forward pre-hooks and post-accumulate-grad hooks that mark a step's layers."""

    def __init__(
        self, model: nn.Module, layers: list[list[nn.Parameter]], layer_of_module: dict[int, int], timer: StepTimer
    ):
        self.timer = timer
        self.layer_of_param = {id(p): i for i, group in enumerate(layers) for p in group}
        self.size = [len(group) for group in layers]
        self.layer_of_module = layer_of_module
        self.handles = [m.register_forward_pre_hook(self._pre) for m in model.modules() if id(m) in layer_of_module] + [
            p.register_post_accumulate_grad_hook(self._grad) for group in layers for p in group
        ]
        self.reset()

    def reset(self) -> None:
        self.calls: list[tuple[int, Any]] = []
        self.pending = list(self.size)
        self.ready: list[tuple[int, Any]] = []

    def _pre(self, module, args) -> None:
        self.calls.append((self.layer_of_module[id(module)], self.timer.mark()))

    def _grad(self, p) -> None:
        layer = self.layer_of_param[id(p)]
        self.pending[layer] -= 1
        if self.pending[layer] == 0:
            self.ready.append((layer, self.timer.mark()))

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


def _run_step(pm: ProfiledModel, batch: tuple, timer: StepTimer, autocast) -> dict[str, Any]:
    pm.module.zero_grad(set_to_none=True)
    marks = {"start": timer.mark()}
    with autocast():
        loss = pm.loss(pm.forward(batch), batch)
    marks["loss_end"] = timer.mark()
    marks["backward_start"] = timer.mark()
    loss.backward()
    marks["end"] = timer.mark()
    return marks


def typical_layer_times(
    per_fwd: Sequence[Sequence[float]], per_bwd: Sequence[Sequence[float]]
) -> tuple[list[float], list[float]]:
    """Per layer, its share of the median step: (forward, backward) seconds per layer. The split
    between layers comes from their medians over the steps, the split between forward and
    backward from the medians of their sums, the total from the median over the steps of forward +
    backward. The medians alone add up to less than any step on a loaded machine (every step is
    interrupted somewhere, rarely in the same layer: a tiny BERT measured 41-59 % below its step
    here), and the medians of the two sums apart up to 15 % below it; the median step is robust."""

    def medians(per_step: Sequence[Sequence[float]]) -> list[float]:
        return [statistics.median(step[i] for step in per_step) for i in range(len(per_step[0]))]

    total = statistics.median(math.fsum(f) + math.fsum(b) for f, b in zip(per_fwd, per_bwd))
    fwd_sum = statistics.median(math.fsum(f) for f in per_fwd)
    bwd_sum = statistics.median(math.fsum(b) for b in per_bwd)
    out = []
    for per_step, share in ((per_fwd, fwd_sum), (per_bwd, bwd_sum)):
        m = medians(per_step)
        part = total * share / (fwd_sum + bwd_sum) if fwd_sum + bwd_sum > 0 else 0.0
        have = math.fsum(m)
        out.append([x * part / have for x in m] if have > 0 else [part / len(m)] * len(m))
    return out[0], out[1]


def distribution(values: Sequence[float], unit: float = 1e3) -> dict[str, float]:
    """median, p10, p90, min, max of `values` (seconds) in 1/unit (ms by default), and n."""
    xs = sorted(v * unit for v in values)
    q = statistics.quantiles(xs, n=10, method="inclusive") if len(xs) > 1 else [xs[0]] * 9
    return {
        "median": statistics.median(xs),
        "p10": q[0],
        "p90": q[8],
        "min": xs[0],
        "max": xs[-1],
        "n": len(xs),
    }


def device_tag(device: torch.device) -> str:
    """A short name of the device for profile names: cpu, h100, h200, a100, ..."""
    if device.type != "cuda":
        return device.type
    words = torch.cuda.get_device_name(device).lower().replace("nvidia", "").split()
    return next((w for w in words if any(c.isdigit() for c in w)), words[0] if words else "cuda")


def _device_words(device: torch.device) -> str:
    if device.type == "cuda":
        return f"one {torch.cuda.get_device_name(device)} (CUDA {torch.version.cuda})"
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"the CPU of {platform.node()} ({platform.machine()}, {os.cpu_count()} CPUs, load average {load})"


def measure_profile(
    model_name: str,
    dataset: str = "digits",
    batch_size: int = 32,
    repeats: int | None = 100,
    warmup: int = 10,
    threads: int = 1,
    seed: int = 1,
    device: str = "cpu",
    precision: str = "fp32",
    seq_len: int = 128,
    hf_config: dict[str, Any] | None = None,
    scale_to_plain: bool = False,
    command: str = "",
) -> dict:
    """The profile JSON (a dict) of `model_name` (dlcp/workloads/trainer/zoo.py) at `batch_size`
    per worker on `device`."""
    if (repeats is not None and repeats < 1) or warmup < 0 or batch_size < 1 or threads < 1:
        raise ValueError("repeats, batch size and threads must be >= 1, warm-up >= 0")
    if precision not in PRECISIONS:
        raise ValueError(f"--precision {precision!r}: one of {', '.join(PRECISIONS)}")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: this torch sees no CUDA device")
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"--device {device!r}: cpu or cuda")
    if dev.type == "cpu":
        torch.set_num_threads(threads)
    else:
        torch.backends.cudnn.benchmark = True
    pm = resolve_model(model_name, dataset=dataset, seq_len=seq_len, hf_config=hf_config, seed=seed)
    model = pm.module.to(dev)
    model.train()
    timer = make_timer(dev)
    autocast: Callable[[], AbstractContextManager[Any]] = (
        (lambda: torch.autocast(device_type=dev.type, dtype=torch.bfloat16)) if precision == "bf16" else nullcontext
    )

    def trial_forward() -> None:
        with autocast():
            pm.forward(pm.make_inputs(batch_size, dev))

    layers, layer_of_module = timed_layers(model, parameter_layers(model), trial_forward)
    plain_s: list[float] = []
    hooked_s: list[float] = []
    per_fwd: list[list[float]] = []
    per_bwd: list[list[float]] = []
    r, wall0 = 0, time.perf_counter()
    while r < warmup + (repeats or AUTO_MAX_REPEATS):
        if repeats is None and r >= warmup + AUTO_MIN_REPEATS and time.perf_counter() - wall0 > AUTO_BUDGET_S:
            break
        r += 1
        batch = pm.make_inputs(batch_size, dev)
        for with_hooks in (False, True) if r % 2 else (True, False):  # the second step on a batch is slower
            if not with_hooks:
                marks = _run_step(pm, batch, timer, autocast)
                timer.synchronize()
                plain_step = timer.seconds(marks["start"], marks["end"])
                continue
            hooks = _Hooks(model, layers, layer_of_module, timer)
            try:
                hooked_marks = _run_step(pm, batch, timer, autocast)
                timer.synchronize()
            finally:
                hooks.remove()
        marks = hooked_marks
        fwd, bwd = step_layer_times(marks, hooks.calls, hooks.ready, len(layers), timer)
        if r == warmup:
            wall0 = time.perf_counter()  # the budget counts measured pairs only
        if r > warmup:
            plain_s.append(plain_step)
            hooked_s.append(timer.seconds(marks["start"], marks["end"]))
            per_fwd.append(fwd)
            per_bwd.append(bwd)
    repeats = len(plain_s)
    layer_fwd, layer_bwd = typical_layer_times(per_fwd, per_bwd)
    factor = statistics.median(plain_s) / statistics.median(hooked_s) if scale_to_plain else 1.0
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    params = [p for p in model.parameters() if p.requires_grad]
    index = {id(p): i for i, p in enumerate(params)}
    sizes = [p.numel() for p in params]
    fwd_s, bwd_s = [0.0] * len(sizes), [0.0] * len(sizes)
    for i, group in enumerate(layers):
        total = sum(p.numel() for p in group)
        for p in group:
            fwd_s[index[id(p)]] = factor * layer_fwd[i] * p.numel() / total
            bwd_s[index[id(p)]] = factor * layer_bwd[i] * p.numel() / total
    if pm.dataset:
        name = default_profile_name(model_name, dataset, batch_size)
    else:
        label = pm.name.removeprefix("hf:").replace(":", ".") + ("+custom" if hf_config else "")
        name = f"{label}-{precision}-b{batch_size}-{device_tag(dev)}"
    fwd_ms, bwd_ms = 1e3 * math.fsum(fwd_s), 1e3 * math.fsum(bwd_s)
    plain, hooked = distribution(plain_s), distribution(hooked_s)  # ms
    threads_words = f", {threads} intra-op thread(s)" if dev.type == "cpu" else ", cudnn.benchmark on"
    note = (
        f"Measured by `{command or 'dlcp profile ' + model_name}` on {_device_words(dev)} at "
        f"{datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}, torch {torch.__version__}"
        f"{threads_words}: {pm.description}, batch {batch_size} per worker, {precision}"
        f"{' (autocast)' if precision == 'bf16' else ''}, random weights. One step = forward + loss + "
        f"backward, no optimizer step; {'CUDA events' if dev.type == 'cuda' else 'perf_counter'} in "
        "forward pre-hooks of each parameter-owning module (forward: each call to the next layer's "
        "call, the last to the end of the loss; a module never called is timed with its caller) and in post-accumulate-grad hooks (backward: a layer is ready when "
        "its last gradient is; from the previous ready moment). Per layer the median of "
        f"{repeats} steps after {warmup} warm-up steps, scaled so that the layers add up to the median "
        "step's forward + backward (split between the two as the medians of their sums), spread over "
        "the layer's tensors by size; "
        f"each measured step paired with a plain one on the same batch, in alternating order. Step median {hooked['median']:.3f} ms "
        f"with the hooks, {plain['median']:.3f} ms without (p10-p90 {plain['p10']:.3f}-{plain['p90']:.3f} ms); "
        f"forward + backward {fwd_ms + bwd_ms:.3f} ms"
        + (
            f", every time multiplied by {factor:.3f} (plain over hooked step) so that they add up to the plain step."
            if scale_to_plain
            else " as measured with the hooks (not rescaled)."
        )
        + " Gradient sizes are fp32 elements."
    )
    return {
        "model": name,
        "note": note,
        "measured": {
            "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"cpu ({platform.machine()})",
            "precision": precision,
            "batch_size": batch_size,
            "repeats": repeats,
            "warmup": warmup,
            "scale_to_plain": round(factor, 6),
            "step_plain_ms": plain,
            "step_hooked_ms": hooked,
            "forward_ms": distribution([math.fsum(f) for f in per_fwd]),
            "backward_ms": distribution([math.fsum(b) for b in per_bwd]),
        },
        "names": names,
        "sizes": sizes,
        "forward_s": fwd_s,
        "backward_s": bwd_s,
        "tensors": len(sizes),
        "parameters": sum(sizes),
    }
