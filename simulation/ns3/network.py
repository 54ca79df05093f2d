"""An experiment's network on ns-3: the topology of `dlcp.network.topology`, one `Ns3Switch` per
switch configured from its runtime document, hosts with ns-3's Internet stack, background traffic.

The same inputs as the Mininet network (`emulation/network.py`): the TopologySpec (hosts hN with
10.0.0.N, switches sN, port K of sN is the runtime's port K) and the runtime documents of
`TopologySpec.runtimes(cfg)`; rates, queue depths, delay and loss come from the runtime's `ports`
rows, the host NIC from `links` (docs/simulation.md, "Modelling choices").
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from dlcp.experiment.agent_config import BACKGROUND_PORT
from dlcp.network.topology import TopologySpec
from simulation.ns3 import loader
from simulation.ns3.simulated_switch import UNLIMITED_DEVICE_BPS, Ns3Switch

SWITCH_DEVICE_QUEUE_PKTS = 8
# ns-3 random stream of background source i's start phase: PHASE_STREAM + i (the switches use
# 10 * k and 10 * k + 1 for switch k)
PHASE_STREAM = 1_000_000


@dataclass
class BackgroundFlow:
    """One `[[background]]` entry on the simulated network."""

    index: int
    kind: str
    src: str
    dst: str
    port: int
    app: object = None
    sink: object = None
    counter: object = None

    def sender_record(self) -> dict:
        """records/<src>-background<index>.json, with the emulated sender's keys where they mean the
        same (`pkts` sent; a simulation has no wall-clock times to give)."""
        return {
            "host": self.src,
            "kind": self.kind,
            "dst": self.dst,
            "port": self.port,
            "pkts": int(self.counter.packets) if self.counter is not None else None,
        }

    def sink_record(self) -> dict:
        """records/<dst>-sink<port>.json: what the flow's sink received, as the emulated sink's record."""
        return {"host": self.dst, "kind": "sink", "port": self.port, "bytes": int(self.sink.GetTotalRx())}


@dataclass
class SimNetwork:
    spec: TopologySpec
    nodes: dict = field(default_factory=dict)  # name -> Ptr<Node>
    host_devices: dict = field(default_factory=dict)  # host -> Ptr<NetDevice>
    switches: dict = field(default_factory=dict)  # name -> Ns3Switch
    background: list = field(default_factory=list)
    mtu: int = 1500  # IP MTU of every link


def build_network(
    spec: TopologySpec, runtimes: dict[str, dict], links_cfg: dict, data_port: int, mtu: int = 1500
) -> SimNetwork:
    """Nodes, links, switches (configured and attached) and host NICs; no traffic yet."""
    ns = loader.compile_cpp("dlcp_switch", "dlcp_net")
    ns.DlcpTcpLikeLinux()  # before any socket exists
    net = SimNetwork(spec, mtu=mtu)
    for name in list(spec.hosts) + list(spec.switches):
        net.nodes[name] = ns.CreateObject["Node"]()
    stack = ns.InternetStackHelper()
    for h in spec.hosts:
        stack.Install(net.nodes[h])
    port_rate = {}  # (switch, port) -> device bit rate
    for sw, doc in runtimes.items():
        for row in doc["ports"]:
            port_rate[(sw, row["port"])] = row["rate_mbps"] * 1e6 if row.get("rate_mbps") else UNLIMITED_DEVICE_BPS
    devices: dict[str, dict[int, tuple]] = {s: {} for s in spec.switches}
    for a, pa, b, pb, rate_mbps in spec.links():
        rate_a = port_rate.get((a, pa), rate_mbps * 1e6)
        rate_b = port_rate.get((b, pb), rate_mbps * 1e6) if b in spec.switches else rate_mbps * 1e6
        devs = ns.DlcpLink(net.nodes[a], net.nodes[b], rate_a, rate_b, mtu)
        devices[a][pa] = (devs.Get(0), rate_a)
        ns.DlcpSwitchDeviceQueue(devs.Get(0), SWITCH_DEVICE_QUEUE_PKTS)
        if b in spec.hosts:
            net.host_devices[b] = devs.Get(1)
            ip = int(ipaddress.IPv4Address(spec.hosts[b].ip))
            fair_to = (
                [int(ipaddress.IPv4Address(h.ip)) for n, h in spec.hosts.items() if n != b]
                if links_cfg.get("host_fair_queueing")
                else []
            )
            ns.DlcpHostNic(net.nodes[b], devs.Get(1), ip, links_cfg["host_queue_pkts"], fair_to)
        else:
            devices[b][pb] = (devs.Get(1), rate_b)
            ns.DlcpSwitchDeviceQueue(devs.Get(1), SWITCH_DEVICE_QUEUE_PKTS)
    for stream, (name, doc) in enumerate(sorted(runtimes.items())):
        sw = Ns3Switch(doc, source=f"runtime of {name}", data_port=data_port, stream=10 * stream)
        sw.add_ports(devices[name])
        sw.sw.Attach(net.nodes[name])
        net.switches[name] = sw
    return net


def onoff_phase(ns, index: int, period_s: float) -> float:
    """Where in its on/off cycle background source `index` starts: uniform over one period, from
    the run's seed. The emulated senders start at no controlled phase (each is a process that
    starts and then sleeps `start_s`; in the ps-incast demo runs the two senders' start offsets,
    meant to be 50 ms x 10, spread over 290-880 ms, i.e. over the whole 100 ms period, and their
    cycles drift by up to 2 % per period), so their bursts meet at every relative phase; ns-3's
    OnOff keeps an exact phase, and without this two sources whose start offset is a multiple of
    the period would collide in every cycle, in every run and for every seed."""
    rv = ns.CreateObject["UniformRandomVariable"]()
    rv.SetStream(PHASE_STREAM + index)
    return float(rv.GetValue(0.0, period_s))


def add_background(net: SimNetwork, background: list[dict]) -> None:
    """Every `[[background]]` entry as an ns-3 application on its source host, with a sink on its
    destination (port BACKGROUND_PORT + i, as the emulator's agents use), starting `start_s` and
    stopping `stop_s` after now (the runner calls this once every worker finished its first
    iteration, when the emulator starts its background agents); an on/off source starts its first
    burst up to one period later (`onoff_phase`)."""
    ns = loader.compile_cpp("dlcp_net")
    spec = net.spec
    for i, bg in enumerate(background):
        src = spec.hosts[spec.background_sources[i]]
        dst = spec.host_named(bg["dst"])
        port = BACKGROUND_PORT + i
        start = bg["start_s"]
        stop = bg["stop_s"] if bg["stop_s"] else 0.0
        if bg["kind"] == "udp_onoff":
            phased = start + onoff_phase(ns, i, (bg["on_ms"] + bg["off_ms"]) / 1e3)
            start = phased if not stop or phased < stop else start  # a window shorter than the phase: none
        tos = bg["dscp"] << 2
        ip = int(ipaddress.IPv4Address(dst.ip))
        flow = BackgroundFlow(i, bg["kind"], src.name, dst.name, port)
        flow.sink = ns.DlcpSink(net.nodes[dst.name], port, bg["kind"] == "tcp")
        if bg["kind"] == "tcp":
            flow.app = ns.DlcpTcpSource(net.nodes[src.name], ip, port, tos, start, stop)
        else:
            on = bg["on_ms"] / 1e3 if bg["kind"] == "udp_onoff" else 0.0
            flow.app = ns.DlcpUdpSource(
                net.nodes[src.name],
                ip,
                port,
                bg["rate_mbps"] * 1e6,
                bg["packet_bytes"],
                on,
                bg["off_ms"] / 1e3,
                bg.get("pattern") == "exponential",
                tos,
                start,
                stop,
            )
            flow.counter = ns.DlcpTxCounter()
            flow.counter.Attach(flow.app)
        net.background.append(flow)
