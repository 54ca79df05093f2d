"""BuiltinSwitch in a real Mininet network: start, forward, dump counters on stop, clean up; and a
start-up failure that reports the switch's own error and command line."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from switch_frames import entry, runtime_doc

from dlcp import backends
from emulation import procs
from emulation.dataplane import BuiltinProcess
from emulation.switches import Bmv2Switch, BuiltinSwitch, DlcpSwitch, SwitchStartError

TAG = f"rs{os.getpid() % 100000}"
ROOT = Path(__file__).resolve().parents[2]


def test_backend_mapping():
    """The registry's emulated backends run their switches with these Mininet classes."""
    assert backends.DEFAULT == "builtin" and backends.implementation("builtin").switch_class is BuiltinSwitch
    assert backends.implementation("bmv2").switch_class is Bmv2Switch and issubclass(Bmv2Switch, DlcpSwitch)
    with pytest.raises(backends.UnknownBackend, match="'nope' is not one of builtin, bmv2, ns3"):
        backends.implementation("nope")


def test_backends_load_the_p4runtime_stack_only_when_bmv2_starts():
    code = (
        "import sys; from dlcp import backends; backends.implementation('bmv2').switch_class.toolchain; "
        "print(sorted(m for m in ('grpc', 'p4runtime_sh', 'emulation.bmv2.control', 'emulation.bmv2.simple_switch') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"


def _net(tmp_path, runtime: dict, **switch_options):
    from mininet.net import Mininet

    net = Mininet(controller=None, build=False, autoSetMacs=False)
    h1 = net.addHost(f"{TAG}h1", ip="10.0.0.1/24", mac="02:00:00:00:01:01")
    h2 = net.addHost(f"{TAG}h2", ip="10.0.0.2/24", mac="02:00:00:00:01:02")
    rt_path = tmp_path / "s1-runtime.json"
    rt_path.write_text(json.dumps(runtime))
    sw = net.addSwitch(
        f"{TAG}s1", cls=BuiltinSwitch, dpid="1", runtime_json=rt_path, run_dir=tmp_path, **switch_options
    )
    net.addLink(h1, sw, port2=1)
    net.addLink(h2, sw, port2=2)
    return net, h1, h2, sw


def test_builtin_switch_in_mininet(tmp_path, monkeypatch):
    monkeypatch.setattr(procs, "STATE_DIR", tmp_path / "pids")
    rt = runtime_doc(ports=(1, 2), intf=lambda p: f"{TAG}s1-eth{p}")
    net, h1, h2, sw = _net(tmp_path, rt)
    try:
        net.build()
        net.staticArp()  # a DLCP switch forwards IPv4 only, so hosts must not need ARP
        net.start()
        assert [i["name"] for i in procs.recorded()] == [sw.name]
        out = h1.cmd("ping -c 3 -i 0.2 -W 2 10.0.0.2")
        assert " 0% packet loss" in out, out
        sw.request_counters()
        assert sum(q["admitted_pkts"] for q in sw.counters()["queues"]) >= 6
    finally:
        net.stop()
    assert sw.dataplane is None and procs.recorded() == []
    c = json.loads((tmp_path / "counters" / f"{sw.name}.json").read_text())
    assert c["switch"] == sw.name and c["backend"] == "builtin"
    ports = {p["port"]: p for p in c["ports"]}
    assert ports[1]["rx_pkts"] >= 3 and ports[2]["tx_pkts"] >= 3
    # pings carry no DLCP header: every admitted packet is in the non-DLCP split, at DSCP class 0
    assert c["non_dlcp"] and {r["dscp_class"] for r in c["non_dlcp"]} == {0}
    assert sum(r["admitted_pkts"] for r in c["non_dlcp"]) == sum(q["admitted_pkts"] for q in c["queues"])
    # queue samples every 0.1 s; the last one has the final per-port counts
    samples = [json.loads(line) for line in (tmp_path / "counters" / f"{sw.name}-samples.jsonl").open()]
    assert len(samples) >= 5 and all(b["t"] > a["t"] for a, b in itertools.pairwise(samples))
    last = samples[-1]["ports"]
    assert set(last) == {"1", "2"} and len(last["1"]["occ"]) == 8
    by_port = {p: sum(q["admitted_pkts"] for q in c["queues"] if q["port"] == p) for p in (1, 2)}
    assert [last[str(p)]["admitted"] for p in (1, 2)] == [by_port[1], by_port[2]]
    assert last["2"]["non_dlcp_admitted"] == last["2"]["admitted"]


@pytest.mark.parametrize("engine", ["c", "python"])
def test_builtin_switch_measures_how_long_frames_wait_before_it_reads_them(tmp_path, monkeypatch, engine):
    """The kernel stamps each frame as it arrives; a switch that reads late (here: stopped while h1
    pings) counts the wait in its dump's `read_lag`, and finds h1's frames came faster than h1's
    link could have sent them (`host_burst`): the switch's own keep-up figures."""
    monkeypatch.setattr(procs, "STATE_DIR", tmp_path / "pids")
    rt = runtime_doc(
        ports=(1, 2), intf=lambda p: f"{TAG}s1-eth{p}", port_cfg={1: {"rate_mbps": 1.0, "host_nic": True}}
    )  # 98-byte pings: 0.8 ms each
    net, h1, h2, sw = _net(tmp_path, rt, extra_args=["--engine", engine])
    try:
        net.build()
        net.staticArp()
        net.start()
        out = h1.cmd("ping -c 3 -i 0.2 -W 2 10.0.0.2")
        assert " 0% packet loss" in out, out
        pid = sw.dataplane.pid
        os.kill(pid, signal.SIGSTOP)
        try:
            h1.cmd("ping -c 3 -i 0.01 -W 1 10.0.0.2")  # about 1 s: the requests wait for the switch
        finally:
            os.kill(pid, signal.SIGCONT)
        time.sleep(0.2)
        sw.request_counters()
        c = sw.counters()
    finally:
        net.stop()
    lag, burst, late = c["read_lag"], c["host_burst"], c["send_late"]
    assert lag["count"] >= 12, lag  # 6 requests, 6 replies
    assert lag["max_ms"] >= 800, lag  # the requests read after the stop
    assert lag["p50_ms"] < 100, lag  # the rest read as they came
    assert burst["count"] >= 6 and burst["max_bytes"] >= 150, burst  # the later pings found earlier ones "on the link"
    assert late["count"] >= 6, late  # h2's replies leave on port 1's paced link


def test_start_failure_reports_stderr_and_command(tmp_path, monkeypatch):
    monkeypatch.setattr(procs, "STATE_DIR", tmp_path / "pids")
    rt = runtime_doc(ports=(1, 2), intf=lambda p: f"{TAG}s1-eth{p}")
    rt["table_entries"].append(entry("DlcpIngress.nope", "DlcpIngress.mark_no_route", {}))
    net, _, _, sw = _net(tmp_path, rt)
    try:
        net.build()
        # let the process itself find the problem
        monkeypatch.setattr(BuiltinProcess, "runtime_ports", lambda self: {1: f"{TAG}s1-eth1", 2: f"{TAG}s1-eth2"})
        with pytest.raises(SwitchStartError) as e:
            sw.start([])
        msg = str(e.value)
        assert "unknown table 'DlcpIngress.nope'" in msg and "command: " in msg and "-m emulation.builtin_switch" in msg
        assert procs.recorded() == []
    finally:
        net.stop()


def test_runtime_ports_must_match_mininet_interfaces(tmp_path, monkeypatch):
    monkeypatch.setattr(procs, "STATE_DIR", tmp_path / "pids")
    rt = runtime_doc(ports=(1, 2), intf=lambda p: f"{TAG}s1-eth{3 - p}")  # ports swapped
    net, _, _, sw = _net(tmp_path, rt)
    try:
        net.build()
        with pytest.raises(SwitchStartError, match=f"{TAG}s1-eth2 is port 2 in the topology but port 1 in the runtime"):
            sw.start([])
        assert sw.dataplane is None and procs.recorded() == []
    finally:
        net.stop()
