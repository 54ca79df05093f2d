"""Which workload an agent trains: the one lookup from `workload.model` to a Workload /
ServerWorkload (dlcp/workloads/contract.py). Models other than `synthetic` come from the torch trainer.
"""

from __future__ import annotations

from dlcp.workloads.settings import WorkloadConfig
from dlcp.workloads.synthetic import SyntheticServerWorkload, SyntheticWorkload


def make_workload(config: WorkloadConfig, rank: int, world: int, fill: str = "rescale"):
    """Worker side of `config` for `rank` of `world`."""
    if config.model == "synthetic":
        return SyntheticWorkload(config, rank, world, fill)
    from dlcp.workloads.trainer.torch_workload import TorchWorkload  # torch loads only when a model needs it

    return TorchWorkload(config, rank, world, fill)


def make_server_workload(config: WorkloadConfig, fill: str = "rescale"):
    """Parameter-server side of `config`."""
    if config.model == "synthetic":
        return SyntheticServerWorkload(config, fill)
    from dlcp.workloads.trainer.torch_workload import TorchServerWorkload

    return TorchServerWorkload(config, fill)
