"""Which workload an agent trains: the one lookup from `workload.model` to a Workload /
ServerWorkload (dlcp/workload.py). Models other than `synthetic` come from the torch trainer.
"""

from __future__ import annotations

from .synthetic import SyntheticServerWorkload, SyntheticWorkload


def make_workload(workload: dict, rank: int, world: int, fill: str = "rescale"):
    """Worker side of `workload` (the agent config's `workload` section) for `rank` of `world`."""
    model = workload.get("model", "cnn")
    if model == "synthetic":
        return SyntheticWorkload.from_config(workload, rank, world, fill)
    raise ValueError(f"workload.model: {model!r} is not available in this build (synthetic)")


def make_server_workload(workload: dict, fill: str = "rescale"):
    """Parameter-server side of `workload`."""
    model = workload.get("model", "cnn")
    if model == "synthetic":
        return SyntheticServerWorkload.from_config(workload, fill)
    raise ValueError(f"workload.model: {model!r} is not available in this build (synthetic)")
