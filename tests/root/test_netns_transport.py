"""The transport between real network namespaces (root): through the built-in switch with a slow
strict-priority port (the PS-incast PROBE problem in miniature), and the control listener's SYN-ACK
priority.

    h1 (10.0.0.1) --port 1--\
                             sw (built-in switch) --port 2: 4 Mbit/s, 8 strict-priority queues-- h2 (10.0.0.2)
    h3 (10.0.0.3) --port 3--/
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import numpy as np
from switch_frames import runtime_doc

from dlcp.transport.api import Peer, SendInfo, TransportConfig
from dlcp.transport.udp_driver import UdpTransport
from dlcp.wire import header as H
from dlcp.wire.chunking import MessageId, packetize
from dlcp.wire.tagging import Tags
from emulation.dataplane import BuiltinProcess
from emulation.netns import Lab, in_netns, raw_socket, sh

VPP = 50
PORTS = (1, 2, 3)


def _mac(port: int) -> str:
    return f"02:00:00:00:01:{port:02x}"  # what runtime_doc's nhop entries rewrite the destination to


class Star:
    """Three hosts on one built-in switch, every name prefixed `tq` + PID; all removed on close()."""

    def __init__(self, tmp: Path, port_cfg: dict):
        self.lab = Lab("tq")
        self.switch = None
        try:
            p = self.lab.prefix
            self.hosts = {}
            for k in PORTS:
                ns = self.lab.netns(f"h{k}")
                self.lab.veth(f"{p}h{k}", ns, f"{p}p{k}", None)
                sh("ip", "link", "set", f"{p}h{k}", "address", _mac(k), ns=ns)
                sh("ip", "addr", "add", f"10.0.0.{k}/24", "dev", f"{p}h{k}", ns=ns)
                for j in PORTS:  # the switch forwards IPv4 only: no ARP
                    if j != k:
                        sh(
                            "ip",
                            "neigh",
                            "replace",
                            f"10.0.0.{j}",
                            "lladdr",
                            "02:00:00:00:00:fe",
                            "dev",
                            f"{p}h{k}",
                            "nud",
                            "permanent",
                            ns=ns,
                        )
                self.hosts[k] = ns
            rt = runtime_doc(
                ports=PORTS, intf=lambda k: f"{p}p{k}", thresholds=(1000, 1000, 1000, 1000), port_cfg=port_cfg
            )
            (tmp / "runtime.json").write_text(json.dumps(rt))
            self.switch = BuiltinProcess(f"{p}sw", tmp / "runtime.json", tmp)
            self.switch.start()
        except BaseException:
            self.close()
            raise

    def transport(self, k: int, **kw) -> UdpTransport:
        with in_netns(self.hosts[k]):  # sockets and threads live in the host's namespace
            return UdpTransport(
                TransportConfig(rank=k, ip=f"10.0.0.{k}", data_port=9910, control_port=9911, values_per_pkt=VPP, **kw),
                [],
            )

    def connect(self, t: UdpTransport, k: int) -> None:
        with in_netns(self.hosts[k]):
            t.connect()

    def close(self) -> dict:
        counters = {}
        if self.switch is not None:
            self.switch.stop()
            if self.switch.counters_path.exists():
                counters = self.switch.counters()
            self.switch = None
        self.lab.close()
        return counters


def _message(n: int, prio: int, src: int):
    g = np.random.default_rng(src).standard_normal(n * VPP).astype(np.float32)
    tags = Tags(
        prio=np.full(n, prio, np.uint8),
        drop_prec=np.zeros(n, np.uint8),
        mag_class=np.full(n, 8, np.uint8),
        layer_id=np.zeros(n, np.uint16),
    )
    return g, packetize(g, MessageId(job_id=1, src_rank=src, msg_id=5, phase=H.PHASE_PUSH), tags, VPP)


def test_low_priority_message_queued_behind_strict_priority_is_not_forced(tmp_path):
    # Sender C (h3)'s priority-6 message holds sender A (h1)'s priority-1 message ~150 ms in the
    # switch's port toward the receiver B (h2). Control (priority 7) overtakes both; a PROBE on the
    # control channel made B ask for all of A's queued data and force A after r_max rounds (this
    # test fails that way with the old transport). The in-band PROBE waits behind A's data.
    star = Star(tmp_path, port_cfg={2: {"rate_mbps": 4.0, "queue_depth_pkts": 1000}})
    ts = {}
    try:
        ts = {k: star.transport(k, r_max=2) for k in PORTS}
        for k in (1, 3):
            ts[k].add_peer(Peer(2, "10.0.0.2"))
            ts[2].add_peer(Peer(k, f"10.0.0.{k}"))
            star.connect(ts[k], k)
        g_c, big = _message(300, 6, 3)
        g_a, small = _message(60, 1, 1)
        hc = ts[3].send(2, big, SendInfo(rec_msg_id=5))
        time.sleep(0.01)  # C's packets reach the switch first
        ha = ts[1].send(2, small, SendInfo(rec_msg_id=5))
        ra = ts[2].recv(1, 0, H.PHASE_PUSH, 5, timeout=10)
        rc = ts[2].recv(3, 0, H.PHASE_PUSH, 5, timeout=10)
        sa, sc = ha.wait(10), hc.wait(10)
        assert sa.mct_us > 100_000  # A's data really waited behind C's
        assert (sa.forced, sa.rounds, sa.retx_pkts) == (False, 1, 0)
        assert (sc.forced, sc.rounds, sc.retx_pkts) == (False, 1, 0)
        np.testing.assert_array_equal(ra.values, g_a)
        np.testing.assert_array_equal(rc.values, g_c)
        st = ts[2].stats()
        assert st["premature_bitmaps"] == 0 and st["drops"].get("late", 0) == 0 and st["duplicates"] == 0
    finally:
        for t in ts.values():
            t.close()
        counters = star.close()
    # the switch queued A's packets and its PROBE(s) in priority 1, C's in 6, control in 7
    q = {(r["port"], r["qid"]): r["admitted_pkts"] for r in counters["queues"]}
    assert q[(2, 6)] >= 301 and q[(2, 1)] >= 61 and q.get((2, 7), 0) > 0


def test_control_handshake_travels_at_control_priority(tmp_path):
    lab = Lab("tq")
    try:
        ns = lab.netns("l")
        cap = raw_socket("lo", ns)
        cap.settimeout(0.2)
        with in_netns(ns):
            t = UdpTransport(TransportConfig(rank=1, data_port=0, control_port=0), [])
            try:
                c = socket.create_connection(("127.0.0.1", t.control_port), timeout=2)
                c.close()
                synack = None
                deadline = time.monotonic() + 3
                while synack is None and time.monotonic() < deadline:
                    try:
                        f = cap.recv(2048)
                    except TimeoutError:
                        continue
                    if (
                        f[12:14] == b"\x08\x00"
                        and f[23] == 6
                        and int.from_bytes(f[34:36], "big") == t.control_port
                        and f[47] & 0x12 == 0x12
                    ):  # TCP SYN+ACK from the listener
                        synack = f
            finally:
                t.close()
                cap.close()
        assert synack is not None, "no SYN-ACK captured"
        assert synack[15] == H.tos_of(H.PRIO_CONTROL, 0)
    finally:
        lab.close()
