"""p4/dlcp.p4 on a real simple_switch_grpc (root + bmv2): forwarding and counters, the priority
numbering and queue rates of bmv2, early drop by precedence, spray vs per-flow load balancing,
queue telemetry, and the start-up errors. Each test starts its own switch on its own veth pairs."""

from __future__ import annotations

import pytest

from dlcp.network import pipeline_names as pn
from dlcp.network.runtime_file import Entry
from dlcp.network.switch_runtime import Route, SwitchConfig

pytest.importorskip("p4runtime_sh", reason="needs the bmv2 extra (make setup)")

from bmv2_rig import PREFIX, SENDER, bmv2_rig, host_ip, host_mac
from frames import dlcp_frame, flow_member, udp_frame

from emulation import (
    netns,
    procs,
)

SRC = host_ip(SENDER)


@pytest.fixture(autouse=True)
def own_pid_records(tmp_path, monkeypatch):
    """Record this test's switch apart from the machine-wide records: `dlcp clean` (say, in the
    runner tests of another checkout running at the same time) stops every recorded process."""
    monkeypatch.setattr(procs, "STATE_DIR", tmp_path / "pids")
    monkeypatch.setenv("DLCP_STATE_DIR", str(tmp_path / "pids"))


def test_forwarding_rewrites_headers_and_counters_match(tmp_path):
    with bmv2_rig(tmp_path, 3, SwitchConfig(policy="dlcp")) as rig:
        dl = [dlcp_frame(SRC, host_ip(2), prio=6, drop_prec=1, seq=i) for i in range(5)]
        other = [udp_frame(SRC, host_ip(3), 5000, 5001, bytes(100), dscp=(2 << 3) | (1 << 1)) for _ in range(3)]
        bad = [
            udp_frame(SRC, host_ip(2), 5000, 5001, b"x", ttl=1),  # ttl_expired
            bytes.fromhex("ffffffffffff000000000001 0806".replace(" ", "")) + bytes(28),  # ARP: not_ipv4
            dlcp_frame(SRC, host_ip(2), ver=2),  # parser_error
            dlcp_frame(SRC, host_ip(2))[:50],  # short: parser_error
            udp_frame(SRC, "10.9.9.9", 5000, 5001, b"x"),  # no_route
        ]
        rig.send(dl + other + bad)
        got = rig.collect([1, 2, 3])
        assert (len(got[1]), len(got[2]), len(got[3])) == (0, 5, 3)
        for _, p in got[2] + got[3]:
            assert p.ttl == 63 and p.ip_ok and p.udp_ok
            assert p.src_mac == "00:00:00:00:00:bb"  # the old destination MAC
        assert {p.dst_mac for _, p in got[2]} == {host_mac(2)} and {p.dst_mac for _, p in got[3]} == {host_mac(3)}
        assert [p.dlcp.seq for _, p in got[2]] == list(range(5))

        dump = rig.counters()
        assert dump["queues"] == [
            {
                "port": 2,
                "qid": 6,
                "color": 1,
                "admitted_pkts": 5,
                "admitted_bytes": 5 * len(dl[0]),
                "early_drop_pkts": 0,
                "early_drop_bytes": 0,
                "tail_drop_pkts": 0,
                "tail_drop_bytes": 0,
            },
            {
                "port": 3,
                "qid": 2,
                "color": 1,
                "admitted_pkts": 3,
                "admitted_bytes": 3 * len(other[0]),
                "early_drop_pkts": 0,
                "early_drop_bytes": 0,
                "tail_drop_pkts": 0,
                "tail_drop_bytes": 0,
            },
        ]
        assert dump["drops"] == {"parser_error": 2, "not_ipv4": 1, "no_route": 1, "ttl_expired": 1}


def test_fifo_policy_puts_everything_in_queue_0(tmp_path):
    with bmv2_rig(tmp_path, 2, SwitchConfig(policy="fifo")) as rig:
        rig.send([dlcp_frame(SRC, host_ip(2), prio=6, drop_prec=3) for _ in range(4)])
        assert len(rig.collect([2], want=4)[2]) == 4
        assert [(q["port"], q["qid"], q["color"], q["admitted_pkts"]) for q in rig.counters()["queues"]] == [
            (2, 0, 0, 4)
        ]


