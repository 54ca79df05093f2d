"""The switch process's interfaces: pcap of chosen ports, SIGUSR1 and control-socket dumps, and
one-line errors for a bad runtime file or a missing interface."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest
from switch_frames import dlcp_frame
from switch_harness import HAVE_C, ROOT, BuiltinSwitchSUT, SwitchTestbed

from emulation.builtin_switch.pcap import read_pcap
from emulation.builtin_switch.process import control_request


@pytest.fixture(scope="module")
def bed():
    b = SwitchTestbed("rsp")
    yield b
    b.close()


@pytest.mark.parametrize("engine", ["c", "python"])
def test_pcap_signal_and_control(bed, tmp_path, engine):
    if engine == "c" and not HAVE_C:
        pytest.skip("C engine not built")
    pcap_dir = tmp_path / "pcap"
    sut = BuiltinSwitchSUT(engine, ("--pcap-dir", str(pcap_dir), "--pcap-port", "1", "--pcap-port", "2"))
    sut.start(bed.runtime(), tmp_path)
    try:
        bed.drain()
        sent = [dlcp_frame(seq=i) for i in range(5)]
        for f in sent:
            bed.socks[1].send(f)
        out = bed.capture(0.3)
        sw = sut.process
        sw.proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 5
        while not sw.counters_path.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        dumped = json.loads(sw.counters_path.read_text())
        assert {p["port"]: p["rx_pkts"] for p in dumped["ports"]}[1] == 5
        assert control_request(sw.control_path, "dump")["path"] == str(sw.counters_path)
        assert control_request(sw.control_path, "nope") == {
            "ok": False,
            "error": "unknown command 'nope' (ping, counters, dump)",
        }
    finally:
        sut.stop()
    rx = [f for _, f in read_pcap(pcap_dir / f"{bed.switch_intf[1]}.pcap")]
    tx = [f for _, f in read_pcap(pcap_dir / f"{bed.switch_intf[2]}.pcap")]
    assert rx == sent  # as received, before the pipeline touched them
    assert tx == [f for _, f in out[2]] and len(tx) == 5


def _run(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "emulation.builtin_switch", *args], cwd=ROOT, capture_output=True, text=True, timeout=30
    )


def test_bad_runtime_is_a_one_line_error(tmp_path):
    rt = tmp_path / "s1-runtime.json"
    rt.write_text(
        json.dumps(
            {
                "switch": "s1",
                "device_id": 1,
                "registers": [],
                "table_entries": [
                    {
                        "table": "DlcpIngress.ipv4_lpm",
                        "action_name": "DlcpIngress.set_nhop_group",
                        "match": {"ipv4_dst": ["10.0.0.1", 40]},
                        "action_params": {"group": 1, "size": 1},
                    }
                ],
                "ports": [],
            }
        )
    )
    p = _run(["--runtime", str(rt)])
    assert p.returncode == 2 and p.stderr.count("\n") == 1
    assert "table_entries[0]: match.ipv4_dst: prefix length 40 > 32" in p.stderr
    p = _run(["--runtime", str(tmp_path / "missing.json")])
    assert p.returncode == 2 and "missing.json: cannot read" in p.stderr


def test_missing_interface_is_a_one_line_error(tmp_path):
    rt = tmp_path / "s1-runtime.json"
    rt.write_text(
        json.dumps(
            {
                "switch": "s1",
                "device_id": 1,
                "table_entries": [],
                "registers": [],
                "ports": [{"port": 1, "intf": "rsnosuch0"}],
            }
        )
    )
    p = _run(["--runtime", str(rt)])
    assert p.returncode == 1 and p.stderr.count("\n") == 1
    assert p.stderr.startswith("builtin_switch s1: port 1: interface rsnosuch0: no interface with this name")
