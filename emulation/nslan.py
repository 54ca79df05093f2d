"""Small emulated networks from plain network namespaces (root): hosts on a Linux bridge, or two hosts
on one rate-limited veth link. For transport tests and benchmarks that need real separate network
stacks but not Mininet or a P4 switch.

Every name starts with the caller's prefix (e.g. "tp" + PID) so parallel users never collide, and
`close()` (also on error and Ctrl-C, through the context manager) deletes every namespace it made,
which deletes their interfaces with them.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass


class NetError(RuntimeError):
    pass


def sh(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise NetError(f"`{' '.join(cmd)}` failed: {p.stderr.strip() or p.stdout.strip()}")
    return p


def in_ns(ns: str, *cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return sh("ip", "netns", "exec", ns, *cmd, check=check)


@dataclass
class Host:
    name: str  # short name (h1, h2, ...)
    ns: str  # network namespace
    ip: str

    def prefix(self) -> list[str]:
        """Command prefix that runs a program inside this host."""
        return ["ip", "netns", "exec", self.ns]


class _Namespaces:
    def __init__(self, prefix: str):
        if len(prefix) > 9:
            raise ValueError(f"namespace prefix {prefix!r} is longer than 9 characters (interface names)")
        self.prefix = prefix
        self.namespaces: list[str] = []
        self._n_veth = 0

    def _ns(self, name: str) -> str:
        ns = f"{self.prefix}{name}"
        sh("ip", "netns", "add", ns)
        self.namespaces.append(ns)
        in_ns(ns, "ip", "link", "set", "lo", "up")
        return ns

    def _veth(self, a_ns: str, a_name: str, b_ns: str, b_name: str) -> None:
        """A veth pair with one end in each namespace (temporary names in the root namespace are
        prefixed, so a failure half-way leaves nothing behind that is not ours)."""
        self._n_veth += 1
        ta, tb = f"{self.prefix}v{self._n_veth}a", f"{self.prefix}v{self._n_veth}b"
        sh("ip", "link", "add", ta, "type", "veth", "peer", "name", tb)
        try:
            sh("ip", "link", "set", ta, "netns", a_ns)
            sh("ip", "link", "set", tb, "netns", b_ns)
        except NetError:
            sh("ip", "link", "del", ta, check=False)
            raise
        in_ns(a_ns, "ip", "link", "set", ta, "name", a_name)
        in_ns(b_ns, "ip", "link", "set", tb, "name", b_name)
        in_ns(a_ns, "ip", "link", "set", a_name, "up")
        in_ns(b_ns, "ip", "link", "set", b_name, "up")

    def close(self) -> None:
        for ns in reversed(self.namespaces):
            sh("ip", "netns", "del", ns, check=False)
        self.namespaces.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class BridgeLan(_Namespaces):
    """`n_hosts` hosts h1..hN (10.77.0.1..N/24 by default) on a Linux bridge in namespace
    `<prefix>br`."""

    def __init__(self, prefix: str, n_hosts: int, subnet: str = "10.77.0"):
        super().__init__(prefix)
        self.hosts: list[Host] = []
        try:
            br_ns = self._ns("br")
            in_ns(br_ns, "ip", "link", "add", "br0", "type", "bridge")
            in_ns(br_ns, "ip", "link", "set", "br0", "up")
            for i in range(1, n_hosts + 1):
                ns = self._ns(f"h{i}")
                self._veth(ns, "eth0", br_ns, f"p{i}")
                in_ns(br_ns, "ip", "link", "set", f"p{i}", "master", "br0")
                ip = f"{subnet}.{i}"
                in_ns(ns, "ip", "addr", "add", f"{ip}/24", "dev", "eth0")
                self.hosts.append(Host(f"h{i}", ns, ip))
        except BaseException:
            self.close()
            raise


class RateLink(_Namespaces):
    """Two hosts a (10.78.0.1) and b (10.78.0.2) on one veth link; a's egress is shaped by TBF to
    `rate_mbps` (burst: 1 ms of the rate, at least 16 KB). The reverse direction is unshaped."""

    def __init__(self, prefix: str, rate_mbps: float, queue_ms: float = 20.0):
        super().__init__(prefix)
        try:
            a, b = self._ns("a"), self._ns("b")
            self._veth(a, "eth0", b, "eth0")
            in_ns(a, "ip", "addr", "add", "10.78.0.1/24", "dev", "eth0")
            in_ns(b, "ip", "addr", "add", "10.78.0.2/24", "dev", "eth0")
            burst = max(16_000, int(rate_mbps * 1e6 / 8 * 1e-3))
            in_ns(a, "tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", f"{rate_mbps}mbit",
                  "burst", str(burst), "latency", f"{queue_ms}ms")
            self.a = Host("a", a, "10.78.0.1")
            self.b = Host("b", b, "10.78.0.2")
        except BaseException:
            self.close()
            raise

    def qdisc_stats(self) -> str:
        return in_ns(self.a.ns, "tc", "-s", "qdisc", "show", "dev", "eth0").stdout