def test_priority_queues_pin_bmv2_numbering_and_rates(tmp_path):
    """bmv2 facts the pipeline relies on (docs/pipeline.md, Queues):
    - standard_metadata.priority 7 is served first;
    - Thrift's per-priority queue calls address the same numbering;
    - rates apply per priority queue, not per port."""
    with bmv2_rig(tmp_path, 4, SwitchConfig(policy="dlcp")) as rig, rig.thrift() as th:
        # (a) Port 2's queues are created by this call, all with the same last-sent time, so the
        # first packet of every priority becomes due at the same instant (t + 1 s), the second
        # ones at t + 2 s: the switch then serves them in priority order although they were sent
        # lowest first.
        th.set_queue_rate(2, 1)
        rig.send([dlcp_frame(SRC, host_ip(2), prio=p, seq=r) for r in range(2) for p in (0, 3, 7)])
        order = [p.dlcp.prio for _, p in rig.collect([2], want=6, quiet_s=1.5, limit_s=6)[2]]
        assert order == [7, 3, 0, 7, 3, 0]

        # (b) Only priority 7 of port 3 is slowed down (2 packets/s); priority 0 passes at once.
        th.set_queue_rate(3, 2, priority=7)
        rig.send([dlcp_frame(SRC, host_ip(3), prio=p, seq=i) for i in range(4) for p in (7, 0)])
        got = rig.collect([3], want=8, quiet_s=1.0, limit_s=6)[3]
        t0 = got[0][0]
        low = [t - t0 for t, p in got if p.dlcp.prio == 0]
        high = [t - t0 for t, p in got if p.dlcp.prio == 7]
        assert len(low) == len(high) == 4
        assert max(low) < 0.5 < 1.2 < max(high)

        # (c) 10 packets/s on every queue of port 4: four busy priorities drain at 10 packets/s
        # each, so 4 x 5 packets take about 0.4 s, not the 1.9 s a per-port rate would take.
        th.set_queue_rate(4, 10)
        rig.send([dlcp_frame(SRC, host_ip(4), prio=p, seq=i) for i in range(5) for p in (7, 5, 3, 0)])
        got = rig.collect([4], want=20, limit_s=6)[4]
        assert len(got) == 20
        assert got[-1][0] - got[0][0] < 1.0


def test_early_drop_of_droppable_packets_before_protected(tmp_path):
    cfg = SwitchConfig(policy="dlcp", qmax=24, k1=16, k2=12, k3=8)
    with bmv2_rig(tmp_path, 2, cfg, port_opts={2: {"rate_pps": 10, "queue_depth_pkts": 64}}) as rig:
        burst = [dlcp_frame(SRC, host_ip(2), prio=3, drop_prec=dp, seq=i) for i in range(24) for dp in (0, 3)]
        rig.send(burst)  # a few ms; at 10 packets/s hardly any leaves meanwhile
        got = rig.collect([2], limit_s=8)[2]
        rows = {q["color"]: q for q in rig.counters()["queues"] if (q["port"], q["qid"]) == (2, 3)}
        protected, droppable = rows[0], rows[3]
        # drop_prec 0 is never dropped early; only the full queue (qmax) drops it
        assert protected["early_drop_pkts"] == 0
        assert protected["admitted_pkts"] + protected["tail_drop_pkts"] == 24
        assert protected["admitted_pkts"] >= 18
        # drop_prec 3 goes once 8 packets wait (later, with 24 waiting, the tail drop takes it)
        assert droppable["admitted_pkts"] + droppable["early_drop_pkts"] + droppable["tail_drop_pkts"] == 24
        assert droppable["admitted_pkts"] <= 6 and droppable["early_drop_pkts"] >= 12
        dp3_seqs = [p.dlcp.seq for _, p in got if p.dlcp.drop_prec == 3]
        dp0_seqs = [p.dlcp.seq for _, p in got if p.dlcp.drop_prec == 0]
        assert dp3_seqs == list(range(len(dp3_seqs)))  # the first ones, before the queue built
        assert max(dp0_seqs) >= max(dp3_seqs) + 10  # protected ones kept coming after that
        # what was admitted is what came out, and the occupancy went back to zero
        assert sum(1 for _, p in got if p.dlcp.drop_prec == 0) == protected["admitted_pkts"]
        assert sum(1 for _, p in got if p.dlcp.drop_prec == 3) == droppable["admitted_pkts"]
        with rig.thrift() as th:
            assert th.register_read(pn.OCCUPANCY, pn.occupancy_index(2, 3)) == 0


def test_spray_spreads_one_dlcp_flow_while_other_flows_stay_on_one_path(tmp_path):
    group = (2, 3, 4)
    dst = "10.0.9.9"
    routes = [Route(f"{host_ip(k)}/32", (k,)) for k in range(1, 5)] + [Route("10.0.9.0/24", group)]
    with bmv2_rig(tmp_path, 4, SwitchConfig(policy="dlcp", load_balancing="spray_rr"), routes=routes) as rig:

        def counts(frames, n):
            rig.send(frames)
            got = rig.collect(list(group), want=n, limit_s=10)
            return {k: len(got[k]) for k in group}

        def set_mode(mode):
            rig.switch.p4rt.write_entries(
                [Entry(pn.LB_CONFIG, pn.SET_LB_MODE, {"mode": pn.LB_MODES[mode]}, default=True)]
            )

        one_flow = [dlcp_frame(SRC, dst, seq=i) for i in range(300)]
        assert counts(one_flow, 300) == {2: 100, 3: 100, 4: 100}  # round-robin

        udp = [udp_frame(SRC, dst, 40001, 5001, bytes(64)) for _ in range(60)]
        tcp = [udp_frame(SRC, dst, 40002, 80, bytes(64), proto=6) for _ in range(60)]
        for frames, proto, sport, dport in ((udp, 17, 40001, 5001), (tcp, 6, 40002, 80)):
            member = group[flow_member(SRC, dst, proto, sport, dport, len(group))]
            assert counts(frames, 60) == {k: (60 if k == member else 0) for k in group}, proto

        set_mode("spray_random")
        c = counts(one_flow, 300)
        assert sum(c.values()) == 300 and min(c.values()) >= 60, c  # mean 100, sd 8

        set_mode("per_flow")
        member = group[flow_member(SRC, dst, 17, 40000, 9910, len(group))]
        assert counts(one_flow[:60], 60) == {k: (60 if k == member else 0) for k in group}


