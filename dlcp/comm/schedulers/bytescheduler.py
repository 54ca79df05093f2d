"""ByteScheduler (Peng et al., SOSP'19) for all-reduce [C: bytedance/byteps branch bytescheduler,
bytescheduler/common/bytecore.py, bytetask.py, pytorch/horovod_task.py; seeds-brief §5]:

* partition: a tensor larger than `partition_bytes` is split into ceil(size / partition) near-equal
  parts (ByteScheduler splits along dimension 0 into that many near-equal row slices; profiles
  have no shapes, so we split the flat tensor into near-equal element ranges);
* priority: by layer, input side first (tensor index, the order of `model.parameters()`), then
  by partition index within the tensor (bytetask: priority * max_partition + i);
* credit: bytes in flight (released, not completed), never exceeded (see credit.py for the one
  deviation from bytecore, which can overshoot by up to one partition).

Defaults are bytecore's: partition 1,000,000 and credit 4,000,000 parameters, i.e. 4 MB and 16 MB of
fp32. ByteScheduler auto-tunes the credit by Bayesian optimisation at run time; here both knobs
are plain options (`dlcp.comm.prediction.tune` grid-searches them under the model).
"""

from __future__ import annotations

from pydantic import Field, model_validator

from dlcp.comm.schedulers.base import Segment, register_scheduler
from dlcp.comm.schedulers.credit import CreditExecutor
from dlcp.settings import BadValue, Settings
from dlcp.workloads.profile import BYTES_PER_ELEMENT

DEFAULT_PARTITION_BYTES = 1_000_000 * BYTES_PER_ELEMENT
DEFAULT_CREDIT_BYTES = 4_000_000 * BYTES_PER_ELEMENT


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
    partition_bytes: int = Field(DEFAULT_PARTITION_BYTES, ge=4, description="bytescheduler: partition size")
    credit_bytes: int = Field(
        DEFAULT_CREDIT_BYTES, ge=4, description="bytescheduler: bytes in flight (>= the largest partition)"
    )

    @model_validator(mode="after")
    def _credit_holds_a_partition(self):
        if self.credit_bytes < self.partition_bytes:
            raise BadValue(
                "credit_bytes",
                f"{self.credit_bytes} is below partition_bytes {self.partition_bytes} (the queue could never drain)",
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
        partition_bytes: int = DEFAULT_PARTITION_BYTES,
        credit_bytes: int = DEFAULT_CREDIT_BYTES,
    ):
        if (
            isinstance(partition_bytes, bool)
            or not isinstance(partition_bytes, int)
            or partition_bytes < BYTES_PER_ELEMENT
        ):
            raise ValueError(
                f"bytescheduler: partition_bytes must be an integer >= {BYTES_PER_ELEMENT}, got {partition_bytes!r}"
            )
        if credit_bytes is None:
            raise ValueError("bytescheduler: credit_bytes must be an integer (bytes in flight)")
        elems = partition_bytes // BYTES_PER_ELEMENT
        blocks = [
            [((t, i), seg) for i, seg in enumerate(partition_tensor(t, n, elems))] for t, n in enumerate(profile.sizes)
        ]
        self.partition_bytes = partition_bytes
        super().__init__(profile.sizes, blocks, credit_bytes)

    def describe(self) -> dict:
        return {
            "groups": [[t] for t in range(len(self.sizes))],
            "partition_bytes": self.partition_bytes,
            "credit_bytes": self.credit_bytes,
            "partitions": [[s.tensor, s.start, s.stop] for bl in self.blocks for _, s in bl],
        }
