"""The agents' fork server (agents/forkserver.py, emulation/forkserver.py), without Mininet: agents
forked into this process's own network namespace (setns needs root), real sockets, real signals."""

from __future__ import annotations

import json
import os
import signal
import socket
import time

import psutil
import pytest

from emulation import procs
from emulation.forkserver import ORPHAN_EXIT, ForkServer, ForkServerError


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    fs = ForkServer(tmp_path_factory.mktemp("fs") / "logs" / "forkserver.log")  # imports torch once
    yield fs
    fs.close()


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sink_config(tmp_path, port: int):
    (tmp_path / "records").mkdir(exist_ok=True)
    path = tmp_path / "agents" / "h1-sink.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "run_dir": str(tmp_path),
                "host": "h1",
                "role": "background",
                "ip": "127.0.0.1",
                "background": {"kind": "sink", "port": port},
            }
        )
    )
    return path


def test_a_forked_agent_runs_in_the_namespace_with_its_nice_and_log_and_reports_its_exit(server, tmp_path):
    port = free_udp_port()
    p = server.spawn(os.getpid(), "background", sink_config(tmp_path, port), tmp_path / "h1-sink.log", nice=-10)
    deadline = time.monotonic() + 10
    while not procs.catches_sigterm(p.pid):  # set up: it installed its handler and bound its port
        assert p.poll() is None, (tmp_path / "h1-sink.log").read_text()
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert psutil.Process(p.pid).nice() == -10
    assert os.getsid(p.pid) == p.pid  # its own session: its own autogroup, as a started process had
    assert psutil.Process(p.pid).ppid() == server.proc.pid
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _ in range(5):
            s.sendto(b"x" * 100, ("127.0.0.1", port))
    time.sleep(0.3)
    p.terminate()
    assert p.wait(timeout=5) == 0
    record = json.loads((tmp_path / "records" / f"h1-sink{port}.json").read_text())
    assert record["pkts"] == 5 and record["bytes"] == 500


def test_an_agent_with_a_bad_config_exits_with_its_one_line_error_in_its_log(server, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"run_dir": "x"}')
    p = server.spawn(os.getpid(), "background", bad, tmp_path / "bad.log")
    assert p.wait(timeout=10) != 0
    assert "background: " in (tmp_path / "bad.log").read_text()


def test_what_the_server_cannot_start_is_a_one_line_error(server, tmp_path):
    with pytest.raises(ForkServerError, match="unknown agent module 'nope'"):
        server.spawn(os.getpid(), "nope", tmp_path / "x.json", tmp_path / "x.log")
    # the process whose namespace it should join is gone: the agent exits, its log says why
    p = server.spawn(2**22 + 1, "background", sink_config(tmp_path, free_udp_port()), tmp_path / "y.log")
    assert p.wait(timeout=10) == 1
    assert f"/proc/{2**22 + 1}/ns/net" in (tmp_path / "y.log").read_text()


def test_agents_stop_with_their_server_and_keep_their_records(tmp_path):
    """The server SIGKILLed: its agents get SIGTERM (their parent-death signal), write their
    records and exit; the runner, whom nobody reports their exits to now, sees them gone by their
    pids, and does not wait forever."""
    server = ForkServer(tmp_path / "forkserver.log")
    port = free_udp_port()
    p = server.spawn(os.getpid(), "background", sink_config(tmp_path, port), tmp_path / "h1-sink.log")
    deadline = time.monotonic() + 10
    while not procs.catches_sigterm(p.pid):  # set up
        assert p.poll() is None and time.monotonic() < deadline, (tmp_path / "h1-sink.log").read_text()
        time.sleep(0.02)
    child = psutil.Process(p.pid)
    os.kill(server.proc.pid, signal.SIGKILL)
    child.wait(timeout=5)  # the parent-death signal
    assert not child.is_running()
    assert p.wait(timeout=5) == ORPHAN_EXIT == 128 + signal.SIGTERM and p.poll() == ORPHAN_EXIT
    assert json.loads((tmp_path / "records" / f"h1-sink{port}.json").read_text())["kind"] == "sink"
    server.close()
