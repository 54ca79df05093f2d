"""Switch runtime entries as data: the `sN-runtime.json` files of docs/pipeline.md.

Pure functions (no root, no bmv2): a small topology description in, one runtime dict per switch
out. `emulation/bmv2/control.py` pushes a runtime to bmv2 (P4Runtime + Thrift); the built-in
dataplane reads the same file.

Input, deliberately small (the topologies module fills it in):

    SwitchTopo(name="s1", device_id=1,
               ports=(Port(1, "s1-eth1", peer="h1", peer_mac="00:00:00:00:00:01", rate_mbps=50), ...),
               routes=(Route("10.0.0.1/32", ports=(1,)),          # one path
                       Route("10.0.1.0/24", ports=(3, 4))))       # equal-cost paths: a group

Every distinct tuple of egress ports becomes one next-hop group (ids from 1, in route order) whose
members are those ports in the given order; the next hop's MAC is the peer MAC of the port.
`switch_topos()` derives the routes of every switch from hosts and links (shortest paths, all
equal-cost next hops) for topologies that do not want to list them by hand.

Knobs (`SwitchConfig`): tagging policy -> classify entries (`fifo` installs none: one FIFO queue,
tail drop only), load-balancing mode, admission thresholds (switch-wide and per port), the ECN
marking threshold K (switch-wide and per queue id).
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from dlcp.experiment import pipeline_names as pn
from dlcp.wire.header import HEADER_LEN, MAX_PAYLOAD_BYTES
from dlcp.wire.tagging import POLICIES

# The frame size queue rates in Mbit/s are converted with for bmv2 (it only knows packets/s): a
# full DLCP data frame (Ethernet 14 + IPv4 20 + UDP 8 + DLCP header + payload).
DATA_FRAME_BYTES = 14 + 20 + 8 + HEADER_LEN + MAX_PAYLOAD_BYTES

DEFAULT_QUEUE_DEPTH_PKTS = 128
TARGETS = ("bmv2", "ref")
_MAC = re.compile(r"^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$")


class RuntimeSpecError(ValueError):
    """A runtime description that cannot be used; the message is one line naming the problem."""


# --- input -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Port:
    """One switch port: Mininet interface sN-ethK is port K."""
    port: int
    intf: str
    peer: str  # node on the other end ("h1", "s2")
    peer_mac: str  # MAC of the peer's interface: the next-hop MAC for routes out of this port
    rate_mbps: float | None = None  # egress drain rate; None = line rate (no shaping)
    rate_pps: int | None = None  # alternatively in packets/s (bmv2's unit); wins over rate_mbps
    queue_depth_pkts: int | None = DEFAULT_QUEUE_DEPTH_PKTS  # per priority queue; above qmax
    delay_us: int = 0  # built-in dataplane only (bmv2 has no delay)
    loss: float = 0.0  # built-in dataplane only


@dataclass(frozen=True)
class Route:
    prefix: str  # "10.0.0.1/32"
    ports: tuple[int, ...]  # equal-cost egress ports, in member order


@dataclass(frozen=True)
class SwitchTopo:
    name: str
    device_id: int
    ports: tuple[Port, ...]
    routes: tuple[Route, ...]


@dataclass(frozen=True)
class Thresholds:
    """Admission thresholds in packets: drop_prec 0 only at qmax, drop_prec c early at k_c."""
    qmax: int = pn.TABLES[pn.QUEUE_THRESHOLDS]["default"][1]["qmax"]
    k1: int = pn.TABLES[pn.QUEUE_THRESHOLDS]["default"][1]["k1"]
    k2: int = pn.TABLES[pn.QUEUE_THRESHOLDS]["default"][1]["k2"]
    k3: int = pn.TABLES[pn.QUEUE_THRESHOLDS]["default"][1]["k3"]

    def params(self) -> dict[str, int]:
        return {"qmax": self.qmax, "k1": self.k1, "k2": self.k2, "k3": self.k3}


@dataclass(frozen=True)
class SwitchConfig:
    policy: str = "dlcp"  # dlcp/wire/tagging.py POLICIES
    lb_mode: str = "spray_random"  # p4names.LB_MODES
    thresholds: Thresholds = Thresholds()
    port_thresholds: Mapping[int, Thresholds] = field(default_factory=dict)
    ecn_k: int = pn.TABLES[pn.ECN_THRESHOLD]["default"][1]["k"]  # mark CE from this queue occupancy on
    ecn_k_prio: Mapping[int, int] = field(default_factory=dict)  # queue id -> K, every port
    target: str = "bmv2"
    p4info: str = "build/p4/dlcp.p4info.txtpb"
    bmv2_json: str = "build/p4/dlcp.json"


@dataclass(frozen=True)
class Host:
    name: str
    ip: str
    mac: str


@dataclass(frozen=True)
class Link:
    """node1:port1 <-> node2:port2 (a host's port is its interface index, usually 0)."""
    node1: str
    port1: int
    node2: str
    port2: int
    rate_mbps: float | None = None
    queue_depth_pkts: int | None = DEFAULT_QUEUE_DEPTH_PKTS


def switch_port_mac(device_id: int, port: int) -> str:
    """The MAC the topologies give switch interfaces (locally administered, unique per port)."""
    return f"02:dc:00:{device_id >> 8 & 0xff:02x}:{device_id & 0xff:02x}:{port:02x}"


# --- generation ------------------------------------------------------------------------------------

def runtime_for(sw: SwitchTopo, cfg: SwitchConfig) -> dict[str, Any]:
    """The runtime dict (docs/pipeline.md) of one switch."""
    _check_config(sw.name, cfg)
    ports = _check_ports(sw)
    entries: list[dict[str, Any]] = [
        _default(pn.LB_CONFIG, pn.SET_LB_MODE, {"mode": pn.LB_MODES[cfg.lb_mode]}),
        _default(pn.QUEUE_THRESHOLDS, pn.SET_THRESHOLDS, cfg.thresholds.params()),
        _default(pn.ECN_THRESHOLD, pn.SET_ECN_THRESHOLD, {"k": cfg.ecn_k}),
    ]
    for qid in sorted(cfg.ecn_k_prio):
        entries.append({"table": pn.ECN_THRESHOLD, "match": {"qid": qid}, "priority": 10,
                        "action_name": pn.SET_ECN_THRESHOLD, "action_params": {"k": cfg.ecn_k_prio[qid]}})
    for port in sorted(cfg.port_thresholds):
        if port not in ports:
            raise RuntimeSpecError(f"{sw.name}: thresholds for port {port}, which the switch does not have")
        entries.append({"table": pn.QUEUE_THRESHOLDS, "match": {"egress_port": port},
                        "action_name": pn.SET_THRESHOLDS,
                        "action_params": cfg.port_thresholds[port].params()})

    groups: dict[tuple[int, ...], int] = {}
    lpm, nhop = [], []
    for route in sw.routes:
        net = _network(sw.name, route.prefix)
        members = tuple(route.ports)
        if not members:
            raise RuntimeSpecError(f"{sw.name}: route {route.prefix} has no egress port")
        for p in members:
            if p not in ports:
                raise RuntimeSpecError(f"{sw.name}: route {route.prefix} leaves through port {p}, "
                                    "which the switch does not have")
        if members not in groups:
            group = groups[members] = len(groups) + 1
            if group >= pn.MAX_GROUPS:
                raise RuntimeSpecError(f"{sw.name}: more than {pn.MAX_GROUPS - 1} next-hop groups")
            for member, p in enumerate(members):
                nhop.append({"table": pn.NHOP, "match": {"nhop_group": group, "nhop_member": member},
                             "action_name": pn.SET_NHOP,
                             "action_params": {"dmac": ports[p].peer_mac, "port": p}})
        lpm.append({"table": pn.IPV4_LPM,
                    "match": {"ipv4_dst": [str(net.network_address), net.prefixlen]},
                    "action_name": pn.SET_NHOP_GROUP,
                    "action_params": {"group": groups[members], "size": len(members)}})
    entries += lpm + nhop
    entries += classify_entries(cfg.policy)

    runtime = {
        "switch": sw.name,
        "device_id": sw.device_id,
        "target": cfg.target,
        "p4info": cfg.p4info,
        "bmv2_json": cfg.bmv2_json,
        "table_entries": entries,
        "ports": [{"port": p.port, "intf": p.intf, "peer": p.peer, "rate_mbps": p.rate_mbps,
                   "rate_pps": p.rate_pps, "queue_depth_pkts": p.queue_depth_pkts,
                   "delay_us": p.delay_us, "loss": p.loss} for p in sorted(sw.ports, key=lambda p: p.port)],
        "registers": [],
    }
    check_runtime(runtime, sw.name)
    return runtime


def classify_entries(policy: str) -> list[dict[str, Any]]:
    """`fifo`: none (default set_class(0, 0): one FIFO queue, tail drop only). Every other policy:
    DLCP packets by their header, everything else by DSCP."""
    if policy not in POLICIES:
        raise RuntimeSpecError(f"dlcp.policy: unknown tagging policy {policy!r} (one of {', '.join(POLICIES)})")
    if policy == "fifo":
        return []
    return [
        {"table": pn.CLASSIFY, "match": {"dlcp_valid": 1}, "priority": 10,
         "action_name": pn.CLASSIFY_FROM_DLCP, "action_params": {}},
        {"table": pn.CLASSIFY, "match": {"dlcp_valid": 0}, "priority": 10,
         "action_name": pn.CLASSIFY_FROM_DSCP, "action_params": {}},
    ]


def runtimes(switches: Iterable[SwitchTopo], cfg: SwitchConfig) -> dict[str, dict[str, Any]]:
    return {sw.name: runtime_for(sw, cfg) for sw in switches}


def write_runtime(runtime: Mapping[str, Any], directory: str | Path) -> Path:
    """Write `<directory>/<switch>-runtime.json` (readable: one table entry per line)."""
    path = Path(directory) / f"{runtime['switch']}-runtime.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {k: v for k, v in runtime.items() if k not in ("table_entries", "ports", "registers")}
    text = json.dumps(body, indent=2)[:-2]
    for key in ("table_entries", "ports", "registers"):
        rows = ",\n".join("    " + json.dumps(r) for r in runtime.get(key, []))
        text += f',\n  "{key}": [\n{rows}\n  ]' if rows else f',\n  "{key}": []'
    path.write_text(text + "\n}\n")
    return path


# --- topology -> routes ----------------------------------------------------------------------------

def switch_topos(hosts: Iterable[Host], switches: Mapping[str, int], links: Iterable[Link]) -> list[SwitchTopo]:
    """Routes for every switch: a /32 per host over all equal-cost shortest-path ports.

    `switches` maps switch name -> device id; switch interfaces are `<switch>-eth<port>` with MAC
    `switch_port_mac(device_id, port)`.
    """
    hosts = {h.name: h for h in hosts}
    links = list(links)
    nodes = set(hosts) | set(switches)
    adjacency: dict[str, list[tuple[int, str, int, Link]]] = {n: [] for n in nodes}
    for ln in links:
        for a, pa, b, pb in ((ln.node1, ln.port1, ln.node2, ln.port2), (ln.node2, ln.port2, ln.node1, ln.port1)):
            if a not in nodes or b not in nodes:
                raise RuntimeSpecError(f"link {ln.node1}:{ln.port1}-{ln.node2}:{ln.port2}: unknown node")
            adjacency[a].append((pa, b, pb, ln))

    def mac_of(node: str, port: int) -> str:
        return hosts[node].mac if node in hosts else switch_port_mac(switches[node], port)

    out = []
    dist = {h: _hop_distances(h, adjacency, hosts) for h in hosts}
    for sw, device_id in switches.items():
        ports = tuple(Port(port=pa, intf=f"{sw}-eth{pa}", peer=b, peer_mac=mac_of(b, pb),
                           rate_mbps=ln.rate_mbps, queue_depth_pkts=ln.queue_depth_pkts)
                      for pa, b, pb, ln in sorted(adjacency[sw], key=lambda t: t[0]))
        routes = []
        for h in sorted(hosts, key=_natural):
            d = dist[h]
            if sw not in d:
                continue  # unreachable from this switch
            via = tuple(pa for pa, b, _, _ in sorted(adjacency[sw], key=lambda t: t[0])
                        if b in d and d[b] == d[sw] - 1)
            routes.append(Route(f"{hosts[h].ip}/32", via))
        out.append(SwitchTopo(sw, device_id, ports, tuple(routes)))
    return out


def _hop_distances(host: str, adjacency, hosts) -> dict[str, int]:
    """BFS from a host; other hosts are endpoints, never transit."""
    d = {host: 0}
    queue = deque([host])
    while queue:
        n = queue.popleft()
        if n != host and n in hosts:
            continue
        for _, m, _, _ in adjacency[n]:
            if m not in d:
                d[m] = d[n] + 1
                queue.append(m)
    return d


def _natural(name: str):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


# --- validation ------------------------------------------------------------------------------------

def _default(table: str, action: str, params: dict) -> dict[str, Any]:
    return {"table": table, "default_action": True, "action_name": action, "action_params": params}


def _network(switch: str, prefix: str) -> ipaddress.IPv4Network:
    try:
        return ipaddress.IPv4Network(prefix, strict=False)
    except ValueError as e:
        raise RuntimeSpecError(f"{switch}: route prefix {prefix!r}: {e}") from None


def _check_config(switch: str, cfg: SwitchConfig) -> None:
    if cfg.lb_mode not in pn.LB_MODES:
        raise RuntimeSpecError(f"dlcp.lb_mode: unknown load-balancing mode {cfg.lb_mode!r} "
                            f"(one of {', '.join(pn.LB_MODES)})")
    if cfg.target not in TARGETS:
        raise RuntimeSpecError(f"{switch}: unknown target {cfg.target!r} (one of {', '.join(TARGETS)})")
    for port, th in [(None, cfg.thresholds), *cfg.port_thresholds.items()]:
        _check_thresholds(th, "dlcp.thresholds" if port is None else f"dlcp.thresholds (port {port})")
    for where, k in [("dlcp.ecn_k", cfg.ecn_k), *((f"dlcp.ecn_k_prio.{q}", v) for q, v in cfg.ecn_k_prio.items())]:
        if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < 2**32:
            raise RuntimeSpecError(f"{where}: {k!r} is not a packet count in 0..{2**32 - 1}")
    for qid in cfg.ecn_k_prio:
        if not (isinstance(qid, int) and 0 <= qid < pn.N_QUEUES):
            raise RuntimeSpecError(f"dlcp.ecn_k_prio: queue {qid!r} is not a priority 0..{pn.N_QUEUES - 1}")


def _check_thresholds(th: Thresholds, where: str) -> None:
    if not 0 <= th.k3 <= th.k2 <= th.k1 <= th.qmax or th.qmax < 1:
        raise RuntimeSpecError(f"{where}: need 0 <= k3 <= k2 <= k1 <= qmax and qmax >= 1, got "
                            f"qmax={th.qmax} k1={th.k1} k2={th.k2} k3={th.k3}")


def _check_ports(sw: SwitchTopo) -> dict[int, Port]:
    if not 0 <= sw.device_id < 2**16:
        raise RuntimeSpecError(f"{sw.name}: device_id {sw.device_id} outside 0..65535")
    ports: dict[int, Port] = {}
    for p in sw.ports:
        if not 0 < p.port < pn.MAX_PORTS:
            raise RuntimeSpecError(f"{sw.name}: port {p.port} ({p.intf}) outside 1..{pn.MAX_PORTS - 1}")
        if p.port in ports:
            raise RuntimeSpecError(f"{sw.name}: port {p.port} listed twice")
        if not _MAC.match(p.peer_mac):
            raise RuntimeSpecError(f"{sw.name}: port {p.port}: peer MAC {p.peer_mac!r} is not aa:bb:cc:dd:ee:ff")
        for key in ("rate_mbps", "rate_pps"):
            v = getattr(p, key)
            if v is not None and not v > 0:
                raise RuntimeSpecError(f"{sw.name}: port {p.port}: {key} must be > 0, got {v}")
        if p.queue_depth_pkts is not None and p.queue_depth_pkts < 1:
            raise RuntimeSpecError(f"{sw.name}: port {p.port}: queue_depth_pkts must be >= 1")
        if not 0.0 <= p.loss < 1.0:
            raise RuntimeSpecError(f"{sw.name}: port {p.port}: loss {p.loss} outside [0, 1)")
        ports[p.port] = p
    return ports


def queue_rate_pps(port: Mapping[str, Any]) -> int | None:
    """The drain rate of a runtime `ports` row in packets/s (bmv2's unit), or None for line rate."""
    if port.get("rate_pps"):
        return int(port["rate_pps"])
    if port.get("rate_mbps"):
        return max(1, round(port["rate_mbps"] * 1e6 / (8 * DATA_FRAME_BYTES)))
    return None


def check_runtime(rt: Mapping[str, Any], source: str = "runtime") -> None:
    """Validate a runtime dict read from a file; raises RuntimeSpecError naming the first problem."""
    for key, typ in (("switch", str), ("device_id", int), ("table_entries", list), ("ports", list),
                     ("registers", list)):
        if not isinstance(rt.get(key), typ):
            raise RuntimeSpecError(f"{source}: key {key!r} missing or not a {typ.__name__}")
    depth_floor = {}
    for i, e in enumerate(rt["table_entries"]):
        where = f"{source}: table_entries[{i}]"
        table, action = e.get("table"), e.get("action_name")
        if table not in pn.TABLES:
            raise RuntimeSpecError(f"{where}: unknown table {table!r}")
        if action not in pn.TABLES[table]["actions"]:
            raise RuntimeSpecError(f"{where}: action {action!r} is not an action of {table}")
        params = e.get("action_params", {})
        expected = [n for n, _ in pn.ACTION_PARAMS[action]]
        if sorted(params) != sorted(expected):
            raise RuntimeSpecError(f"{where}: {action} takes parameters {expected}, got {sorted(params)}")
        for n, bits in pn.ACTION_PARAMS[action]:
            _check_value(params[n], bits, f"{where}: {action}.{n}")
        keys = dict(pn.TABLES[table]["keys"])
        if e.get("default_action"):
            if e.get("match"):
                raise RuntimeSpecError(f"{where}: a default action has no match")
        else:
            match = e.get("match")
            if not isinstance(match, dict) or not match or set(match) - set(keys):
                raise RuntimeSpecError(f"{where}: match keys {sorted(match or {})} not among {table} keys "
                                    f"{sorted(keys)}")
            if "ternary" in keys.values() and not isinstance(e.get("priority"), int):
                raise RuntimeSpecError(f"{where}: entries of {table} need an integer priority")
        if action == pn.SET_THRESHOLDS:
            port = None if e.get("default_action") else e["match"]["egress_port"]
            depth_floor[port] = params["qmax"]
    for i, p in enumerate(rt["ports"]):
        where = f"{source}: ports[{i}]"
        if not isinstance(p.get("port"), int) or not 0 < p["port"] < pn.MAX_PORTS:
            raise RuntimeSpecError(f"{where}: port missing or outside 1..{pn.MAX_PORTS - 1}")
        qmax = depth_floor.get(p["port"], depth_floor.get(None, pn.TABLES[pn.QUEUE_THRESHOLDS]["default"][1]["qmax"]))
        depth = p.get("queue_depth_pkts")
        if depth is not None and depth <= qmax:
            # the switch's own queue would drop before admission control does, and bmv2's
            # occupancy register would never get those packets back
            raise RuntimeSpecError(f"{where}: queue_depth_pkts {depth} must exceed qmax {qmax}")
    for i, r in enumerate(rt["registers"]):
        if r.get("register") not in pn.REGISTERS or not isinstance(r.get("index"), int) \
                or not 0 <= r["index"] < pn.REGISTERS[r["register"]] or not isinstance(r.get("value"), int):
            raise RuntimeSpecError(f"{source}: registers[{i}]: need a known register, an index in range and "
                                f"an integer value, got {r}")


def _check_value(v: Any, bits: int, where: str) -> None:
    if isinstance(v, str) and (_MAC.match(v) or v.count(".") == 3):
        return
    if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < 2**bits:
        raise RuntimeSpecError(f"{where}: {v!r} does not fit {bits} bits")


def load_runtime(path: str | Path) -> dict[str, Any]:
    """Read and validate `sN-runtime.json`."""
    path = Path(path)
    try:
        rt = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise RuntimeSpecError(f"{path}: cannot read runtime file: {e}") from None
    if not isinstance(rt, dict):
        raise RuntimeSpecError(f"{path}: a runtime file holds one JSON object")
    check_runtime(rt, str(path))
    return rt
