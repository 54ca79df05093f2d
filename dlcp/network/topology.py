"""Topologies as data: hosts, switches, numbered ports, link rates, roles and equal-cost routes.

Pure graph code (no Mininet): `emulation/network.py` turns a TopologySpec into a Mininet
network, the runtime generator turns its routes into switch table entries, and reports read it
back from `topology.json`. Names: hosts hN, switches sN, switch port K is interface sN-ethK.

- star: one switch s1, hosts h1..hN (the PS incast case);
- dumbbell: s1 - s2, hosts_left on s1, hosts_right on s2 (one shared bottleneck link);
- leaf_spine: spines s1..sK, leaves s(K+1)..s(K+L), hosts_per_leaf hosts under each leaf; every
  leaf links to every spine (the multi-path case for load balancing).
- torus / mesh (dims rows x cols): one switch per grid point, s1..sN in row-major order, each with
  one host (hK on port 1 of sK), switches linked to their grid neighbours; the torus wraps around.
  These are the multi-port direct networks of MultiTree (docs/collectives.md).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from dlcp.network import switch_runtime as rt
from dlcp.queueing.settings import QueueingSettings
from dlcp.settings import ConfigError
from dlcp.wire.tagging import Policy


@dataclass
class Port:
    port: int
    intf: str
    peer: str  # node on the other end
    peer_port: int  # its port number (hosts: 0, interface hN-eth0)
    rate_mbps: float


@dataclass
class Host:
    name: str
    ip: str
    mac: str
    switch: str
    switch_port: int
    rate_mbps: float
    role: str = "idle"  # worker | ps | background | idle
    rank: int = -1  # worker rank (within its job)
    job: int = 0  # its job's place in [[jobs]] + 1 (the job id on the wire); 0: no job, or no [[jobs]]


@dataclass
class Switch:
    name: str
    device_id: int
    ports: dict[int, Port] = field(default_factory=dict)


@dataclass
class TopologySpec:
    kind: str
    hosts: dict[str, Host] = field(default_factory=dict)
    switches: dict[str, Switch] = field(default_factory=dict)
    background_sources: list[str] = field(default_factory=list)  # host of each [[background]] entry
    dims: tuple[int, ...] = ()  # torus / mesh: (rows, cols)
    jobs: int = 0  # jobs placed from [[jobs]] (0: the experiment's one [workload])

    # --- building ---
    def add_switch(self) -> Switch:
        n = len(self.switches) + 1
        sw = Switch(f"s{n}", device_id=n)
        self.switches[sw.name] = sw
        return sw

    def add_host(self, sw: Switch, rate_mbps: float) -> Host:
        n = len(self.hosts) + 1
        port = len(sw.ports) + 1
        h = Host(
            f"h{n}",
            ip=f"10.0.0.{n}",
            mac=f"00:00:00:00:00:{n:02x}",
            switch=sw.name,
            switch_port=port,
            rate_mbps=rate_mbps,
        )
        self.hosts[h.name] = h
        sw.ports[port] = Port(port, f"{sw.name}-eth{port}", h.name, 0, rate_mbps)
        return h

    def link_switches(self, a: Switch, b: Switch, rate_mbps: float) -> None:
        pa, pb = len(a.ports) + 1, len(b.ports) + 1
        a.ports[pa] = Port(pa, f"{a.name}-eth{pa}", b.name, pb, rate_mbps)
        b.ports[pb] = Port(pb, f"{b.name}-eth{pb}", a.name, pa, rate_mbps)

    # --- queries ---
    def routes(self) -> dict[str, dict[str, tuple[int, ...]]]:
        """switch -> host -> its equal-cost egress ports toward that host, in member order: the
        routes `runtimes()` installs (dlcp.runtime.switch_topos), for planners that follow paths."""
        hosts = [rt.Host(h.name, h.ip, h.mac) for h in self.hosts.values()]
        links = [rt.Link(a, pa, b, pb) for a, pa, b, pb, _ in self.links()]
        by_ip = {h.ip: h.name for h in self.hosts.values()}
        out = {}
        for topo in rt.switch_topos(hosts, {s.name: s.device_id for s in self.switches.values()}, links):
            out[topo.name] = {by_ip[r.prefix.split("/")[0]]: r.ports for r in topo.routes}
        return out

    def links(self) -> list[tuple[str, int, str, int, float]]:
        """Every link once: (node_a, port_a, node_b, port_b, rate_mbps); hosts use port 0."""
        out = []
        for sw in self.switches.values():
            for p in sw.ports.values():
                if p.peer in self.hosts or (sw.name, p.port) < (p.peer, p.peer_port):
                    out.append((sw.name, p.port, p.peer, p.peer_port, p.rate_mbps))
        return out

    def by_role(self, role: str, job: int | None = None) -> list[Host]:
        """Hosts of `role` by rank (of job `job` only, when given: 1.. with [[jobs]])."""
        hs = [h for h in self.hosts.values() if h.role == role and (job is None or h.job == job)]
        return sorted(hs, key=lambda h: (h.job, h.rank, int(h.name[1:])))

    def job_view(self, job: int) -> TopologySpec:
        """This topology with job `job`'s workers and PS as the only ones (the others' hosts idle):
        what that job's collectives plan on and its agents check their placement against."""
        view = replace(self, hosts={n: replace(h) for n, h in self.hosts.items()}, background_sources=[], jobs=0)
        for h in view.hosts.values():
            if h.role in ("worker", "ps") and h.job != job:
                h.role, h.rank = "idle", -1
            if h.role in ("worker", "ps"):
                h.job = 0
            elif h.role == "background":
                h.role = "idle"
        return view

    def host_named(self, ref: str) -> Host:
        """A host by name ('h3') or role reference ('ps', 'worker2'; with [[jobs]] the first job's,
        or another's as 'job2.worker2', 'job2.ps')."""
        if ref in self.hosts:
            return self.hosts[ref]
        job, role = 1 if self.jobs else 0, ref
        if ref.startswith("job") and "." in ref and ref[3:].split(".", 1)[0].isdigit():
            job, role = int(ref[3:].split(".", 1)[0]), ref.split(".", 1)[1]
        if role == "ps" and self.by_role("ps", job):
            return self.by_role("ps", job)[0]
        if role.startswith("worker") and role[6:].isdigit():
            for h in self.by_role("worker", job):
                if h.rank == int(role[6:]):
                    return h
        raise KeyError(ref)

    def runtimes(self, cfg: dict) -> dict[str, dict]:
        """Each switch's runtime file content (docs/pipeline.md) for the resolved experiment config:
        routes over all equal-cost shortest paths (dlcp.runtime.switch_topos), the policy's
        classification, load balancing and thresholds, the links' queue, delay and loss, and the
        ports' queue discipline (`[switch]`)."""
        links_cfg, d = cfg["links"], cfg["dlcp"]
        hosts = [rt.Host(h.name, h.ip, h.mac) for h in self.hosts.values()]
        links = [
            rt.Link(a, pa, b, pb, rate_mbps=float(rate), queue_depth_pkts=links_cfg["queue_pkts"])
            for a, pa, b, pb, rate in self.links()
        ]
        switch_cfg = rt.SwitchConfig(
            **{k: d[k] for k in rt.SwitchSettings.model_fields},
            policy=switch_policy(cfg),
            target=cfg["backend"],
            queueing=QueueingSettings(**(cfg.get("switch") or {})),
        )
        out = {}
        for topo in rt.switch_topos(hosts, {s.name: s.device_id for s in self.switches.values()}, links):
            ports = tuple(replace(p, delay_us=links_cfg["delay_us"], loss=float(links_cfg["loss"])) for p in topo.ports)
            out[topo.name] = rt.runtime_for(replace(topo, ports=ports), switch_cfg)
        return out

    def to_json(self) -> dict:
        """topology.json (docs/runs.md); a host's `job` and the `jobs` count only with [[jobs]]."""
        hosts = [asdict(h) for h in self.hosts.values()]
        if not self.jobs:
            for h in hosts:
                del h["job"]
        return {
            "kind": self.kind,
            **({"dims": list(self.dims)} if self.dims else {}),
            **({"jobs": self.jobs} if self.jobs else {}),
            "background_sources": self.background_sources,
            "hosts": hosts,
            "switches": [
                {"name": s.name, "device_id": s.device_id, "ports": [asdict(p) for p in s.ports.values()]}
                for s in self.switches.values()
            ],
            "links": [dict(zip(("a", "a_port", "b", "b_port", "rate_mbps"), link)) for link in self.links()],
        }


