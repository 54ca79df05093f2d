"""Conformance harness: a switch under test on veth pairs this harness creates, frames injected
with AF_PACKET from a tester namespace, outputs captured on the other ports.

    tester ns: <p>t1..t4  <-veth->  root ns: <p>p1..p4 (switch ports 1..4), p = "rs" + PID

The switch runs in the root namespace, where bmv2's gRPC and Thrift servers are reachable from
this process. `SwitchUnderTest` is the only backend-specific part: `BuiltinSwitchSUT` runs the
built-in switch (C or Python engine), `Bmv2SUT` simple_switch_grpc with p4/dlcp.p4; both go
through emulation/dataplane.py like the runner's switches do. `Ns3SUT` needs no namespaces: the
same frames go into a switch simulated on ns-3 (simulation/ns3/inject.py) and its outputs come
back with their simulated times, checked by the same `verify`.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Protocol

from switch_frames import dlcp_frame, runtime_doc, udp_frame
from switch_scenarios import DETERMINISTIC

from dlcp.network import pipeline_names as P
from dlcp.network.switch_runtime import SwitchConfig
from dlcp.switch.hashing import crc16, five_tuple_bytes
from emulation.dataplane import BuiltinProcess
from emulation.netns import Lab, drain, raw_socket

ROOT = Path(__file__).resolve().parents[2]
PORTS = (1, 2, 3, 4)


def _fastpath_usable() -> bool:
    from emulation.builtin_switch.process import load_fastpath

    try:
        load_fastpath()
        return True
    except ImportError:
        return False


HAVE_C = _fastpath_usable()
ENGINES = ("c", "python") if HAVE_C else ("python",)  # the built-in switch engines this machine can run


class SwitchUnderTest(Protocol):
    name: str

    def start(self, runtime: dict, workdir: Path) -> None:
        """Run the switch on the root-namespace interfaces of this runtime document (docs/pipeline.md)."""

    def stop(self) -> dict:
        """Stop the switch; return its counter dump (docs/pipeline.md "Counter dump")."""


class _ProcessSUT:
    """A switch under test run by an emulation.dataplane process."""

    process = None

    def alive(self) -> bool:
        return self.process is not None and self.process.alive()

    def stop(self) -> dict:
        if self.process is None:
            return {}
        self.process.stop()
        path, self.process = self.process.counters_path, None
        return json.loads(path.read_text()) if path.exists() else {}


class BuiltinSwitchSUT(_ProcessSUT):
    def __init__(self, engine: str, extra_args: tuple[str, ...] = ()):
        self.engine = engine
        self.extra_args = ["--engine", engine, "--seed", "7", *extra_args]
        self.name = f"builtin_switch-{engine}"

    def start(self, runtime: dict, workdir: Path) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        rt = workdir / "runtime.json"
        rt.write_text(json.dumps(runtime))
        self.process = BuiltinProcess(runtime["switch"], rt, workdir, extra_args=self.extra_args)
        self.process.start()

    def counters(self) -> dict:
        return self.process.live_counters()


class Bmv2SUT(_ProcessSUT):
    """simple_switch_grpc running p4/dlcp.p4; the harness's runtime documents get what a bmv2
    runtime file has beyond them (target, P4 build). A port without queue_depth_pkts gets the
    reader's default (128 packets) on both backends, above the default qmax (bmv2's own 64 would
    drop before admission control)."""

    name = "bmv2"

    def start(self, runtime: dict, workdir: Path) -> None:
        from fake_p4runtime import free_port

        from emulation.bmv2.simple_switch import Bmv2Process

        workdir.mkdir(parents=True, exist_ok=True)
        cfg = SwitchConfig()
        doc = {**runtime, "target": "bmv2", "p4info": cfg.p4info, "bmv2_json": cfg.bmv2_json}
        rt = workdir / "runtime.json"
        rt.write_text(json.dumps(doc))
        self.process = Bmv2Process(runtime["switch"], rt, workdir, grpc_port=free_port(), thrift_port=free_port())
        self.process.start()

    def counters(self) -> dict:
        return self.process.counter_dump()


class Ns3SUT:
    """The switch simulated on ns-3. Every scenario runs in one child process (one ns-3 import,
    a fresh switch and `Simulator::Destroy()` per scenario): `run_all` returns a `Result` per name.
    Times in a Result are simulated seconds from the first injected frame."""

    name = "ns3"

    def run_all(self, scenarios: list[dict], workdir: Path, timeout_s: float = 600) -> dict[str, Result]:
        workdir.mkdir(parents=True, exist_ok=True)
        docs = []
        for sc in scenarios:
            sends = [
                {"port": b["port"], "frame": build_frame(b["frame"]).hex(), "n": b["n"], "gap_us": b.get("gap_us", 0)}
                for b in sc["send"]
            ]
            runtime = runtime_doc(ports=PORTS, intf=lambda k: f"sw-eth{k}", **sc["runtime"])
            docs.append({"name": sc["name"], "runtime": runtime, "send": sends, "settle_s": sc["settle_s"], "seed": 7})
        (workdir / "scenarios.json").write_text(json.dumps(docs))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "simulation.ns3.inject",
                str(workdir / "scenarios.json"),
                str(workdir / "results.json"),
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        if proc.returncode:
            raise RuntimeError(f"simulation.ns3.inject failed ({proc.returncode}): {proc.stderr[-2000:]}")
        raw = json.loads((workdir / "results.json").read_text())
        out = {}
        for name, r in raw.items():
            frames = {k: [(t, bytes.fromhex(h)) for t, h in r["out"].get(str(k), [])] for k in PORTS}
            out[name] = Result(r["sent"], r["t_send"], frames, r["counters"])
        return out


class SwitchTestbed:
    """The namespaces, veths and tester sockets, shared by the scenarios of one test module."""

    def __init__(self, tag: str = "rs"):
        self.lab = Lab(tag)
        try:
            self.tester = self.lab.netns("t")
            p = self.lab.prefix
            self.switch_intf = {k: f"{p}p{k}" for k in PORTS}
            self.tester_intf = {k: f"{p}t{k}" for k in PORTS}
            for k in PORTS:
                self.lab.veth(self.tester_intf[k], self.tester, self.switch_intf[k], None)
            self.socks = {k: raw_socket(self.tester_intf[k], self.tester) for k in PORTS}
            for s in self.socks.values():
                s.setblocking(False)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        for s in getattr(self, "socks", {}).values():
            s.close()
        self.lab.close()

    def runtime(self, **kw) -> dict:
        return runtime_doc(ports=PORTS, intf=lambda k: self.switch_intf[k], **kw)

    def drain(self) -> None:
        for s in self.socks.values():
            drain(s)

    def capture(self, seconds: float) -> dict[int, list[tuple[float, bytes]]]:
        out: dict[int, list] = {k: [] for k in PORTS}  # a port whose socket is closed stays empty
        by_fd = {s.fileno(): (k, s) for k, s in self.socks.items()}
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            ready, _, _ = select.select(list(by_fd), [], [], left)
            now = time.monotonic()
            for fd in ready:
                k, s = by_fd[fd]
                try:
                    while True:
                        out[k].append((now, s.recv(65536)))
                except BlockingIOError:
                    pass
        return out


# --- frames ----------------------------------------------------------------------------------------


def raw_frame(name: str) -> bytes:
    if name == "truncated_dlcp":
        return dlcp_frame(dst="10.0.0.2")[: 42 + 10]
    if name == "dlcp_version_2":
        f = bytearray(dlcp_frame(dst="10.0.0.2"))
        f[42] = (2 << 4) | (f[42] & 0x0F)
        return bytes(f)
    if name == "truncated_telemetry":
        return dlcp_frame(dst="10.0.0.2", telemetry=True, payload=0)[: 66 + 4]
    if name == "truncated_ipv4":
        return udp_frame(dst="10.0.0.2")[:26]
    if name == "arp":
        return bytes.fromhex("ffffffffffff020000000001080600010800060400010200000000010a0000010000000000000a000002")
    if name == "ipv6":
        return bytes.fromhex("33330000000102000000000186dd6000000000083aff") + bytes(32) + bytes(8)
    raise ValueError(f"unknown raw frame {name!r}")


def build_frame(spec: dict) -> bytes:
    spec = dict(spec)
    kind = spec.pop("kind")
    if kind == "dlcp":
        return dlcp_frame(**spec)
    if kind == "udp":
        return udp_frame(**spec)
    if kind == "raw":
        return raw_frame(spec["name"])
    raise ValueError(f"unknown frame kind {kind!r}")


# --- running a scenario ------------------------------------------------------------------------------


class Result:
    def __init__(self, sent: int, t_send: float, out: dict, counters: dict):
        self.sent, self.t_send, self.out, self.counters = sent, t_send, out, counters

    def frames(self, port: int) -> list[bytes]:
        return [f for _, f in self.out[port]]


def run_scenario(bed: SwitchTestbed, sut: SwitchUnderTest, sc: dict, workdir: Path) -> Result:
    sut.start(bed.runtime(**sc["runtime"]), workdir)
    try:
        bed.drain()
        bursts = [(b["port"], build_frame(b["frame"]), b["n"], b.get("gap_us", 0)) for b in sc["send"]]
        sent = 0
        t_send = time.monotonic()
        for port, frame, n, gap_us in bursts:
            s = bed.socks[port]
            for _ in range(n):
                s.send(frame)
                sent += 1
                if gap_us:
                    time.sleep(gap_us / 1e6)
        out = bed.capture(sc["settle_s"])
    finally:
        counters = sut.stop()
    return Result(sent, t_send, out, counters)


# --- checks ------------------------------------------------------------------------------------------


def _ones_ok(data: bytes) -> bool:
    if len(data) % 2:
        data += b"\x00"
    s = sum(int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s == 0xFFFF


def checksums_valid(f: bytes) -> bool:
    if not _ones_ok(f[14:34]):
        return False
    udp = f[34:]
    if f[23] != 17 or udp[6:8] == b"\x00\x00":
        return True
    ulen = int.from_bytes(udp[4:6], "big")
    pseudo = f[26:34] + b"\x00\x11" + udp[4:6]
    return _ones_ok(pseudo + udp[:ulen])


def _all_out(r: Result) -> list[bytes]:
    return [f for k in PORTS for f in r.frames(k)]


def check_ttl_is(r: Result, ttl: int):
    assert all(f[22] == ttl for f in _all_out(r)), [f[22] for f in _all_out(r)]


def check_macs_rewritten(r: Result):
    for k in PORTS:
        for f in r.frames(k):
            assert f[0:6] == bytes.fromhex(f"0200000001{k:02x}") and f[6:12] == bytes.fromhex("0200000000fe")


def check_checksums_valid(r: Result):
    assert all(checksums_valid(f) for f in _all_out(r))


def _order_check(seq: list[int], want: list[int], slack: int, what: str):
    """After at most `slack` leading packets (they left before the burst was complete), the output
    is exactly `want` minus what those leading packets used up."""
    for lead in range(slack + 1):
        rest = want[:]
        head = seq[:lead]
        try:
            for v in head:
                rest.remove(v)
        except ValueError:
            continue
        if seq[lead:] == rest:
            return
    raise AssertionError(f"{what} order {seq} is not {want} (after up to {slack} early packets)")


def check_priority_order(r: Result, want: list[int], slack: int):
    _order_check([f[43] >> 5 for f in r.frames(2)], want, slack, "DLCP prio")


def check_priority_order_by_dscp(r: Result, want: list[int], slack: int):
    _order_check([f[15] >> 5 for f in r.frames(2)], want, slack, "DSCP prio")


def check_register(r: Result, name: str, index: str, value: int):
    assert r.counters["registers"][name].get(index) == value, r.counters["registers"]


def check_total_out(r: Result, n: int):
    assert len(_all_out(r)) == n


def check_flows_sticky_crc16(r: Result, members: list[int]):
    seen: dict[int, set] = {}
    for k in PORTS:
        for f in r.frames(k):
            sport = int.from_bytes(f[34:36], "big")
            seen.setdefault(sport, set()).add(k)
    assert seen, "nothing forwarded"
    for sport, ports in seen.items():
        key = five_tuple_bytes(bytes([10, 0, 0, 1]), bytes([10, 0, 0, 9]), 17, sport, 6000)
        assert ports == {members[crc16(key) % len(members)]}, (sport, ports)


def check_telemetry(r: Result, hops: int, min_max_depth: int, min_last_wait_us: int):
    tel = [(f[66], int.from_bytes(f[68:70], "big"), int.from_bytes(f[70:74], "big")) for f in r.frames(2)]
    assert all(h == hops for h, _, _ in tel), tel
    assert max(d for _, d, _ in tel) >= min_max_depth, tel
    assert max(w for _, _, w in tel) >= min_last_wait_us, tel
    zero = [f for f in r.frames(2) if f[40:42] == b"\x00\x00"]
    assert len(zero) == 3, "a zero UDP checksum must stay zero"


def check_telemetry_depths(r: Result, prio: int, n: int, lo: int, hi: int):
    """The `n` priority-`prio` frames out of port 2 carry max_enq_qdepth in lo..hi."""
    depths = [int.from_bytes(f[68:70], "big") for f in r.frames(2) if f[43] >> 5 == prio]
    assert len(depths) == n and all(lo <= d <= hi for d in depths), depths


def check_min_latency_s(r: Result, port: int, seconds: float):
    first = min(t for t, _ in r.out[port])
    assert first - r.t_send >= seconds, first - r.t_send


def check_ce_marks(r: Result, port: int, unmarked: int, marked: int, not_ect: int, slack: int):
    """The ECN-capable frames out of `port`, in order: `unmarked` still ECT(0), then `marked` CE, both
    +- slack; `not_ect` frames not ECN-capable, left alone; the switch's ce_marked counter agrees."""
    ecn = [f[15] & 3 for f in r.frames(port)]
    assert ecn.count(0) == not_ect, f"{ecn.count(0)} not-ECT frames, expected {not_ect}: {ecn}"
    ect = [e for e in ecn if e]
    first_ce = ect.index(3) if 3 in ect else len(ect)
    assert abs(first_ce - unmarked) <= slack, f"first CE after {first_ce} frames, expected {unmarked}: {ecn}"
    assert all(e == 3 for e in ect[first_ce:]) and all(e == 2 for e in ect[:first_ce]), f"not ECT(0)* CE*: {ecn}"
    assert abs(ect.count(3) - marked) <= slack, f"{ect.count(3)} CE, expected {marked}"
    counted = sum(row["ce_marked_pkts"] for row in r.counters.get("ecn_marks", []) if row["port"] == port)
    assert counted == ect.count(3), f"ce_marked counts {counted}, {ect.count(3)} frames came out marked"


