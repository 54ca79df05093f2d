"""The keys of a budget schedule (`dlcp.budget_schedule` and DBLP's phase parameters), part of the
collectives' `[dlcp]` settings (CommSettings, dlcp/comm/settings.py): a schedule changes the loss
budget of the messages the collectives send and receive. The schedule itself is
dlcp/iteration/budget_schedule.py (docs/bounded-loss.md)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from dlcp.settings import BadValue, Fraction, Settings


class BudgetScheduleSettings(Settings):
    """`dlcp.budget_schedule` and DBLP's phase parameters (keys of the `dlcp` section)."""

    section: ClassVar[str] = "dlcp"
    budget_schedule: Literal["fixed", "phase"] = Field(
        "fixed",
        description="fixed: loss_budget throughout; phase: DBLP's phase-aware budget, phase_low in critical "
        "periods (a jump of the aggregated gradient's norm) and phase_high elsewhere",
    )
    phase_low: Fraction = Field(0.008, description="phase schedule: the budget of a critical period")
    phase_high: Fraction = Field(0.408, description="phase schedule: the budget elsewhere")
    phase_every: int = Field(
        10, ge=1, description="phase schedule: iterations between detections (a critical period lasts this long)"
    )
    phase_eta: float = Field(
        0.5, gt=0, description="phase schedule: relative change of the gradient norm that marks a critical period"
    )

    @model_validator(mode="after")
    def _low_below_high(self):
        if self.phase_low > self.phase_high:
            raise BadValue("phase_low", f"{self.phase_low:g} is above phase_high {self.phase_high:g}")
        return self
