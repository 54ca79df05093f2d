"""Fault injection that needs root: a read-only results root, a capture port the topology lacks
(refused before Mininet starts), a benchmark option refused before its namespaces, a run
SIGKILLed mid-run whose report is then titled partial, and an intact real run, whose report must
miss nothing (the control for the synthetic runs' missing-record checks). The cases without root are in
tests/unit/test_faults.py. Each test checks the machine is clean afterwards; run under the netns
lock (`flock /tmp/dlcp-netns.lock`)."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
from emulated_runs import (  # noqa: F401 (clean_machine: autouse)
    DLCP,
    ROOT,
    assert_clean,
    clean_machine,
    write_config,
)

from emulation import procs


def dlcp(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(DLCP + list(args), capture_output=True, text=True, timeout=timeout, cwd=ROOT)


@pytest.fixture
def read_only(tmp_path) -> Path:
    """A read-only mount (what root's permissions cannot get around)."""
    mnt = tmp_path / "ro"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_a_read_only_results_root_is_refused_in_one_line(tmp_path, read_only):
    cfg = write_config(tmp_path)
    p = dlcp("run", str(cfg), "--out", str(read_only / "results"))
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.startswith(f"dlcp run: --out '{read_only / 'results'}': cannot create a directory in {read_only}")
    assert "Read-only file system" in p.stderr


def test_a_capture_port_the_switch_lacks_is_refused_before_the_network_starts(tmp_path):
    cfg = write_config(tmp_path)
    t0 = time.monotonic()
    p = dlcp("run", str(cfg), "--out", str(tmp_path / "r"), "--set", 'output.pcap_ports=["s1-eth99"]')
    assert p.returncode == 2, p.stderr[-2000:]
    assert p.stderr == "dlcp run: output.pcap_ports: 's1-eth99': s1 has ports s1-eth1..s1-eth4\n"
    assert not (tmp_path / "r").exists() and time.monotonic() - t0 < 30
    assert_clean()


def test_incast_refuses_a_negative_host_mark_before_its_namespaces():
    p = dlcp("bench", "incast", "--host-mark-ms", "-1", "--senders", "2", "--cc", "dctcp", "--repeats", "1")
    assert p.returncode == 1 and p.stdout == "", p.stdout
    assert p.stderr == "dlcp bench incast: --host-mark-ms -1: must be >= 0 (0: off)\n"
    assert_clean()


def test_a_sigkilled_run_is_reported_as_partial(tmp_path):
    cfg = write_config(tmp_path, iterations=500, timeout=600)
    proc = subprocess.Popen(
        DLCP + ["run", str(cfg), "--out", str(tmp_path / "r"), "--no-report"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    deadline, run = time.monotonic() + 120, None
    while run is None:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
        for prog in (tmp_path / "r").glob("*/*/progress/h1"):
            try:
                if json.loads(prog.read_text()).get("iter", 0) >= 7:  # past the warm-up
                    run = prog.parents[1]
            except ValueError:
                pass
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    time.sleep(2)  # its children die with it (parent-death signal); `dlcp clean` removes the links
    assert dlcp("clean").returncode == 0
    assert_clean()
    assert not [p for p in procs.recorded() if p["owner"] == proc.pid and procs.is_ours_and_alive(p)]
    p = dlcp("report", str(run), "--out", str(tmp_path / "report"), timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "missing: meta.json: no end recorded (the run was killed" in p.stderr
    title = (tmp_path / "report" / "report.md").read_text().splitlines()[0]
    assert title.endswith("PARTIAL (unfinished)"), title
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    # the agents died with it (SIGKILL: no records); their progress says how far they got
    assert summary["run"]["partial"] and summary["run"]["status"] == "unfinished"
    assert any(p.startswith("progress/h1: agent ended in state 'running'") for p in summary["problems"])


def test_an_intact_real_run_misses_nothing_and_says_its_records_are_warm_up(tmp_path):
    """The real counterpart of the synthetic runs: every record file the report expects is there,
    and a run shorter than the default warm-up (4 of 5) says so instead of 'no records'."""
    cfg = write_config(tmp_path, iterations=4)
    p = dlcp("run", str(cfg), "--run-dir", str(tmp_path / "run"), timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["problems"] == [] and summary["scale"]["dilation_from"] == "meta.json"
    md = (tmp_path / "run" / "report.md").read_text()
    assert "No sender-side message records" not in md
    assert "sender-side message records are from the warm-up (workload.warmup_iterations = 5" in md
