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

Knobs (`SwitchConfig`, a settings model the experiment's `dlcp` section composes): tagging policy -> classify entries (`fifo` installs none: one FIFO queue,
tail drop only), load-balancing mode, admission thresholds (switch-wide and per port), the ECN
marking threshold K (switch-wide and per queue id), and the ports' queue discipline (the
experiment's `[switch]` section, dlcp/queueing).

Every runtime made here is checked by the same reader the switches use (`runtime_file.parse_runtime`).
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import Field, model_validator

import dlcp.backends as backends
from dlcp.network import pipeline_names as pn
from dlcp.network.runtime_file import (
    DEFAULT_BMV2_JSON,
    DEFAULT_P4INFO,
    DEFAULT_QUEUE_DEPTH_PKTS,
    TARGETS,
    PortConfig,
    RuntimeFileError,
    parse_runtime,
)
from dlcp.queueing.settings import QueueingSettings
from dlcp.settings import BadValue, IntKey, Settings
from dlcp.wire.header import HEADER_LEN, MAX_PAYLOAD_BYTES
from dlcp.wire.layout import LAYOUT
from dlcp.wire.tagging import Policy

# The frame size queue rates in Mbit/s are converted with for bmv2 (it only knows packets/s): a
# full DLCP data frame (Ethernet + IPv4 + UDP + DLCP header + payload).
DATA_FRAME_BYTES = LAYOUT.eth_len + LAYOUT.ipv4_len + LAYOUT.udp_len + HEADER_LEN + MAX_PAYLOAD_BYTES

if TYPE_CHECKING:  # a Literal built from data: the checker sees a str, pydantic the allowed values
    LbMode = str
    Target = str
else:
    LbMode = Literal[tuple(pn.LB_MODES)]
    Target = Literal[TARGETS]
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
    rate_pps: int | None = None  # alternatively in packets/s (bmv2's unit); not both
    queue_depth_pkts: int | None = DEFAULT_QUEUE_DEPTH_PKTS  # per priority queue; above qmax
    delay_us: int = 0  # built-in switch only (bmv2 has no delay)
    loss: float = 0.0  # built-in switch only
    host_nic: bool = False  # the peer is a host (built-in switch: its NIC's transmission time on arrival)


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


_DEFAULT_THRESHOLDS = pn.DEFAULT_THRESHOLDS  # the P4 program's


class Thresholds(Settings):
    """Admission thresholds in packets: drop_prec 0 only at qmax, drop_prec c early at k_c."""

    section: ClassVar[str] = "dlcp"
    qmax: int = Field(
        _DEFAULT_THRESHOLDS["qmax"], ge=1, description="tail-drop threshold (packets) per port and priority"
    )
    k1: int = Field(_DEFAULT_THRESHOLDS["k1"], ge=0, description="early-drop threshold of drop precedence 1")
    k2: int = Field(_DEFAULT_THRESHOLDS["k2"], ge=0, description="early-drop threshold of drop precedence 2")
    k3: int = Field(_DEFAULT_THRESHOLDS["k3"], ge=0, description="early-drop threshold of drop precedence 3")

    @model_validator(mode="after")
    def _ordered(self):
        if not self.k3 <= self.k2 <= self.k1 <= self.qmax:
            raise BadValue(
                "k1",
                f"thresholds must satisfy k3 <= k2 <= k1 <= qmax, got "
                f"k3={self.k3} k2={self.k2} k1={self.k1} qmax={self.qmax}",
            )
        return self

    def params(self) -> dict[str, int]:
        return {"qmax": self.qmax, "k1": self.k1, "k2": self.k2, "k3": self.k3}


QueueId = Annotated[int, IntKey, Field(ge=0, le=pn.N_QUEUES - 1)]
EcnK = Annotated[int, Field(ge=0, le=(1 << pn.THRESHOLD_BITS) - 1)]


