"""Torch trainer that tolerates lost gradient chunks: the public entry point.

The implementation lives in the `dlcp.training` package (docs/trainer.md):
- `TorchWorkload` / `TorchServerWorkload`: the Workload / ServerWorkload contract of
  dlcp/workload.py for a worker and for the parameter server;
- `WorkloadConfig`: the `workload` section of an agent configuration (docs/runs.md);
- `fill_average`, `FILLS`: the fill policies `zero`, `rescale`, `stale`, `local`;
- `MODELS`, `DATASETS`: the model and dataset registries.
The DDP communication hook is `dlcp.torch_hook`.
"""

from .training.data import DATASETS, load_dataset
from .training.fill import FILLS, fill_average
from .training.models import MODELS, build_model, parameter_layers
from .training.torch_workload import TorchServerWorkload, TorchWorkload, WorkloadConfig

__all__ = ["DATASETS", "FILLS", "MODELS", "TorchServerWorkload", "TorchWorkload", "WorkloadConfig",
           "build_model", "fill_average", "load_dataset", "parameter_layers"]
