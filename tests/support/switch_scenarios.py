"""Conformance scenarios as data: what goes in (frames, ports, timing), what must come out.

Each scenario names
  runtime: keyword arguments of switch_frames.runtime_doc (routes, lb_mode, thresholds, ports)
  send:    bursts, in order: {"port": ingress port, "n": copies, "frame": frame spec, "gap_us": spacing}
           frame spec: {"kind": "dlcp" | "udp" | "raw", ...builder arguments}; "vary_sport": a new UDP
           source port per copy (a new flow each)
  expect:  "out": {port: exact count} (ports not listed must stay silent), "out_range": {port: [lo, hi]},
           "drops": {reason: count}, "queues": {"port,qid,color": {counter: count}}, "tol": slack for
           timing-dependent counts, "checks": named property checks (harness.CHECKS) with arguments
  settle_s: how long the outputs are captured after the last frame
  DETERMINISTIC scenarios (no "tol", no "out_range": nothing depends on timing or chance) also hold
           every engine's counters to the reference model's (switch_harness.check_counters)
  bmv2:    only where bmv2 cannot agree with docs/pipeline.md's shared-port-rate model: "differs"
           says why, and either a reformulation of the scenario for bmv2 (keys runtime, send,
           expect, settle_s replace the scenario's) or "start_error": what bmv2's start must refuse

Ports 1-4 exist in every scenario; 10.0.0.K/32 routes to port K unless `routes` says otherwise.
"""

from __future__ import annotations

DST = "10.0.0.2"
SPRAY = {"10.0.0.2/32": [2], "10.0.0.9/32": [2, 3, 4]}
PER_QUEUE_RATES = (
    "bmv2 rate-limits every priority queue on its own (docs/pipeline.md, bmv2 specifics): "
    "the two priorities drain side by side at the full rate each instead of sharing the "
    "port, so the high one does not go first; bmv2's strict priority only orders packets "
    "due at the same moment. Reformulated: at 1 packet/s the first packet of every "
    "queue of a port is due 1 s after the queues were configured, the second 2 s after, "
    "so a burst sent lowest priority first must come out 7, 3, 0 per round."
)


FULL = 1472  # UDP payload bytes of a 1514-byte frame: one wrr quantum (dlcp/queueing QUANTUM_BYTES)
WRR_ON_BMV2 = {
    "differs": "bmv2's priority queues serve strict priority only: the runtime's wrr port is refused",
    "start_error": "queueing 'wrr' cannot run on bmv2",
}


def _full_frames(dst: str, prio: int, n: int) -> dict:
    """n full-size frames without a DLCP header, classified by DSCP into queue `prio`."""
    return {"port": 1, "n": n, "frame": {"kind": "udp", "dst": dst, "tos": prio << 5, "payload": FULL}}


def _wrr(*weights) -> dict:
    return {"discipline": "wrr", "weights": list(weights)}


def _due_together(kind: str) -> dict:
    """The bmv2 form of a priority-order scenario: 2 rounds of priorities 0, 3, 7 at 1 packet/s."""

    def frame(prio):
        if kind == "dlcp":
            return {"kind": "dlcp", "dst": DST, "prio": prio}
        return {"kind": "udp", "dst": DST, "tos": prio << 5}

    return {
        "differs": PER_QUEUE_RATES,
        "runtime": {"port_cfg": {2: {"rate_pps": 1}}},
        "send": [{"port": 1, "n": 1, "frame": frame(p)} for _ in range(2) for p in (0, 3, 7)],
        "expect": {
            "out": {2: 6},
            "checks": [[f"priority_order{'' if kind == 'dlcp' else '_by_dscp'}", [7, 3, 0, 7, 3, 0], 0]],
        },
        "settle_s": 2.6,
    }


