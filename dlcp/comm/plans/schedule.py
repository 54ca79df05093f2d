"""A collective as data: a list of steps, each a list of transfers that run at the same time.

A transfer moves one chunk of a rank's buffer (chunk `chunk` of `chunks` equal cuts, the cut the
ring uses: np.linspace bounds) from rank `src` to rank `dst` along `path` (host-to-host nodes).
`reduce` adds what arrives to the receiver's chunk, `copy` overwrites it. Every transfer of a step
reads the sender's buffer as it was when the step began (lockstep, as MultiTree's NI or a per-step
barrier enforces). `link_conflicts` lists the (step, directed link) pairs that carry more chunks
than the link's capacity (paths.Router: one chunk per step on equal-rate links); `alpha_beta_cost`
prices a schedule. execute.py runs one on numbers.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from dlcp.comm.plans.paths import Link, PlanError, Router, links_of
from dlcp.network.topology import TopologySpec

OPS = ("reduce", "copy")


@dataclass(frozen=True)
class Transfer:
    src: int  # rank
    dst: int
    chunk: int
    chunks: int  # the buffer is cut into this many chunks
    op: str  # "reduce" | "copy"
    path: tuple[str, ...]  # host, switches..., host

    @property
    def links(self) -> tuple[Link, ...]:
        return links_of(self.path)

    def to_json(self) -> dict:
        return {
            "src": self.src,
            "dst": self.dst,
            "chunk": [self.chunk, self.chunks],
            "op": self.op,
            "path": list(self.path),
        }


@dataclass
class Schedule:
    collective: str
    hosts: tuple[str, ...]  # host of each rank
    steps: list[list[Transfer]]
    phases: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> [first step, end step)

    @property
    def ranks(self) -> int:
        return len(self.hosts)

    @property
    def steps_per_phase(self) -> int:
        return max((b - a for a, b in self.phases.values()), default=len(self.steps))

    def to_json(self) -> dict:
        return {
            "collective": self.collective,
            "hosts": list(self.hosts),
            "phases": {k: list(v) for k, v in self.phases.items()},
            "steps_per_phase": self.steps_per_phase,
            "steps": [[t.to_json() for t in step] for step in self.steps],
        }


def chunk_bounds(n_values: int, chunks: int) -> np.ndarray:
    """Value boundaries of `chunks` equal cuts of n values (dlcp.comm.transport_communicator.RingAllReduce's cut)."""
    return np.linspace(0, n_values, chunks + 1).astype(np.int64)


def check_paths(schedule: Schedule, spec: TopologySpec, router: Router | None = None) -> None:
    """Raise PlanError naming the first transfer whose path is not a routed path between its ranks."""
    router = router or Router(spec)
    for s, step in enumerate(schedule.steps):
        for t in step:
            where = f"{schedule.collective} step {s}: transfer {t.src}->{t.dst} chunk {t.chunk}/{t.chunks}"
            if t.op not in OPS:
                raise PlanError(f"{where}: op {t.op!r} is not one of {', '.join(OPS)}")
            if not (0 <= t.src < schedule.ranks and 0 <= t.dst < schedule.ranks and 0 <= t.chunk < t.chunks):
                raise PlanError(f"{where}: rank or chunk out of range")
            if (t.path[:1], t.path[-1:]) != ((schedule.hosts[t.src],), (schedule.hosts[t.dst],)):
                raise PlanError(
                    f"{where}: path {'-'.join(t.path)} does not join {schedule.hosts[t.src]} "
                    f"and {schedule.hosts[t.dst]}"
                )
            if not router.is_route_path(t.path):
                raise PlanError(f"{where}: path {'-'.join(t.path)} is not an equal-cost route of the topology")


def link_loads(schedule: Schedule) -> list[Counter]:
    """Chunks each directed link carries, per step."""
    return [Counter(ln for t in step for ln in t.links) for step in schedule.steps]


def spray_loads(schedule: Schedule, router: Router) -> list[dict[Link, float]]:
    """Chunks each directed link carries per step when switches spray every transfer over all its
    equal-cost members (fractions), instead of following the transfer's own path."""
    out = []
    for step in schedule.steps:
        load: dict[Link, float] = {}  # fractions: not a Counter (whose counts are int)
        for t in step:
            for ln, f in router.spray_shares(t.path[0], t.path[-1]).items():
                load[ln] = load.get(ln, 0.0) + f
        out.append(load)
    return out


def link_conflicts(schedule: Schedule, spec: TopologySpec, spray: bool = False) -> list[tuple[int, Link, float, int]]:
    """Every (step, directed link, chunks carried, capacity) where a link carries more chunks in
    one step than its capacity; host-to-switch and switch-to-switch links in both directions.
    Paths are checked against the topology's routes first (PlanError if one is not routed).

    spray=False: each transfer on its own path (the plan's member choice, pinned). spray=True:
    each transfer split equally over the equal-cost members at every switch (spray modes, fluid
    limit), whatever path it names; loads may then be fractions."""
    router = Router(spec)
    check_paths(schedule, spec, router)
    loads: Sequence[Mapping[Link, float]] = spray_loads(schedule, router) if spray else link_loads(schedule)
    out: list[tuple[int, Link, float, int]] = []
    for s, load in enumerate(loads):
        for ln, n in sorted(load.items()):
            if n > router.capacity[ln] + 1e-9:
                out.append((s, ln, n, router.capacity[ln]))
    return out


def alpha_beta_cost(
    schedule: Schedule, message_bytes: float, alpha: float, beta: float, spec: TopologySpec | None = None
) -> float:
    """Seconds for one collective on a message of `message_bytes` under the alpha-beta model.

    Each step costs alpha (start-up) plus its largest chunk's bytes times beta (seconds per byte on
    a fabric link): for ring and MultiTree that is 2 x steps_per_phase x (alpha + M/P x beta).
    With `spec`, contention counts: a step lasts alpha + max over links of
    (bytes the link carries in the step / its capacity) x beta, so a step that puts two chunks on
    one link takes twice the transfer time (the fluid share two flows get on that link).
    """
    router = Router(spec) if spec is not None else None
    total = 0.0
    for step in schedule.steps:
        if not step:
            continue
        size = {t: message_bytes / t.chunks for t in step}
        if router is None:
            worst = max(size.values())
        else:
            per_link: dict[Link, float] = {}
            for t in step:
                for ln in t.links:
                    per_link[ln] = per_link.get(ln, 0.0) + size[t]
            worst = max(b / router.capacity[ln] for ln, b in per_link.items())
        total += alpha + worst * beta
    return total
