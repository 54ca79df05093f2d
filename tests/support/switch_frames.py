"""Frame and runtime builders shared by the switch tests (scapy; nothing here needs root)."""

from __future__ import annotations

from dlcp.network import pipeline_names as P
from dlcp.wire.header import DATA_PORT, FLAG_TELEMETRY, DlcpHeader, Probe, pack_probe, probe_header, tos_of


def dlcp_frame(
    dst="10.0.0.2",
    src="10.0.0.1",
    prio=1,
    drop_prec=0,
    ttl=64,
    sport=40000,
    payload=64,
    telemetry=False,
    udp_csum=None,
    seq=0,
    tos=None,
    dport=DATA_PORT,
) -> bytes:
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw

    head = DlcpHeader(
        prio=prio, drop_prec=drop_prec, flags=FLAG_TELEMETRY if telemetry else 0, n_pkts=max(seq + 1, 1), seq=seq
    ).pack()
    body = head + (bytes(8) if telemetry else b"") + bytes(payload)
    udp = UDP(sport=sport, dport=dport) if udp_csum is None else UDP(sport=sport, dport=dport, chksum=udp_csum)
    pkt = (
        Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:fe")
        / IP(src=src, dst=dst, ttl=ttl, tos=tos_of(prio, drop_prec) if tos is None else tos)
        / udp
        / Raw(body)
    )
    return bytes(pkt)


def probe_frame(dst="10.0.0.2", src="10.0.0.1", prio=1, ttl=64, sport=40000, round=1, n_pkts=9) -> bytes:
    """An in-band PROBE (DLCP type PROBE, drop precedence 0, PROTECTED) as the transport sends it."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw

    body = pack_probe(probe_header(DlcpHeader(n_pkts=n_pkts, msg_id=3), prio), Probe(round, 0, n_pkts))
    return bytes(
        Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:fe")
        / IP(src=src, dst=dst, ttl=ttl, tos=tos_of(prio, 0))
        / UDP(sport=sport, dport=DATA_PORT)
        / Raw(body)
    )


def udp_frame(dst="10.0.0.2", src="10.0.0.1", sport=5000, dport=6000, tos=0, ttl=64, payload=32) -> bytes:
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw

    return bytes(
        Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:fe")
        / IP(src=src, dst=dst, ttl=ttl, tos=tos)
        / UDP(sport=sport, dport=dport)
        / Raw(bytes(payload))
    )


def entry(table, action, params, **kw) -> dict:
    return {"table": table, "action_name": action, "action_params": params, **kw}


def runtime_doc(
    ports=(1, 2, 3, 4),
    routes=None,
    lb_mode="per_flow",
    classify=True,
    thresholds=None,
    port_cfg=None,
    intf=lambda p: f"sw-eth{p}",
    port_thresholds=None,
    ecn_k=None,
    ecn_entries=(),
) -> dict:
    """A star: 10.0.0.K/32 -> port K; `routes` maps a prefix to a list of member ports (a group).
    `ecn_k`: the switch-wide ECN threshold; `ecn_entries`: (match dict, priority, k) overrides."""
    routes = routes if routes is not None else {f"10.0.0.{p}/32": [p] for p in ports}
    entries = [entry(P.LB_CONFIG, P.SET_LB_MODE, {"mode": P.LB_MODES[lb_mode]}, default_action=True)]
    for g, (prefix, members) in enumerate(routes.items(), start=1):
        addr, plen = prefix.split("/")
        entries.append(
            entry(
                P.IPV4_LPM, P.SET_NHOP_GROUP, {"group": g, "size": len(members)}, match={"ipv4_dst": [addr, int(plen)]}
            )
        )
        for m, port in enumerate(members):
            if port is None:
                continue  # a hole in the group: nhop miss
            entries.append(
                entry(
                    P.NHOP,
                    P.SET_NHOP,
                    {"dmac": f"02:00:00:00:01:{port:02x}", "port": port},
                    match={"nhop_group": g, "nhop_member": m},
                )
            )
    if classify:
        entries.append(entry(P.CLASSIFY, P.CLASSIFY_FROM_DLCP, {}, match={"dlcp_valid": 1}, priority=10))
        entries.append(entry(P.CLASSIFY, P.CLASSIFY_FROM_DSCP, {}, match={"dlcp_valid": 0}, priority=10))
    if thresholds:
        entries.append(
            entry(
                P.QUEUE_THRESHOLDS,
                P.SET_THRESHOLDS,
                dict(zip(("qmax", "k1", "k2", "k3"), thresholds)),
                default_action=True,
            )
        )
    for port, th in (port_thresholds or {}).items():
        entries.append(
            entry(
                P.QUEUE_THRESHOLDS,
                P.SET_THRESHOLDS,
                dict(zip(("qmax", "k1", "k2", "k3"), th)),
                match={"egress_port": port},
            )
        )
    if ecn_k is not None:
        entries.append(entry(P.ECN_THRESHOLD, P.SET_ECN_THRESHOLD, {"k": ecn_k}, default_action=True))
    for match, prio, k in ecn_entries:
        entries.append(entry(P.ECN_THRESHOLD, P.SET_ECN_THRESHOLD, {"k": k}, match=match, priority=prio))
    port_cfg = port_cfg or {}
    return {
        "switch": "sw",
        "device_id": 1,
        "target": "builtin",
        "registers": [],
        "table_entries": entries,
        "ports": [{"port": p, "intf": intf(p), **port_cfg.get(p, {})} for p in ports],
    }
