"""ByteScheduler (Peng et al., SOSP'19) for all-reduce [C: bytedance/byteps branch bytescheduler,
bytescheduler/common/bytecore.py, bytetask.py, pytorch/horovod_task.py; seeds-brief §5]:

* partition: a tensor larger than `partition_bytes` is split into ceil(size / partition) near-equal
  parts (ByteScheduler splits along dimension 0 into that many near-equal row slices; profiles
  have no shapes, so we split the flat tensor into near-equal element ranges);
* priority: by layer, input side first (tensor index, the order of `model.parameters()`), then
  by partition index within the tensor (bytetask: priority * max_partition + i);
* credit: bytes in flight (released, not completed), never exceeded (see credit.py for the one
  deviation from bytecore, which can overshoot by up to one partition).

Defaults per architecture, from ByteScheduler's own docs [C: bytedance/byteps, bytescheduler/docs/
scheduling.md]: "The partition threshold ... The default value is 1000000. For allreduce
architecture, the value should be much larger, e.g., 8000000" and "The credit ... The default value
is 4000000. For allreduce architecture, the value should be larger, e.g., 16000000" (parameters).
bytecore's defaults (1,000,000 / 4,000,000) are the parameter-server ones. This scheduler issues
all-reduces, so `architecture = "allreduce"` (8,000,000 / 16,000,000 parameters = 32 MB / 64 MB of
fp32) is the default; `architecture = "ps"` takes the PS values (4 MB / 16 MB), e.g. to reproduce a
comparison that used them. An explicit `partition_bytes` / `credit_bytes` overrides either (0 =
the architecture's). ByteScheduler auto-tunes the credit by Bayesian optimisation at run time;
here both knobs are plain options (`dlcp.comm.prediction.tune` grid-searches them under the model).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from dlcp.comm.schedulers.base import Segment, register_scheduler
from dlcp.comm.schedulers.credit import CreditExecutor
from dlcp.settings import BadValue, Settings
from dlcp.workloads.profile import BYTES_PER_ELEMENT

Architecture = Literal["allreduce", "ps"]
# (partition, credit) in bytes per architecture, from ByteScheduler's docs (module docstring)
DEFAULTS: dict[str, tuple[int, int]] = {
    "allreduce": (8_000_000 * BYTES_PER_ELEMENT, 16_000_000 * BYTES_PER_ELEMENT),
    "ps": (1_000_000 * BYTES_PER_ELEMENT, 4_000_000 * BYTES_PER_ELEMENT),
}
DEFAULTS_SOURCE = "bytedance/byteps bytescheduler/docs/scheduling.md"


def resolved_sizes(architecture: str, partition_bytes: int = 0, credit_bytes: int = 0) -> tuple[int, int]:
    """(partition, credit) in bytes: the given ones, 0 meaning the architecture's default."""
    if architecture not in DEFAULTS:
        raise ValueError(f"bytescheduler: architecture must be one of {', '.join(DEFAULTS)}, got {architecture!r}")
    part, credit = DEFAULTS[architecture]
    return partition_bytes or part, credit_bytes or credit


def partition_tensor(tensor: int, size: int, partition_elems: int) -> list[Segment]:
    """ceil(size / partition_elems) near-equal consecutive ranges (sizes differ by at most 1)."""
    parts = -(-size // partition_elems)
    base, extra = divmod(size, parts)
    out, start = [], 0
    for i in range(parts):
        stop = start + base + (1 if i < extra else 0)
        out.append(Segment(tensor, start, stop))
        start = stop
    return out


class ByteSchedulerOptions(Settings):
    architecture: Architecture = Field(
        "allreduce",
        description="bytescheduler: whose default partition and credit (ByteScheduler's docs): "
        "allreduce 32 MB / 64 MB, ps 4 MB / 16 MB",
    )
    partition_bytes: int = Field(0, ge=0, description="bytescheduler: partition size; 0 = the architecture's")
    credit_bytes: int = Field(
        0, ge=0, description="bytescheduler: bytes in flight (>= the largest partition); 0 = the architecture's"
    )

    @model_validator(mode="after")
    def _credit_holds_a_partition(self):
        if 0 < self.partition_bytes < 4:
            raise BadValue("partition_bytes", f"{self.partition_bytes} is below one fp32 element (4 bytes)")
        part, credit = resolved_sizes(self.architecture, self.partition_bytes, self.credit_bytes)
        if credit < part:
            raise BadValue(
                "credit_bytes",
                f"{credit} is below partition_bytes {part} (the queue could never drain)",
            )
        return self


@register_scheduler(
    "bytescheduler",
    "ByteScheduler (Peng et al., SOSP'19): partitions, input side first, under a credit of bytes in flight",
    ByteSchedulerOptions,
)
class ByteScheduler(CreditExecutor):
    def __init__(
        self,
        profile,
        cost=None,
        workers=None,
        architecture: str = "allreduce",
        partition_bytes: int = 0,
        credit_bytes: int = 0,
    ):
        if (
            isinstance(partition_bytes, bool)
            or not isinstance(partition_bytes, int)
            or 0 < partition_bytes < BYTES_PER_ELEMENT
            or partition_bytes < 0
        ):
            raise ValueError(
                f"bytescheduler: partition_bytes must be an integer >= {BYTES_PER_ELEMENT} "
                f"(0: the architecture's default), got {partition_bytes!r}"
            )
        if credit_bytes is None:
            raise ValueError("bytescheduler: credit_bytes must be an integer (bytes in flight)")
        self.architecture = architecture
        given = {"partition_bytes": partition_bytes, "credit_bytes": credit_bytes}
        self.defaults_used = [k for k, v in given.items() if not v]
        partition_bytes, credit_bytes = resolved_sizes(architecture, partition_bytes, credit_bytes)
        elems = partition_bytes // BYTES_PER_ELEMENT
        blocks = [
            [((t, i), seg) for i, seg in enumerate(partition_tensor(t, n, elems))] for t, n in enumerate(profile.sizes)
        ]
        self.partition_bytes = partition_bytes
        super().__init__(profile.sizes, blocks, credit_bytes)

    def describe(self) -> dict:
        return {
            "groups": [[t] for t in range(len(self.sizes))],
            "architecture": self.architecture,
            "defaults": (
                f"{', '.join(self.defaults_used)}: ByteScheduler's {self.architecture} default ({DEFAULTS_SOURCE})"
                if self.defaults_used
                else "none (both given)"
            ),
            "partition_bytes": self.partition_bytes,
            "credit_bytes": self.credit_bytes,
            "partitions": [[s.tensor, s.start, s.stop] for bl in self.blocks for _, s in bl],
        }
