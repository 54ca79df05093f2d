"""A bmv2 switch on veth pairs for the bmv2 tests: port k of the switch is `<prefix>sk`, its peer
`<prefix>hk` stays in the root namespace where the test sends and captures raw frames. Host k is
10.0.0.k with MAC 00:00:00:00:00:0k."""

from __future__ import annotations

import contextlib
import select
import socket
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from fake_p4runtime import free_port
from frames import parse

from dlcp.network.switch_runtime import Port, Route, SwitchConfig, SwitchTopo, runtime_for
from emulation import netns
from emulation.bmv2 import simple_switch as bmv2switch
from emulation.bmv2.control import ThriftSwitch

PREFIX = netns.unique_prefix("pf")
SENDER = 1


def host_ip(k: int) -> str:
    return f"10.0.0.{k}"


def host_mac(k: int) -> str:
    return f"00:00:00:00:00:{k:02x}"


@dataclass
class Rig:
    switch: bmv2switch.Bmv2Process
    sockets: dict[int, socket.socket]
    thrift_port: int
    run_dir: Path
    runtime: dict = field(default_factory=dict)

    def send(self, frames: list[bytes], port: int = SENDER) -> None:
        s = self.sockets[port]
        for f in frames:
            s.send(f)

    def collect(self, ports, quiet_s: float = 0.5, limit_s: float = 10.0, want: int | None = None):
        """port -> [(arrival time, Parsed)] of the UDP frames from the sender host, until no port has
        had a frame for `quiet_s`, `want` frames came, or `limit_s` is over."""
        out = defaultdict(list)
        by_sock = {self.sockets[p]: p for p in ports}
        end = time.monotonic() + limit_s
        got = 0
        while want is None or got < want:
            left = end - time.monotonic()
            if left <= 0:
                break
            ready, _, _ = select.select(list(by_sock), [], [], min(quiet_s, left))
            if not ready:
                break
            now = time.monotonic()
            for s in ready:
                frame, addr = s.recvfrom(65535)
                parsed = parse(frame) if addr[2] != socket.PACKET_OUTGOING else None
                if parsed is not None and parsed.src_ip == host_ip(SENDER):
                    out[by_sock[s]].append((now, parsed))
                    got += 1
        return out

    def thrift(self) -> ThriftSwitch:
        return ThriftSwitch(self.thrift_port, name=self.switch.name)

    def counters(self) -> dict:
        return self.switch.counter_dump()


@contextlib.contextmanager
def bmv2_rig(run_dir: Path, n_ports: int, cfg: SwitchConfig, routes=None, port_opts=None) -> Iterator[Rig]:
    """Switch with ports 1..n_ports; routes default to 10.0.0.k/32 -> port k; `port_opts[k]` overrides
    Port fields (rate_pps, queue_depth_pkts, ...)."""
    port_opts = port_opts or {}
    pairs = [(f"{PREFIX}s{k}", f"{PREFIX}h{k}") for k in range(1, n_ports + 1)]
    ports = tuple(
        Port(
            **{
                "port": k,
                "intf": pairs[k - 1][0],
                "peer": f"h{k}",
                "peer_mac": host_mac(k),
                "queue_depth_pkts": None,
                **port_opts.get(k, {}),
            }
        )
        for k in range(1, n_ports + 1)
    )
    routes = routes or tuple(Route(f"{host_ip(k)}/32", (k,)) for k in range(1, n_ports + 1))
    runtime = runtime_for(SwitchTopo(f"{PREFIX}s", 1, ports, tuple(routes)), cfg)
    with netns.Lab("pf") as lab:
        for a, b in pairs:
            lab.veth(a, None, b, None, offloads=True)  # the switch turns its side's offloads off
        sockets = {k: netns.raw_socket(pairs[k - 1][1]) for k in range(1, n_ports + 1)}
        thrift_port = free_port()
        sw = bmv2switch.start_bmv2(
            f"{PREFIX}s",
            runtime,
            {k: pairs[k - 1][0] for k in range(1, n_ports + 1)},
            run_dir,
            grpc_port=free_port(),
            thrift_port=thrift_port,
        )
        try:
            for s in sockets.values():
                netns.drain(s)
            yield Rig(sw, sockets, thrift_port, run_dir, runtime)
        finally:
            sw.stop()
            for s in sockets.values():
                s.close()