def check_wrr_shares(r: Result, port: int, shares: dict[str, int], slack: int):
    """While every queue of `shares` (DSCP class -> frames per round) still has frames to send, every
    run of one round's worth of consecutive frames out of `port` holds exactly each queue's share.
    The first `slack` frames may have left before the burst was complete."""
    seq = [f[15] >> 5 for f in r.frames(port)]
    want = {int(q): n for q, n in shares.items()}
    end = min(max((i for i, q in enumerate(seq) if q == c), default=-1) for c in want) + 1
    window = sum(want.values())
    region = seq[slack:end]
    assert len(region) >= 2 * window, f"queues {sorted(want)} were backlogged together for {len(region)} frames: {seq}"
    for i in range(len(region) - window + 1):
        got = {c: region[i : i + window].count(c) for c in want}
        assert got == want, f"frames {slack + i}..{slack + i + window - 1} of port {port}: {got}, not {want}: {seq}"


def check_paced(r: Result, port: int, pps: float, slack: int):
    """The port sent at its rate without idling while it had frames: the first to the last frame out
    took (n - 1) transmission slots, give or take `slack` slots."""
    times = [t for t, _ in r.out[port]]
    span, slots = times[-1] - times[0], len(times) - 1
    assert (slots - slack) / pps <= span <= (slots + slack) / pps, f"{len(times)} frames in {span:.4f} s at {pps} pps"


