"""`dlcp bench switch`: forwarding rate of the built-in dataplane, beside a Linux bridge (and bmv2
simple_switch when installed), measured in the same run on the same namespaces.

On a shared machine the wall-clock rate of a user-space switch is its CPU share times its speed,
so the table also gives the switch's CPU use in the interval and the rate per CPU-second
(`kpps_per_cpu`), split into user and kernel microseconds per packet.

sender ns --veth--> switch ns (port 1 -> port 2) --veth--> receiver ns. The sender
(emulation.blaster) offers more 1442-byte DLCP frames than any of the dataplanes forwards; the
forwarded rate is read from the receiver interface's kernel counters. The refswitch runs the full
pipeline (LPM, round-robin spray, classify, admission, counters) with an unlimited port rate.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dlcp.bench_output import emit
from dlcp.network import pipeline_names as P
from dlcp.wire.header import DATA_PORT, DlcpHeader, tos_of
from emulation.netns import Lab, link_counters, sh
from emulation.procs import stop_child

FRAME_BYTES = 1442  # Ethernet 14 + IPv4 20 + UDP 8 + 1400 bytes of UDP payload (DLCP header + values)
ROOT = Path(__file__).resolve().parents[2]
SRC_MAC, DST_MAC, OUT_MAC = "02:00:00:00:00:01", "02:00:00:00:00:fe", "02:00:00:00:00:02"
SRC_IP, DST_IP = "10.9.0.1", "10.9.0.2"


def dlcp_frame(frame_bytes: int = FRAME_BYTES) -> bytes:
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw

    head = DlcpHeader(prio=3, drop_prec=1, n_pkts=1000, seq=1).pack()
    pkt = (Ether(src=SRC_MAC, dst=DST_MAC) / IP(src=SRC_IP, dst=DST_IP, ttl=64, tos=tos_of(3, 1))
           / UDP(sport=40000, dport=DATA_PORT) / Raw(head + bytes(frame_bytes - 42 - len(head))))
    frame = bytes(pkt)
    assert len(frame) == frame_bytes, len(frame)
    return frame


def bench_runtime(in_intf: str, out_intf: str) -> dict:
    e = lambda table, action, params, **kw: {"table": table, "action_name": action, "action_params": params, **kw}  # noqa: E731
    return {
        "switch": "bench",
        "device_id": 1,
        "target": "ref",
        "registers": [],
        "table_entries": [
            e(P.LB_CONFIG, P.SET_LB_MODE, {"mode": P.LB_MODES["spray_rr"]}, default_action=True),
            e(P.IPV4_LPM, P.SET_NHOP_GROUP, {"group": 1, "size": 1}, match={"ipv4_dst": [DST_IP, 32]}),
            e(P.NHOP, P.SET_NHOP, {"dmac": OUT_MAC, "port": 2}, match={"nhop_group": 1, "nhop_member": 0}),
            e(P.CLASSIFY, P.CLASSIFY_FROM_DLCP, {}, match={"dlcp_valid": 1}, priority=10),
            e(P.CLASSIFY, P.CLASSIFY_FROM_DSCP, {}, match={"dlcp_valid": 0}, priority=10),
            e(P.QUEUE_THRESHOLDS, P.SET_THRESHOLDS, dict(P.DEFAULT_THRESHOLDS), default_action=True),
        ],
        "ports": [{"port": 1, "intf": in_intf}, {"port": 2, "intf": out_intf}],
    }


class Bench:
    def __init__(self, lab: Lab, args, workdir: Path):
        self.lab, self.args, self.workdir = lab, args, workdir
        p = lab.prefix
        self.snd, self.sw, self.rcv = lab.netns("snd"), lab.netns("sw"), lab.netns("rcv")
        self.tx_if, self.p1, self.p2, self.rx_if = f"{p}a", f"{p}p1", f"{p}p2", f"{p}b"
        lab.veth(self.tx_if, self.snd, self.p1, self.sw)
        lab.veth(self.p2, self.sw, self.rx_if, self.rcv)
        self.frame = dlcp_frame()

    def measure(self, label: str, pid: int | None = None, tx_if: str | None = None, rx_if: str | None = None) -> dict:
        """Offer frames for warm-up + seconds; the forwarded rate is what reached the receiver.

        With `pid` (a user-space switch), also the CPU time it used in the interval, so the rate per
        CPU-second can be told apart from time the shared machine gave to other processes. tx_if /
        rx_if: the sender's and receiver's interfaces (default: the pair around the switch namespace)."""
        a = self.args
        tx_if, rx_if = tx_if or self.tx_if, rx_if or self.rx_if
        print(f"bench switch: measuring {label} ({a.seconds:g} s)...", file=sys.stderr, flush=True)
        cmd = ["ip", "netns", "exec", self.snd, sys.executable, "-m", "emulation.benches.blaster", "--intf", tx_if,
               "--frame-hex", self.frame.hex(), "--seconds", str(a.warmup + a.seconds + 0.5)]
        if a.sender_cpu is not None:
            cmd += ["--cpu", str(a.sender_cpu)]
        sender = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            time.sleep(a.warmup)
            c0, t0, (u0, s0) = link_counters(rx_if, self.rcv)["rx_packets"], time.monotonic(), cpu_seconds(pid)
            time.sleep(a.seconds)
            c1, t1, (u1, s1) = link_counters(rx_if, self.rcv)["rx_packets"], time.monotonic(), cpu_seconds(pid)
            out, err = sender.communicate(timeout=30)
        finally:
            if sender.poll() is None:
                sender.kill()
                sender.wait()
        if sender.returncode != 0:
            raise RuntimeError(f"sender failed: {err.strip()[-500:]}")
        offered = int(out.split()[-1]) / (a.warmup + a.seconds + 0.5)
        kpps = (c1 - c0) / (t1 - t0) / 1e3
        cpu = ((u1 - u0) + (s1 - s0)) / (t1 - t0) if pid else None
        n = max(c1 - c0, 1)
        return {"dataplane": label, "kpps": kpps, "Mbit_s": kpps * 1e3 * FRAME_BYTES * 8 / 1e6,
                "offered_kpps": offered / 1e3, "switch_cpu": cpu,
                "kpps_per_cpu": kpps / cpu if cpu else None,
                "user_us_per_pkt": (u1 - u0) / n * 1e6 if pid else None,
                "sys_us_per_pkt": (s1 - s0) / n * 1e6 if pid else None}

    def refswitch(self) -> dict:
        rt = self.workdir / "bench-runtime.json"
        rt.write_text(json.dumps(bench_runtime(self.p1, self.p2)))
        cmd = ["ip", "netns", "exec", self.sw, sys.executable, "-m", "emulation.refswitch", "--runtime", str(rt),
               "--counters", str(self.workdir / "counters.json"), "--batch", str(self.args.batch),
               "--engine", self.args.engine]
        if self.args.switch_cpu is not None:
            cmd += ["--cpu", str(self.args.switch_cpu)]
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            if "ready" not in proc.stdout.readline():
                raise RuntimeError(f"refswitch did not start: {' '.join(cmd)}: {proc.stderr.read()[-800:]}")
            row = self.measure(f"refswitch ({self.args.engine} engine)" if self.args.engine != "auto"
                               else "refswitch", proc.pid)
        finally:
            stop_child(proc, grace_s=10)
        c = json.loads((self.workdir / "counters.json").read_text())
        port1 = next(p for p in c["ports"] if p["port"] == 1)
        row["note"] = f"{port1['rx_kernel_drops']} frames dropped by the kernel before the switch read them"
        return row

    def bridge(self) -> dict:
        sh("ip", "link", "add", "br0", "type", "bridge", ns=self.sw)
        try:
            for intf in (self.p1, self.p2):
                sh("ip", "link", "set", intf, "master", "br0", ns=self.sw)
            sh("ip", "link", "set", "br0", "up", ns=self.sw)
            row = self.measure("linux bridge")
            row["note"] = "kernel forwarding in the sender's softirq (no user-space hop)"
            return row
        finally:
            sh("ip", "link", "del", "br0", ns=self.sw, check=False)

    def bmv2(self) -> tuple[dict | None, str | None]:
        """simple_switch_grpc running p4/dlcp.p4 (emulation/bmv2/switch.py) when it is installed;
        else None and why. bmv2's gRPC/Thrift servers must be reachable from here, so its ports are
        a second pair of veths in the root namespace (the sender and receiver stay where they are)."""
        from dlcp.network.switch_runtime import Port, Route, SwitchConfig, SwitchTopo, runtime_for
        from emulation.bmv2 import switch as bmv2switch
        try:
            bmv2switch.toolchain()
        except bmv2switch.SwitchStartError as e:
            return None, str(e)
        p = self.lab.prefix
        tx_if, q1, q2, rx_if = f"{p}c", f"{p}q1", f"{p}q2", f"{p}d"
        self.lab.veth(tx_if, self.snd, q1, None)
        self.lab.veth(q2, None, rx_if, self.rcv)
        topo = SwitchTopo(f"{p}bm", 1, (Port(1, q1, "snd", SRC_MAC, queue_depth_pkts=None),
                                        Port(2, q2, "rcv", OUT_MAC, queue_depth_pkts=None)),
                          (Route(f"{DST_IP}/32", (2,)),))
        runtime = runtime_for(topo, SwitchConfig(policy="dlcp", load_balancing="spray_rr"))
        sw = bmv2switch.start_bmv2(topo.name, runtime, {1: q1, 2: q2}, self.workdir, grpc_port=bmv2switch.free_port(),
                                   thrift_port=bmv2switch.free_port())
        try:
            return self.measure("bmv2 simple_switch_grpc", sw.pid, tx_if=tx_if, rx_if=rx_if), None
        finally:
            sw.stop(dump_counters=False)


def cpu_seconds(pid: int | None) -> tuple[float, float]:
    """(user, system) CPU seconds of a process so far; (0, 0) without a pid."""
    if not pid:
        return 0.0, 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tck = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tck, int(fields[12]) / tck


def bench_switch(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="dlcp bench switch", description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="measured interval per dataplane")
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--batch", type=int, default=64, help="refswitch frames per recvmmsg/sendmmsg")
    ap.add_argument("--switch-cpu", type=int, help="pin the switch to this CPU (-1: no pinning; default 1 on a "
                    "multi-core machine)")
    ap.add_argument("--sender-cpu", type=int, help="pin the sender to this CPU (-1: no pinning; default 0 on a "
                    "multi-core machine)")
    ap.add_argument("--engine", choices=("auto", "c", "python"), default="auto", help="refswitch engine")
    ap.add_argument("--no-bridge", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("dlcp bench switch: needs root (it creates network namespaces)")
    if args.seconds <= 0 or args.warmup < 0:
        raise SystemExit("dlcp bench switch: --seconds must be > 0 and --warmup >= 0")
    if (os.cpu_count() or 1) > 1:
        args.switch_cpu = 1 if args.switch_cpu is None else args.switch_cpu
        args.sender_cpu = 0 if args.sender_cpu is None else args.sender_cpu
    args.switch_cpu = None if args.switch_cpu == -1 else args.switch_cpu
    args.sender_cpu = None if args.sender_cpu == -1 else args.sender_cpu
    with tempfile.TemporaryDirectory(prefix="dlcp-bench-switch-") as tmp, Lab("rs") as lab:
        b = Bench(lab, args, Path(tmp))
        rows = [b.refswitch()]
        bridge = None if args.no_bridge else b.bridge()
        if bridge:
            rows.append(bridge)
        bmv2, why = b.bmv2()
        if bmv2:
            rows.append(bmv2)
    ref = rows[0]
    for r in rows:
        r["ratio_to_bridge"] = r["kpps"] / bridge["kpps"] if bridge and bridge["kpps"] else None
    if bmv2 is None:
        rows.append({"dataplane": "bmv2 simple_switch", "note": f"not measured: {why}"})
    cols = ["dataplane", "kpps", "Mbit_s", "offered_kpps", "ratio_to_bridge", "switch_cpu", "kpps_per_cpu",
            "user_us_per_pkt", "sys_us_per_pkt", "note"]
    result = {"ref_kpps": round(ref["kpps"], 1), "bridge_kpps": round(bridge["kpps"], 1) if bridge else None,
              "bmv2_kpps": round(bmv2["kpps"], 1) if bmv2 else None, "frame_bytes": FRAME_BYTES,
              "ref_mbit_s": round(ref["Mbit_s"], 1), "ref_kpps_per_cpu": round(ref["kpps_per_cpu"] or 0, 1),
              "ref_switch_cpu": round(ref["switch_cpu"] or 0, 2)}
    emit(f"switch forwarding, {FRAME_BYTES}-byte DLCP frames, port 1 -> port 2 "
         f"(switch cpu {args.switch_cpu}, sender cpu {args.sender_cpu}; shared machine: figures are noisy)",
         [{c: r.get(c) for c in cols} for r in rows], result, args.json)
    return 0
