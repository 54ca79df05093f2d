"""The bmv2 launcher's failure paths, with a stand-in `simple_switch_grpc` (a shell script), so they
run everywhere: every failure names the switch and, once a process ran, shows its command line and
log tail; nothing is left running or recorded."""

from __future__ import annotations

import os
import socket

import pytest
from fake_p4runtime import free_port

from dlcp.network.switch_runtime import SwitchConfig, SwitchTopo, runtime_for
from emulation import procs
from emulation.bmv2 import simple_switch as bmv2switch


@pytest.fixture
def runtime(tmp_path):
    for f in ("p.txtpb", "p.json"):
        (tmp_path / f).write_text("{}")
    return runtime_for(
        SwitchTopo("s8", 8, (), ()), SwitchConfig(p4info=str(tmp_path / "p.txtpb"), bmv2_json=str(tmp_path / "p.json"))
    )


@pytest.fixture
def fake_bmv2(tmp_path, monkeypatch):
    """Install a stand-in simple_switch_grpc running `body`; PID records go to tmp_path."""
    monkeypatch.setattr(procs, "STATE_DIR", tmp_path / "pids")

    def install(body: str) -> str:
        exe = tmp_path / "simple_switch_grpc"
        exe.write_text("#!/bin/sh\n" + body + "\n")
        exe.chmod(0o755)
        monkeypatch.setenv(bmv2switch.BMV2_ENV, str(exe))
        return str(exe)

    return install


def test_switch_that_dies_shows_command_and_log_tail(fake_bmv2, runtime, tmp_path):
    exe = fake_bmv2('echo "boom: cannot open device" >&2; exit 3')
    with pytest.raises(bmv2switch.SwitchStartError) as e:
        bmv2switch.start_bmv2(
            "s8", runtime, {1: "lo"}, tmp_path / "run", grpc_port=free_port(), thrift_port=free_port()
        )
    text = str(e.value)
    assert text.startswith("bmv2 switch s8: simple_switch_grpc exited with status 3 during start-up")
    assert f"command: {exe} --device-id 8 -i 1@lo --thrift-port" in text
    assert "--priority-queues 8" in text and "boom: cannot open device" in text
    assert procs.recorded() == []


def test_switch_that_never_listens_is_stopped(fake_bmv2, runtime, tmp_path):
    fake_bmv2("exec sleep 60")
    with pytest.raises(bmv2switch.SwitchStartError, match=r"s8: gRPC port \d+ / Thrift port \d+ not listening"):
        bmv2switch.start_bmv2(
            "s8", runtime, {}, tmp_path / "run", grpc_port=free_port(), thrift_port=free_port(), timeout_s=1
        )
    assert procs.recorded() == []


def test_busy_port_is_refused(fake_bmv2, runtime, tmp_path):
    fake_bmv2("exit 0")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(bmv2switch.SwitchStartError, match=rf"s8: TCP port {port} \(Thrift\) is busy"):
            bmv2switch.start_bmv2("s8", runtime, {}, tmp_path, thrift_port=port, grpc_port=free_port())


def test_missing_interface_is_refused(fake_bmv2, runtime, tmp_path):
    fake_bmv2("exit 0")
    with pytest.raises(bmv2switch.SwitchStartError, match="s8: interface pfnosuch0 \\(port 1\\) does not exist"):
        bmv2switch.start_bmv2("s8", runtime, {1: "pfnosuch0"}, tmp_path)


def test_missing_bmv2_is_one_line(monkeypatch, runtime, tmp_path):
    monkeypatch.setenv(bmv2switch.BMV2_ENV, "/nonexistent/simple_switch_grpc")
    with pytest.raises(bmv2switch.SwitchStartError) as e:
        bmv2switch.start_bmv2("s8", runtime, {}, tmp_path)
    assert "DLCP_BMV2_BIN=/nonexistent/simple_switch_grpc is not an executable" in str(e.value)
    assert "\n" not in str(e.value)


def test_command_line():
    cmd = bmv2switch.bmv2_command("ssg", 3, {2: "s3-eth2", 1: "s3-eth1"}, 9562, 9093)
    assert cmd == [
        "ssg",
        "--device-id",
        "3",
        "-i",
        "1@s3-eth1",
        "-i",
        "2@s3-eth2",
        "--thrift-port",
        "9093",
        "--log-level",
        "off",
        "--no-p4",
        "--",
        "--grpc-server-addr",
        "127.0.0.1:9562",
        "--priority-queues",
        "8",
    ]
    debug = bmv2switch.bmv2_command("ssg", 3, {}, 1, 2, debug_log=True, pcap_dir=os.path.join("r", "pcap"))
    assert debug[debug.index("--log-console") : debug.index("--no-p4")] == [
        "--log-console",
        "-L",
        "debug",
        "--pcap",
        os.path.join("r", "pcap"),
    ]
