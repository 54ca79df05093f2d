"""The simulated hosts' send side against the emulated UDP driver (dlcp/transport/udp_driver.py):
its send thread hands one transmission to a blocking socket and asks the transport core for the
next only once the socket took all of it. A message's start (its DESCRIBE) therefore waits while
the socket is full, and a message queued behind a long one waits in the NIC behind at most a send
buffer's worth of packets. Before this was modelled, ns-3's hosts took every queued message from
the core at once: the parameter server's scatter started all its pulls at one instant, and the
last of them counted the whole scatter as its own completion time. The simulation runs in a child
process (one simulator per process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ns3_scripts import STAR3_NETWORK

from simulation.ns3.hosts import core_missing
from simulation.ns3.loader import available

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.skipif(
        available() is not None or core_missing() is not None, reason=str(available() or core_missing())
    ),
]

N_LONG = 300  # packets of the first message: far more than the send buffer holds

SCRIPT = (
    r"""
import json
import numpy as np
from dlcp.experiment import config as C
from dlcp.network import topology as T
from dlcp.transport.api import SendInfo, TransportConfig
from dlcp.wire import header as H
from dlcp.wire.chunking import MessageId, packetize
from dlcp.wire.tagging import tag_message
from simulation.ns3 import loader
from simulation.ns3.hosts import HostStack, send_buffer_packets, transport_config
from simulation.ns3.network import build_network
"""
    + STAR3_NETWORK
    + r"""
stack = HostStack(ns, net, d["data_port"], d["control_port"], cfg["links"]["host_queue_pkts"])
hosts = []
for rank, name in enumerate(("h1", "h2", "h3")):
    # no congestion window: a message is one transmission, as a window grown large makes it
    tcfg = transport_config(TransportConfig, {**d, "cc": "none"}, rank=rank, job_id=1, ip=spec.hosts[name].ip, host=name)
    hosts.append(stack.add(name, rank, tcfg, lambda h, key, res: None, lambda h, key, res: None))
h1, h2, h3 = hosts
vpp = h1.endpoint.cfg.values_per_pkt


def batch(n_pkts, msg_id):
    g = np.random.default_rng(msg_id).standard_normal(n_pkts * vpp).astype(np.float32)
    tags = tag_message(g, [0], [0], 1, values_per_pkt=vpp)
    return packetize(g, MessageId(job_id=1, src_rank=0, msg_id=msg_id, phase=H.PHASE_PUSH), tags, vpp)


def send_both():  # one call after the other, as the PS's scatter hands its messages over
    h1.send(1, batch(__N_LONG__, 1), SendInfo(rec_msg_id=1))
    h1.send(2, batch(1, 2), SendInfo(rec_msg_id=2))


stack.clock.at(0.001, send_both)
ns.Simulator.Stop(ns.Seconds(1.0))
ns.Simulator.Run()
stack.take_all()
sent = {r["msg_id"]: r for r in h1.endpoint.sender.rows}
got = {r["msg_id"]: r for h in (h2, h3) for r in h.endpoint.receiver.rows}
print(json.dumps({"sent": sent, "got": got,
                  "budget": send_buffer_packets(tcfg.sndbuf_bytes, cfg["links"]["host_queue_pkts"])}))
"""
)


def _run(script: str) -> dict:
    p = subprocess.run(
        [sys.executable, "-c", script.replace("__N_LONG__", str(N_LONG))],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_a_message_starts_once_the_socket_took_the_one_before():
    """h1 hands a 300-packet message for h2 and a 1-packet message for h3 to its transport at one
    instant. The short one starts when the socket took the long one's last packet (300 less a send
    buffer's worth of packets later), and its packet reaches h3 after waiting behind one send
    buffer's worth in the NIC, not behind the whole long message."""
    r = _run(SCRIPT)
    long_sent, short_sent = r["sent"]["1"], r["sent"]["2"]
    long_got, short_got = r["got"]["1"], r["got"]["2"]
    assert long_got["pkts"] == N_LONG and short_got["pkts"] == 1
    frame_us = (long_got["complete_us"] - long_got["first_byte_us"]) / (N_LONG - 1)  # the bottleneck's pace
    budget = r["budget"]
    assert 50 < budget < N_LONG - 50
    started_after = (short_sent["start_us"] - long_sent["start_us"]) / frame_us
    assert abs(started_after - (N_LONG - budget)) <= 3, (started_after, budget)
    waited_in_nic = (short_got["first_byte_us"] - short_sent["start_us"]) / frame_us
    assert abs(waited_in_nic - budget) <= 3, (waited_in_nic, budget)


def test_with_host_fair_queueing_the_short_message_does_not_wait_behind_the_long_one():
    """links.host_fair_queueing: the NIC serves h2 and h3 round-robin (one FIFO each, as the
    emulated hosts' HTB leaves), so the short message for h3 still starts once the socket took the
    long one, but reaches h3 a few frame times later (its datagrams each wait for a slot in the
    full socket and one turn of the round robin, then two hops), not behind a send buffer's worth
    of the long one's packets (113)."""
    fair = SCRIPT.replace('"links": {"host_mbps": 50}', '"links": {"host_mbps": 50, "host_fair_queueing": True}')
    assert fair != SCRIPT
    r = _run(fair)
    long_sent, short_sent = r["sent"]["1"], r["sent"]["2"]
    long_got, short_got = r["got"]["1"], r["got"]["2"]
    assert long_got["pkts"] == N_LONG and short_got["pkts"] == 1
    frame_us = (long_got["complete_us"] - long_got["first_byte_us"]) / (N_LONG - 1)
    started_after = (short_sent["start_us"] - long_sent["start_us"]) / frame_us
    assert abs(started_after - (N_LONG - r["budget"])) <= 3, (started_after, r["budget"])
    waited_in_nic = (short_got["first_byte_us"] - short_sent["start_us"]) / frame_us
    assert waited_in_nic <= 10, waited_in_nic  # 7 here
