"""Topologies named on a command line, for plans: "torus:4x4", "mesh:4x4", "star:8",
"leaf_spine:2x2x4" (spines x leaves x hosts per leaf), "dumbbell:3x3" (left x right).

Every host becomes a worker, placed as experiments place them (topospec.assign_roles: leaf-spine
ranks interleaved across leaves). Link rates: `fabric_mbps` between switches; host links at
`host_mbps`, which defaults to the fabric rate except on torus and mesh, where it defaults to
fabric rate x the switch degree (4 on a 2-D torus): the multi-port network interface of
MultiTree's direct networks, where a node can feed every router port in the same step.
"""

from __future__ import annotations

import re

from dlcp.comm.plans.paths import PlanError
from dlcp.network import topology as topospec
from dlcp.network.topology import TopologySpec

SHAPES = {"torus": 2, "mesh": 2, "star": 1, "leaf_spine": 3, "dumbbell": 2}


def parse_topology(text: str, fabric_mbps: float = 50.0, host_mbps: float | None = None) -> TopologySpec:
    kind, _, shape = text.partition(":")
    if kind not in SHAPES:
        raise PlanError(f"--topology: unknown kind {kind!r} in {text!r} (one of {', '.join(SHAPES)})")
    if not re.fullmatch(r"\d+(x\d+)*", shape) or shape.count("x") + 1 != SHAPES[kind]:
        example = "x".join(["4", "4", "4"][: SHAPES[kind]])
        raise PlanError(f"--topology: {kind} needs {SHAPES[kind]} number(s) like {kind}:{example}, got {text!r}")
    n = [int(x) for x in shape.split("x")]
    if min(n) < 1:
        raise PlanError(f"--topology: sizes must be >= 1, got {text!r}")
    if kind in ("torus", "mesh"):
        # the largest switch degree: 2 neighbours per dimension of 3 or more, 1 in a 2-wide one
        degree = sum(2 if d > 2 else d - 1 for d in n)
        spec = getattr(topospec, kind)((n[0], n[1]), host_mbps or fabric_mbps * max(1, degree), fabric_mbps)
    elif kind == "star":
        spec = topospec.star(n[0], host_mbps or fabric_mbps)
    elif kind == "leaf_spine":
        spec = topospec.leaf_spine(n[0], n[1], n[2], host_mbps or fabric_mbps, fabric_mbps)
    else:
        spec = topospec.dumbbell(n[0], n[1], host_mbps or fabric_mbps, fabric_mbps)
    if len(spec.hosts) < 2:
        raise PlanError(f"--topology: {text!r} has {len(spec.hosts)} host(s); a collective needs 2")
    topospec.assign_roles(spec, len(spec.hosts), False, [])
    return spec


def topology_label(spec: TopologySpec) -> str:
    """plan_json's `topology` field: "torus:4x4" for grids, the kind alone otherwise."""
    return spec.kind + (":" + "x".join(map(str, spec.dims)) if spec.dims else "")
