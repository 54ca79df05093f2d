"""Which compute a workload section asks for, and the compute model it gets.

`workload.compute`: `"real"` (the compute takes what the CPU needs; the synthetic model sleeps
`compute_ms`) or `"profile"` (times from a layer profile, dlcp/workloads/compute_model.py).
`workload.profile`: a bundled profile name (dlcp/workloads/profiles/) or a JSON file. Empty with a
torch model means that model's own measured profile, `<model>-<dataset>-b<batch_size>` (written by
`dlcp profile`); the synthetic model needs one named (it then trains tensors of the profile's
sizes). `workload.dilation` (set by the runner from `scale.dilation`) multiplies every time.
"""

from __future__ import annotations

from typing import Sequence

from dlcp.workloads.compute_model import Clock, MonotonicClock, ParameterGate, ProfileCompute, layer_times
from dlcp.workloads.profile import Profile, load_profile

COMPUTE_MODES = ("real", "profile")


def default_profile_name(model: str, dataset: str, batch_size: int) -> str:
    """The bundled measured profile of a torch model, by what it was measured with."""
    return f"{model}-{dataset}-b{batch_size}"


def compute_mode(workload: dict) -> str:
    mode = workload.get("compute", "real")
    if mode not in COMPUTE_MODES:
        raise ValueError(f"workload.compute: {mode!r} is not one of {', '.join(COMPUTE_MODES)}")
    return mode


def dilation_of(workload: dict) -> float:
    d = workload.get("dilation", 1)
    if isinstance(d, bool) or not isinstance(d, (int, float)) or not d >= 1:
        raise ValueError(f"workload.dilation: must be a number >= 1, got {d!r}")
    return float(d)


def workload_profile(workload: dict) -> Profile | None:
    """The profile `workload` times its compute with, or None for real compute. ValueError with
    one line naming the key or file when it cannot be had."""
    if compute_mode(workload) == "real":
        return None
    name = workload.get("profile", "")
    model = workload.get("model", "cnn")
    if not name:
        if model == "synthetic":
            raise ValueError("workload.profile: compute = 'profile' with the synthetic model needs a profile "
                             "(a bundled name such as resnet50, or a JSON file)")
        name = default_profile_name(model, workload.get("dataset", "digits"), workload.get("batch_size", 32))
        try:
            return load_profile(name)
        except ValueError:
            raise ValueError(f"workload.profile: no bundled profile {name!r} for model {model}; measure one with "
                             f"`dlcp profile {model} --dataset {workload.get('dataset', 'digits')} --batch-size "
                             f"{workload.get('batch_size', 32)} --out FILE` and set workload.profile = FILE") from None
    try:
        return load_profile(name)
    except ValueError as e:
        raise ValueError(f"workload.profile: {e}") from None


def check_tensor_sizes(profile: Profile, sizes: Sequence[int], model: str) -> None:
    """A real model times itself with a profile only if the profile describes its tensors."""
    if tuple(sizes) != profile.sizes:
        where = next((i for i, (a, b) in enumerate(zip(sizes, profile.sizes)) if a != b), min(len(sizes), len(profile)))
        raise ValueError(f"workload.profile: {profile.source or profile.name} does not describe model {model}: "
                         f"{len(profile)} tensors vs the model's {len(sizes)}, first difference at tensor {where}")


GATE_TIMEOUT_S = 120.0  # parameters never released: a bug in the caller, not a reason to hang


def make_profile_compute(profile: Profile, layer_tensors: Sequence[Sequence[int]], dilation: float,
                         clock: Clock | None = None, warmup: int = 0) -> tuple[ProfileCompute, ParameterGate]:
    """The compute model of a workload whose layer l holds the profile's tensors layer_tensors[l],
    every time multiplied by `dilation`, with its parameter gate; lateness is counted from
    iteration `warmup` on."""
    clock = clock or MonotonicClock()
    fwd = [t * dilation for t in layer_times(profile.forward_s, layer_tensors)]
    bwd = [t * dilation for t in layer_times(profile.backward_s, layer_tensors)]
    gate = ParameterGate(len(layer_tensors), clock)
    return ProfileCompute(fwd, bwd, clock, gate, gate_timeout_s=GATE_TIMEOUT_S, count_from=warmup), gate


TORCH_MODELS = ("mlp", "cnn", "resnet")


def check_workload(workload: dict) -> Profile | None:
    """Everything about a workload section's compute that can be checked before a run: the mode,
    the profile loads, the keys fit together, a torch model has the profile's tensors (builds the
    model: imports torch). Returns the profile (None: real compute); ValueError naming the key."""
    profile = workload_profile(workload)
    if profile is None:
        return None
    if workload.get("compute_ms"):
        raise ValueError("workload.compute_ms: a sleep of the real-compute synthetic model; with compute = "
                         "'profile' the profile's times apply (leave compute_ms at 0)")
    model = workload.get("model", "cnn")
    if model == "synthetic" and workload.get("layers") and tuple(workload["layers"]) != profile.sizes:
        raise ValueError("workload.layers: set by the profile with compute = 'profile' (leave it empty)")
    if model in TORCH_MODELS:
        from dlcp.workloads.trainer.data import load_dataset
        from dlcp.workloads.trainer.models import build_model
        data = load_dataset(workload.get("dataset", "digits"))
        net = build_model(model, data.in_shape, data.n_classes, 0)
        check_tensor_sizes(profile, [p.numel() for p in net.parameters()], model)
    return profile
