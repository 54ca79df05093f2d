"""2-D (hierarchical) ring all-reduce as a step schedule, and its registration as the collective
`ring2d` (one of MultiTree's baselines [C: farabimahmud/accelerator, `ring2d`]; seeds-brief §8).

The ranks form a grid of R rows x C columns: on a torus or mesh the topology's own grid (rows are
rings of the torus), elsewhere the racks (ranks under one edge switch, paths.locality_order) as
rows when every rack holds the same number, else the squarest R x C with R x C = P. The buffer is
cut into R x C chunks; part c of the row phase is chunks c*R .. c*R + R - 1.

    row reduce-scatter    (C - 1 steps): a ring in every row over the C parts; afterwards the rank
                                         in column i of a row holds part (i + 1) mod C reduced
                                         over its row;
    column reduce-scatter (R - 1 steps): a ring in every column over that part's R chunks;
                                         afterwards each rank holds one chunk reduced over all;
    column all-gather, row all-gather: the same rings backwards in phase order, copying.

2 (R - 1) + 2 (C - 1) steps against the ring's 2 (P - 1); a row step moves M / C, a column step
M / P, so the bandwidth term is the ring's 2 (P - 1) / P x M x beta. A row step's part travels as
its R chunks between the same two ranks (one message each). Paths: balanced per (src, dst) pair.
"""

from __future__ import annotations

import math

from dlcp.comm.plans.collective import CollectiveEntry, FixedSchedule, register_collective, spec_for, worker_hosts
from dlcp.comm.plans.paths import PlanError, Router, locality_order, rank_hosts
from dlcp.comm.plans.schedule import Schedule, Transfer
from dlcp.comm.plans.topology_arg import topology_label
from dlcp.network.topology import TopologySpec


def rank_grid(spec: TopologySpec, hosts: list[str]) -> list[list[int]]:
    """Ranks as rows of the 2-D ring (see the module docstring)."""
    P = len(hosts)
    if spec.kind in ("torus", "mesh") and len(spec.dims) == 2 and spec.dims[0] * spec.dims[1] == P:
        rows, cols = spec.dims
        at = {int(spec.hosts[h].switch[1:]) - 1: r for r, h in enumerate(hosts)}  # s(row*cols + col + 1)
        return [[at[i * cols + j] for j in range(cols)] for i in range(rows)]
    order = locality_order(spec, hosts)
    racks: dict[str, list[int]] = {}
    for r in order:
        racks.setdefault(spec.hosts[hosts[r]].switch, []).append(r)
    sizes = {len(v) for v in racks.values()}
    if len(racks) > 1 and len(sizes) == 1 and sizes.pop() > 1:
        return list(racks.values())
    n_rows = max(d for d in range(1, math.isqrt(P) + 1) if P % d == 0)
    width = P // n_rows
    return [order[i : i + width] for i in range(0, P, width)]


def _ring_phase(lines: list[list[int]], which, op: str) -> list[list[tuple[int, int, list[int], str]]]:
    """Steps of rings over every line at once: (src, dst, chunks, op). which(line, i, s) -> the
    chunks member i sends at step s."""
    n = len(lines[0])
    out = []
    for s in range(n - 1):
        step = []
        for line in lines:
            for i in range(n):
                step.append((line[i], line[(i + 1) % n], which(line, i, s), op))
        out.append(step)
    return out


def ring2d_schedule(spec: TopologySpec, hosts: list[str] | None = None) -> Schedule:
    hosts = list(hosts or rank_hosts(spec))
    P = len(hosts)
    if P < 2:
        raise PlanError(f"ring2d: {P} rank(s); an all-reduce needs at least 2")
    rows = rank_grid(spec, hosts)
    R, C = len(rows), len(rows[0])
    cols = [[rows[i][j] for i in range(R)] for j in range(C)]
    col_of = {r: j for line in rows for j, r in enumerate(line)}
    part = {r: (col_of[r] + 1) % C for r in col_of}  # the part a rank holds after the row phase

    def row_rs(line, i, s):
        return [((i - s) % C) * R + x for x in range(R)]

    def col_rs(line, i, s):
        return [part[line[i]] * R + (i - s) % R]

    def col_ag(line, i, s):
        return [part[line[i]] * R + (i + 1 - s) % R]

    def row_ag(line, i, s):
        return [((i + 1 - s) % C) * R + x for x in range(R)]

    raw = (
        (_ring_phase(rows, row_rs, "reduce") if C > 1 else [])
        + (_ring_phase(cols, col_rs, "reduce") if R > 1 else [])
        + (_ring_phase(cols, col_ag, "copy") if R > 1 else [])
        + (_ring_phase(rows, row_ag, "copy") if C > 1 else [])
    )
    pairs = list(dict.fromkeys((a, b) for step in raw for a, b, _, _ in step))
    path = dict(zip(pairs, Router(spec).balanced_paths((hosts[a], hosts[b]) for a, b in pairs)))
    steps = [[Transfer(a, b, c, P, op, path[(a, b)]) for a, b, chunks, op in step for c in chunks] for step in raw]
    half = len(steps) // 2
    return Schedule("ring2d", tuple(hosts), steps, {"reduce_scatter": (0, half), "all_gather": (half, len(steps))})


def ring2d_plan(workers: int, spec: TopologySpec | None = None) -> FixedSchedule:
    spec = spec_for(workers, spec)
    return FixedSchedule("ring2d", ring2d_schedule(spec, worker_hosts(spec, workers)))


def plan_json(spec: TopologySpec, hosts: list[str] | None = None) -> dict:
    """What `dlcp schedule --collective ring2d` prints: the grid of ranks and the steps per phase."""
    hosts = list(hosts or rank_hosts(spec))
    sched = ring2d_schedule(spec, hosts)
    return {
        "collective": "ring2d",
        "topology": topology_label(spec),
        "hosts": hosts,
        "rows": rank_grid(spec, hosts),
        "steps_per_phase": sched.steps_per_phase,
    }


register_collective(
    CollectiveEntry(
        name="ring2d",
        description="2-D ring: reduce-scatter along rows then columns, all-gather back (hierarchical ring)",
        plan=lambda options, workers, spec: ring2d_plan(workers, spec),
        describe=lambda options, workers, spec: plan_json(spec_for(workers, spec)),
    )
)
