"""The transport settings of the newer bounded-loss systems (docs/bounded-loss.md): when a receiver
ends a message on its own (`close`: OptiReduce's adaptive time-out, LTP's Early Close) and how many
destinations a sender transmits to at once (`incast`: OptiReduce's dynamic incast). Keys of the
experiment's `dlcp` section, composed into TransportSettings (dlcp/transport/api.py); the rules
themselves are sans-I/O, in dlcp/transport/core/close.py and dlcp/transport/core/incast.py.

The defaults are the bounded-loss transport as it was: a receiver ends a message only when the
sender's PROBE asks (`close = "probe"`), a sender transmits to every destination it has data for
(`incast = 0`).
"""

from __future__ import annotations

from typing import ClassVar, Literal, get_args

from pydantic import Field, model_validator

from dlcp.settings import BadValue, Fraction, Settings

CloseRule = Literal["probe", "timeout", "early"]
CLOSE_RULES = get_args(CloseRule)


class BoundedTransportSettings(Settings):
    """Receiver-initiated closes and the sender's incast bound (see the module docstring)."""

    section: ClassVar[str] = "dlcp"
    close: CloseRule = Field(
        "probe",
        description="when a receiver ends a message: when the sender's PROBE asks (the budget decides), at an "
        "adaptive time-out after its start (OptiReduce's UBT), or once an adaptive share arrived and the flow "
        "stalled (LTP's Early Close); protected packets are always waited for",
    )
    close_timeout_pctl: float = Field(
        95.0, ge=50, le=100, description="close timeout: percentile of the message's recent completion times"
    )
    close_timeout_window: int = Field(
        20, ge=2, le=1000, description="close timeout: completions of one message kept (no time-out before this many)"
    )
    close_timeout_slack: float = Field(1.0, ge=1, le=100, description="close timeout: time-out = slack x percentile")
    close_early_min: Fraction = Field(0.0, description="close early: least loss-tolerant bound b (close at 1 - b)")
    close_early_max: Fraction = Field(0.1, description="close early: greatest loss-tolerant bound b")
    close_early_gain: float = Field(
        2.0, ge=0, description="close early: b = gain x the source's recent missing fraction (EWMA), within min..max"
    )
    incast: int = Field(
        0,
        ge=0,
        le=254,
        description="destinations a sender transmits to at once (0 = all; with incast_adaptive: the most)",
    )
    incast_adaptive: bool = Field(
        False,
        description="adapt the destinations at once: +1/k per clean message, halved after a lossy one "
        "(OptiReduce's dynamic incast, reconstructed)",
    )

    @model_validator(mode="after")
    def _early_bounds(self):
        if self.close_early_min > self.close_early_max:
            raise BadValue(
                "close_early_min", f"{self.close_early_min:g} is above close_early_max {self.close_early_max:g}"
            )
        return self