def test_telemetry_is_stamped_in_place_with_valid_checksums(tmp_path):
    with bmv2_rig(tmp_path, 2, SwitchConfig(policy="dlcp"), port_opts={2: {"rate_pps": 100}}) as rig:
        frames = [dlcp_frame(SRC, host_ip(2), prio=2, seq=i, telemetry=True) for i in range(10)]
        frames.append(dlcp_frame(SRC, host_ip(2), prio=2, seq=10, telemetry=True, udp_checksum=False))
        rig.send(frames)
        got = [p for _, p in rig.collect([2], want=11, limit_s=5)[2]]
        assert [p.dlcp.seq for p in got] == list(range(11))
        assert all(p.length == len(frames[0]) for p in got)
        assert all(p.telemetry.hops == 1 and p.udp_ok for p in got)
        assert got[-1].udp_checksum == 0 and all(p.udp_checksum != 0 for p in got[:-1])
        depths = [p.telemetry.max_enq_qdepth for p in got]
        waits = [p.telemetry.sum_deq_timedelta_us for p in got]
        assert depths[0] == 0 and depths[9] >= 5  # the queue built up behind the rate limit
        assert waits[9] >= 40_000  # ~10 ms per packet ahead of it at 100 packets/s


def test_veth_prefix_is_ours():
    assert PREFIX.startswith("pf") and len(PREFIX) + 2 <= netns.IFNAMSIZ


def test_bench_bmv2_prints_its_figures():  # DLCP_STATE_DIR (own_pid_records) reaches the bench
    import json
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "dlcp_cli", "bench", "bmv2", "--seconds", "0.5", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["bmv2_kpps"] > 0 and result["direct_kpps"] > 0 and result["frame_bytes"] == 1466
    assert "bmv2 p4/dlcp.p4" in out.stdout


def test_two_switches_from_one_process_in_a_chain(tmp_path):
    """h1 - s1 - s2 - h2: two simple_switch_grpc driven from this process; a telemetry packet
    comes out with two hops stamped and the TTL down by two."""
    from fake_p4runtime import free_port
    from frames import parse

    from dlcp.network.switch_runtime import Port, SwitchTopo, runtime_for
    from emulation.bmv2.simple_switch import start_bmv2

    a1, h1, a2, b1, b2, h2 = (f"{PREFIX}{n}" for n in ("a1", "h1", "a2", "b1", "b2", "h2"))
    cfg = SwitchConfig(policy="dlcp")
    s1 = runtime_for(
        SwitchTopo(
            f"{PREFIX}c1",
            1,
            (
                Port(1, a1, "h1", host_mac(1), queue_depth_pkts=None),
                Port(2, a2, "s2", "02:dc:00:00:02:01", queue_depth_pkts=None),
            ),
            (Route(f"{host_ip(2)}/32", (2,)),),
        ),
        cfg,
    )
    s2 = runtime_for(
        SwitchTopo(
            f"{PREFIX}c2",
            2,
            (
                Port(1, b1, "s1", "02:dc:00:00:01:02", queue_depth_pkts=None),
                Port(2, b2, "h2", host_mac(2), queue_depth_pkts=None),
            ),
            (Route(f"{host_ip(2)}/32", (2,)),),
        ),
        cfg,
    )
    with netns.Lab("pf") as lab:
        for a, b in ((a1, h1), (a2, b1), (b2, h2)):
            lab.veth(a, None, b, None, offloads=True)
        tx, rx = netns.raw_socket(h1), netns.raw_socket(h2)
        sw1 = start_bmv2(s1["switch"], s1, {1: a1, 2: a2}, tmp_path, grpc_port=free_port(), thrift_port=free_port())
        try:
            sw2 = start_bmv2(s2["switch"], s2, {1: b1, 2: b2}, tmp_path, grpc_port=free_port(), thrift_port=free_port())
            try:
                netns.drain(rx)
                tx.send(dlcp_frame(SRC, host_ip(2), telemetry=True, ttl=20))
                got = [parse(f) for _, f in netns.receive(rx, quiet_s=1.0, want=1)]
                assert len(got) == 1 and got[0].ttl == 18 and got[0].ip_ok and got[0].udp_ok
                assert got[0].telemetry.hops == 2 and got[0].dst_mac == host_mac(2)
                assert sw1.counter_dump()["queues"][0]["port"] == 2 and sw2.counter_dump()["queues"][0]["port"] == 2
            finally:
                sw2.stop()
        finally:
            sw1.stop()
            tx.close()
            rx.close()
