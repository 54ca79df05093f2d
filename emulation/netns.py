"""Network namespaces, veth pairs and raw frames for tests and benchmarks that run switches, agents
or transports on real network stacks without Mininet.

- `sh(*cmd, ns=None)`: run a command (inside namespace `ns`); a failure raises NetError with stderr.
- `in_netns(ns)`: this thread inside `ns` for the body (sockets made there stay there).
- `Lab(tag)`: owns the namespaces and veth pairs it makes (either end in a namespace or in the root
  namespace) and removes them all on `close()`, also after an error or Ctrl-C when used as a
  context manager. Names start with `tag` plus the PID (`unique_prefix`), so parallel runs and other
  users of the machine never collide.
- `BridgeLan`, `RateLink`: small host networks built on a Lab.
- `raw_socket`, `drain`, `receive`: whole Ethernet frames in and out of an interface (AF_PACKET).
- `link_counters`: the kernel's counters of an interface.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

CLONE_NEWNET = 0x40000000
ETH_P_ALL = 0x0003
SO_RCVBUFFORCE = 33  # <asm-generic/socket.h>; not exported by the socket module
SOL_PACKET, PACKET_IGNORE_OUTGOING = 263, 23  # <linux/if_packet.h>
IFNAMSIZ = 15  # longest interface name
_libc = ctypes.CDLL(None, use_errno=True)


class NetError(RuntimeError):
    """A namespace or link command failed; the message has the command and its stderr."""


def sh(*cmd: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """Run a command (inside namespace `ns` when given); a failure raises NetError with its stderr."""
    argv = (["ip", "netns", "exec", ns] if ns else []) + list(cmd)
    p = subprocess.run(argv, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise NetError(f"`{' '.join(argv)}` failed ({p.returncode}): {p.stderr.strip() or p.stdout.strip()}")
    return p


@contextlib.contextmanager
def in_netns(ns: str | None):
    """Run the body with this thread in namespace `ns` (None: stay where it is)."""
    if ns is None:
        yield
        return
    with open("/proc/thread-self/ns/net") as home, open(f"/run/netns/{ns}") as target:
        if _libc.setns(target.fileno(), CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into {ns}")
        try:
            yield
        finally:
            if _libc.setns(home.fileno(), CLONE_NEWNET) != 0:  # pragma: no cover - cannot recover
                raise OSError(ctypes.get_errno(), "setns back to the original namespace")


def unique_prefix(tag: str) -> str:
    """A short per-process prefix for names: `<tag><pid base 36>`."""
    pid, digits = os.getpid(), ""
    while pid:
        pid, r = divmod(pid, 36)
        digits = "0123456789abcdefghijklmnopqrstuvwxyz"[r] + digits
    return tag + digits


# --- namespaces and links ------------------------------------------------------------------------------


class Lab:
    """Namespaces joined by veth pairs, all removed on close()."""

    def __init__(self, tag: str):
        self.prefix = unique_prefix(tag)
        self.namespaces: list[str] = []
        self.root_links: list[str] = []  # veth ends in the root namespace

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def netns(self, suffix: str) -> str:
        """A new namespace `<prefix><suffix>` with lo up and no IPv6."""
        name = f"{self.prefix}{suffix}"
        sh("ip", "netns", "add", name)
        self.namespaces.append(name)
        # no IPv6 autoconfiguration: stray router/neighbour solicitations would reach the switch
        for key in ("all", "default"):
            sh("sysctl", "-qw", f"net.ipv6.conf.{key}.disable_ipv6=1", ns=name)
        sh("ip", "link", "set", "lo", "up", ns=name)
        return name

    def veth(self, a: str, ns_a: str | None, b: str, ns_b: str | None, mtu: int = 1500, offloads: bool = False) -> None:
        """A veth pair a@ns_a <-> b@ns_b (None: the root namespace), both up and without IPv6;
        offloads off unless asked (then frames can be GSO super-frames with partial checksums, as
        from a host with default settings)."""
        for name, ns in ((a, ns_a), (b, ns_b)):
            if ns is None and len(name) > IFNAMSIZ:
                raise ValueError(f"interface name {name!r} longer than {IFNAMSIZ} characters")
        where = lambda ns: ["netns", ns] if ns else []
        sh(
            "ip",
            "link",
            "add",
            a,
            *where(ns_a),
            "mtu",
            str(mtu),
            "type",
            "veth",
            "peer",
            "name",
            b,
            *where(ns_b),
            "mtu",
            str(mtu),
        )
        self.root_links += [name for name, ns in ((a, ns_a), (b, ns_b)) if ns is None]
        for name, ns in ((a, ns_a), (b, ns_b)):
            if ns is None:  # namespaces made here have IPv6 off already
                sh("sysctl", "-qw", f"net.ipv6.conf.{name}.disable_ipv6=1")
            if not offloads:
                sh(
                    "ethtool",
                    "-K",
                    name,
                    "tx",
                    "off",
                    "rx",
                    "off",
                    "tso",
                    "off",
                    "gso",
                    "off",
                    "gro",
                    "off",
                    ns=ns,
                    check=False,
                )
            sh("ip", "link", "set", name, "up", ns=ns)

    def close(self) -> None:
        errors = []
        for name in self.root_links:  # deleting one end deletes the pair
            sh("ip", "link", "del", name, check=False)
        self.root_links.clear()
        for ns in reversed(self.namespaces):
            p = sh("ip", "netns", "del", ns, check=False)
            if p.returncode != 0 and Path(f"/run/netns/{ns}").exists():
                errors.append(p.stderr.strip())
        self.namespaces.clear()
        if errors:
            raise NetError("; ".join(errors))


@dataclass
class Host:
    name: str  # short name (h1, h2, ...)
    ns: str  # network namespace
    ip: str

    def prefix(self) -> list[str]:
        """Command prefix that runs a program inside this host."""
        return ["ip", "netns", "exec", self.ns]


class BridgeLan(Lab):
    """`n_hosts` hosts h1..hN (10.77.0.1..N/24 by default) on a Linux bridge in namespace
    `<prefix>br`; host offloads stay at the kernel's defaults."""

    def __init__(self, tag: str, n_hosts: int, subnet: str = "10.77.0"):
        super().__init__(tag)
        self.hosts: list[Host] = []
        try:
            br = self.netns("br")
            sh("ip", "link", "add", "br0", "type", "bridge", ns=br)
            sh("ip", "link", "set", "br0", "up", ns=br)
            for i in range(1, n_hosts + 1):
                ns = self.netns(f"h{i}")
                self.veth("eth0", ns, f"p{i}", br, offloads=True)
                sh("ip", "link", "set", f"p{i}", "master", "br0", ns=br)
                ip = f"{subnet}.{i}"
                sh("ip", "addr", "add", f"{ip}/24", "dev", "eth0", ns=ns)
                self.hosts.append(Host(f"h{i}", ns, ip))
        except BaseException:
            self.close()
            raise


