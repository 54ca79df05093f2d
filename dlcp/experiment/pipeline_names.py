"""Names and sizes of the DLCP switch pipeline, shared by the runtime-entry generator, the built-in
dataplane and the tests. `p4/dlcp.p4` is the specification; a test checks these names against its
P4Info (or its source when p4c is absent). Semantics: docs/pipeline.md.
"""

from __future__ import annotations

MAX_PORTS = 64  # port numbers 0..63 (Mininet interface sN-ethK is port K)
N_QUEUES = 8  # strict-priority queues per port; 7 is served first
N_COLORS = 4  # drop precedences
MAX_GROUPS = 1024  # next-hop groups

# ingress tables: name -> (keys as (name, match kind)), actions
IPV4_LPM = "DlcpIngress.ipv4_lpm"
NHOP = "DlcpIngress.nhop"
LB_CONFIG = "DlcpIngress.lb_config"
CLASSIFY = "DlcpIngress.classify"
QUEUE_THRESHOLDS = "DlcpIngress.queue_thresholds"
ECN_THRESHOLD = "DlcpIngress.ecn_threshold"  # p4/include/ecn.p4

SET_NHOP_GROUP = "DlcpIngress.set_nhop_group"  # (group: bit<16>, size: bit<16>)
SET_NHOP = "DlcpIngress.set_nhop"  # (dmac: bit<48>, port: bit<9>)
DROP = "DlcpIngress.drop"
SET_LB_MODE = "DlcpIngress.set_lb_mode"  # (mode: bit<2>)
CLASSIFY_FROM_DLCP = "DlcpIngress.classify_from_dlcp"
CLASSIFY_FROM_DSCP = "DlcpIngress.classify_from_dscp"
SET_CLASS = "DlcpIngress.set_class"  # (qid: bit<3>, color: bit<2>)
SET_THRESHOLDS = "DlcpIngress.set_thresholds"  # (qmax, k1, k2, k3: bit<32>, packets)
SET_ECN_THRESHOLD = "DlcpIngress.set_ecn_threshold"  # (k: bit<32>, packets; ECN_NEVER = never mark)
NO_ACTION = "NoAction"

TABLES = {
    IPV4_LPM: {"keys": [("ipv4_dst", "lpm")], "actions": [SET_NHOP_GROUP, DROP],
               "default": (DROP, {})},
    NHOP: {"keys": [("nhop_group", "exact"), ("nhop_member", "exact")], "actions": [SET_NHOP, DROP],
           "default": (DROP, {})},
    LB_CONFIG: {"keys": [], "actions": [SET_LB_MODE], "default": (SET_LB_MODE, {"mode": 0})},
    CLASSIFY: {"keys": [("dlcp_valid", "exact"), ("dlcp_prio", "ternary"), ("dlcp_drop_prec", "ternary"),
                        ("dscp", "ternary")],
               "actions": [CLASSIFY_FROM_DLCP, CLASSIFY_FROM_DSCP, SET_CLASS],
               "default": (SET_CLASS, {"qid": 0, "color": 0})},
    QUEUE_THRESHOLDS: {"keys": [("egress_port", "exact")], "actions": [SET_THRESHOLDS],
                       "default": (SET_THRESHOLDS, {"qmax": 64, "k1": 48, "k2": 32, "k3": 16})},
    ECN_THRESHOLD: {"keys": [("egress_port", "ternary"), ("qid", "ternary")], "actions": [SET_ECN_THRESHOLD],
                    "default": (SET_ECN_THRESHOLD, {"k": 10})},
}
ECN_NEVER = 0xFFFFFFFF  # an ECN threshold no queue reaches

ACTION_PARAMS = {
    SET_NHOP_GROUP: [("group", 16), ("size", 16)],
    SET_NHOP: [("dmac", 48), ("port", 9)],
    DROP: [],
    SET_LB_MODE: [("mode", 2)],
    CLASSIFY_FROM_DLCP: [],
    CLASSIFY_FROM_DSCP: [],
    SET_CLASS: [("qid", 3), ("color", 2)],
    SET_THRESHOLDS: [("qmax", 32), ("k1", 32), ("k2", 32), ("k3", 32)],
    SET_ECN_THRESHOLD: [("k", 32)],
}

LB_MODES = {"per_flow": 0, "spray_random": 1, "spray_rr": 2}

# registers
OCCUPANCY = "DlcpIngress.occupancy"  # bit<32>[MAX_PORTS * N_QUEUES], index port * 8 + qid
RR_NEXT = "DlcpIngress.rr_next"  # bit<16>[MAX_GROUPS], next round-robin value per group
REGISTERS = {OCCUPANCY: MAX_PORTS * N_QUEUES, RR_NEXT: MAX_GROUPS}

# indirect counters (packets and bytes)
ADMITTED = "DlcpIngress.admitted"  # index port * 32 + qid * 4 + color
EARLY_DROPS = "DlcpIngress.early_drops"  # same index
TAIL_DROPS = "DlcpIngress.tail_drops"  # same index
DROPS = "DlcpIngress.drops"  # index = drop reason below
CE_MARKED = "DlcpIngress.ce_marked"  # index port * 8 + qid: packets marked CE (p4/include/ecn.p4)
QUEUE_COUNTERS = (ADMITTED, EARLY_DROPS, TAIL_DROPS)
COUNTERS = {ADMITTED: MAX_PORTS * N_QUEUES * N_COLORS, EARLY_DROPS: MAX_PORTS * N_QUEUES * N_COLORS,
            TAIL_DROPS: MAX_PORTS * N_QUEUES * N_COLORS, DROPS: 8, CE_MARKED: MAX_PORTS * N_QUEUES}
DROP_REASONS = {"parser_error": 0, "not_ipv4": 1, "no_route": 2, "ttl_expired": 3}

# direct counters
IPV4_LPM_HITS = "DlcpIngress.ipv4_lpm_hits"
CLASSIFY_HITS = "DlcpIngress.classify_hits"
DIRECT_COUNTERS = {IPV4_LPM_HITS: IPV4_LPM, CLASSIFY_HITS: CLASSIFY}


def queue_counter_index(port: int, qid: int, color: int) -> int:
    return (port * N_QUEUES + qid) * N_COLORS + color


def queue_counter_key(index: int) -> tuple[int, int, int]:
    """(port, qid, color) of a queue counter index."""
    port_q, color = divmod(index, N_COLORS)
    port, qid = divmod(port_q, N_QUEUES)
    return port, qid, color


def occupancy_index(port: int, qid: int) -> int:
    return port * N_QUEUES + qid
