"""What an experiment sets about communication: the collectives' `[dlcp]` keys (ring budget,
re-sync, telemetry), the `[comm]` section (which scheduler decides what to send when, over which
collective, with their parameters), and what one rank's collectives are configured with.

`[comm]` (docs/schedulers.md, docs/collectives.md):

    scheduler = "wfbp" | "mgwfbp" | "oasr" | "bytescheduler" | "usbyte" | "dear"
    collective = "ring" | "multitree" | "dssync"
    alpha_s, beta_s_per_byte      the cost model the planners plan with (0: from the links)
    [comm.bytescheduler] partition_bytes, credit_bytes     [comm.usbyte] unit_elems, credit_bytes
    [comm.dear] threshold_bytes   [comm.mgwfbp] small_merge_elems
    [comm.ring] order             [comm.multitree] kary, paths  [comm.dssync] group, average
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from dlcp.comm.plans.ring import RingOrder
from dlcp.comm.schedulers.bytescheduler import DEFAULT_CREDIT_BYTES, DEFAULT_PARTITION_BYTES
from dlcp.comm.schedulers.dear import DEFAULT_THRESHOLD_BYTES
from dlcp.comm.schedulers.usbyte import DEFAULT_UNIT_ELEMS
from dlcp.settings import BadValue, Settings
from dlcp.transport.api import WireByte
from dlcp.wire.control_frames import PS_RANK
from dlcp.wire.tagging import TaggingConfig

Mode = Literal["ps", "allreduce"]
RingBudget = Literal["protect_rs", "per_step"]
World = Annotated[int, Field(ge=1, le=PS_RANK - 1)]  # worker ranks 0..253 and the PS fit a wire byte
SchedulerName = Literal["wfbp", "mgwfbp", "oasr", "bytescheduler", "usbyte", "dear"]
CollectiveName = Literal["ring", "multitree", "dssync"]


class CommSettings(Settings):
    """What an experiment sets about the collectives (keys of its `dlcp` section)."""

    section: ClassVar[str] = "dlcp"
    ring_budget: RingBudget = Field(
        "protect_rs", description="all-reduce steps: reliable reduce-scatter, or a budget per step"
    )
    resync_every: int = Field(50, ge=0, description="all-reduce: replica re-sync period in iterations (0 = never)")
    telemetry: bool = Field(False, description="ask switches to stamp queue telemetry into data packets")


class CommConfig(CommSettings):
    """What the collectives of one rank need besides the transport."""

    rank: WireByte  # wire rank (PS_RANK at the PS)
    world: World  # workers
    job_id: WireByte = 1
    tagging: TaggingConfig = TaggingConfig()
    timeout_s: float = Field(60.0, gt=0)  # longest wait for one message


# --- [comm]: scheduler and collective ---------------------------------------------------------------


class MGWFBPOptions(Settings):
    small_merge_elems: int = Field(
        0,
        ge=0,
        description="mgwfbp: also merge groups below this many elements "
        "(DeAR's copy: 8192; 0 = the authors' rule only)",
    )


class ByteSchedulerOptions(Settings):
    partition_bytes: int = Field(DEFAULT_PARTITION_BYTES, ge=4, description="bytescheduler: partition size")
    credit_bytes: int = Field(
        DEFAULT_CREDIT_BYTES, ge=4, description="bytescheduler: bytes in flight (>= the largest partition)"
    )


class USByteOptions(Settings):
    unit_elems: int = Field(DEFAULT_UNIT_ELEMS, ge=1, description="usbyte: block unit S_p in elements")
    credit_bytes: int = Field(0, ge=0, description="usbyte: bytes in flight; 0 = one block at a time (the plan)")


class DeAROptions(Settings):
    threshold_bytes: int = Field(DEFAULT_THRESHOLD_BYTES, ge=0, description="dear: fusion buffer size (0 = no fusion)")


class RingOptions(Settings):
    order: RingOrder = Field(
        "rank",
        description="ring: ranks 0..P-1 in rank order (interleaved across edge switches), or grouped "
        "by edge switch so the ring crosses the fabric once per switch (NCCL's topology-aware ring)",
    )


class MultiTreeOptions(Settings):
    kary: int = Field(2, ge=2, le=16, description="multitree: a parent gains up to kary-1 children per tree and step")
    paths: Literal["spray", "pinned"] = Field(
        "spray",
        description="multitree: links allocated so the schedule holds when sprayed too, or on pinned paths only",
    )


class DsSyncOptions(Settings):
    group: int = Field(2, ge=2, le=PS_RANK - 1, description="dssync: workers per group (divides workload.workers)")
    average: Literal["parameters", "gradients"] = Field(
        "parameters",
        description="dssync: local SGD step then parameter average in the group (the paper's), or "
        "the group's mean gradient",
    )


class CommPolicy(Settings):
    """`[comm]`: the communication scheduler, the collective, and their parameters."""

    section: ClassVar[str] = "comm"
    scheduler: SchedulerName = Field("wfbp", description="what to send when: merge, partition, order, credit")
    collective: CollectiveName = Field("ring", description="the all-reduce algorithm (workload.mode = 'allreduce')")
    alpha_s: float = Field(0.0, ge=0, description="planners' all-reduce start-up, s; 0 = from the links")
    beta_s_per_byte: float = Field(0.0, ge=0, description="planners' all-reduce s per byte; 0 = from the links")
    step_latency_s: float = Field(0.001, ge=0, description="per collective step, when alpha comes from the links")
    lockstep: bool = Field(True, description="a rank starts a step once its messages of the previous one are done")
    mgwfbp: MGWFBPOptions = Field(default_factory=MGWFBPOptions)
    bytescheduler: ByteSchedulerOptions = Field(default_factory=ByteSchedulerOptions)
    usbyte: USByteOptions = Field(default_factory=USByteOptions)
    dear: DeAROptions = Field(default_factory=DeAROptions)
    ring: RingOptions = Field(default_factory=RingOptions)
    multitree: MultiTreeOptions = Field(default_factory=MultiTreeOptions)
    dssync: DsSyncOptions = Field(default_factory=DsSyncOptions)

    @model_validator(mode="after")
    def _compose(self):
        if self.bytescheduler.credit_bytes < self.bytescheduler.partition_bytes:
            raise BadValue(
                "bytescheduler.credit_bytes",
                f"{self.bytescheduler.credit_bytes} is below "
                f"partition_bytes {self.bytescheduler.partition_bytes} (the queue could never drain)",
            )
        if self.collective == "dssync" and self.dssync.average == "parameters" and self.scheduler != "wfbp":
            raise BadValue(
                "scheduler",
                f"{self.scheduler!r} schedules gradient all-reduces, but dssync.average = "
                "'parameters' averages parameters after the local step: use 'wfbp', or "
                "dssync.average = 'gradients'",
            )
        return self

    def scheduler_options(self) -> dict:
        """Keyword options of the chosen scheduler (dlcp.comm.schedulers.make_scheduler)."""
        s = self.scheduler
        if s == "mgwfbp":
            return {"small_merge_elems": self.mgwfbp.small_merge_elems}
        if s == "bytescheduler":
            return {
                "partition_bytes": self.bytescheduler.partition_bytes,
                "credit_bytes": self.bytescheduler.credit_bytes,
            }
        if s == "usbyte":
            return {"unit_elems": self.usbyte.unit_elems, "credit_bytes": self.usbyte.credit_bytes or None}
        if s == "dear":
            return {"threshold_bytes": self.dear.threshold_bytes}
        return {}