CHECKS = {name[len("check_") :]: fn for name, fn in globals().items() if name.startswith("check_")}


# --- the counters every engine writes --------------------------------------------------------------


def reference_counters(sc: dict) -> dict:
    """The counters the reference model (dlcp/switch/pipeline.py) gives the scenario's frames, one
    after another, each sent before the next comes: a deterministic scenario's counts on any engine."""
    from dlcp.network.runtime_file import parse_runtime
    from dlcp.switch import counter_dump
    from dlcp.switch.pipeline import Pipeline

    runtime = parse_runtime(runtime_doc(ports=PORTS, **sc["runtime"]), sc["name"])
    pipe = Pipeline(runtime)
    ports = {k: dict.fromkeys(("rx_pkts", "rx_bytes", "tx_pkts", "tx_bytes"), 0) for k in PORTS}
    for burst in sc["send"]:
        frame = build_frame(burst["frame"])
        for _ in range(burst["n"]):
            f = bytearray(frame)
            ports[burst["port"]]["rx_pkts"] += 1
            ports[burst["port"]]["rx_bytes"] += len(f)
            out = pipe.ingress(f, burst["port"])
            if out is not None:
                port, qid, _, tel = out
                pipe.egress(f, port, qid, tel, 0, 0, False)
                ports[port]["tx_pkts"] += 1
                ports[port]["tx_bytes"] += len(f)
    rows = [counter_dump.port_row(k, f"p{k}", ports[k]) for k in PORTS]
    return counter_dump.snapshot(runtime.switch, pipe.counters(), rows, engine="reference", backend="reference")


