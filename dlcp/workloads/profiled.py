"""Which compute a workload asks for, and the compute model it gets.

`workload.compute` (dlcp/workloads/settings.py): `"real"` (the compute takes what the CPU needs;
the synthetic model sleeps `compute_ms`) or `"profile"` (times from a layer profile,
dlcp/workloads/compute_model.py). `workload.profile`: a bundled profile name
(dlcp/workloads/profiles/) or a JSON file. Empty with a torch model means that model's own
measured profile, `<model>-<dataset>-b<batch_size>` (written by `dlcp profile`); the synthetic
model needs one named (it then trains tensors of the profile's sizes). `workload.compute_scale`
k multiplies every time of the profile (a device k times slower), here, where every consumer gets
its profile: the emulated agents, the ns-3 hosts, the sizes-only workload and the planners. An
agent's `workload.dilation` (the experiment's `scale.dilation`) multiplies every time again.
"""

from __future__ import annotations

from collections.abc import Sequence

from dlcp.workloads.compute_model import Clock, MonotonicClock, ParameterGate, ProfileCompute, layer_times
from dlcp.workloads.profile import Profile, load_profile
from dlcp.workloads.settings import DEFAULT_LAYERS, TORCH_MODELS, TrainingSettings


def default_profile_name(model: str, dataset: str, batch_size: int) -> str:
    """The bundled measured profile of a torch model, by what it was measured with."""
    return f"{model}-{dataset}-b{batch_size}"


def workload_profile(workload: TrainingSettings) -> Profile | None:
    """The profile `workload` times its compute with (`compute_scale` applied), or None for real
    compute. ValueError with one line naming the key or file when it cannot be had."""
    if workload.compute == "real":
        return None
    profile = _named_profile(workload)
    return profile if workload.compute_scale == 1 else profile.scaled(workload.compute_scale)


def _named_profile(workload: TrainingSettings) -> Profile:
    name = workload.profile
    if not name:  # the settings model requires one for the synthetic model
        name = default_profile_name(workload.model, workload.dataset, workload.batch_size)
        try:
            return load_profile(name)
        except ValueError:
            raise ValueError(
                f"workload.profile: no bundled profile {name!r} for model {workload.model}; measure "
                f"one with `dlcp profile {workload.model} --dataset {workload.dataset} --batch-size "
                f"{workload.batch_size} --out FILE` and set workload.profile = FILE"
            ) from None
    try:
        return load_profile(name)
    except ValueError as e:
        raise ValueError(f"workload.profile: {e}") from None


def layer_sizes(workload: TrainingSettings) -> list[int]:
    """The synthetic model's layer sizes: the profile's tensors with profile compute, else `layers`."""
    profile = workload_profile(workload)
    return list(profile.sizes) if profile is not None else list(workload.layers)


def profile_for_tensors(profile: Profile, sizes: Sequence[int], model: str) -> Profile:
    """The profile a real model times itself with: `profile` where it describes the model's
    tensors, else its compute fitted onto them by parameter fraction (Profile.fitted_to: another
    model's compute, e.g. BERT's on a GPU, over this model's messages; the report says so)."""
    return profile if tuple(sizes) == profile.sizes else profile.fitted_to(sizes, model)


def is_fitted(profile: Profile, sizes: Sequence[int]) -> bool:
    return tuple(sizes) != profile.sizes


GATE_TIMEOUT_S = 120.0  # parameters never released: a bug in the caller, not a reason to hang


def make_profile_compute(
    profile: Profile,
    layer_tensors: Sequence[Sequence[int]],
    dilation: float,
    clock: Clock | None = None,
    warmup: int = 0,
) -> tuple[ProfileCompute, ParameterGate]:
    """The compute model of a workload whose layer l holds the profile's tensors layer_tensors[l],
    every time multiplied by `dilation`, with its parameter gate; lateness is counted from
    iteration `warmup` on."""
    clock = clock or MonotonicClock()
    fwd = [t * dilation for t in layer_times(profile.forward_s, layer_tensors)]
    bwd = [t * dilation for t in layer_times(profile.backward_s, layer_tensors)]
    gate = ParameterGate(len(layer_tensors), clock)
    return ProfileCompute(fwd, bwd, clock, gate, gate_timeout_s=GATE_TIMEOUT_S, count_from=warmup), gate


def check_workload(workload: TrainingSettings) -> Profile | None:
    """Everything about a workload's compute that needs files or torch, checked before a run: the
    profile loads, the synthetic model's `layers` are not set against it, and a torch model's
    tensors take the profile's compute (builds the model: imports torch). Returns the profile the
    model times itself with (None: real compute); ValueError naming the key."""
    profile = workload_profile(workload)
    if profile is None:
        return None
    if workload.model == "synthetic" and tuple(workload.layers) not in (DEFAULT_LAYERS, profile.sizes):
        raise ValueError("workload.layers: set by the profile with compute = 'profile' (leave it out)")
    if workload.model in TORCH_MODELS:
        from dlcp.workloads.trainer.data import load_dataset
        from dlcp.workloads.trainer.models import build_model

        data = load_dataset(workload.dataset)
        net = build_model(workload.model, data.in_shape, data.n_classes, 0)
        return profile_for_tensors(profile, [p.numel() for p in net.parameters()], workload.model)
    return profile
