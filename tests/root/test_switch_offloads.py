"""Hosts with default offloads (TSO/GSO, TX checksum offload) talk through the switch: TCP sends
64 KiB GSO super-frames and UDP leaves with partial checksums; the vnet header must carry both
through the switch so real sockets on the other side accept the data."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import textwrap

import pytest
from switch_frames import runtime_doc
from switch_harness import ENGINES, BuiltinSwitchSUT

from emulation.netns import Lab, sh

SERVER = textwrap.dedent("""
    import hashlib, socket, sys
    kind = sys.argv[1]
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM if kind == "tcp" else socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, 33, 8 << 20)  # SO_RCVBUFFORCE: the switch forwards in bursts
    s.bind(("10.0.0.2", 5001)); s.settimeout(5)
    h, n = hashlib.sha256(), 0
    if kind == "tcp":
        s.listen(1); print("ready", flush=True); c, _ = s.accept(); c.settimeout(20)
        while (b := c.recv(1 << 16)):
            h.update(b); n += len(b)
    else:
        print("ready", flush=True)
        try:
            while n < int(sys.argv[2]):
                b = s.recv(65536); h.update(b); n += len(b)
        except socket.timeout:
            pass
    print(n, h.hexdigest(), flush=True)
""")

CLIENT = textwrap.dedent("""
    import socket, sys
    kind, data = sys.argv[1], bytes(range(256)) * 4 * int(sys.argv[2])
    if kind == "tcp":
        s = socket.create_connection(("10.0.0.2", 5001), timeout=20); s.sendall(data); s.close()
    else:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for i in range(0, len(data), 1024):
            s.sendto(data[i:i + 1024], ("10.0.0.2", 5001))
""")


@pytest.mark.parametrize("engine", ENGINES)
def test_gso_tcp_and_partial_checksum_udp_through_the_switch(tmp_path, engine):
    with Lab(f"rso{engine[0]}") as lab:
        h1, h2 = lab.netns("h1"), lab.netns("h2")
        p = lab.prefix
        intf = {1: f"{p}p1", 2: f"{p}p2"}
        for k, ns in ((1, h1), (2, h2)):
            lab.veth(f"{p}h{k}", ns, intf[k], None, offloads=True)
            sh("ip", "link", "set", f"{p}h{k}", "address", f"02:00:00:00:01:{k:02x}", ns=ns)
            sh("ip", "addr", "add", f"10.0.0.{k}/24", "dev", f"{p}h{k}", ns=ns)
            # the switch forwards IPv4 only: neighbours are static (any MAC reaches the switch port)
            sh("ip", "neigh", "add", f"10.0.0.{3 - k}", "lladdr", "02:00:00:00:00:fe", "dev", f"{p}h{k}", ns=ns)
        sut = BuiltinSwitchSUT(engine)
        sut.start(
            runtime_doc(
                ports=(1, 2),
                intf=intf.get,
                thresholds=(4096, 4096, 4096, 4096),
                port_cfg={1: {"queue_depth_pkts": 4096}, 2: {"queue_depth_pkts": 4096}},
            ),
            tmp_path,
        )
        try:
            for kind, kib in (("tcp", 8192), ("udp", 256)):
                server = subprocess.Popen(
                    ["ip", "netns", "exec", h2, sys.executable, "-c", SERVER, kind, str(kib * 1024)],
                    stdout=subprocess.PIPE,
                    text=True,
                )
                assert server.stdout.readline().strip() == "ready"
                subprocess.run(
                    ["ip", "netns", "exec", h1, sys.executable, "-c", CLIENT, kind, str(kib)], check=True, timeout=60
                )
                n, digest = server.communicate(timeout=60)[0].split()
                data = bytes(range(256)) * 4 * kib
                if kind == "tcp":
                    assert int(n) == len(data) and digest == hashlib.sha256(data).hexdigest()
                else:  # every datagram passed the receiver's checksum test (partial checksums survived)
                    assert int(n) == len(data)
            c = sut.counters()
        finally:
            sut.stop()
    p1 = next(p for p in c["ports"] if p["port"] == 1)
    assert p1["rx_bytes"] / p1["rx_pkts"] > 1514, "no GSO super-frame reached the switch (offloads off?)"
    assert c["drops"]["parser_error"] == 0
