"""DS-Sync (divide-and-shuffle) groups: which workers average together in each iteration.

N workers in groups of s (N = G x s). Every iteration each group averages its members' values
(a ring all-reduce inside the group, divided by the group size); the groups change from one
iteration to the next so that after K iterations, with no other update in between, every worker
holds the exact global average. The rule (ours; the paper's own pattern is not public):

  Positions 0..N-1 are written in mixed radix with prime digits, least significant first: the
  primes of s, then the primes of N/s (N = 24, s = 6: radices 2, 3, 2, 2). Round k averages over
  a set of digits: for every prime p dividing s (a_p times in s, b_p times in N) it takes a_p of
  the b_p digits of value p, cyclically (round k takes p-digits k*a_p .. k*a_p + a_p - 1, mod
  b_p). A group is the s positions that agree on every other digit. Round 0 is therefore the
  consecutive blocks of s.

  Exact in K = max over p | s of ceil(b_p / a_p) rounds, the smallest K with N | s^K: averaging
  over a digit set is the projection onto values that do not depend on those digits; these
  projections commute, so K rounds project onto values independent of every digit covered, and
  every digit is covered. No rule with groups of s can do better or reach exactness when
  N does not divide s^K: after K rounds every weight a worker gives another is a multiple of
  1/s^K, and the average needs 1/N.

  So groups of s reach the exact average iff every prime factor of N/s divides s (N = 16, s = 4:
  2 rounds; N = 16, s = 2: 4; N = 24, s = 6: 3; N = 12, s = 4 or N = 6, s = 2: never). For the
  others the primes of N/s that do not divide s ("leftover" digits) get extra rounds of their own,
  packed first-fit into rounds whose group size (product of the round's leftover radices) stays
  <= s where it can (a prime > s gets a round alone); those rounds have groups of a different
  size, which the paper allows ("groups may differ in size", secondary source). Exact in
  K + (leftover rounds); `exact_equal_groups` says which case a plan is.

Topology (leaf-spine and others): positions are ranks in locality order (paths.locality_order:
grouped by edge switch), so round 0 keeps groups under one leaf when s divides the hosts per
leaf, and later rounds vary the high digits, i.e. take workers at the same offset from different
leaves ("columns"). A cross-rack group then has members spread over the leaves, and each step's
cross-rack flows get equal-cost paths chosen by Router.balanced_paths, so a leaf's flows are
spread over its uplinks (at most ceil(flows / spines) per uplink) instead of all on one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import Field

from dlcp.comm.plans.collective import CollectiveEntry, StepPlan, register_collective, spec_for, worker_hosts
from dlcp.comm.plans.paths import PlanError, Router, locality_order, rank_hosts
from dlcp.comm.plans.ring import ring_steps
from dlcp.comm.plans.schedule import Schedule, Transfer, link_conflicts
from dlcp.comm.plans.topology_arg import topology_label
from dlcp.network.topology import TopologySpec
from dlcp.settings import BadValue, Settings
from dlcp.wire.control_frames import PS_RANK


def prime_factors(n: int) -> list[int]:
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    if n > 1:
        out.append(n)
    return out


def rounds_to_average(workers: int, group: int) -> tuple[int, bool]:
    """(rounds our rule needs for the exact average, whether all its groups have `group` members)."""
    plan = dssync_groups(workers, group)
    return plan.period, plan.exact_equal_groups


@dataclass
class DsSyncGroups:
    workers: int
    group: int
    order: tuple[int, ...]  # position -> rank
    radices: tuple[int, ...]  # mixed-radix digits of a position, least significant first
    digit_sets: list[tuple[int, ...]]  # digits each round averages over
    iterations: list[list[list[int]]]  # round -> groups -> ranks (ring order inside the group)
    exact_equal_groups: bool  # every group of every round has `group` members
    exact: bool = True  # one period reaches the exact global average (else it only mixes towards it)
    rule: str = "digits"  # "digits" (the mixed-radix rule) or "grid blocks" (shifted tilings of a torus)

    @property
    def period(self) -> int:
        """Rounds (iterations) after which the pattern repeats: with `exact`, the rounds to the
        exact global average."""
        return len(self.iterations)

    def groups(self, iteration: int) -> list[list[int]]:
        return self.iterations[iteration % self.period]


def dssync_groups(workers: int, group: int, order: Sequence[int] | None = None) -> DsSyncGroups:
    """The groups per iteration for `workers` in groups of `group`; `order` maps positions to
    ranks (default identity; topology_groups passes the locality order)."""
    if not isinstance(workers, int) or workers < 2:
        raise PlanError(f"dssync.workers: need an integer >= 2, got {workers!r}")
    if not isinstance(group, int) or not 2 <= group <= workers or workers % group:
        raise PlanError(f"dssync.group: {group!r} must be an integer >= 2 that divides workers = {workers}")
    order = tuple(range(workers)) if order is None else tuple(order)
    if sorted(order) != list(range(workers)):
        raise PlanError(f"dssync: order must be a permutation of 0..{workers - 1}")
    s_primes = prime_factors(group)
    radices = tuple(s_primes + prime_factors(workers // group))
    digit_sets = []
    shared = sorted(set(s_primes))
    idx = {p: [i for i, d in enumerate(radices) if d == p] for p in shared}
    a = {p: s_primes.count(p) for p in shared}
    for k in range(max(math.ceil(len(idx[p]) / a[p]) for p in shared)):
        digit_sets.append(tuple(sorted(idx[p][(k * a[p] + j) % len(idx[p])] for p in shared for j in range(a[p]))))
    leftover = [i for i, d in enumerate(radices) if group % d]
    for bin_ in _first_fit(sorted(leftover, key=lambda i: -radices[i]), radices, group):
        digit_sets.append(tuple(sorted(bin_)))
    iterations = [_groups(radices, ds, order) for ds in digit_sets]
    return DsSyncGroups(workers, group, order, radices, digit_sets, iterations, not leftover)


def _first_fit(digits: list[int], radices, cap: int) -> list[list[int]]:
    bins: list[list[int]] = []
    for i in digits:
        for b in bins:
            if math.prod(radices[j] for j in b) * radices[i] <= cap:
                b.append(i)
                break
        else:
            bins.append([i])
    return bins


def _groups(radices, digit_set, order) -> list[list[int]]:
    """Positions that agree on every digit outside `digit_set`, as ranks; groups by first member."""
    by_key: dict[tuple, list[int]] = {}
    for pos in range(len(order)):
        digits, x = [], pos
        for r in radices:
            digits.append(x % r)
            x //= r
        key = tuple(d for i, d in enumerate(digits) if i not in digit_set)
        by_key.setdefault(key, []).append(order[pos])
    return sorted(by_key.values(), key=lambda g: g[0])


def topology_groups(spec: TopologySpec, group: int, hosts: list[str] | None = None) -> DsSyncGroups:
    """DS-Sync groups chosen from the topology (positions in locality order: edge switch first).

    Switched fabrics (leaf-spine, star, dumbbell): the digit rule over the locality order, so round
    0 is rack-local and later rounds take one worker per rack. A torus: the digit rule too when
    every one of its rounds is free of shared links (4x4 in groups of 4: rows, then columns);
    otherwise its later rounds would be strided groups crossing shared multi-hop links (8x8 in
    groups of 4), and the groups are grid blocks instead (`grid_tilings`): bottleneck-free in every
    round, which is DS-Sync's point, at the price of exactness where a dimension has more than two
    blocks."""
    hosts = list(hosts or rank_hosts(spec))
    digits = dssync_groups(len(hosts), group, locality_order(spec, hosts))
    if spec.kind != "torus" or len(hosts) != len(spec.hosts) or _bottleneck_free(spec, digits, hosts):
        return digits
    blocks = grid_tilings(spec, group, hosts)
    return blocks if blocks is not None and _bottleneck_free(spec, blocks, hosts) else digits


def _bottleneck_free(spec: TopologySpec, plan: DsSyncGroups, hosts: list[str]) -> bool:
    return all(not link_conflicts(round_schedule(spec, plan, k, hosts), spec) for k in range(plan.period))


def block_shape(rows: int, cols: int, group: int) -> tuple[int, int] | None:
    """The block (rows x cols of the grid) of `group` workers that tiles the grid: it divides both
    dimensions, and a dimension cut into several blocks has blocks at least 2 long (else a shifted
    tiling would never mix along it); the squarest such block, or None."""
    shapes = [
        (br, group // br)
        for br in range(1, group + 1)
        if group % br == 0
        and rows % br == 0
        and cols % (group // br) == 0
        and (br >= 2 or rows == br)
        and (group // br >= 2 or cols == group // br)
    ]
    return min(shapes, key=lambda b: (abs(b[0] - b[1]), b)) if shapes else None


def _block_ring(r0: int, c0: int, br: int, bc: int, rows: int, cols: int) -> list[tuple[int, int]]:
    """The cells of a block in ring order: a snake through its rows (each hop one link); the hop
    back to the first cell runs against the snake's direction, so it shares no directed link."""
    cells = []
    for i in range(br):
        cs = range(bc) if i % 2 == 0 else range(bc - 1, -1, -1)
        cells += [((r0 + i) % rows, (c0 + j) % cols) for j in cs]
    return cells


