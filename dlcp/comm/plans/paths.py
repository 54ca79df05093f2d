"""Paths of transfers over a TopologySpec, and what one step of a plan may put on a link.

A path is the tuple of nodes a message crosses, host to host ("h1", "s1", "s2", "h2"); its links
are the directed node pairs along it. Paths follow the routes the runtime installs
(`TopologySpec.routes()`: every equal-cost shortest next hop), so a plan only uses paths the
switches can forward on. Where several equal-cost paths exist, the plan says which one it assumes.

`spray_shares` is the other reading of a flow: spread over every equal-cost member at every
switch, as the switches' spray modes do, whatever path the plan named.

Link capacity per step: a step moves one chunk over a fabric (switch-to-switch) link. A link of
rate r carries floor(r / unit) chunks per step and direction, where unit is the slowest
switch-to-switch rate (star: the slowest host link). With equal rates every link carries one
chunk per step; a host link at 4x the fabric rate carries four, which is how the multi-port
network interface of MultiTree's direct networks is modelled (docs/collectives.md).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from itertools import pairwise

from dlcp.network.topology import TopologySpec

Link = tuple[str, str]  # directed: (from node, to node)


class PlanError(ValueError):
    """A plan that cannot be built or does not fit its topology; one line naming the problem."""


def links_of(path: tuple[str, ...]) -> tuple[Link, ...]:
    return tuple(pairwise(path))


def natural(name: str):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def rank_hosts(spec: TopologySpec) -> list[str]:
    """Host of each rank: the workers by rank when roles are assigned, else every host in name order."""
    workers = spec.by_role("worker")
    if workers:
        return [h.name for h in workers]
    return sorted(spec.hosts, key=natural)


def locality_order(spec: TopologySpec, hosts: list[str]) -> list[int]:
    """Ranks grouped by the switch their host hangs off (switches in name order, ranks ascending
    within), so consecutive positions share an edge switch where they can."""
    return sorted(range(len(hosts)), key=lambda r: (natural(spec.hosts[hosts[r]].switch), r))


class Router:
    """Equal-cost paths and per-step link capacities of one topology."""

    def __init__(self, spec: TopologySpec):
        self.spec = spec
        self._routes = spec.routes()
        self._peer = {s.name: {p.port: p.peer for p in s.ports.values()} for s in spec.switches.values()}
        for sw, ports in self._peer.items():
            dup = [n for n, k in Counter(ports.values()).items() if k > 1]
            if dup:  # node pairs would not name links uniquely
                raise PlanError(f"topology: {sw} has parallel links to {dup[0]}; plans need one link per node pair")
        rates = {}
        for a, _, b, _, rate in spec.links():
            rates[(a, b)] = rates[(b, a)] = float(rate)
        fabric = [r for (a, b), r in rates.items() if a in spec.switches and b in spec.switches]
        unit = min(fabric or rates.values())
        self.capacity: dict[Link, int] = {ln: max(1, int(r / unit + 1e-9)) for ln, r in rates.items()}
        self._hops: dict[str, dict[str, int]] = {}
        self._spray: dict[tuple[str, str], dict[Link, float]] = {}

    def next_hops(self, node: str, dst: str) -> list[str]:
        """Where `node` forwards a packet for host `dst`, in route member order."""
        if node in self.spec.hosts:
            return [self.spec.hosts[node].switch]
        return [self._peer[node][p] for p in self._routes[node].get(dst, ())]

    def hops(self, src: str, dst: str) -> int:
        """Links on a shortest path from host src to host dst."""
        d = self._hops.setdefault(dst, {})
        if src not in d:
            n, node = 0, src
            while node != dst:
                nxt = self.next_hops(node, dst)
                if not nxt:
                    raise PlanError(f"topology: no route from {src} to {dst}")
                node, n = nxt[0], n + 1
            d[src] = n
        return d[src]

    def paths(self, src: str, dst: str) -> list[tuple[str, ...]]:
        """Every equal-cost path from host src to host dst; the first takes member 0 at every hop."""
        if src == dst:
            raise PlanError(f"a transfer from {src} to itself has no path")
        out: list[tuple[str, ...]] = []

        def walk(path):
            if path[-1] == dst:
                out.append(tuple(path))
                return
            nxt = self.next_hops(path[-1], dst)
            if not nxt:
                raise PlanError(f"topology: no route from {src} to {dst}")
            for n in nxt:
                walk(path + [n])

        walk([src])
        return out

    def free_path(self, src: str, dst: str, avail: dict[Link, int]) -> tuple[str, ...] | None:
        """The first equal-cost path (member order) whose every link has capacity left in `avail`."""

        def walk(path):
            node = path[-1]
            if node == dst:
                return tuple(path)
            for n in self.next_hops(node, dst):
                if avail.get((node, n), 0) > 0:
                    found = walk(path + [n])
                    if found:
                        return found
            return None

        return walk([src])

    def spray_shares(self, src: str, dst: str) -> dict[Link, float]:
        """Fraction of a src -> dst flow on each link when every switch splits it equally over
        its equal-cost members (per-packet spraying, in the fluid limit)."""
        if (src, dst) in self._spray:
            return self._spray[(src, dst)]
        share: dict[Link, float] = {}
        frontier = {src: 1.0}
        while frontier:
            nxt: dict[str, float] = {}
            for node, f in frontier.items():
                if node == dst:
                    continue
                hops = self.next_hops(node, dst)
                if not hops:
                    raise PlanError(f"topology: no route from {src} to {dst}")
                for n in hops:
                    share[(node, n)] = share.get((node, n), 0.0) + f / len(hops)
                    nxt[n] = nxt.get(n, 0.0) + f / len(hops)
            frontier = nxt
        self._spray[(src, dst)] = share
        return share

    def is_route_path(self, path: tuple[str, ...]) -> bool:
        """Whether `path` goes host to host along the routes toward its last node."""
        if len(path) < 2 or path[0] not in self.spec.hosts or path[-1] not in self.spec.hosts:
            return False
        return all(b in self.next_hops(a, path[-1]) for a, b in links_of(path))

    def balanced_paths(self, pairs: Iterable[tuple[str, str]]) -> list[tuple[str, ...]]:
        """One equal-cost path per (src, dst) pair of one step, chosen greedily in the given order
        so that the most loaded link (chunks / capacity) stays as low as possible, then the total;
        ties go to member order. This is the path choice assumed for plans that do not pick their
        own (ring, DS-Sync): the best a pinned path per flow can do, close to what spraying achieves."""
        load: Counter = Counter()
        out = []
        for src, dst in pairs:
            best, best_key = None, None
            for p in self.paths(src, dst):
                lk = links_of(p)
                key = (
                    max((load[ln] + 1) / self.capacity[ln] for ln in lk),
                    sum((load[ln] + 1) / self.capacity[ln] for ln in lk),
                )
                if best_key is None or key < best_key:
                    best, best_key = p, key
            assert best is not None  # paths() raises PlanError rather than return none
            for ln in links_of(best):
                load[ln] += 1
            out.append(best)
        return out
