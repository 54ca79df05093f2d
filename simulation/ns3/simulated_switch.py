"""One DLCP switch in an ns-3 simulation, configured from its `sN-runtime.json` (docs/pipeline.md).

The runtime document is read and checked by the one runtime-file reader
(`dlcp.network.runtime_file.parse_runtime`) and flattened by the reference pipeline's
`Pipeline.compiled_tables()` (dlcp/switch/pipeline.py), the same arrays the built-in switch's C
engine gets; `cpp/dlcp_switch.h` then runs the C pipeline core (dlcp/switch/c/switch_core.h) per
packet. So a runtime file means the same on the built-in switch and on ns-3, and a bad one fails
with the same one-line error naming the file, entry and field.

The counter dump is every engine's (`dlcp.switch.counter_dump.snapshot`) with `backend = "ns3"`.
"""

from __future__ import annotations

from dlcp.network import pipeline_names as P
from dlcp.network.runtime_file import DEFAULT_QUEUE_DEPTH_PKTS, Runtime, parse_runtime
from dlcp.switch import counter_dump as C
from dlcp.switch.pipeline import Pipeline
from dlcp.wire.header import DATA_PORT
from simulation.ns3 import loader

# the built-in switch's rate for ports without one is the host's; here it is the device's
UNLIMITED_DEVICE_BPS = 100e9


class Ns3Switch:
    """A `DlcpSwitch` C++ object and the runtime it was configured from."""

    def __init__(self, doc: dict, source: str = "<runtime>", data_port: int = DATA_PORT, stream: int = 0):
        self.runtime: Runtime = parse_runtime(doc, source)
        self.name = self.runtime.switch
        self.pipe = Pipeline(self.runtime, data_port=data_port)
        ns = loader.compile_cpp("dlcp_switch")
        self.ns = ns
        self.obj = ns.CreateObject["DlcpSwitch"]()
        sw = self.obj.__deref__()  # methods on the object itself (cppyy: Ptr proxies lose state)
        self.sw = sw
        sw.SetDataPort(data_port)
        sw.AssignStreams(stream)
        lpm, nhop, classify, thresholds, lb_mode, rr_next, n_lpm, n_classify = self.pipe.compiled_tables()
        sw.SetTableSizes(n_lpm, n_classify)
        for value, plen, index, group, size in lpm:
            sw.AddLpm(value, plen, index, group, size)
        for group, member, index, dmac, port in nhop:
            sw.AddNhop(group, member, index, int.from_bytes(dmac, "big"), port)
        for key, (index, qid, color) in enumerate(classify):
            if (index, qid, color) != (-1, 0, 0):  # the core's default
                sw.SetClass(key, index, qid, color)
        for port, (qmax, k1, k2, k3) in enumerate(thresholds):
            if (qmax, k1, k2, k3) != tuple(P.DEFAULT_THRESHOLDS.values()):
                sw.SetThresholds(port, qmax, k1, k2, k3)
        for i, k in enumerate(self.pipe.ecn_k):
            sw.SetEcnK(i // P.N_QUEUES, i % P.N_QUEUES, k)
        sw.SetLbMode(lb_mode)
        for group, v in enumerate(rr_next):
            if v:
                sw.SetRrNext(group, v)

    def add_ports(self, devices: dict | None = None) -> None:
        """Every port of the runtime with its queue discipline; `devices[port] = (Ptr<NetDevice>,
        device bit rate)` puts it on a link, else its output is captured (`captured()`)."""
        devices = devices or {}
        for cfg in self.runtime.ports:
            dev, dev_bps = devices.get(cfg.port, (None, 0.0))
            self.sw.AddPort(
                cfg.port,
                dev if dev is not None else self.ns.Ptr[self.ns.NetDevice](),
                cfg.rate_bps or 0.0,
                cfg.rate_pps or 0.0,
                dev_bps,
                cfg.queue_depth_pkts or DEFAULT_QUEUE_DEPTH_PKTS,
                cfg.delay_us / 1e6,
                cfg.loss,
            )
            q = cfg.queueing
            self.sw.SetQueueing(cfg.port, q.discipline.c_id, self.ns.cppyy.gbl.std.vector["uint32_t"](q.c_params()))

    def captured(self) -> list[tuple[float, int, bytes]]:
        """(simulated s, port, Ethernet frame) of every packet a port without a device sent."""
        out = []
        for c in self.sw.GetCaptured():
            out.append((float(c.t), int(c.port), bytes(c.frame)))
        return out

    def raw_counters(self) -> dict:
        """The core's counters in the layout of `Pipeline.counters()` (and the C engine's)."""
        sw = self.sw
        raw: dict = {}
        for name, which in (("admitted", 0), ("early", 1), ("tail", 2), ("ce", 3), ("drops", 4)):
            raw[f"{name}_pkts"], raw[f"{name}_bytes"] = list(sw.Counts(which, False)), list(sw.Counts(which, True))
        non_dlcp = [int(v) for v in sw.NonDlcp()]
        coarse = list(sw.DelayCoarse())
        raw.update(
            lpm_hits=list(sw.LpmHits()),
            classify_hits=list(sw.ClassifyHits()),
            occupancy=list(sw.Occupancy()),
            rr_next=list(sw.RrNext()),
            last_drop=int(sw.LastDrop()),
            non_dlcp={non_dlcp[i]: tuple(non_dlcp[i + 1 : i + 4]) for i in range(0, len(non_dlcp), 4)},
            delay_fine=list(sw.DelayFine()),
            delay_coarse=dict(zip(coarse[0::2], coarse[1::2])),
            delay_n=int(sw.DelayN()),
            delay_max=int(sw.DelayMax()),
            max_enq_qdepth=int(sw.MaxEnqQdepth()),
        )
        return raw

    def port_rows(self) -> list[dict]:
        names = ("rx_pkts", "rx_bytes", "tx_pkts", "tx_bytes")
        names += ("queue_overflow_pkts", "link_loss_pkts", "queued_pkts", "pending_pkts")
        return [
            C.port_row(cfg.port, cfg.intf, dict(zip(names, (int(x) for x in self.sw.PortCounters(cfg.port)))))
            for cfg in self.runtime.ports
        ]

    def counter_dump(self) -> dict:
        """`counters/sN.json` (docs/pipeline.md): every engine's shape, backend ns3."""
        return C.snapshot(self.name, self.raw_counters(), self.port_rows(), engine="ns3", backend="ns3")
