"""Network namespaces and veth pairs for tests and benchmarks that run switches without Mininet.

A `Lab` owns every namespace it creates and deletes them all (which deletes their veths) on
`close()`, also after an error or Ctrl-C when used as a context manager. Names carry a caller-given
prefix plus the PID, so parallel runs and other users of the machine never collide.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import socket
import subprocess
from pathlib import Path

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def sh(*cmd: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """Run a command (inside namespace `ns` when given); a failure raises with its stderr."""
    argv = (["ip", "netns", "exec", ns] if ns else []) + list(cmd)
    p = subprocess.run(argv, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({p.returncode}): {p.stderr.strip()}")
    return p


@contextlib.contextmanager
def in_netns(ns: str):
    """Run the body with this thread in namespace `ns` (sockets made there stay there)."""
    with open("/proc/thread-self/ns/net") as home, open(f"/run/netns/{ns}") as target:
        if _libc.setns(target.fileno(), CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into {ns}")
        try:
            yield
        finally:
            if _libc.setns(home.fileno(), CLONE_NEWNET) != 0:  # pragma: no cover - cannot recover
                raise OSError(ctypes.get_errno(), "setns back to the original namespace")


def raw_socket(ns: str, intf: str, rcvbuf: int = 8 << 20) -> socket.socket:
    """A bound AF_PACKET socket on `intf` in namespace `ns` (send and capture frames)."""
    with in_netns(ns):
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        s.setsockopt(socket.SOL_SOCKET, 33, rcvbuf)  # SO_RCVBUFFORCE
        s.setsockopt(263, 23, 1)  # PACKET_IGNORE_OUTGOING: do not capture what we send
        s.bind((intf, 0x0003))
    return s


class Lab:
    """Namespaces joined by veth pairs, all removed on close()."""

    def __init__(self, prefix: str):
        self.prefix = f"{prefix}{os.getpid()}"
        self.namespaces: list[str] = []

    def __enter__(self) -> "Lab":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def netns(self, suffix: str) -> str:
        name = f"{self.prefix}{suffix}"
        sh("ip", "netns", "add", name)
        self.namespaces.append(name)
        # no IPv6 autoconfiguration: stray router/neighbour solicitations would reach the switch
        for key in ("all", "default"):
            sh("sysctl", "-qw", f"net.ipv6.conf.{key}.disable_ipv6=1", ns=name)
        sh("ip", "link", "set", "lo", "up", ns=name)
        return name

    def veth(self, a: str, ns_a: str, b: str, ns_b: str, mtu: int = 1500, offloads: bool = False) -> None:
        """A veth pair a@ns_a <-> b@ns_b, both up; offloads off unless asked (then frames can be
        GSO super-frames with partial checksums, as from a host with default settings)."""
        sh("ip", "link", "add", a, "netns", ns_a, "mtu", str(mtu), "type", "veth", "peer", "name", b,
           "netns", ns_b, "mtu", str(mtu))
        for name, ns in ((a, ns_a), (b, ns_b)):
            if not offloads:
                sh("ethtool", "-K", name, "tx", "off", "rx", "off", "tso", "off", "gso", "off", "gro", "off",
                   ns=ns, check=False)
            sh("ip", "link", "set", name, "up", ns=ns)

    def close(self) -> None:
        errors = []
        for ns in reversed(self.namespaces):
            p = sh("ip", "netns", "del", ns, check=False)
            if p.returncode != 0 and Path(f"/run/netns/{ns}").exists():
                errors.append(p.stderr.strip())
        self.namespaces.clear()
        if errors:
            raise RuntimeError("; ".join(errors))


def link_counters(ns: str, intf: str) -> dict:
    """Kernel counters of an interface: rx_packets, tx_packets, rx_dropped, ..."""
    out = sh("ip", "-j", "-s", "link", "show", "dev", intf, ns=ns).stdout
    st = json.loads(out)[0]["stats64"]
    return {f"rx_{k}": v for k, v in st["rx"].items()} | {f"tx_{k}": v for k, v in st["tx"].items()}
