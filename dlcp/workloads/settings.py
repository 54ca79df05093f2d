"""What a workload is configured with: the keys of the `workload` section (an experiment's adds
`mode` and `workers`, an agent's the run's `seed`) and the fill rules `dlcp.fill` takes
(registered in dlcp/workloads/fills/: FILLS)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from dlcp.settings import BadValue, Fraction, Settings, check_argument, registry_name
from dlcp.wire.header import FIELD_BITS
from dlcp.workloads.fills import FILLS

ModelName = Literal["mlp", "cnn", "resnet", "synthetic"]
TORCH_MODELS = ("mlp", "cnn", "resnet")
Dataset = Literal["digits", "synthetic"]
Compute = Literal["real", "profile"]
if TYPE_CHECKING:
    Fill = str
else:  # a registered fill rule (dlcp/workloads/fills/), looked up when a config is validated
    Fill = registry_name(FILLS)
# LeNet-5 (conv 1->6 5x5, conv 6->16 5x5, fc 256->120, fc 120->84, fc 84->10), weights + biases
DEFAULT_LAYERS = (156, 2416, 30840, 10164, 850)
MAX_LAYERS = 1 << dict(FIELD_BITS)["layer_id"]  # layer ids travel in 16 bits
SYNTHETIC_LR_LIMIT = 0.4  # the synthetic problem's largest curvature is 5: SGD diverges from lr 2/5 on


def check_fill(name: str) -> str:
    """`name` if it is a fill rule (for callers that take one as an argument: fill_average, the DDP hook)."""
    return check_argument("fill", Fill, name, "dlcp")


class TrainingSettings(Settings):
    """What is trained and how (keys of the `workload` section)."""

    section: ClassVar[str] = "workload"
    model: ModelName = Field("cnn", description="model registry name")
    dataset: Dataset = Field("digits", description="scikit-learn digits, or a synthetic task")
    iterations: int = Field(20, ge=1, description="training iterations per worker")
    batch_size: int = Field(32, ge=1, description="per-worker batch")
    lr: float = Field(0.05, gt=0, description=f"SGD learning rate (synthetic model: below {SYNTHETIC_LR_LIMIT:g})")
    momentum: float = Field(0.9, ge=0, lt=1, description="SGD momentum (torch models)")
    weight_decay: float = Field(0.0, ge=0, description="SGD weight decay (torch models)")
    eval_every: int = Field(5, ge=0, description="0 = evaluate only at the end")
    bucket_values: int = Field(0, ge=0, description="0 = one message per layer")
    layers: list[Annotated[int, Field(ge=1)]] = Field(
        list(DEFAULT_LAYERS),
        min_length=1,
        max_length=MAX_LAYERS,
        description="synthetic model: layer sizes in values (default: LeNet-5's)",
    )
    compute_ms: float = Field(0.0, ge=0, description="synthetic model: compute time per iteration")
    compute: Compute = Field(
        "real",
        description="compute time: what the CPU takes, or each layer's time from "
        "workload.profile (dlcp/workloads/profiled.py)",
    )
    profile: str = Field(
        "",
        description="layer profile (bundled name or JSON file); empty = the torch model's "
        "own <model>-<dataset>-b<batch_size>; synthetic: trains its tensor sizes",
    )
    compute_scale: float = Field(
        1.0,
        gt=0,
        allow_inf_nan=False,
        description="every compute time of the profile times k: a device k times slower than the "
        "one it was measured on (profile compute)",
    )
    warmup_iterations: int = Field(5, ge=0, description="first iterations left out of iteration and MCT statistics")
    target_accuracy: Fraction = Field(
        0.9,
        description="reports: time to accuracy is the time of the first evaluation whose test accuracy (worker "
        "mean) reaches this",
    )
    hadamard: bool = Field(
        False,
        description="OptiReduce's randomised Hadamard transform: gradients sent transformed, the filled average "
        "transformed back, so a lost packet spreads over its block (dlcp/workloads/hadamard.py)",
    )

    @model_validator(mode="after")
    def _synthetic_lr(self):
        if self.model == "synthetic" and self.lr >= SYNTHETIC_LR_LIMIT:
            raise BadValue(
                "lr",
                f"{self.lr:g} is not below {SYNTHETIC_LR_LIMIT:g}, where SGD on the synthetic "
                "problem diverges (its largest curvature is 5)",
            )
        return self

    @model_validator(mode="after")
    def _profile_compute(self):
        if self.compute == "profile" and self.compute_ms:
            raise BadValue(
                "compute_ms",
                "a sleep of the real-compute synthetic model; with compute = 'profile' "
                "the profile's times apply (leave compute_ms at 0)",
            )
        if self.compute_scale != 1 and self.compute != "profile":
            raise BadValue(
                "compute_scale",
                f"{self.compute_scale:g} scales a profile's compute times; it needs compute = "
                "'profile' (real compute takes what the CPU takes)",
            )
        if self.compute == "profile" and self.model == "synthetic" and not self.profile:
            raise BadValue(
                "profile",
                "compute = 'profile' with the synthetic model needs a profile (a bundled "
                "name such as resnet50-fp32-b64-h200, or a JSON file)",
            )
        return self

    def is_eval_iteration(self, iteration: int) -> bool:
        last = iteration == self.iterations - 1
        return last or (self.eval_every > 0 and (iteration + 1) % self.eval_every == 0)


class WorkloadConfig(TrainingSettings):
    """What a worker or the PS trains: the experiment's workload keys and the run's seed."""

    seed: int = Field(1, ge=0, description="seeds data order, model init, losses")
    dilation: float = Field(
        1.0, ge=1, description="profile compute times are multiplied by it (the experiment's scale.dilation)"
    )