def switch_policy(cfg: dict) -> Policy:
    """The tagging the switches are set up for (their classification: none for fifo): the
    experiment's `dlcp.policy`; with [[jobs]], fifo only while no job needs queues, i.e. every job
    tags fifo and all in the same band (`dlcp.queues`: then every data packet takes one queue
    anyway); else the first job's policy that is not fifo, or `layer` when only the bands differ."""
    jobs = cfg.get("jobs") or []
    if not jobs:
        return cfg["dlcp"]["policy"]
    policies = [j["dlcp"]["policy"] for j in jobs]
    tagged = [p for p in policies if p != "fifo"]
    if tagged:
        return tagged[0]
    return "layer" if len({tuple(j["dlcp"]["queues"]) for j in jobs}) > 1 else "fifo"


def star(hosts: int, host_mbps: float) -> TopologySpec:
    t = TopologySpec("star")
    s1 = t.add_switch()
    for _ in range(hosts):
        t.add_host(s1, host_mbps)
    return t


def dumbbell(left: int, right: int, host_mbps: float, fabric_mbps: float) -> TopologySpec:
    t = TopologySpec("dumbbell")
    s1, s2 = t.add_switch(), t.add_switch()
    t.link_switches(s1, s2, fabric_mbps)
    for _ in range(left):
        t.add_host(s1, host_mbps)
    for _ in range(right):
        t.add_host(s2, host_mbps)
    return t


