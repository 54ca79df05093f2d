"""The backends `dlcp run` drives and what each can do: the one place that names them.

A backend runs one run of an experiment into a run directory (docs/runs.md) under the contract of
dlcp/runs/contract.py. What it can do is data here (`Capabilities`), so the config's checks
(dlcp/experiment/config.py), the runtime-file reader, the series runner (dlcp/runs/) and `dlcp
sweep` ask this registry instead of comparing names, and a new backend is one `register` call plus
its implementation.

The implementations need root, Mininet or ns-3, so they live above dlcp/ (emulation/,
simulation/). This module names each by module path and imports it only when a run starts on it
(`implementation`): importing dlcp/ imports neither (tests/unit/test_layout.py checks both).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Literal

from dlcp.wire.header import JUMBO_MTU, STANDARD_MTU

Clock = Literal["wall", "simulated"]


class UnknownBackend(ValueError):
    """A backend name nobody registered; one line, naming the new name when it was renamed."""


@dataclass(frozen=True)
class Capabilities:
    """What a backend can run. Config validation refuses the rest before anything starts."""

    root: str | None  # why it needs root (the refusal says so), or None when it does not
    payloads: tuple[str, ...]  # workload.payload values its hosts carry
    max_workers: int  # workload.workers it can hold
    max_mtu: int  # largest links.mtu
    max_mbps: float  # fastest links.host_mbps / fabric_mbps (emulated links are shaped by one machine)
    link_delay_loss: bool  # emulates links.delay_us and links.loss
    captures: bool  # output.pcap_ports: its switch ports are interfaces a capture can read
    forked_runs: bool  # each run of a series in a process of its own (ns-3: one simulator per process)
    parallel_runs: bool  # runs on one machine share nothing (dlcp sweep runs its points at once)
    clock: Clock  # the records' time base; on "wall", scale.dilation slows the whole run down
    deterministic: bool  # a seed fixes the run exactly (two runs with one seed are one sample)
    switch_engines: tuple[str, ...]  # the switch implementations it runs
    queue_must_exceed_qmax: bool  # the switch's own queue drops before admission control can act
    # its switches run the pipeline core's queue disciplines (dlcp/queueing); False: their queues
    # serve strict priority only (bmv2's simple_switch has no other scheduler)
    queue_disciplines: bool
    # [[jobs]]: several training jobs on one fabric, each starting at its own time (its workers'
    # first iteration delayed by its start_s + shift_s)
    several_jobs: bool


@dataclass(frozen=True)
class Backend:
    name: str  # the config value: `backend = "<name>"`
    description: str  # what it is, for errors, help and the key reference
    hosts: str  # what a host is there (why the limits are what they are)
    capabilities: Capabilities
    implementation: str  # "package.module:attribute" of the object that runs it (dlcp/runs/contract.py)


_BACKENDS: dict[str, Backend] = {}
# A name that was renamed: the error names the new one.
RENAMED = {"ref": "builtin"}
DEFAULT = "builtin"
# The target of a switch runtime file that names none: runtime files older than the key were bmv2's.
RUNTIME_DEFAULT_TARGET = "bmv2"


def register(backend: Backend) -> Backend:
    if backend.name in _BACKENDS or backend.name in RENAMED:
        raise ValueError(f"backend {backend.name!r} registered twice")
    _BACKENDS[backend.name] = backend
    return backend


def names() -> tuple[str, ...]:
    return tuple(_BACKENDS)


def get(name: str) -> Backend:
    """The registered backend `name`; UnknownBackend with one line otherwise."""
    try:
        return _BACKENDS[name]
    except KeyError:
        raise UnknownBackend(unknown_backend(name)) from None


def unknown_backend(name: object) -> str:
    """Why `name` is no backend, in words that fit after "backend: "."""
    if isinstance(name, str) and name in RENAMED:
        return f"{name!r} is now called {RENAMED[name]!r}"
    return f"{name!r} is not one of {', '.join(names())}"


def capabilities(name: str) -> Capabilities:
    return get(name).capabilities


def offering(test, quoted: bool = True) -> str:
    """The backends whose capabilities pass `test`, as a config would name them ("'ns3'",
    "'builtin' or 'ns3'"; unquoted for prose)."""
    found = [repr(b.name) if quoted else b.name for b in _BACKENDS.values() if test(b.capabilities)]
    return " or ".join(found) or "none"


def implementation(name: str) -> Any:
    """The object that runs `name` (dlcp/runs/contract.py), imported now: the first thing that
    needs the backend's own packages."""
    module, _, attr = get(name).implementation.partition(":")
    return getattr(importlib.import_module(module), attr)


MININET_HOSTS = "Mininet hosts on one machine"

register(
    Backend(
        name="builtin",
        description="the built-in switch (emulation/builtin_switch) in Mininet",
        hosts=MININET_HOSTS,
        capabilities=Capabilities(
            root="Mininet network namespaces",
            payloads=("values",),
            max_workers=64,
            max_mtu=STANDARD_MTU,
            max_mbps=10_000,
            link_delay_loss=True,
            captures=True,
            forked_runs=False,
            parallel_runs=False,
            clock="wall",
            deterministic=False,
            switch_engines=("c", "python"),
            queue_must_exceed_qmax=False,
            queue_disciplines=True,
            several_jobs=True,
        ),
        implementation="emulation.mininet_backend:BUILTIN",
    )
)
register(
    Backend(
        name="bmv2",
        description="simple_switch_grpc running p4/dlcp.p4 in Mininet",
        hosts=MININET_HOSTS,
        capabilities=Capabilities(
            root="Mininet network namespaces",
            payloads=("values",),
            max_workers=64,
            max_mtu=STANDARD_MTU,
            max_mbps=10_000,
            link_delay_loss=False,
            captures=True,
            forked_runs=False,
            parallel_runs=False,
            clock="wall",
            deterministic=False,
            switch_engines=("bmv2",),
            queue_must_exceed_qmax=True,
            queue_disciplines=False,
            several_jobs=False,
        ),
        implementation="emulation.mininet_backend:BMV2",
    )
)
register(
    Backend(
        name="ns3",
        description="the ns-3 simulator (the sim extra)",
        hosts="ns-3 nodes",
        capabilities=Capabilities(
            root=None,
            payloads=("values", "sizes"),
            max_workers=253,
            max_mtu=JUMBO_MTU,
            max_mbps=1_600_000,  # a non-blocking fabric of 100 Gbit/s hosts needs faster fabric links
            link_delay_loss=True,
            captures=False,
            forked_runs=True,
            parallel_runs=True,
            clock="simulated",
            deterministic=True,
            switch_engines=("ns3",),
            queue_must_exceed_qmax=False,
            queue_disciplines=True,
            several_jobs=True,
        ),
        implementation="simulation.ns3.backend:NS3",
    )
)