class RateLink(Lab):
    """Two hosts a (10.78.0.1) and b (10.78.0.2) on one veth link; a's egress is shaped by TBF to
    `rate_mbps` (burst: 1 ms of the rate, at least 16 KB). The reverse direction is unshaped."""

    def __init__(self, tag: str, rate_mbps: float, queue_ms: float = 20.0):
        super().__init__(tag)
        try:
            a, b = self.netns("a"), self.netns("b")
            self.veth("eth0", a, "eth0", b, offloads=True)
            sh("ip", "addr", "add", "10.78.0.1/24", "dev", "eth0", ns=a)
            sh("ip", "addr", "add", "10.78.0.2/24", "dev", "eth0", ns=b)
            burst = max(16_000, int(rate_mbps * 1e6 / 8 * 1e-3))
            sh(
                "tc",
                "qdisc",
                "add",
                "dev",
                "eth0",
                "root",
                "tbf",
                "rate",
                f"{rate_mbps}mbit",
                "burst",
                str(burst),
                "latency",
                f"{queue_ms}ms",
                ns=a,
            )
            self.a = Host("a", a, "10.78.0.1")
            self.b = Host("b", b, "10.78.0.2")
        except BaseException:
            self.close()
            raise

    def qdisc_stats(self) -> str:
        return sh("tc", "-s", "qdisc", "show", "dev", "eth0", ns=self.a.ns).stdout


def link_counters(intf: str, ns: str | None = None) -> dict:
    """Kernel counters of an interface: rx_packets, tx_packets, rx_bytes, rx_dropped, ..."""
    out = sh("ip", "-j", "-s", "link", "show", "dev", intf, ns=ns).stdout
    st = json.loads(out)[0]["stats64"]
    return {f"rx_{k}": v for k, v in st["rx"].items()} | {f"tx_{k}": v for k, v in st["tx"].items()}


# --- raw frames --------------------------------------------------------------------------------------


def raw_socket(intf: str, ns: str | None = None, rcvbuf: int = 8 << 20) -> socket.socket:
    """An AF_PACKET socket bound to `intf` (in namespace `ns`) that sends whole frames and captures
    every frame arriving on the interface, but not the ones it sent itself."""
    with in_netns(ns):
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        try:  # past net.core.rmem_max (root only): bursts must not overflow the capture
            s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, rcvbuf)
        except PermissionError:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        s.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
        s.bind((intf, 0))
    return s


def drain(s: socket.socket) -> None:
    """Discard whatever is queued on a socket."""
    blocking = s.getblocking()
    s.setblocking(False)
    try:
        while True:
            s.recv(65535)
    except BlockingIOError:
        pass
    finally:
        s.setblocking(blocking)


def receive(
    s: socket.socket, quiet_s: float = 0.3, limit_s: float = 10.0, want: int | None = None
) -> list[tuple[float, bytes]]:
    """(monotonic arrival time, frame) until `quiet_s` passes without a frame, `want` frames came, or
    `limit_s` is over."""
    out = []
    end = time.monotonic() + limit_s
    while time.monotonic() < end and (want is None or len(out) < want):
        r, _, _ = select.select([s], [], [], min(quiet_s, max(0.0, end - time.monotonic())))
        if not r:
            break
        out.append((time.monotonic(), s.recv(65535)))
    return out