class SwitchSettings(Thresholds):
    """What an experiment sets about its switches besides the policy (keys of its `dlcp` section)."""

    load_balancing: LbMode = Field("spray_random", description="member choice for DLCP packets")
    ecn_k: EcnK = Field(
        pn.DEFAULT_ECN_K, description="switches mark CE on ECN-capable packets once their queue holds this many"
    )
    ecn_k_prio: dict[QueueId, EcnK] = Field({}, description="priority (queue id 0..7) -> its own ecn_k")


class SwitchConfig(SwitchSettings):
    """Everything the runtime entries of a switch depend on besides its topology (the switch-wide
    thresholds are its qmax, k1, k2, k3)."""

    policy: Policy = "dlcp"  # tagging policy: fifo installs no classification (one FIFO queue)
    port_thresholds: dict[Annotated[int, IntKey], Thresholds] = {}  # noqa: RUF012
    queueing: QueueingSettings = Field(default_factory=QueueingSettings)  # every port's discipline
    target: Target = backends.RUNTIME_DEFAULT_TARGET
    p4info: str = DEFAULT_P4INFO
    bmv2_json: str = DEFAULT_BMV2_JSON


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
    return f"02:dc:00:{device_id >> 8 & 0xFF:02x}:{device_id & 0xFF:02x}:{port:02x}"


# --- generation ------------------------------------------------------------------------------------


def runtime_for(sw: SwitchTopo, cfg: SwitchConfig) -> dict[str, Any]:
    """The runtime dict (docs/pipeline.md) of one switch."""
    ports = _check_ports(sw)
    entries: list[dict[str, Any]] = [
        _default(pn.LB_CONFIG, pn.SET_LB_MODE, {"mode": pn.LB_MODES[cfg.load_balancing]}),
        _default(pn.QUEUE_THRESHOLDS, pn.SET_THRESHOLDS, cfg.params()),
        _default(pn.ECN_THRESHOLD, pn.SET_ECN_THRESHOLD, {"k": cfg.ecn_k}),
    ]
    for qid in sorted(cfg.ecn_k_prio):
        entries.append(
            {
                "table": pn.ECN_THRESHOLD,
                "match": {"qid": qid},
                "priority": 10,
                "action_name": pn.SET_ECN_THRESHOLD,
                "action_params": {"k": cfg.ecn_k_prio[qid]},
            }
        )
    for port in sorted(cfg.port_thresholds):
        if port not in ports:
            raise RuntimeSpecError(f"{sw.name}: thresholds for port {port}, which the switch does not have")
        entries.append(
            {
                "table": pn.QUEUE_THRESHOLDS,
                "match": {"egress_port": port},
                "action_name": pn.SET_THRESHOLDS,
                "action_params": cfg.port_thresholds[port].params(),
            }
        )

    groups: dict[tuple[int, ...], int] = {}
    lpm, nhop = [], []
    for route in sw.routes:
        net = _network(sw.name, route.prefix)
        members = tuple(route.ports)
        if not members:
            raise RuntimeSpecError(f"{sw.name}: route {route.prefix} has no egress port")
        for p in members:
            if p not in ports:
                raise RuntimeSpecError(
                    f"{sw.name}: route {route.prefix} leaves through port {p}, which the switch does not have"
                )
        if members not in groups:
            group = groups[members] = len(groups) + 1
            if group >= pn.MAX_GROUPS:
                raise RuntimeSpecError(f"{sw.name}: more than {pn.MAX_GROUPS - 1} next-hop groups")
            for member, p in enumerate(members):
                nhop.append(
                    {
                        "table": pn.NHOP,
                        "match": {"nhop_group": group, "nhop_member": member},
                        "action_name": pn.SET_NHOP,
                        "action_params": {"dmac": ports[p].peer_mac, "port": p},
                    }
                )
        lpm.append(
            {
                "table": pn.IPV4_LPM,
                "match": {"ipv4_dst": [str(net.network_address), net.prefixlen]},
                "action_name": pn.SET_NHOP_GROUP,
                "action_params": {"group": groups[members], "size": len(members)},
            }
        )
    entries += lpm + nhop
    entries += classify_entries(cfg.policy)
    queueing = cfg.queueing.config().to_doc()

    runtime = {
        "switch": sw.name,
        "device_id": sw.device_id,
        "target": cfg.target,
        "p4info": cfg.p4info,
        "bmv2_json": cfg.bmv2_json,
        "table_entries": entries,
        "ports": [
            {
                "port": p.port,
                "intf": p.intf,
                "peer": p.peer,
                "rate_mbps": p.rate_mbps,
                "rate_pps": p.rate_pps,
                "queue_depth_pkts": p.queue_depth_pkts,
                "delay_us": p.delay_us,
                "loss": p.loss,
                "host_nic": p.host_nic,
                "queueing": queueing,
            }
            for p in sorted(sw.ports, key=lambda p: p.port)
        ],
        "registers": [],
    }
    try:
        parse_runtime(runtime, sw.name)
    except RuntimeFileError as e:
        raise RuntimeSpecError(str(e)) from None
    return runtime