def grid_tilings(spec: TopologySpec, group: int, hosts: list[str]) -> DsSyncGroups | None:
    """Groups that are blocks of a torus grid [D]: round 0 tiles the grid with `block_shape`
    blocks, round 1 with the same blocks shifted by half a block along every dimension cut into
    several blocks, then again. Each group's ring moves one link per hop, and blocks of a round
    are disjoint, so no link is shared. Exact after the two rounds iff every dimension has at
    most two blocks of even length (8x8 in 2x2 blocks is not: it mixes towards the average,
    like the paper's shuffling, instead of reaching it); `exact` says which, checked on numbers."""
    rows, cols = spec.dims
    shape = block_shape(rows, cols, group)
    if shape is None:
        return None
    br, bc = shape
    rank_at = {}
    for r, h in enumerate(hosts):
        k = int(spec.hosts[h].switch[1:]) - 1  # s(row*cols + col + 1), docs/collectives.md
        rank_at[(k // cols, k % cols)] = r
    shifts = [(0, 0), (br // 2 if rows > br else 0, bc // 2 if cols > bc else 0)]
    iterations = []
    for dr, dc in dict.fromkeys(shifts):
        groups = [
            [rank_at[cell] for cell in _block_ring(r0 + dr, c0 + dc, br, bc, rows, cols)]
            for r0 in range(0, rows, br)
            for c0 in range(0, cols, bc)
        ]
        iterations.append(sorted(groups, key=lambda g: g[0]))
    plan = DsSyncGroups(len(hosts), group, tuple(range(len(hosts))), (), [], iterations, True, True, "grid blocks")
    rng = np.random.default_rng(0)
    values = [rng.normal(size=3) for _ in hosts]
    out = average_rounds(values, plan)
    plan.exact = bool(np.allclose(out, np.mean(values, axis=0)))
    plan.exact_equal_groups = plan.exact
    return plan


def average_rounds(values: list[np.ndarray], plan: DsSyncGroups, rounds: int | None = None) -> list[np.ndarray]:
    """Every worker's values after `rounds` iterations of group averaging (default: one period)."""
    out = [np.array(v, dtype=np.float64) for v in values]
    for k in range(plan.period if rounds is None else rounds):
        for g in plan.groups(k):
            mean = np.mean([out[r] for r in g], axis=0)
            for r in g:
                out[r] = mean.copy()
    return out


def iteration_cost(plan: DsSyncGroups, iteration: int, message_bytes: float, alpha: float, beta: float) -> float:
    """Alpha-beta seconds of one iteration's synchronisation without contention: the groups run
    side by side, each a ring all-reduce of the whole message over its g members,
    2 (g - 1) (alpha + M / g x beta); the largest group sets the time. Reaching the exact average
    costs the sum over one period. (With a topology, alpha_beta_cost(round_schedule(...), spec=...)
    adds the contention of the chosen paths.)"""
    g = max(len(grp) for grp in plan.groups(iteration))
    return 2 * (g - 1) * (alpha + message_bytes / g * beta)


def round_schedule(spec: TopologySpec, plan: DsSyncGroups, iteration: int, hosts: list[str] | None = None) -> Schedule:
    """The ring all-reduces of one iteration's groups, run side by side (sums; divide by the
    group size for the average). Paths: balanced over all groups' flows (the same every step)."""
    hosts = list(hosts or rank_hosts(spec))
    if len(hosts) != plan.workers:
        raise PlanError(f"dssync: plan for {plan.workers} workers, topology has {len(hosts)} ranks")
    rings = [ring_steps(g) for g in plan.groups(iteration)]
    pairs = [(g[i], g[(i + 1) % len(g)]) for g in plan.groups(iteration) for i in range(len(g))]
    path = dict(zip(pairs, Router(spec).balanced_paths((hosts[a], hosts[b]) for a, b in pairs)))
    n_steps = max(len(r) for r in rings)
    steps = [
        [
            Transfer(src, dst, chunk, len(g), op, path[(src, dst)])
            for g, r in zip(plan.groups(iteration), rings)
            if k < len(r)
            for src, dst, chunk, op in r[k]
        ]
        for k in range(n_steps)
    ]
    half = n_steps // 2
    return Schedule("dssync", tuple(hosts), steps, {"reduce_scatter": (0, half), "all_gather": (half, n_steps)})


def plan_json(workers: int, group: int, spec: TopologySpec | None = None) -> dict:
    """What `dlcp schedule --collective dssync --workers N --group s` prints."""
    if spec is None:
        plan = dssync_groups(workers, group)
    else:
        hosts = rank_hosts(spec)
        if len(hosts) != workers:
            raise PlanError(f"dssync.workers: {workers}, but the topology has {len(hosts)} ranks")
        plan = topology_groups(spec, group, hosts)
    return {
        "collective": "dssync",
        "workers": workers,
        "group": group,
        **({"topology": topology_label(spec), "hosts": rank_hosts(spec)} if spec is not None else {}),
        "rule": plan.rule,
        "radices": list(plan.radices),
        "digit_sets": [list(d) for d in plan.digit_sets],
        "exact_equal_groups": plan.exact_equal_groups,
        "rounds_to_average": plan.period if plan.exact else None,
        "period": plan.period,
        "iterations": plan.iterations,
        "steps_per_phase": max(len(g) for it in plan.iterations for g in it) - 1,
    }


class DsSyncRounds(StepPlan):
    """DS-Sync's plan: iteration k runs the group rings of round k mod period."""

    collective = "dssync"

    def __init__(self, pattern: DsSyncGroups, spec: TopologySpec | None = None):
        super().__init__(pattern.workers)
        self.pattern = pattern
        self.spec = spec_for(pattern.workers, spec)
        self.period = pattern.period
        hosts = worker_hosts(self.spec, pattern.workers)
        self._rounds = [round_schedule(self.spec, pattern, k, hosts) for k in range(pattern.period)]
        self._group_of = [{r: len(g) for g in pattern.groups(k) for r in g} for k in range(pattern.period)]

    def schedule(self, iteration: int) -> Schedule:
        return self._rounds[iteration % self.period]

    def groups(self, iteration: int) -> list[list[int]]:
        return self.pattern.groups(iteration)

    def group_size(self, iteration: int, rank: int) -> int:
        return self._group_of[iteration % self.period][rank]


def dssync_rounds(workers: int, group: int, spec: TopologySpec | None = None) -> DsSyncRounds:
    """The plan of `workers` ranks in groups of `group` on `spec` (None: a star)."""
    spec = spec_for(workers, spec)
    return DsSyncRounds(topology_groups(spec, group, rank_hosts(spec)[:workers]), spec)


class DsSyncOptions(Settings):
    group: int = Field(2, ge=2, le=PS_RANK - 1, description="dssync: workers per group (divides workload.workers)")
    average: Literal["parameters", "gradients"] = Field(
        "parameters",
        description="dssync: local SGD step then parameter average in the group (the paper's), or "
        "the group's mean gradient",
    )


def _check(o: DsSyncOptions, scheduler: str, workers: int | None) -> None:
    if o.average == "parameters" and scheduler != "wfbp":
        raise BadValue(
            "scheduler",
            f"{scheduler!r} schedules gradient all-reduces, but dssync.average = "
            "'parameters' averages parameters after the local step: use 'wfbp', or "
            "dssync.average = 'gradients'",
        )
    if workers is not None and workers % o.group:
        raise BadValue("dssync.group", f"{o.group} does not divide workload.workers = {workers}")


register_collective(
    CollectiveEntry(
        name="dssync",
        description="DS-Sync: groups of workers average together, regrouped each iteration until the exact average",
        options=DsSyncOptions,
        plan=lambda o, workers, spec: dssync_rounds(workers, o.group, spec),
        describe=lambda o, workers, spec: plan_json(workers, o.group, spec),
        check=_check,
        summary=lambda d: [
            f"dssync: {d['workers']} workers in groups of {d['group']} ({d.get('rule', 'digits')}): "
            + (
                f"exact average after {d['rounds_to_average']} iterations"
                if d["rounds_to_average"]
                else f"a period of {d['period']} iterations mixes towards the average, never exactly"
            )
            + f"; {d['steps_per_phase']} steps per phase"
        ],
        averages_parameters=lambda o: o.average == "parameters",
        bus_factor=lambda o, workers: 2 * (o.group - 1) / o.group,  # an all-reduce within each group
        resyncs=False,  # replicas differ by design until a period completes
    )
)
