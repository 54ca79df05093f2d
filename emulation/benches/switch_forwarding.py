"""`dlcp bench switch`: the forwarding rate of the built-in switch, measured so that the figure is
the switch's and not the harness's; beside a Linux bridge (and bmv2 simple_switch when installed).

    sender ns --veth--> switch ns (port 1 -> port 2) --veth--> receiver ns

Placement (a machine with 2 or more cores): the switch runs alone on one core (`--switch-cpu`,
default 1) under SCHED_RR, as in runs, where it stands in for hardware; the sender and the receiver
share another (`--sender-cpu`, default 0): the sender is pinned there, also under SCHED_RR (on a
shared machine its rate is otherwise what other processes leave it), and the kernel's receive
work of both links is steered there by RPS (the sender's frames reach the switch's socket, and the
switch's frames reach the receiver, in softirqs on the sender's core). What runs on the switch's
core is the switch: its own system calls, and other processes only in the 5 % the kernel keeps
from real-time tasks.

Offered load: the sender is paced. A ladder of loads (x1.5 from 50 kpps, `--probe-seconds` each)
finds the first load the switch does not keep up with (forwards less than 95 % of it); the
measurement offers that load, `--repeats` times: more than the switch forwards, so the figure is its
capacity, and no more than the receiver side takes (`harness_drops` counts what it did not). Each
measurement reports the forwarded rate, the offered rate, what the switch's socket dropped while
the switch was busy, and the CPU share of each component: the switch and sender processes, kernel
softirq time per core, and the time other processes took on the switch's core.

The bridge row forwards in the sender's softirq (unpaced, on the sender's core): a reference for the
veth harness, not a like-for-like competitor.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import psutil

from dlcp.bench_output import emit
from dlcp.network import pipeline_names as P
from dlcp.wire.header import DATA_PORT, DlcpHeader, tos_of
from emulation.benches import machine_to_itself
from emulation.netns import Lab, link_counters, sh
from emulation.procs import stop_child

FRAME_BYTES = 1442  # Ethernet 14 + IPv4 20 + UDP 8 + 1400 bytes of UDP payload (DLCP header + values)
ROOT = Path(__file__).resolve().parents[2]
SRC_MAC, DST_MAC, OUT_MAC = "02:00:00:00:00:01", "02:00:00:00:00:fe", "02:00:00:00:00:02"
SRC_IP, DST_IP = "10.9.0.1", "10.9.0.2"
LADDER_START_KPPS, LADDER_STEP, LADDER_MAX_KPPS = 50.0, 1.5, 3000.0
BMV2_LADDER_START_KPPS = 5.0  # bmv2 forwards 10-20 kpps
KEEPS_UP = 0.95  # forwarded / offered at or above this: the switch kept up with the load
SWITCH_RT_PRIORITY = 10  # SCHED_RR, as emulation/dataplane.py gives switches in runs
BENCH_RT_PRIORITY = 20  # the bench itself, above the switch and the sender: its counter reads are on time
BENCH_QUEUE_PKTS = 4096


def dlcp_frame(frame_bytes: int = FRAME_BYTES) -> bytes:
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw

    head = DlcpHeader(prio=3, drop_prec=1, n_pkts=1000, seq=1).pack()
    pkt = (
        Ether(src=SRC_MAC, dst=DST_MAC)
        / IP(src=SRC_IP, dst=DST_IP, ttl=64, tos=tos_of(3, 1))
        / UDP(sport=40000, dport=DATA_PORT)
        / Raw(head + bytes(frame_bytes - 42 - len(head)))
    )
    frame = bytes(pkt)
    assert len(frame) == frame_bytes, len(frame)
    return frame


def bench_runtime(in_intf: str, out_intf: str) -> dict:
    e = lambda table, action, params, **kw: {"table": table, "action_name": action, "action_params": params, **kw}
    return {
        "switch": "bench",
        "device_id": 1,
        "target": "builtin",
        "registers": [],
        "table_entries": [
            e(P.LB_CONFIG, P.SET_LB_MODE, {"mode": P.LB_MODES["spray_rr"]}, default_action=True),
            e(P.IPV4_LPM, P.SET_NHOP_GROUP, {"group": 1, "size": 1}, match={"ipv4_dst": [DST_IP, 32]}),
            e(P.NHOP, P.SET_NHOP, {"dmac": OUT_MAC, "port": 2}, match={"nhop_group": 1, "nhop_member": 0}),
            e(P.CLASSIFY, P.CLASSIFY_FROM_DLCP, {}, match={"dlcp_valid": 1}, priority=10),
            e(P.CLASSIFY, P.CLASSIFY_FROM_DSCP, {}, match={"dlcp_valid": 0}, priority=10),
            # deep queues: the bench measures forwarding, and a paced burst must not meet admission drops
            e(
                P.QUEUE_THRESHOLDS,
                P.SET_THRESHOLDS,
                {"qmax": BENCH_QUEUE_PKTS, "k1": BENCH_QUEUE_PKTS, "k2": BENCH_QUEUE_PKTS, "k3": BENCH_QUEUE_PKTS},
                default_action=True,
            ),
        ],
        "ports": [
            {"port": 1, "intf": in_intf, "queue_depth_pkts": BENCH_QUEUE_PKTS + 1},
            {"port": 2, "intf": out_intf, "queue_depth_pkts": BENCH_QUEUE_PKTS + 1},
        ],
    }


# --- CPU accounting --------------------------------------------------------------------------------------


@dataclass
class CpuSnapshot:
    """/proc/stat per core (jiffies by field) and the CPU seconds of the processes followed."""

    at: float
    cores: dict[int, dict[str, int]]
    procs: dict[str, tuple[float, float]]  # name -> (user, system) CPU seconds

    FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")

    @classmethod
    def take(cls, pids: dict[str, int]) -> CpuSnapshot:
        cores = {}
        for line in Path("/proc/stat").read_text().splitlines():
            head, *vals = line.split()
            if head.startswith("cpu") and head != "cpu":
                cores[int(head[3:])] = dict(zip(cls.FIELDS, map(int, vals)))
        procs = {}
        for name, pid in pids.items():
            try:
                t = psutil.Process(pid).cpu_times()
                procs[name] = (t.user, t.system)
            except psutil.Error:
                procs[name] = (0.0, 0.0)
        return cls(time.monotonic(), cores, procs)


def cpu_shares(a: CpuSnapshot, b: CpuSnapshot, switch_cpu: int | None) -> dict[str, float | None]:
    """Fractions of one core over the interval: each followed process, each core's softirq time and,
    on the switch's core, the busy time that was neither the switch nor softirq (other processes)."""
    tck = os.sysconf("SC_CLK_TCK")
    secs = b.at - a.at
    out: dict[str, float | None] = {f"{k}_cpu": (sum(b.procs[k]) - sum(a.procs[k])) / secs for k in b.procs}
    for core in sorted(b.cores):
        d = {f: (b.cores[core][f] - a.cores[core][f]) / tck / secs for f in CpuSnapshot.FIELDS}
        out[f"cpu{core}_softirq"] = d["softirq"] + d["irq"]
        if core == switch_cpu:
            busy = d["user"] + d["nice"] + d["system"]
            out["switch_core_other"] = max(0.0, busy - (out.get("switch_cpu") or 0.0))
    return out


