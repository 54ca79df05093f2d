"""Queue disciplines by name: what each one is called, its id in the C pipeline core, its options,
its one-line description, its Python reference, and the switch targets that cannot express it.

A discipline decides which of a port's `N_QUEUES` queues sends next; admission (admission.py) and
the link rate are not its business. Each discipline module registers itself (`register`) and is
imported by the package, so the experiment's allowed values (`switch.queueing`), the runtime
files' `queueing` rows, the generated C ids (`QDISC_<NAME>` in dlcp_wire.h) and the refusal on a
target that cannot run it all come from here. The C statement of each discipline is
`sw_qdisc_pick` in dlcp/switch/c/switch_core.h; tests hold the two to the same choices.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from dlcp.settings import ConfigError, Settings

N_QUEUES = 8  # egress queues per port, one per DLCP priority (queue 7 is the highest)
# the bytes one unit of weight lets a weighted discipline send per round: one full Ethernet
# frame at the standard MTU (1500 bytes of IP + 14 of Ethernet)
QUANTUM_BYTES = 1514


class Scheduler(Protocol):
    """One port's discipline: which queue sends next, from the queues as they are now."""

    def pick(self, queues: Sequence[Sequence[Any]], size_of: Callable[[Any], int]) -> int:
        """The queue whose head packet goes next (`size_of(packet)`: its frame bytes), or -1 when
        every queue is empty. Called once per packet sent; the caller then takes that head."""
        ...


class NoOptions(Settings):
    """A discipline without options."""


@dataclass(frozen=True)
class Discipline:
    name: str
    c_id: int  # QDISC_<NAME> in the generated dlcp_wire.h, what sw_qdisc_pick switches on
    doc: str  # one line for the key reference and the docs
    reference: Callable[[Settings], Scheduler]  # the Python reference: options -> a port's scheduler
    options: type[Settings] = NoOptions
    # the C core's parameters (N_QUEUES unsigned 32-bit values) from the options
    c_params: Callable[[Settings], list[int]] = field(default=lambda _options: [0] * N_QUEUES)
    refused_on: Mapping[str, str] = field(default_factory=dict)  # switch target -> why it cannot


DISCIPLINES: dict[str, Discipline] = {}


def register(d: Discipline) -> Discipline:
    for other in DISCIPLINES.values():
        if d.name == other.name or d.c_id == other.c_id:
            raise ValueError(f"queue discipline {d.name!r} (id {d.c_id}) clashes with {other.name!r}")
    DISCIPLINES[d.name] = d
    return d


def names() -> tuple[str, ...]:
    return tuple(DISCIPLINES)


class QueueingError(ValueError):
    """A discipline or option that cannot be used; the message is one line naming it."""


@dataclass(frozen=True)
class QueueingConfig:
    """A port's discipline with its options: what a runtime file's `queueing` row holds."""

    discipline: Discipline
    options: Settings

    @property
    def name(self) -> str:
        return self.discipline.name

    def scheduler(self) -> Scheduler:
        """A fresh Python reference scheduler (one per port)."""
        return self.discipline.reference(self.options)

    def c_params(self) -> list[int]:
        return self.discipline.c_params(self.options)

    def to_doc(self) -> dict[str, Any]:
        """The runtime file's `queueing` row: {"discipline": name, **options}."""
        return {"discipline": self.name, **self.options.model_dump()}

    def refusal(self, target: str) -> str | None:
        """Why `target` cannot run this discipline, or None when it can."""
        return self.discipline.refused_on.get(target)


def discipline(name: Any) -> Discipline:
    d = DISCIPLINES.get(name) if isinstance(name, str) else None
    if d is None:
        raise QueueingError(f"{name!r} is not a queue discipline (one of {', '.join(DISCIPLINES)})")
    return d


def configure(name: str, **options: Any) -> QueueingConfig:
    """A discipline and its options, checked (QueueingError naming the option)."""
    d = discipline(name)
    try:
        return QueueingConfig(d, d.options(**options))
    except ConfigError as e:
        raise QueueingError(f"{d.name} {e}") from None


def from_doc(doc: Any) -> QueueingConfig:
    """A runtime file's `queueing` row ({"discipline": name, **options}; missing: strict)."""
    if doc is None:
        return configure("strict")
    if not isinstance(doc, dict) or "discipline" not in doc:
        raise QueueingError(f'expected {{"discipline": one of {", ".join(DISCIPLINES)}, ...options}}, got {doc!r}')
    rest = {k: v for k, v in doc.items() if k != "discipline"}
    return configure(doc["discipline"], **rest)
