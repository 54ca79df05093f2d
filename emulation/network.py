"""Mininet networks from a TopologySpec: hosts hN, switches sN with explicit ports, no controller,
no Open vSwitch.

Link rates are enforced in two places, like real NICs and switch ports: on each switch egress port
by the switch itself (its strict-priority queues drain at the port rate, so the bottleneck queue is
inside the switch where the priority policy decides who waits), and on each host's interface by an
HTB qdisc at the host link rate (the host NIC). Hosts get static ARP, IPv6 off and offloads off.

With `links.host_fair_queueing` the host NIC serves its destinations round-robin instead of in one
FIFO: one HTB leaf per other host (u32 filter on the destination address), all under the link
rate, each guaranteed rate / n and allowed the whole rate, so backlogged destinations share the
link packet by packet. That is how MultiTree's multi-port network interface feeds several router
ports in one step (docs/collectives.md); with one FIFO, messages to four neighbours queued together
leave one after the other and the last starts its fabric link three messages late.
"""

from __future__ import annotations

from mininet.link import Link
from mininet.net import Mininet
from mininet.node import Host

from dlcp.network.switch_runtime import switch_port_mac
from dlcp.network.topology import TopologySpec
from emulation import procs


class DiesWithRun:
    """Mininet node mix-in: every process the node starts (its shell, and what `popen` runs in its
    namespace) gets the parent-death signal of emulation/procs.py, so it dies with the run."""

    def _popen(self, cmd, **params):
        return super()._popen(procs.dying_with_parent(list(cmd)), **params)


class DlcpHost(DiesWithRun, Host):
    """A Mininet host configured like a quiet experiment NIC."""

    def configure_nic(self, rate_mbps: float, queue_pkts: int, fair_to: list[str] | None = None) -> None:
        """HTB at `rate_mbps` over one FIFO of `queue_pkts`; with `fair_to` (the other hosts'
        addresses), one round-robin leaf per destination instead (see the module docstring)."""
        intf = self.defaultIntf().name
        cmds = [
            "sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1",
            # checksums computed in software and no segmentation offloads: what the switch
            # receives is what goes on the wire
            f"ethtool -K {intf} rx off tx off sg off tso off gso off gro off",
            f"tc qdisc replace dev {intf} root handle 1: htb default {2 if fair_to else 1}",
            f"tc class replace dev {intf} parent 1: classid 1:1 htb rate {rate_mbps}mbit ceil {rate_mbps}mbit",
        ]
        if not fair_to:
            cmds.append(f"tc qdisc replace dev {intf} parent 1:1 handle 10: pfifo limit {queue_pkts}")
        else:
            share = rate_mbps / (len(fair_to) + 1)
            for k, ip in enumerate([None] + list(fair_to)):  # leaf 1:2 takes what no filter matches
                cls = f"1:{k + 2:x}"
                cmds += [
                    f"tc class replace dev {intf} parent 1:1 classid {cls} htb rate {share}mbit "
                    f"ceil {rate_mbps}mbit quantum 1514",
                    f"tc qdisc replace dev {intf} parent {cls} handle {k + 16:x}: pfifo limit {queue_pkts}",
                ]
                if ip is not None:
                    cmds.append(
                        f"tc filter add dev {intf} parent 1: protocol ip prio 1 u32 match ip dst {ip}/32 flowid {cls}"
                    )
        for cmd in cmds:
            out = self.cmd(cmd + " 2>&1; echo rc=$?")
            if not out.rstrip().endswith("rc=0"):
                raise RuntimeError(f"{self.name}: host set-up failed: {cmd}: {out.strip()}")


def build_network(
    spec: TopologySpec,
    switch_cls,
    switch_params: dict[str, dict],
    host_queue_pkts: int,
    host_fair_queueing: bool = False,
) -> Mininet:
    """A started Mininet network for `spec`.

    `switch_params[name]` are keyword arguments of `switch_cls` (runtime file, run directory, ...).
    Interfaces are named sN-ethK / hN-eth0 so port K of sN is exactly sN-ethK.
    """
    net = Mininet(
        topo=None,
        controller=None,
        switch=switch_cls,
        host=DlcpHost,
        link=Link,
        autoSetMacs=False,
        autoStaticArp=False,
        build=False,
        waitConnected=False,
    )
    for h in spec.hosts.values():
        net.addHost(h.name, ip=f"{h.ip}/24", mac=h.mac)
    for s in spec.switches.values():
        net.addSwitch(s.name, dpid=f"{s.device_id:016x}", **switch_params.get(s.name, {}))

    def mac(switch: str, port: int) -> str:  # the MACs the runtime entries use as next hops
        return switch_port_mac(spec.switches[switch].device_id, port)

    for a, pa, b, pb, _rate in spec.links():
        if b in spec.hosts:
            net.addLink(
                b,
                a,
                port1=0,
                port2=pa,
                intfName1=f"{b}-eth0",
                intfName2=f"{a}-eth{pa}",
                addr1=spec.hosts[b].mac,
                addr2=mac(a, pa),
            )
        else:
            net.addLink(
                a,
                b,
                port1=pa,
                port2=pb,
                intfName1=f"{a}-eth{pa}",
                intfName2=f"{b}-eth{pb}",
                addr1=mac(a, pa),
                addr2=mac(b, pb),
            )
    net.build()
    for h in spec.hosts.values():
        node = net.get(h.name)
        others = [o.ip for o in spec.hosts.values() if o.name != h.name]
        node.configure_nic(h.rate_mbps, host_queue_pkts, others if host_fair_queueing else None)
        for other in spec.hosts.values():
            if other.name != h.name:
                node.setARP(other.ip, other.mac)
    for s in spec.switches.values():
        # switch-side interfaces are in the root namespace: keep them free of offloads too, and
        # of IPv6 (the kernel would send its own neighbour discovery out of the switch's ports)
        for intf in net.get(s.name).intfList():
            if intf.name != "lo":
                intf.cmd(
                    f"sysctl -qw net.ipv6.conf.{intf.name}.disable_ipv6=1; "
                    f"ethtool -K {intf.name} rx off tx off sg off tso off gso off gro off >/dev/null 2>&1"
                )
    net.start()
    return net