PIPELINE_COUNTERS = ("queues", "ecn_marks", "drops", "tables", "registers", "non_dlcp")
PORT_TRAFFIC = ("rx_pkts", "rx_bytes", "tx_pkts", "tx_bytes")


def check_counters(sc: dict, r: Result, backend: str) -> None:
    """Every engine of the pipeline core writes the same keys, and in a deterministic scenario the
    same counts as the reference model; bmv2 (its own P4 counters) is held to the queue and drop
    counts."""
    from dlcp.switch.counter_dump import DUMP_KEYS, PORT_COUNTS

    c = r.counters
    if backend != "bmv2":
        assert tuple(c) == DUMP_KEYS, f"counter dump keys {list(c)}, expected {list(DUMP_KEYS)}"
        for row in c["ports"]:
            assert list(row) == ["port", "intf", *PORT_COUNTS, "state"], f"port row keys {list(row)}"
    if sc["name"] not in DETERMINISTIC:
        return
    ref = reference_counters(sc)
    for key in PIPELINE_COUNTERS if backend != "bmv2" else ("queues", "drops"):
        assert c[key] == ref[key], f"{key}: {c[key]} differs from the reference model's {ref[key]}"
    got = {p["port"]: {k: p[k] for k in PORT_TRAFFIC} for p in c["ports"]}
    want = {p["port"]: {k: p[k] for k in PORT_TRAFFIC} for p in ref["ports"]}
    assert got == want, f"port traffic {got} differs from the reference model's {want}"


