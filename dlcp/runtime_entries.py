"""Switch runtime entries (`sN-runtime.json`, docs/pipeline.md) from a topology and a config.

Pure data: the same file feeds the built-in dataplane directly and bmv2 through P4Runtime and
Thrift, so both backends run exactly the same entries.
"""

from __future__ import annotations

from . import p4names as N
from .topospec import TopologySpec

P4INFO = "build/p4/dlcp.p4info.txtpb"
BMV2_JSON = "build/p4/dlcp.json"


def _entry(table: str, action: str, params: dict, match: dict | None = None, priority: int | None = None) -> dict:
    e = {"table": table}
    if match is None:
        e["default_action"] = True
    else:
        e["match"] = match
    if priority is not None:
        e["priority"] = priority
    e["action_name"] = action
    e["action_params"] = params
    return e


def policy_entries(cfg: dict) -> list[dict]:
    """Load balancing mode, classification and admission thresholds of the experiment's policy."""
    d = cfg["dlcp"]
    out = [_entry(N.LB_CONFIG, N.SET_LB_MODE, {"mode": N.LB_MODES[d["load_balancing"]]})]
    if d["policy"] != "fifo":  # fifo: the empty table's default puts everything in one queue
        out.append(_entry(N.CLASSIFY, N.CLASSIFY_FROM_DLCP, {}, {"dlcp_valid": 1}, priority=10))
        out.append(_entry(N.CLASSIFY, N.CLASSIFY_FROM_DSCP, {}, {"dlcp_valid": 0}, priority=10))
    out.append(_entry(N.QUEUE_THRESHOLDS, N.SET_THRESHOLDS,
                      {"qmax": d["qmax"], "k1": d["k1"], "k2": d["k2"], "k3": d["k3"]}))
    return out


def routing_entries(spec: TopologySpec, switch: str) -> list[dict]:
    """A /32 route per host to its own next-hop group (group id = host number) holding every
    equal-cost port toward it; each member rewrites the destination MAC to the host's."""
    out = []
    for h in spec.hosts.values():
        ports = spec.next_hops(switch, h.name)
        if not ports:
            continue
        group = int(h.name[1:])
        for member, port in enumerate(ports):
            out.append(_entry(N.NHOP, N.SET_NHOP, {"dmac": h.mac, "port": port},
                              {"nhop_group": group, "nhop_member": member}))
        out.append(_entry(N.IPV4_LPM, N.SET_NHOP_GROUP, {"group": group, "size": len(ports)},
                          {"ipv4_dst": [h.ip, 32]}))
    return out


def port_entries(spec: TopologySpec, switch: str, cfg: dict) -> list[dict]:
    links = cfg["links"]
    return [{"port": p.port, "intf": p.intf, "peer": p.peer, "rate_mbps": float(p.rate_mbps), "rate_pps": None,
             "queue_depth_pkts": links["queue_pkts"], "delay_us": links["delay_us"], "loss": float(links["loss"])}
            for p in spec.switches[switch].ports.values()]


def runtime_files(spec: TopologySpec, cfg: dict) -> dict[str, dict]:
    """Switch name -> the content of its runtime file."""
    return {name: {"switch": name, "device_id": sw.device_id, "target": "bmv2",
                   "p4info": P4INFO, "bmv2_json": BMV2_JSON,
                   "table_entries": policy_entries(cfg) + routing_entries(spec, name),
                   "ports": port_entries(spec, name, cfg), "registers": []}
            for name, sw in spec.switches.items()}
