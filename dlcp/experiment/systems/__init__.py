"""Systems: named bundles of settings that make the framework behave as one published system
(docs/bounded-loss.md), the value of the experiment's `system` key and of `dlcp run --policies`.

A loss-tolerant system is not one knob: OptiReduce is a collective (`comm.collective = "tar"`), a
receiver that stops waiting at an adaptive time-out (`dlcp.close`), a sender incast bound
(`dlcp.incast_adaptive`), a Hadamard transform (`workload.hadamard`) and a tagging and fill choice
at once; LTP and DBLP likewise. Varying each key would run their cross product, most of which is
no system at all, so a system is a registered point in that space: a name, one line, the
settings it sets (dotted keys, as `--set` writes them), the workload modes it runs in, and where it
comes from. Each registers itself in its own module of this package (`SYSTEMS` imports them all
before its first lookup): adding a system is one module.

Applying one (dlcp/experiment/config.py `apply_system`) writes its settings over the file's and sets
`system`; `--set` keys still win (a system is a starting point a user can tune), and a run
records the system in config.toml and meta.json. The tagging policies are systems too (each sets
only `dlcp.policy`), so `--policies fifo,dlcp` runs what it always ran.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dlcp.registry import Entry, Registry


@dataclass(frozen=True, kw_only=True)
class SystemEntry(Entry):
    """A registered system (see the module docstring)."""

    settings: dict[str, Any] = field(default_factory=dict)
    """dotted key -> value, applied as `--set key=value` would."""
    modes: tuple[str, ...] = ("ps", "allreduce")
    """the `workload.mode`s it runs in."""
    source: str = ""
    """the paper or code it follows, and how closely (docs/bounded-loss.md has the details)."""


SYSTEMS: Registry[SystemEntry] = Registry("system", discover="dlcp.experiment.systems")


def register_system(entry: SystemEntry) -> SystemEntry:
    return SYSTEMS.register(entry)
