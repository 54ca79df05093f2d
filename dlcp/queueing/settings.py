"""The experiment's `[switch]` section: the queue discipline of every switch port, one of the
registry's names (`switch.queueing`), and one options section per discipline that has options
(`[switch.wrr]`), validated with that discipline's own options model (dlcp/settings.py
SectionedSettings): a new discipline brings its name and its section along."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from pydantic import Field

from dlcp.queueing.registry import DISCIPLINES, QueueingConfig
from dlcp.settings import BadValue, SectionedSettings, registry_name

if TYPE_CHECKING:
    DisciplineName = str
else:
    DisciplineName = registry_name(DISCIPLINES)


class QueueingSettings(SectionedSettings):
    """`[switch]`: which queue of a switch port sends next, and the disciplines' options."""

    section: ClassVar[str] = "switch"
    section_registries = (DISCIPLINES,)
    queueing: DisciplineName = Field(
        "strict", description="the egress queue discipline of every switch port (docs/pipeline.md)"
    )

    def config(self) -> QueueingConfig:
        """The chosen discipline with its options (the other disciplines' sections are ignored)."""
        return QueueingConfig(DISCIPLINES.get(self.queueing), self.options_of(self.queueing))

    def check_target(self, backend: str) -> None:
        """BadValue naming `queueing` when the switches of `backend` cannot run the discipline."""
        why = self.config().refusal(backend)
        if why:
            raise BadValue("queueing", f"{self.queueing!r} cannot run on {backend}: {why}")
