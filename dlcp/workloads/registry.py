"""Which workload an agent trains: the one lookup from `workload.model` to a Workload /
ServerWorkload (dlcp/workloads/contract.py). Models other than `synthetic` come from the torch trainer.
"""

from __future__ import annotations

from dlcp.workloads.synthetic import SyntheticServerWorkload, SyntheticWorkload

TORCH_MODELS = ("mlp", "cnn", "resnet")


def make_workload(workload: dict, rank: int, world: int, fill: str = "rescale"):
    """Worker side of `workload` (the agent config's `workload` section) for `rank` of `world`."""
    model = workload.get("model", "cnn")
    if model == "synthetic":
        return SyntheticWorkload.from_config(workload, rank, world, fill)
    if model in TORCH_MODELS:
        from dlcp.workloads.trainer.torch_workload import TorchWorkload  # torch loads only when a model needs it
        return TorchWorkload.from_config(workload, rank, world, fill)
    raise ValueError(f"workload.model: {model!r} is not one of synthetic, {', '.join(TORCH_MODELS)}")


def make_server_workload(workload: dict, fill: str = "rescale"):
    """Parameter-server side of `workload`."""
    model = workload.get("model", "cnn")
    if model == "synthetic":
        return SyntheticServerWorkload.from_config(workload, fill)
    if model in TORCH_MODELS:
        from dlcp.workloads.trainer.torch_workload import TorchServerWorkload
        return TorchServerWorkload.from_config(workload, fill)
    raise ValueError(f"workload.model: {model!r} is not one of synthetic, {', '.join(TORCH_MODELS)}")
