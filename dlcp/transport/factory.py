"""`make_transport`: the bounded-loss transport or the plain-TCP baseline by name."""

from __future__ import annotations

from dlcp.transport.api import TransportConfig
from dlcp.transport.tcp_baseline import TcpTransport
from dlcp.transport.udp_driver import UdpTransport

TRANSPORTS = ("dlcp", "tcp")


def make_transport(config: TransportConfig, peers, kind: str = "dlcp"):
    """The bounded-loss transport (`dlcp`) or the plain-TCP baseline (`tcp`), same interface."""
    if kind == "tcp":
        return TcpTransport(config, peers)
    if kind != "dlcp":
        raise ValueError(f"dlcp.transport: {kind!r} is not one of {', '.join(TRANSPORTS)}")
    return UdpTransport(config, peers)