class NetDev:
    """Interface counters of a namespace, read from /proc/<pid>/net/dev of a process parked in it:
    no subprocess per read, so the sender's and the receiver's counters are read microseconds apart."""

    FIELDS: ClassVar[dict[str, int]] = {"rx_packets": 1, "rx_dropped": 3, "tx_packets": 9, "tx_dropped": 11}

    def __init__(self, ns: str):
        self.proc = subprocess.Popen(["ip", "netns", "exec", ns, "sleep", "infinity"], stdin=subprocess.DEVNULL)

    def read(self, intf: str) -> dict[str, int]:
        for line in Path(f"/proc/{self.proc.pid}/net/dev").read_text().splitlines()[2:]:
            name, _, rest = line.partition(":")
            if name.strip() == intf:
                vals = [int(v) for v in rest.split()]
                return {k: vals[i] for k, i in self.FIELDS.items()}
        raise KeyError(f"no interface {intf} in /proc/{self.proc.pid}/net/dev")

    def close(self) -> None:
        stop_child(self.proc, grace_s=2)


def set_realtime(pid: int) -> None:
    """SCHED_RR for every thread of the process (raises OSError when not allowed)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        os.sched_setscheduler(int(tid), os.SCHED_RR, os.sched_param(SWITCH_RT_PRIORITY))


def steer_receive(intf: str, ns: str, cpu: int) -> None:
    """Receive processing of `intf` (in namespace `ns`) on `cpu` (RPS): a veth frame is then
    received in a softirq of that core, whoever sent it."""
    sh("sh", "-c", f"echo {1 << cpu:x} > /sys/class/net/{intf}/queues/rx-0/rps_cpus", ns=ns)


# --- the bench -------------------------------------------------------------------------------------------


class Bench:
    def __init__(self, lab: Lab, args, workdir: Path):
        self.lab, self.args, self.workdir = lab, args, workdir
        p = lab.prefix
        self.snd, self.sw, self.rcv = lab.netns("snd"), lab.netns("sw"), lab.netns("rcv")
        self.tx_if, self.p1, self.p2, self.rx_if = f"{p}a", f"{p}p1", f"{p}p2", f"{p}b"
        lab.veth(self.tx_if, self.snd, self.p1, self.sw)
        lab.veth(self.p2, self.sw, self.rx_if, self.rcv)
        if args.sender_cpu is not None:  # the kernel's receive work of both links on the sender's core
            steer_receive(self.p1, self.sw, args.sender_cpu)
            steer_receive(self.rx_if, self.rcv, args.sender_cpu)
        self.frame = dlcp_frame()
        self.netdev = {ns: NetDev(ns) for ns in (self.snd, self.sw, self.rcv)}
        time.sleep(0.2)  # `ip netns exec` has entered the namespace

    def close(self) -> None:
        for d in self.netdev.values():
            d.close()

    def start_sender(self, seconds: float, rate_kpps: float | None, tx_if: str | None = None) -> subprocess.Popen:
        cmd = [
            "ip",
            "netns",
            "exec",
            self.snd,
            sys.executable,
            "-m",
            "emulation.benches.blaster",
            "--intf",
            tx_if or self.tx_if,
            "--frame-hex",
            self.frame.hex(),
            "--seconds",
            str(seconds),
        ]
        if rate_kpps:
            cmd += ["--rate-pps", str(rate_kpps * 1e3)]
        if self.args.sender_cpu is not None:
            cmd += ["--cpu", str(self.args.sender_cpu), "--realtime"]
        sender = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # its Python start-up takes 0.2 s to over a second (a cold cache, no byte code): the warm-up
        # counts from its first frame, else a measured interval can close before anything was sent
        if sender.stdout is None or sender.stdout.readline().strip() != "sending":
            sender.kill()
            _, err = sender.communicate()
            raise RuntimeError(f"the sender did not start: {' '.join(cmd)}: {err.strip()[-500:]}")
        return sender

    def measure(
        self,
        label: str,
        seconds: float,
        rate_kpps: float | None = None,
        switch_pid: int | None = None,
        control: Path | None = None,
        tx_if: str | None = None,
        rx_if: str | None = None,
        sw_out: tuple[str, str | None] | None = None,
    ) -> dict:
        """Offer frames (paced at rate_kpps, or as fast as the sender goes) for warm-up + seconds; the
        forwarded rate is what reached the receiver's interface. sw_out: the switch's output
        interface and its namespace, whose send drops are the receiver side's (harness drops)."""
        a = self.args
        tx_if, rx_if = tx_if or self.tx_if, rx_if or self.rx_if
        sw_out = sw_out or (self.p2, self.sw)
        sender = self.start_sender(a.warmup + seconds + 0.5, rate_kpps, tx_if)
        try:
            time.sleep(a.warmup)
            pids = {"sender": sender.pid, **({"switch": switch_pid} if switch_pid else {})}
            before = self._counters(tx_if, rx_if, sw_out, control, pids)
            time.sleep(seconds)
            after = self._counters(tx_if, rx_if, sw_out, control, pids)
            _, err = sender.communicate(timeout=30)
        finally:
            if sender.poll() is None:
                sender.kill()
                sender.wait()
        if sender.returncode != 0:
            raise RuntimeError(f"sender failed: {err.strip()[-500:]}")
        secs = after["cpu"].at - before["cpu"].at
        d = {k: after[k] - before[k] for k in ("rx", "sent", "harness_drops", "switch_socket_drops")}
        kpps = d["rx"] / secs / 1e3
        row = {
            "dataplane": label,
            "kpps": kpps,
            "Mbit_s": kpps * 1e3 * FRAME_BYTES * 8 / 1e6,
            "offered_kpps": d["sent"] / secs / 1e3,
            "switch_socket_drops_kpps": d["switch_socket_drops"] / secs / 1e3 if control else None,
            "harness_drops": d["harness_drops"],
            **cpu_shares(before["cpu"], after["cpu"], a.switch_cpu if switch_pid else None),
        }
        if switch_pid and row.get("switch_cpu"):
            row["kpps_per_cpu"] = kpps / row["switch_cpu"]
            (u0, s0), (u1, s1) = before["cpu"].procs["switch"], after["cpu"].procs["switch"]
            n = max(d["rx"], 1)
            row["user_us_per_pkt"], row["sys_us_per_pkt"] = (u1 - u0) / n * 1e6, (s1 - s0) / n * 1e6
        return row

    def _counters(
        self, tx_if: str, rx_if: str, sw_out: tuple[str, str | None], control: Path | None, pids: dict
    ) -> dict:
        """Counters of the interval's edges: the sender's and the receiver's back to back (their
        difference is the measurement), then the rest."""
        sent = self.netdev[self.snd].read(tx_if)
        rx = self.netdev[self.rcv].read(rx_if)
        cpu = CpuSnapshot.take(pids)
        out = self.netdev[sw_out[1]].read(sw_out[0]) if sw_out[1] else link_counters(sw_out[0])
        drops = 0
        if control is not None:
            from emulation.builtin_switch.process import control_request

            ports = control_request(control, "counters", timeout=5)["counters"]["ports"]
            drops = next(p["rx_kernel_drops"] for p in ports if p["port"] == 1)
        return {
            "rx": rx["rx_packets"],
            "sent": sent["tx_packets"],
            "harness_drops": rx["rx_dropped"] + out["tx_dropped"],
            "switch_socket_drops": drops,
            "cpu": cpu,
        }

    def find_load(
        self, switch_pid: int, control: Path | None, start_kpps: float = LADDER_START_KPPS, **where
    ) -> tuple[float, list[dict], str]:
        """The offered load for the measurement: the first load of the ladder the switch does not
        keep up with; (load in kpps, the ladder's rows, why it stopped). `where`: measure()'s
        interfaces when they are not the default pair."""
        rate, ladder = start_kpps, []
        while rate <= LADDER_MAX_KPPS:
            row = self.measure(f"ladder {rate:.0f} kpps", self.args.probe_seconds, rate, switch_pid, control, **where)
            ladder.append(row)
            if row["offered_kpps"] < 0.9 * rate:
                return (
                    row["offered_kpps"],
                    ladder,
                    (f"the sender reached only {row['offered_kpps']:.0f} of {rate:.0f} kpps: harness-limited"),
                )
            if row["kpps"] < KEEPS_UP * row["offered_kpps"]:
                return rate, ladder, f"the switch forwarded {row['kpps']:.0f} of {row['offered_kpps']:.0f} kpps"
            rate *= LADDER_STEP
        return LADDER_MAX_KPPS, ladder, f"kept up with {LADDER_MAX_KPPS:.0f} kpps"

    def builtin_switch(self) -> tuple[list[dict], dict]:
        """(one row per repeat at the chosen load, what the load search found)."""
        rt = self.workdir / "bench-runtime.json"
        rt.write_text(json.dumps(bench_runtime(self.p1, self.p2)))
        control = self.workdir / "control.sock"
        cmd = [
            "ip",
            "netns",
            "exec",
            self.sw,
            sys.executable,
            "-m",
            "emulation.builtin_switch",
            "--runtime",
            str(rt),
            "--counters",
            str(self.workdir / "counters.json"),
            "--control",
            str(control),
            "--batch",
            str(self.args.batch),
            "--engine",
            self.args.engine,
        ]
        if self.args.switch_cpu is not None:
            cmd += ["--cpu", str(self.args.switch_cpu)]
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        label = f"built-in switch ({self.args.engine} engine)" if self.args.engine != "auto" else "built-in switch"
        try:
            if "ready" not in proc.stdout.readline():
                raise RuntimeError(f"the built-in switch did not start: {' '.join(cmd)}: {proc.stderr.read()[-800:]}")
            try:
                set_realtime(proc.pid)
                realtime = True
            except OSError:
                realtime = False
            if self.args.offered_kpps:
                load, ladder, why = self.args.offered_kpps, [], "given by --offered-kpps"
            else:
                load, ladder, why = self.find_load(proc.pid, control)
            print(
                f"bench switch: offering {load:.0f} kpps ({why}); {self.args.repeats} x {self.args.seconds:g} s",
                file=sys.stderr,
                flush=True,
            )
            rows = [
                self.measure(f"{label} #{i + 1}", self.args.seconds, load, proc.pid, control)
                for i in range(self.args.repeats)
            ]
        finally:
            stop_child(proc, grace_s=10)
        return rows, {"offered_kpps": load, "load_search": why, "ladder": ladder, "realtime": realtime}

    def bridge(self) -> dict:
        sh("ip", "link", "add", "br0", "type", "bridge", ns=self.sw)
        try:
            for intf in (self.p1, self.p2):
                sh("ip", "link", "set", intf, "master", "br0", ns=self.sw)
            sh("ip", "link", "set", "br0", "up", ns=self.sw)
            row = self.measure("linux bridge", self.args.seconds)
            row["note"] = "kernel forwarding in the sender's softirq, unpaced sender (harness reference)"
            return row
        finally:
            sh("ip", "link", "del", "br0", ns=self.sw, check=False)

    def bmv2(self) -> tuple[dict | None, str | None]:
        """simple_switch_grpc running p4/dlcp.p4 (emulation/bmv2/simple_switch.py) when it is installed;
        else None and why. bmv2's gRPC/Thrift servers must be reachable from here, so its ports are
        a second pair of veths in the root namespace (the sender and receiver stay where they are)."""
        from dlcp.network.switch_runtime import Port, Route, SwitchConfig, SwitchTopo, runtime_for
        from emulation.bmv2 import simple_switch as bmv2switch

        try:
            bmv2switch.toolchain()
        except bmv2switch.SwitchStartError as e:
            return None, str(e)
        p = self.lab.prefix
        tx_if, q1, q2, rx_if = f"{p}c", f"{p}q1", f"{p}q2", f"{p}d"
        self.lab.veth(tx_if, self.snd, q1, None)
        self.lab.veth(q2, None, rx_if, self.rcv)
        topo = SwitchTopo(
            f"{p}bm",
            1,
            (Port(1, q1, "snd", SRC_MAC, queue_depth_pkts=None), Port(2, q2, "rcv", OUT_MAC, queue_depth_pkts=None)),
            (Route(f"{DST_IP}/32", (2,)),),
        )
        runtime = runtime_for(topo, SwitchConfig(policy="dlcp", load_balancing="spray_rr"))
        sw = bmv2switch.start_bmv2(
            topo.name,
            runtime,
            {1: q1, 2: q2},
            self.workdir,
            grpc_port=bmv2switch.free_port(),
            thrift_port=bmv2switch.free_port(),
        )
        where = {"tx_if": tx_if, "rx_if": rx_if, "sw_out": (q2, None)}
        try:
            if self.args.switch_cpu is not None:  # the same placement as the built-in switch
                for tid in os.listdir(f"/proc/{sw.pid}/task"):
                    os.sched_setaffinity(int(tid), {self.args.switch_cpu})
                set_realtime(sw.pid)
            load, _, why = self.find_load(sw.pid, None, BMV2_LADDER_START_KPPS, **where)
            row = self.measure("bmv2 simple_switch_grpc", self.args.seconds, load, sw.pid, **where)
            row["note"] = f"offered {load:.0f} kpps: {why}"
            return row, None
        finally:
            sw.stop(dump_counters=False)


def spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summary_row(rows: list[dict]) -> dict:
    """The median of the repeats, with min-max of the forwarded rate in the note."""
    med = {
        k: statistics.median(r[k] for r in rows)
        for k in rows[0]
        if isinstance(rows[0][k], (int, float)) and all(isinstance(r.get(k), (int, float)) for r in rows)
    }
    kpps = [r["kpps"] for r in rows]
    return {
        **med,
        "dataplane": f"built-in switch, median of {len(rows)}",
        "note": f"forwarded {min(kpps):.0f}-{max(kpps):.0f} kpps over the runs",
    }


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="dlcp bench switch", description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="measured interval per repeat (default 3)")
    ap.add_argument("--warmup", type=float, default=0.5)
    ap.add_argument("--repeats", type=int, default=3, help="measurements at the chosen load (default 3)")
    ap.add_argument("--probe-seconds", type=float, default=1.0, help="measured interval per step of the load ladder")
    ap.add_argument("--offered-kpps", type=float, help="offer this load instead of searching for it")
    ap.add_argument("--batch", type=int, default=64, help="built-in switch frames per recvmmsg/sendmmsg")
    ap.add_argument(
        "--switch-cpu", type=int, help="the switch's core (-1: no pinning; default 1 on a multi-core machine)"
    )
    ap.add_argument(
        "--sender-cpu",
        type=int,
        help="the core of the sender and of the receive work (-1: no pinning; default 0 on a multi-core machine)",
    )
    ap.add_argument("--engine", choices=("auto", "c", "python"), default="auto", help="built-in switch engine")
    ap.add_argument("--no-bridge", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.seconds <= 0 or args.warmup < 0 or args.probe_seconds <= 0 or args.repeats < 1:
        raise SystemExit("dlcp bench switch: --seconds and --probe-seconds must be > 0, --warmup >= 0, --repeats >= 1")
    if (os.cpu_count() or 1) > 1:
        args.switch_cpu = 1 if args.switch_cpu is None else args.switch_cpu
        args.sender_cpu = 0 if args.sender_cpu is None else args.sender_cpu
    args.switch_cpu = None if args.switch_cpu == -1 else args.switch_cpu
    args.sender_cpu = None if args.sender_cpu == -1 else args.sender_cpu
    return args


def bench_switch(argv: list[str]) -> int:
    args = parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("dlcp bench switch: needs root (it creates network namespaces)")
    load = os.getloadavg()
    if args.switch_cpu is not None:  # the switch and the sender run real-time: the bench must still get the CPU
        os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(BENCH_RT_PRIORITY))
    with (
        machine_to_itself("dlcp bench switch"),
        tempfile.TemporaryDirectory(prefix="dlcp-bench-switch-") as tmp,
        Lab("rs") as lab,
    ):
        b = Bench(lab, args, Path(tmp))
        try:
            ref_rows, found = b.builtin_switch()
            bridge = None if args.no_bridge else b.bridge()
            bmv2, why = b.bmv2()
        finally:
            b.close()
    ref = summary_row(ref_rows)
    rows = ref_rows + [ref] + ([bridge] if bridge else [])
    if bmv2:
        rows.append(bmv2)
    else:
        rows.append({"dataplane": "bmv2 simple_switch", "note": f"not measured: {why.split(': install')[0]}"})
    softirq = sorted({k for r in rows for k in r if k.endswith("_softirq")})
    cols = [
        "dataplane",
        "kpps",
        "offered_kpps",
        "switch_socket_drops_kpps",
        "harness_drops",
        "switch_cpu",
        "kpps_per_cpu",
        "user_us_per_pkt",
        "sys_us_per_pkt",
        "sender_cpu",
        *softirq,
        "switch_core_other",
        "note",
    ]
    kpps = [r["kpps"] for r in ref_rows]
    r1 = lambda v: None if v is None else round(v, 1)
    r2 = lambda v: None if v is None else round(v, 2)
    result = {
        "ref_kpps": r1(ref["kpps"]),
        "ref_kpps_runs": [r1(k) for k in kpps],
        "ref_kpps_min": r1(min(kpps)),
        "ref_kpps_max": r1(max(kpps)),
        "ref_switch_cpu": r2(ref.get("switch_cpu")),
        "ref_kpps_per_cpu": r1(ref.get("kpps_per_cpu")),
        "ref_sender_cpu": r2(ref.get("sender_cpu")),
        "ref_switch_core_other": r2(ref.get("switch_core_other")),
        "ref_harness_drops": int(sum(r["harness_drops"] for r in ref_rows)),
        "offered_kpps": r1(found["offered_kpps"]),
        "load_search": found["load_search"],
        "switch_realtime": found["realtime"],
        "bridge_kpps": r1(bridge["kpps"]) if bridge else None,
        "bmv2_kpps": r1(bmv2["kpps"]) if bmv2 else None,
        "frame_bytes": FRAME_BYTES,
        "switch_cpu_core": args.switch_cpu,
        "sender_cpu_core": args.sender_cpu,
        "cores": os.cpu_count(),
        "loadavg_1_5_15": [round(x, 2) for x in load],
    }
    emit(
        f"switch forwarding, {FRAME_BYTES}-byte DLCP frames, port 1 -> port 2: switch alone on cpu {args.switch_cpu}"
        f"{' (SCHED_RR)' if found['realtime'] else ''}, sender and receive work on cpu {args.sender_cpu}; offered "
        f"{found['offered_kpps']:.0f} kpps ({found['load_search']}); load average {load[0]:.2f} "
        f"(CPU columns: fractions of one core)",
        [{c: r.get(c) for c in cols} for r in rows],
        result,
        args.json,
    )
    return 0
