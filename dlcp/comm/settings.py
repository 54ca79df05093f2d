"""What an experiment sets about communication: the collectives' `[dlcp]` keys (ring budget,
re-sync, telemetry), the `[comm]` section (which scheduler decides what to send when, over which
collective, with their parameters), and what one rank's collectives are configured with.

`[comm]` (docs/schedulers.md, docs/collectives.md):

    scheduler = a registered scheduler (dlcp/comm/schedulers/: SCHEDULERS)
    collective = a registered collective (dlcp/comm/plans/: COLLECTIVES)
    alpha_s, beta_s_per_byte      the cost model the schedulers plan with (0: from the links)
    [comm.<name>]                 the options of scheduler or collective <name>, declared by it
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import Field, model_validator

from dlcp.comm.budget_settings import BudgetScheduleSettings
from dlcp.comm.plans.collective import COLLECTIVES, CollectiveEntry
from dlcp.comm.schedulers.base import SCHEDULERS, SchedulerEntry
from dlcp.settings import SectionedSettings, registry_name
from dlcp.transport.api import WireByte
from dlcp.wire.control_frames import PS_RANK
from dlcp.wire.tagging import TaggingConfig

Mode = Literal["ps", "allreduce"]
RingBudget = Literal["protect_rs", "per_step"]
World = Annotated[int, Field(ge=1, le=PS_RANK - 1)]  # worker ranks 0..253 and the PS fit a wire byte
if TYPE_CHECKING:
    SchedulerName = str
    CollectiveName = str
else:  # a registered name, looked up when a config is validated
    SchedulerName = registry_name(SCHEDULERS)
    CollectiveName = registry_name(COLLECTIVES)


class CommSettings(BudgetScheduleSettings):
    """What an experiment sets about the collectives (keys of its `dlcp` section), a budget
    schedule's included (dlcp/comm/budget_settings.py)."""

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


class CommSetup(SectionedSettings):
    """`[comm]`: the communication scheduler, the collective, and their parameters. The names and
    the `[comm.<name>]` option sections come from the registries (dlcp/comm/schedulers/base.py
    SCHEDULERS, dlcp/comm/plans/collective.py COLLECTIVES)."""

    section: ClassVar[str] = "comm"
    section_registries = (SCHEDULERS, COLLECTIVES)
    scheduler: SchedulerName = Field("wfbp", description="what to send when: merge, partition, order, credit")
    collective: CollectiveName = Field("ring", description="the all-reduce algorithm (workload.mode = 'allreduce')")
    alpha_s: float = Field(0.0, ge=0, description="planners' all-reduce start-up, s; 0 = from the links")
    beta_s_per_byte: float = Field(0.0, ge=0, description="planners' all-reduce s per byte; 0 = from the links")
    step_latency_s: float = Field(0.001, ge=0, description="per collective step, when alpha comes from the links")
    lockstep: bool = Field(True, description="a rank starts a step once its messages of the previous one are done")

    @model_validator(mode="after")
    def _collective_takes_scheduler(self):
        self.check_workers(None)
        return self

    @property
    def scheduler_entry(self) -> SchedulerEntry:
        return SCHEDULERS.get(self.scheduler)

    @property
    def collective_entry(self) -> CollectiveEntry:
        return COLLECTIVES.get(self.collective)

    def scheduler_options(self) -> dict:
        """Keyword options of the chosen scheduler (dlcp.comm.schedulers.make_scheduler)."""
        return self.scheduler_entry.kwargs(self.options_of(self.scheduler))

    def collective_options(self) -> Any:
        """The chosen collective's validated `[comm.<collective>]` options (None if it has none)."""
        return self.options_of(self.collective)

    def check_workers(self, workers: int | None) -> None:
        """Raise BadValue (key relative to `[comm]`) if the collective cannot run this scheduler, or
        with `workers` workers (None: not known here)."""
        self.collective_entry.check(self.collective_options(), self.scheduler, workers)

    def averages_parameters(self) -> bool:
        """Ranks average parameters after a local step (DS-Sync's own mode) instead of all-reducing
        gradients."""
        return self.collective_entry.averages_parameters(self.collective_options())

    def resyncs(self) -> bool:
        """Rank 0's periodic re-sync (`dlcp.resync_every`) applies to this collective."""
        return self.collective_entry.resyncs