SCENARIOS = [
    {
        "name": "forward_basic",
        "runtime": {},
        "send": [{"port": 1, "n": 10, "frame": {"kind": "dlcp", "dst": DST, "prio": 3, "drop_prec": 1, "ttl": 9}}],
        "expect": {
            "out": {2: 10},
            "queues": {"2,3,1": {"admitted_pkts": 10, "admitted_bytes": 10 * 130}},
            "checks": [["ttl_is", 8], ["macs_rewritten"], ["checksums_valid"]],
        },
        "settle_s": 0.3,
    },
    {
        "name": "priority_order_under_congestion",
        "runtime": {"port_cfg": {2: {"rate_pps": 100}}},
        "send": [
            {"port": 1, "n": 20, "frame": {"kind": "dlcp", "dst": DST, "prio": 1}},
            {"port": 1, "n": 20, "frame": {"kind": "dlcp", "dst": DST, "prio": 6}},
        ],
        # the first prio-1 packet finds the port idle and leaves at once; then all of prio 6 first
        "expect": {"out": {2: 40}, "checks": [["priority_order", [6] * 20 + [1] * 20, 3]]},
        "settle_s": 0.75,
        "bmv2": _due_together("dlcp"),
    },
    {
        "name": "dscp_priority_for_non_dlcp",
        "runtime": {"port_cfg": {2: {"rate_pps": 100}}},
        "send": [
            {"port": 1, "n": 15, "frame": {"kind": "udp", "dst": DST, "tos": (1 << 5)}},
            {"port": 1, "n": 15, "frame": {"kind": "udp", "dst": DST, "tos": (5 << 5)}},
        ],
        "expect": {"out": {2: 30}, "checks": [["priority_order_by_dscp", [5] * 15 + [1] * 15, 3]]},
        "settle_s": 0.55,
        "bmv2": _due_together("dscp"),
    },
    {
        "name": "early_drop_per_precedence",
        "runtime": {"port_cfg": {2: {"rate_pps": 100}}, "port_thresholds": {2: [32, 24, 16, 8]}},
        "send": [
            {"port": 1, "n": 20, "frame": {"kind": "dlcp", "dst": DST, "prio": 2, "drop_prec": c}} for c in (3, 2, 1, 0)
        ],
        # occupancy climbs through k3, k2, k1, qmax; the first packet leaves at once
        "expect": {
            "out": {2: 33},
            "tol": 2,
            "queues": {
                "2,2,3": {"admitted_pkts": 9, "early_drop_pkts": 11},
                "2,2,2": {"admitted_pkts": 8, "early_drop_pkts": 12},
                "2,2,1": {"admitted_pkts": 8, "early_drop_pkts": 12},
                "2,2,0": {"admitted_pkts": 8, "early_drop_pkts": 0, "tail_drop_pkts": 12},
            },
        },
        "settle_s": 0.5,
    },
    {
        "name": "ecn_marks_from_k",
        "runtime": {
            "port_cfg": {2: {"rate_pps": 100}},
            "ecn_k": 4,
            "ecn_entries": [({"egress_port": 3, "qid": 2}, 10, 1000)],
        },
        "send": [
            {"port": 1, "n": 20, "frame": {"kind": "dlcp", "dst": DST, "prio": 2, "tos": (2 << 5) | 2}},
            {"port": 1, "n": 5, "frame": {"kind": "dlcp", "dst": DST, "prio": 4, "tos": 4 << 5}},
        ],
        # occupancy of (2, q2) climbs; the first packet leaves at once, the next 4 find fewer than K
        # ahead, the rest are marked; not-ECT packets (q4) are never marked
        "expect": {
            "out": {2: 25},
            "tol": 1,
            "queues": {"2,2,0": {"admitted_pkts": 20}},
            "checks": [["ce_marks", 2, 5, 15, 5, 1]],
        },
        "settle_s": 0.45,
    },
    {
        "name": "tail_drop_fifo",
        # 100 pps: what the port sends while the burst is still going in comes on top of qmax + 1;
        # at 200 pps bmv2 once let 68 out (1 of 5 CI runs, not reproduced alone or under load)
        "runtime": {"classify": False, "port_cfg": {2: {"rate_pps": 100}}},
        "send": [{"port": 1, "n": 90, "frame": {"kind": "dlcp", "dst": DST, "prio": 5, "drop_prec": 3}}],
        # fifo: no classify entries, so everything is queue 0, color 0: only qmax (64) drops
        "expect": {"out": {2: 65}, "tol": 2, "queues": {"2,0,0": {"admitted_pkts": 65, "tail_drop_pkts": 25}}},
        "settle_s": 0.9,  # 65 frames at 100 pps, and some margin
    },
    {
        "name": "spray_round_robin",
        "runtime": {"routes": SPRAY, "lb_mode": "spray_rr"},
        "send": [{"port": 1, "n": 30, "frame": {"kind": "dlcp", "dst": "10.0.0.9"}}],
        "expect": {"out": {2: 10, 3: 10, 4: 10}, "checks": [["register", "DlcpIngress.rr_next", "2", 30]]},
        "settle_s": 0.3,
    },
    {
        "name": "spray_random",
        "runtime": {"routes": SPRAY, "lb_mode": "spray_random"},
        "send": [{"port": 1, "n": 300, "frame": {"kind": "dlcp", "dst": "10.0.0.9"}, "gap_us": 50}],
        "expect": {"out_range": {2: [60, 140], 3: [60, 140], 4: [60, 140]}, "checks": [["total_out", 300]]},
        "settle_s": 0.3,
    },
    {
        "name": "per_flow_stickiness",
        "runtime": {"routes": SPRAY, "lb_mode": "spray_random"},
        # non-DLCP traffic is hashed per flow even in a spray mode: 12 flows x 4 packets
        "send": [{"port": 1, "n": 4, "frame": {"kind": "udp", "dst": "10.0.0.9", "sport": 7000 + f}} for f in range(12)]
        * 1,
        "expect": {"checks": [["flows_sticky_crc16", [2, 3, 4]], ["total_out", 48]]},
        "settle_s": 0.3,
    },
    {
        "name": "ttl_expiry",
        "runtime": {},
        "send": [
            {"port": 1, "n": 5, "frame": {"kind": "dlcp", "dst": DST, "ttl": 1}},
            {"port": 1, "n": 5, "frame": {"kind": "dlcp", "dst": DST, "ttl": 0}},
            {"port": 1, "n": 5, "frame": {"kind": "dlcp", "dst": DST, "ttl": 2}},
        ],
        "expect": {"out": {2: 5}, "drops": {"ttl_expired": 10}, "checks": [["ttl_is", 1], ["checksums_valid"]]},
        "settle_s": 0.3,
    },
    {
        "name": "no_route",
        "runtime": {"routes": {"10.0.0.2/32": [2], "10.0.0.9/32": [3, None]}, "lb_mode": "spray_rr"},
        "send": [
            {"port": 1, "n": 5, "frame": {"kind": "dlcp", "dst": "10.9.9.9"}},
            {"port": 1, "n": 10, "frame": {"kind": "dlcp", "dst": "10.0.0.9"}},
        ],  # half hit the hole
        "expect": {"out": {3: 5}, "drops": {"no_route": 10}},
        "settle_s": 0.3,
    },
    {
        "name": "malformed",
        "runtime": {},
        "send": [
            {"port": 1, "n": 5, "frame": {"kind": "raw", "name": "truncated_dlcp"}},
            {"port": 1, "n": 5, "frame": {"kind": "raw", "name": "dlcp_version_2"}},
            {"port": 1, "n": 5, "frame": {"kind": "raw", "name": "truncated_telemetry"}},
            {"port": 1, "n": 5, "frame": {"kind": "raw", "name": "truncated_ipv4"}},
            {"port": 1, "n": 5, "frame": {"kind": "raw", "name": "arp"}},
            {"port": 1, "n": 5, "frame": {"kind": "raw", "name": "ipv6"}},
            {"port": 1, "n": 5, "frame": {"kind": "udp", "dst": DST, "dport": 9911}},
        ],  # not DLCP: fine
        "expect": {"out": {2: 5}, "drops": {"parser_error": 20, "not_ipv4": 10}},
        "settle_s": 0.3,
    },
    {
        "name": "telemetry_stamped",
        "runtime": {"port_cfg": {2: {"rate_pps": 200}}},
        "send": [
            {"port": 1, "n": 10, "frame": {"kind": "dlcp", "dst": DST, "telemetry": True}},
            {"port": 1, "n": 3, "frame": {"kind": "dlcp", "dst": DST, "telemetry": True, "udp_csum": 0}},
        ],
        "expect": {"out": {2: 13}, "checks": [["telemetry", 1, 5, 20000], ["checksums_valid"]]},
        "settle_s": 0.3,
    },
    {
        "name": "telemetry_depth_is_per_priority_queue",
        "runtime": {"port_cfg": {2: {"rate_pps": 100}}},
        # 9 prio-1 packets wait when the prio-6 ones arrive; enq_qdepth counts only the packet's own
        # queue (bmv2's semantics), so the prio-6 packets see at most the 2 prio-6 packets ahead
        "send": [
            {"port": 1, "n": 10, "frame": {"kind": "dlcp", "dst": DST, "prio": 1}},
            {"port": 1, "n": 3, "frame": {"kind": "dlcp", "dst": DST, "prio": 6, "telemetry": True}},
        ],
        "expect": {"out": {2: 13}, "checks": [["telemetry_depths", 6, 3, 0, 2]]},
        "settle_s": 0.3,
    },
    {
        "name": "link_delay_and_loss",
        "runtime": {"port_cfg": {2: {"delay_us": 80000}, 3: {"loss": 0.5}}},
        "send": [
            {"port": 1, "n": 5, "frame": {"kind": "dlcp", "dst": DST}},
            {"port": 1, "n": 200, "frame": {"kind": "dlcp", "dst": "10.0.0.3"}},
        ],
        "expect": {"out": {2: 5}, "out_range": {3: [60, 140]}, "checks": [["min_latency_s", 2, 0.075]]},
        "settle_s": 0.4,
        "bmv2": {
            "differs": "bmv2 has no link delay or random loss: the controller refuses delay_us and loss",
            "start_error": "delay_us and loss need the built-in switch",
        },
    },
    {
        "name": "wrr_weights_under_congestion",
        # queue 1 (weight 1) and queue 6 (weight 3) backlogged on a 100 packets/s port: the first
        # frame of queue 1 leaves at once, then rounds of 3 frames of queue 6 and 1 of queue 1 until
        # queue 6 is empty
        "runtime": {"port_cfg": {2: {"rate_pps": 100, "queueing": _wrr(1, 1, 1, 1, 1, 1, 3, 1)}}},
        "send": [_full_frames(DST, 1, 20), _full_frames(DST, 6, 20)],
        "expect": {
            "out": {2: 40},
            "queues": {"2,1,0": {"admitted_pkts": 20}, "2,6,0": {"admitted_pkts": 20}},
            "checks": [["wrr_shares", 2, {"6": 3, "1": 1}, 1]],
        },
        "settle_s": 0.6,
        "bmv2": WRR_ON_BMV2,
    },
    {
        "name": "wrr_skips_empty_queues",
        # queue 6 has weight 8 but nothing to send: it costs no slot (work-conserving), queues 1 and 3
        # share the port 1:2, and the port never idles while a queue holds a frame
        "runtime": {"port_cfg": {2: {"rate_pps": 100, "queueing": _wrr(1, 1, 1, 2, 1, 1, 8, 1)}}},
        "send": [_full_frames(DST, 1, 12), _full_frames(DST, 3, 12)],
        "expect": {
            "out": {2: 24},
            "checks": [["wrr_shares", 2, {"3": 2, "1": 1}, 1], ["paced", 2, 100, 1]],
        },
        "settle_s": 0.45,
        "bmv2": WRR_ON_BMV2,
    },
    {
        "name": "strict_and_wrr_side_by_side",
        # the same two bursts to a strict port and to a wrr port of equal weights: strict sends all
        # of queue 6 before queue 1, wrr alternates
        "runtime": {"port_cfg": {2: {"rate_pps": 100}, 3: {"rate_pps": 100, "queueing": _wrr(*[1] * 8)}}},
        "send": [
            _full_frames(DST, 1, 15),
            _full_frames(DST, 6, 15),
            _full_frames("10.0.0.3", 1, 15),
            _full_frames("10.0.0.3", 6, 15),
        ],
        "expect": {
            "out": {2: 30, 3: 30},
            "checks": [
                ["priority_order_by_dscp", [6] * 15 + [1] * 15, 3],
                ["wrr_shares", 3, {"6": 1, "1": 1}, 1],
            ],
        },
        "settle_s": 0.55,
        "bmv2": WRR_ON_BMV2,
    },
]

# the scenarios whose counts depend on neither timing nor chance: every engine must write the
# reference model's counters for them (switch_harness.check_counters)
DETERMINISTIC = frozenset(
    s["name"] for s in SCENARIOS if not s["expect"].get("tol") and not s["expect"].get("out_range")
)