def leaf_spine(spines: int, leaves: int, hosts_per_leaf: int, host_mbps: float, fabric_mbps: float) -> TopologySpec:
    t = TopologySpec("leaf_spine")
    spine_sw = [t.add_switch() for _ in range(spines)]
    leaf_sw = [t.add_switch() for _ in range(leaves)]
    for leaf in leaf_sw:  # uplinks first: leaf ports 1..spines face the spines
        for spine in spine_sw:
            t.link_switches(leaf, spine, fabric_mbps)
    for leaf in leaf_sw:
        for _ in range(hosts_per_leaf):
            t.add_host(leaf, host_mbps)
    return t


def torus(dims: tuple[int, int], host_mbps: float, fabric_mbps: float) -> TopologySpec:
    """A 2-D torus of rows x cols switches, one host each; see `_grid`."""
    return _grid("torus", dims, True, host_mbps, fabric_mbps)


def mesh(dims: tuple[int, int], host_mbps: float, fabric_mbps: float) -> TopologySpec:
    """A 2-D mesh of rows x cols switches, one host each; see `_grid`."""
    return _grid("mesh", dims, False, host_mbps, fabric_mbps)


def _grid(kind: str, dims, wrap: bool, host_mbps: float, fabric_mbps: float) -> TopologySpec:
    """Switch of (row, col) is s(row*cols + col + 1), its host h(same number) on port 1; then the
    links, row-major, each switch to its east and south neighbour (ports numbered in that order).

    Wrap-around links exist only in dimensions of 3 or more: in a 2-wide dimension the +1 and -1
    neighbours are the same switch, and a second parallel link would make a multigraph that the
    routes (one next hop per peer) and the planners' link names (node pairs) cannot tell apart.
    So a torus dimension of 2 is a mesh dimension of 2, and a dimension of 1 has no links at all.
    """
    if (
        not isinstance(dims, (tuple, list))
        or len(dims) != 2
        or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in dims)
    ):
        raise ConfigError(f"topology.dims: {kind} needs two integer dimensions >= 1, got {dims!r}")
    rows, cols = dims
    if not 2 <= rows * cols <= 254:  # hosts are 10.0.0.1 .. 10.0.0.254
        raise ConfigError(f"topology.dims: {kind} {rows}x{cols} needs 2..254 switches, has {rows * cols}")
    t = TopologySpec(kind, dims=(rows, cols))
    sw = [t.add_switch() for _ in range(rows * cols)]
    for s in sw:
        t.add_host(s, host_mbps)
    for r in range(rows):
        for c in range(cols):
            here = sw[r * cols + c]
            if c + 1 < cols or (wrap and cols > 2):
                t.link_switches(here, sw[r * cols + (c + 1) % cols], fabric_mbps)
            if r + 1 < rows or (wrap and rows > 2):
                t.link_switches(here, sw[((r + 1) % rows) * cols + c], fabric_mbps)
    return t


def from_config(cfg: dict) -> TopologySpec:
    """The topology of a resolved experiment config, with roles assigned."""
    t, links = cfg["topology"], cfg["links"]
    if t["kind"] == "star":
        spec = star(t["hosts"], links["host_mbps"])
    elif t["kind"] == "dumbbell":
        spec = dumbbell(t["hosts_left"], t["hosts_right"], links["host_mbps"], links["fabric_mbps"])
    elif t["kind"] in ("torus", "mesh"):
        spec = _grid(t["kind"], tuple(t["dims"]), t["kind"] == "torus", links["host_mbps"], links["fabric_mbps"])
    else:
        spec = leaf_spine(t["spines"], t["leaves"], t["hosts_per_leaf"], links["host_mbps"], links["fabric_mbps"])
    jobs = cfg.get("jobs") or []
    if jobs:
        placement = [(j["workload"]["workers"], j["workload"]["mode"] == "ps") for j in jobs]
        assign_job_roles(spec, placement, cfg["background"])
    else:
        assign_roles(spec, cfg["workload"]["workers"], cfg["workload"]["mode"] == "ps", cfg["background"])
    check_pcap_ports(spec, cfg.get("output", {}).get("pcap_ports", []))  # agents rebuild it without [output]
    return spec


