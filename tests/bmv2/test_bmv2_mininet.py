"""Bmv2Switch in a real Mininet network: two hosts exchange DLCP datagrams over real UDP sockets
through simple_switch_grpc; stopping the net dumps the counters and leaves no process behind."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from dlcp.network.switch_runtime import Port, Route, SwitchConfig, SwitchTopo, runtime_for, write_runtime

pytest.importorskip("p4runtime_sh", reason="needs the bmv2 extra (make setup)")

from bmv2_rig import PREFIX
from fake_p4runtime import free_port

from emulation import procs
from emulation.switches import Bmv2Switch

RECEIVER = textwrap.dedent("""
    import json, socket, sys
    from dlcp.wire.header import unpack_from
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("10.0.0.2", 9910))
    s.settimeout(5.0)
    print("ready", flush=True)
    got = []
    try:
        while len(got) < int(sys.argv[1]):
            h = unpack_from(s.recv(2048))
            got.append([h.seq, h.prio, h.drop_prec])
    except socket.timeout:
        pass
    print(json.dumps(got))
""")

SENDER = textwrap.dedent("""
    import socket, sys
    from dlcp.wire.header import DlcpHeader, tos_of
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for i in range(int(sys.argv[1])):
        s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos_of(5, i % 2))
        s.sendto(DlcpHeader(prio=5, drop_prec=i % 2, seq=i, n_pkts=1000).pack() + bytes(400), ("10.0.0.2", 9910))
""")


def test_bmv2switch_carries_real_udp_and_cleans_up(tmp_path, monkeypatch):
    monkeypatch.setattr(procs, "STATE_DIR", tmp_path / "pids")  # apart from other runs' `dlcp clean`
    from mininet.net import Mininet

    h1, h2, s1 = f"{PREFIX}h1", f"{PREFIX}h2", f"{PREFIX}s1"
    mac1, mac2 = "00:00:00:00:01:01", "00:00:00:00:01:02"
    topo = SwitchTopo(
        s1,
        1,
        (Port(1, f"{s1}-eth1", h1, mac1), Port(2, f"{s1}-eth2", h2, mac2)),
        (Route("10.0.0.1/32", (1,)), Route("10.0.0.2/32", (2,))),
    )
    runtime = write_runtime(runtime_for(topo, SwitchConfig(policy="dlcp")), tmp_path / "runtime")

    net = Mininet(controller=None, build=False, autoSetMacs=False)
    try:
        a = net.addHost(h1, ip="10.0.0.1/24", mac=mac1)
        b = net.addHost(h2, ip="10.0.0.2/24", mac=mac2)
        sw = net.addSwitch(
            s1, cls=Bmv2Switch, runtime_json=runtime, run_dir=tmp_path, grpc_port=free_port(), thrift_port=free_port()
        )
        net.addLink(a, sw, port1=0, port2=1)
        net.addLink(b, sw, port1=0, port2=2)
        net.build()
        net.start()
        pid = sw.dataplane.pid
        for host, peer in ((a, b), (b, a)):
            host.setARP(peer.IP(), peer.MAC())
            host.cmd(f"ethtool -K {host.defaultIntf()} tx off rx off")  # the switch forwards bytes as they are

        assert "1 received" in a.cmd("ping -c1 -W2 10.0.0.2")
        receiver = b.popen([sys.executable, "-c", RECEIVER, "20"], stdout=subprocess.PIPE, text=True)
        assert receiver.stdout.readline().strip() == "ready"
        assert a.popen([sys.executable, "-c", SENDER, "20"]).wait(timeout=20) == 0
        got = json.loads(receiver.communicate(timeout=20)[0])
        assert [g[0] for g in got] == list(range(20))
        queues = {(q["port"], q["qid"], q["color"]): q["admitted_pkts"] for q in sw.dataplane.counter_dump()["queues"]}
        assert queues[(2, 5, 0)] == 10 and queues[(2, 5, 1)] == 10
    finally:
        net.stop()
    dump = json.loads((tmp_path / "counters" / f"{s1}.json").read_text())
    assert dump["switch"] == s1 and dump["backend"] == "bmv2"
    assert sum(q["admitted_pkts"] for q in dump["queues"]) >= 20
    assert pid not in {i["pid"] for i in procs.recorded()}
    assert subprocess.run(["kill", "-0", str(pid)], capture_output=True).returncode != 0