def classify_entries(policy: Policy) -> list[dict[str, Any]]:
    """`fifo`: none (default set_class(0, 0): one FIFO queue, tail drop only). Every other policy:
    DLCP packets by their header, everything else by DSCP."""
    if policy == "fifo":
        return []
    return [
        {
            "table": pn.CLASSIFY,
            "match": {"dlcp_valid": 1},
            "priority": 10,
            "action_name": pn.CLASSIFY_FROM_DLCP,
            "action_params": {},
        },
        {
            "table": pn.CLASSIFY,
            "match": {"dlcp_valid": 0},
            "priority": 10,
            "action_name": pn.CLASSIFY_FROM_DSCP,
            "action_params": {},
        },
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
    by_name = {h.name: h for h in hosts}
    links = list(links)
    nodes = set(by_name) | set(switches)
    adjacency: dict[str, list[tuple[int, str, int, Link]]] = {n: [] for n in nodes}
    for ln in links:
        for a, pa, b, pb in ((ln.node1, ln.port1, ln.node2, ln.port2), (ln.node2, ln.port2, ln.node1, ln.port1)):
            if a not in nodes or b not in nodes:
                raise RuntimeSpecError(f"link {ln.node1}:{ln.port1}-{ln.node2}:{ln.port2}: unknown node")
            adjacency[a].append((pa, b, pb, ln))

    def mac_of(node: str, port: int) -> str:
        return by_name[node].mac if node in by_name else switch_port_mac(switches[node], port)

    out = []
    dist = {h: _hop_distances(h, adjacency, by_name) for h in by_name}
    for sw, device_id in switches.items():
        ports = tuple(
            Port(
                port=pa,
                intf=f"{sw}-eth{pa}",
                peer=b,
                peer_mac=mac_of(b, pb),
                rate_mbps=ln.rate_mbps,
                queue_depth_pkts=ln.queue_depth_pkts,
                host_nic=b in by_name,
            )
            for pa, b, pb, ln in sorted(adjacency[sw], key=lambda t: t[0])
        )
        routes = []
        for h in sorted(by_name, key=_natural):
            d = dist[h]
            if sw not in d:
                continue  # unreachable from this switch
            via = tuple(pa for pa, b, _, _ in sorted(adjacency[sw], key=lambda t: t[0]) if b in d and d[b] == d[sw] - 1)
            routes.append(Route(f"{by_name[h].ip}/32", via))
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


def _check_ports(sw: SwitchTopo) -> dict[int, Port]:
    """What the runtime file cannot show any more (the rest: runtime_file.parse_runtime)."""
    for p in sw.ports:
        if not _MAC.match(p.peer_mac):
            raise RuntimeSpecError(f"{sw.name}: port {p.port}: peer MAC {p.peer_mac!r} is not aa:bb:cc:dd:ee:ff")
    return {p.port: p for p in sw.ports}


def queue_rate_pps(port: PortConfig) -> int | None:
    """The drain rate of a port in packets/s (bmv2's unit), or None for line rate."""
    if port.rate_pps:
        return int(port.rate_pps)
    if port.rate_mbps:
        return max(1, round(port.rate_mbps * 1e6 / (8 * DATA_FRAME_BYTES)))
    return None
