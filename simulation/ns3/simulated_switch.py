"""One DLCP switch in an ns-3 simulation, configured from its `sN-runtime.json` (docs/pipeline.md).

The runtime document is read and checked by the one runtime-file reader
(`dlcp.network.runtime_file.parse_runtime`) and flattened by the built-in dataplane's
`Pipeline.compiled_tables()`, the same arrays its C engine gets; `cpp/dlcp_switch.h` then runs
the pipeline per packet. So a runtime file means the same on `ref` and on `ns3`, and a bad one
fails with the same one-line error naming the file, entry and field.

The counter dump is the built-in dataplane's (`dlcp.switch.counter_dump.snapshot`) with
`backend = "ns3"`.
"""

from __future__ import annotations

from dlcp.network import pipeline_names as P
from dlcp.network.runtime_file import DEFAULT_QUEUE_DEPTH_PKTS, Runtime, parse_runtime
from dlcp.switch import counter_dump as C
from dlcp.switch.pipeline import Pipeline
from dlcp.wire.header import DATA_PORT
from simulation.ns3 import loader

# the built-in dataplane's rate for ports without one is the host's; here it is the device's
UNLIMITED_DEVICE_BPS = 100e9


def ecn_thresholds(pipe: Pipeline) -> list[int] | None:
    """K per (port * 8 + qid) when the pipeline has ECN marking (p4/include/ecn.p4), else None."""
    return getattr(pipe, "ecn_k", None)


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
        sw.SetLpmEntries(n_lpm)
        for value, plen, index, group, size in lpm:
            sw.AddLpm(value, plen, index, group, size)
        for group, member, index, dmac, port in nhop:
            sw.AddNhop(group, member, index, int.from_bytes(dmac, "big"), port)
        sw.SetClassifyEntries(n_classify)
        for key, (index, qid, color) in enumerate(classify):
            if (index, qid, color) != (-1, 0, 0):  # the C++ default
                sw.SetClass(key, index, qid, color)
        for port, (qmax, k1, k2, k3) in enumerate(thresholds):
            if (qmax, k1, k2, k3) != (64, 48, 32, 16):
                sw.SetThresholds(port, qmax, k1, k2, k3)
        ecn = ecn_thresholds(self.pipe)
        if ecn is not None:
            for i, k in enumerate(ecn):
                sw.SetEcnK(i // P.N_QUEUES, i % P.N_QUEUES, k)
        sw.SetLbMode(lb_mode)
        for group, v in enumerate(rr_next):
            if v:
                sw.SetRrNext(group, v)

    def add_ports(self, devices: dict | None = None) -> None:
        """Every port of the runtime; `devices[port] = (Ptr<NetDevice>, device bit rate)` puts it on
        a link, else its output is captured (`captured()`)."""
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

    def captured(self) -> list[tuple[float, int, bytes]]:
        """(simulated s, port, Ethernet frame) of every packet a port without a device sent."""
        out = []
        for c in self.sw.GetCaptured():
            out.append((float(c.t), int(c.port), bytes(c.frame)))
        return out

    def raw_counters(self) -> dict:
        """The counters in the layout of the built-in engines' `counters()`."""
        sw = self.sw

        def split(v):
            v = list(v)
            return v[0::2], v[1::2]

        raw = {}
        for name, which in (("admitted", 0), ("early", 1), ("tail", 2)):
            raw[f"{name}_pkts"], raw[f"{name}_bytes"] = split(sw.QueueCounter(which))
        raw["ce_pkts"], raw["ce_bytes"] = split(sw.QueueCounter(3))
        raw["drops_pkts"], raw["drops_bytes"] = split(sw.DropCounters())
        raw["lpm_hits"] = list(sw.LpmHits())
        raw["classify_hits"] = list(sw.ClassifyHits())
        raw["occupancy"] = list(sw.Occupancy())
        raw["rr_next"] = list(sw.RrNext())
        coarse = list(sw.DelayCoarse())
        raw.update(
            delay_fine=list(sw.DelayFine()),
            delay_coarse=dict(zip(coarse[0::2], coarse[1::2])),
            delay_n=int(sw.DelayN()),
            delay_max=int(sw.DelayMax()),
            max_enq_qdepth=int(sw.MaxEnqQdepth()),
        )
        return raw

    def port_rows(self) -> list[dict]:
        rows = []
        for cfg in self.runtime.ports:
            v = [int(x) for x in self.sw.PortCounters(cfg.port)]
            rows.append(
                {
                    "port": cfg.port,
                    "intf": cfg.intf,
                    "rx_pkts": v[0],
                    "rx_bytes": v[1],
                    "tx_pkts": v[2],
                    "tx_bytes": v[3],
                    "queue_overflow_pkts": v[4],
                    "link_loss_pkts": v[5],
                    "queued_pkts": v[6],
                    "pending_pkts": v[7],
                }
            )
        return rows

    def counter_dump(self) -> dict:
        """`counters/sN.json` (docs/pipeline.md), the built-in dataplane's shape, backend ns3."""
        raw = self.raw_counters()
        doc = C.snapshot(self.name, raw, self.port_rows(), engine="ns3")
        doc["backend"] = "ns3"
        return doc
