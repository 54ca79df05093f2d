"""`make_transport`: the bounded-loss transport or the plain-TCP baseline, as the settings say."""

from __future__ import annotations

from dlcp.transport.api import TransportConfig
from dlcp.transport.bounded_loss import Transport
from dlcp.transport.tcp_baseline import TcpTransport

TRANSPORTS = {"dlcp": Transport, "tcp": TcpTransport}


def make_transport(config: TransportConfig, peers):
    """The bounded-loss transport (`config.transport` dlcp) or the plain-TCP baseline (tcp), same
    interface."""
    return TRANSPORTS[config.transport](config, peers)
