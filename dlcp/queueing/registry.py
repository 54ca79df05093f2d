"""Queue disciplines by name (a dlcp/registry.py registry): what each one is called, its one-line
description, its options model, its id in the C pipeline core, its Python reference, and the switch
targets that cannot express it.

A discipline decides which of a port's `N_QUEUES` queues sends next; admission (admission.py) and
the link rate are not its business. Each module of dlcp/queueing/disciplines registers one
(`register_discipline`), and the registry imports that package before its first lookup, so the
experiment's allowed values and option sections (`switch.queueing`, `[switch.<name>]`), the
runtime files' `queueing` rows and the generated C ids (`QDISC_<NAME>` in dlcp_wire.h) all come
from here. Every engine of the pipeline core runs every discipline; a backend whose switches
serve strict priority only (its capability `queue_disciplines` is false, dlcp/backends.py) runs
just the disciplines that plain priority queues are (`strict_priority`), and is refused the rest
with one line. The C statement of each discipline is
its case of `sw_qdisc_pick` in dlcp/switch/c/switch_core.h; tests/unit/test_queueing.py holds the
two to the same choices.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import dlcp.backends as backends
from dlcp.registry import Entry, Registry, RegistryError
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


def _no_params(options: Settings | None) -> list[int]:
    return [0] * N_QUEUES


@dataclass(frozen=True, kw_only=True)
class Discipline(Entry):
    """A registered queue discipline (`options`: its options model, or None)."""

    c_id: int  # QDISC_<NAME> in the generated dlcp_wire.h, what sw_qdisc_pick switches on
    reference: Callable[[Any], Scheduler]  # the Python reference: options (or None) -> a port's scheduler
    # the C core's N_QUEUES unsigned 32-bit parameters from the options (sw_set_qdisc)
    c_params: Callable[[Any], list[int]] = _no_params
    # plain strict-priority queues are this discipline: every backend runs it
    strict_priority: bool = False


DISCIPLINES: Registry[Discipline] = Registry("queue discipline", discover="dlcp.queueing.disciplines")


def register_discipline(d: Discipline) -> Discipline:
    """Register `d`; its C id must be new too (the C core switches on it)."""
    clash = next((o for o in DISCIPLINES.entries() if o.c_id == d.c_id), None)
    if clash is not None:
        raise RegistryError(f"queue discipline {d.name!r}: C id {d.c_id} is {clash.name!r}'s")
    return DISCIPLINES.register(d)


class QueueingError(ValueError):
    """A discipline or option that cannot be used; the message is one line naming it."""


@dataclass(frozen=True)
class QueueingConfig:
    """A port's discipline with its options: what a runtime file's `queueing` row holds."""

    discipline: Discipline
    options: Settings | None = None

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
        return {"discipline": self.name, **(self.options.model_dump() if self.options is not None else {})}

    def refusal(self, backend: str) -> str | None:
        """Why the switches of `backend` cannot run this discipline, or None when they can."""
        if self.discipline.strict_priority or backends.capabilities(backend).queue_disciplines:
            return None
        can = " or ".join(repr(b) for b in backends.names() if backends.capabilities(b).queue_disciplines)
        return f"its switches serve strict priority only; backend = {can} can run {self.name!r}"


def configure(name: Any, **options: Any) -> QueueingConfig:
    """A discipline and its options, checked (QueueingError naming the discipline or option)."""
    try:
        d = DISCIPLINES.get(name)
    except RegistryError as e:
        raise QueueingError(str(e)) from None
    if d.options is None:
        if options:
            raise QueueingError(f"{d.name} takes no options, got {', '.join(sorted(options))}")
        return QueueingConfig(d)
    try:
        return QueueingConfig(d, d.options(**options))
    except ConfigError as e:
        raise QueueingError(f"{d.name} {e}") from None


def from_doc(doc: Any) -> QueueingConfig:
    """A runtime file's `queueing` row ({"discipline": name, **options}; missing: strict)."""
    if doc is None:
        return configure("strict")
    if not isinstance(doc, dict) or "discipline" not in doc:
        names = ", ".join(DISCIPLINES.choices())
        raise QueueingError(f'expected {{"discipline": one of {names}, ...options}}, got {doc!r}')
    return configure(doc["discipline"], **{k: v for k, v in doc.items() if k != "discipline"})