def check_pcap_ports(spec: TopologySpec, ports: list[str]) -> None:
    """Every `output.pcap_ports` entry is a port of this topology (sN-ethK); ConfigError naming the
    first that is not, and what the topology has instead."""
    for entry in ports:
        sw, sep, _ = entry.partition("-eth")
        if sep and sw in spec.switches and entry in {p.intf for p in spec.switches[sw].ports.values()}:
            continue
        if sep and sw in spec.switches:
            have = f"{sw} has ports {sw}-eth1..{sw}-eth{len(spec.switches[sw].ports)}"
        elif sep:
            have = f"no switch {sw} (the topology has {_span(list(spec.switches))})"
        else:
            have = "not a switch port (sN-ethK, e.g. 's1-eth1')"
        raise ConfigError(f"output.pcap_ports: {entry!r}: {have}", "output.pcap_ports", have)


def _span(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{names[0]}..{names[-1]}"


def _placement_order(spec: TopologySpec) -> list[Host]:
    """Hosts interleaved across edge switches, so consecutive workers sit under different switches
    and their traffic crosses the fabric (leaf_spine); on a dumbbell, left side first."""
    if spec.kind == "dumbbell":
        return list(spec.hosts.values())
    by_switch: dict[str, list[Host]] = {}
    for h in spec.hosts.values():
        by_switch.setdefault(h.switch, []).append(h)
    columns = list(by_switch.values())
    return [col[i] for i in range(max(map(len, columns))) for col in columns if i < len(col)]


def assign_roles(spec: TopologySpec, workers: int, with_ps: bool, background: list[dict]) -> None:
    """Workers first (ranks 0..), then the PS, then background sources named or taken in order.

    Dumbbell: workers on the left, PS on the far right, so pushes cross the bottleneck link.
    """
    order = _placement_order(spec)
    if spec.kind == "dumbbell" and with_ps:
        ps = order.pop()  # the last right-hand host
        ps.role = "ps"
    for rank, h in enumerate(order[:workers]):
        h.role, h.rank = "worker", rank
    if with_ps and not spec.by_role("ps"):
        order[workers].role = "ps"
    place_background(spec, order, background)


def assign_job_roles(spec: TopologySpec, jobs: list[tuple[int, bool]], background: list[dict]) -> None:
    """Several jobs ((workers, with a PS) each, in [[jobs]] order): each job's workers take the next
    free hosts in placement order (interleaved across edge switches, as one job's are), then its PS
    the next one (on a dumbbell the far right-hand hosts, from the right); then the background
    sources as for one job. So every job spreads over the edge switches and shares the fabric with
    the others."""
    order = _placement_order(spec)
    spec.jobs = len(jobs)
    right = list(reversed(order)) if spec.kind == "dumbbell" else []
    for job, (workers, with_ps) in enumerate(jobs, start=1):
        if with_ps and right:
            ps = next(h for h in right if h.role == "idle")
            ps.role, ps.job = "ps", job
        free = [h for h in order if h.role == "idle"]
        for rank, h in enumerate(free[:workers]):
            h.role, h.rank, h.job = "worker", rank, job
        if with_ps and not spec.by_role("ps", job):
            ps = next(h for h in order if h.role == "idle")
            ps.role, ps.job = "ps", job
    place_background(spec, order, background)


def place_background(spec: TopologySpec, order: list[Host], background: list[dict]) -> None:
    """Each [[background]] entry's source (named, or the next free host) and its destination."""
    for i, bg in enumerate(background):
        if bg["src"]:
            if bg["src"] not in spec.hosts:
                raise ConfigError(f"background[{i}].src: no host {bg['src']!r} in the topology")
            src = spec.hosts[bg["src"]]
        else:
            free = [h for h in order if h.role == "idle"]
            if not free:
                raise ConfigError(
                    f"background[{i}].src: no free host left for background traffic "
                    f"(topology has {len(spec.hosts)} hosts)"
                )
            src = free[0]
        if src.role not in ("idle", "background"):
            raise ConfigError(f"background[{i}].src: {src.name} is already a {src.role}")
        src.role = "background"
        spec.background_sources.append(src.name)
        try:
            dst = spec.host_named(bg["dst"])
        except KeyError:
            raise ConfigError(f"background[{i}].dst: no host or role {bg['dst']!r} in the topology") from None
        if dst.name == src.name:
            raise ConfigError(f"background[{i}].dst: {dst.name} is also the source")