def for_backend(sc: dict, backend: str) -> dict:
    """The scenario as it runs on `backend`: a backend's own section (scenarios.py) replaces the
    parts it reformulates."""
    own = sc.get(backend, {})
    return {**sc, **{k: v for k, v in own.items() if k in ("runtime", "send", "expect", "settle_s")}}


def verify(sc: dict, r: Result, backend: str) -> None:
    exp = sc["expect"]
    tol = exp.get("tol", 0)
    got = {k: len(r.out[k]) for k in PORTS}
    c = r.counters
    assert c, "the switch left no counter dump"
    for k in PORTS:
        if k in exp.get("out", {}):
            assert abs(got[k] - exp["out"][k]) <= tol, f"port {k}: {got[k]} out, expected {exp['out'][k]}"
        elif k in exp.get("out_range", {}):
            lo, hi = exp["out_range"][k]
            assert lo <= got[k] <= hi, f"port {k}: {got[k]} out, expected {lo}..{hi}"
        elif "out" in exp or "out_range" in exp:
            assert got[k] == 0, f"port {k}: {got[k]} unexpected frames"
    for reason in P.DROP_REASONS:
        assert c["drops"][reason] == exp.get("drops", {}).get(reason, 0), (reason, c["drops"])
    rows = {(q["port"], q["qid"], q["color"]): q for q in c["queues"]}
    for key, want in exp.get("queues", {}).items():
        row = rows.get(tuple(int(x) for x in key.split(",")), {})
        for counter, n in want.items():
            assert abs(row.get(counter, 0) - n) <= tol, f"queue {key} {counter}: {row.get(counter, 0)}, expected {n}"
    # conservation: every frame the switch read is accounted for exactly once (bmv2's `ports` are
    # the kernel's counts on its interfaces: frames its capture missed would show here)
    ports = {p["port"]: p for p in c["ports"]}
    rx = sum(p["rx_pkts"] for p in ports.values())
    assert rx == r.sent, f"switch read {rx} of {r.sent} frames"
    q = lambda name: sum(row[name] for row in c["queues"])
    assert rx == sum(c["drops"].values()) + q("admitted_pkts") + q("early_drop_pkts") + q("tail_drop_pkts")
    for k, p in ports.items():
        assert p["tx_pkts"] == got[k], f"port {k}: switch sent {p['tx_pkts']}, tester saw {got[k]}"
    in_switch = ("link_loss_pkts", "queue_overflow_pkts", "queued_pkts", "pending_pkts")  # built-in switch only
    assert q("admitted_pkts") == sum(p["tx_pkts"] + sum(p.get(k, 0) for k in in_switch) for p in ports.values())
    for name, *args in exp.get("checks", []):
        CHECKS[name](r, *args)
    check_counters(sc, r, backend)


def check_scenario(bed, sut, sc: dict, tmp_path, record_property) -> None:
    """One scenario on one switch under test, held to what the scenario expects of that backend
    (its own section says where and why it differs, or that it must refuse to start)."""
    import pytest

    from emulation.dataplane import SwitchStartError

    own = sc.get(sut.name, {})
    if own:
        record_property("differs", own["differs"])
    if "start_error" in own:
        with pytest.raises(SwitchStartError, match=own["start_error"]):
            run_scenario(bed, sut, sc, tmp_path)
        assert not sut.alive()
        return
    sc = for_backend(sc, sut.name)
    verify(sc, run_scenario(bed, sut, sc, tmp_path), sut.name)
