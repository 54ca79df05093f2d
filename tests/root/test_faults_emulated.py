"""Fault injection that needs root: a read-only results root, a capture port the topology lacks
(refused before Mininet starts), a benchmark option refused before its namespaces, a run
SIGKILLed mid-run whose report is then titled partial, and an intact real run, whose report must
miss nothing (the control for the synthetic runs' missing-record checks). Then each process a run
starts killed mid-run (a switch, the agents' fork server, an agent): the run names it in one line,
stops everything within seconds, keeps what was recorded and writes a partial report; SIGTERM
while the agents' modules load; a second run while one runs; a --run-dir that holds a run. The
cases without root are in tests/unit/test_faults.py, ns-3's in tests/ns3/test_faults_ns3.py. Each
test checks the machine is clean afterwards; run under the netns lock (`flock
/tmp/dlcp-netns.lock`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from datetime import datetime
from pathlib import Path

import pytest
from emulated_runs import (  # noqa: F401 (clean_machine: autouse)
    DLCP,
    ROOT,
    assert_clean,
    clean_machine,
    finish,
    start_long_run,
    wait_for_progress,
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
    # the agents stopped with it (their parent-death signal is SIGTERM): their progress says how
    # far they got, and they wrote what they had recorded
    assert summary["run"]["partial"] and summary["run"]["status"] == "unfinished"
    assert any(
        p.startswith("progress/h1: agent ended in state 'error'") and p.endswith("stopped by signal SIGTERM")
        for p in summary["problems"]
    ), summary["problems"]
    assert summary["iteration"]["count"] >= 1  # past the warm-up: its iterations are recorded


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


# --- a process the run started dies mid-run ----------------------------------------------------------

WARMUP = 5  # the default workload.warmup_iterations: a partial report needs iterations past it


def recorded_pid(runner: subprocess.Popen, role: str, name: str | None = None) -> int:
    """The pid of what `runner` started in `role` (emulation/procs.py's records), once it has."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for p in procs.recorded():
            if p["owner"] == runner.pid and p["role"] == role and name in (None, p["name"]):
                return p["pid"]
        assert runner.poll() is None, runner.communicate()[1][-3000:]
        time.sleep(0.05)
    raise AssertionError(f"no {role} {name or ''} recorded")


def failure(err: str) -> str:
    (line,) = [ln for ln in err.splitlines() if ln.startswith("dlcp run: failed: ")]
    return line.removeprefix("dlcp run: failed: ")


def ended_after(run: Path, t_unix: float) -> float:
    """Seconds from `t_unix` to the end meta.json records (everything stopped by then)."""
    return datetime.fromisoformat(json.loads((run / "meta.json").read_text())["end_utc"]).timestamp() - t_unix


def agent_totals(run: Path, host: str, err: str) -> dict:
    """records/<host>-agent.json; when it is missing, the failure shows the run's stderr and the
    agents' logs (how each agent ended), not only the missing path."""
    path = run / "records" / f"{host}-agent.json"
    if not path.exists():
        logs = "\n".join(f"{log.name}:\n{procs.log_tail(log)}" for log in sorted((run / "logs").glob("h*.log")))
        raise AssertionError(f"no {path.name}; the run said:\n{err[-3000:]}\nthe agents' logs:\n{logs}")
    return json.loads(path.read_text())


def assert_partial_report(run: Path, err: str, error: str) -> None:
    meta = json.loads((run / "meta.json").read_text())
    assert meta["status"] == "error" and meta["error"] == error, meta
    assert f"partial report: {run / 'report.html'}" in err, err[-3000:]
    title = (run / "report.md").read_text().splitlines()[0]
    assert title.endswith("PARTIAL (error)"), title
    assert error in (run / "report.md").read_text()


def test_a_killed_switch_ends_the_run_within_seconds_naming_it(tmp_path):
    """The switch on the workers' side dies: the run says which and how in one line, stops
    everything within 5 s (no waiting for timeout_s), keeps the other switch's counters and the
    agents' records, and writes a partial report."""
    proc = start_long_run(tmp_path, report=True, dumbbell=True)
    run = wait_for_progress(tmp_path / "r", proc, min_iter=WARMUP + 2)
    pid = recorded_pid(proc, "switch", "s1")
    killed = time.time()
    os.kill(pid, signal.SIGKILL)
    err = finish(proc, 120)
    assert proc.returncode == 1, err[-3000:]
    why = f"switch s1 (pid {pid}) was killed by SIGKILL"
    assert failure(err) == why, err[-3000:]
    assert ended_after(run, killed) < 5.0
    assert f"dlcp run: {why}; writing the partial report (" in err  # said at once, before the report
    assert f"partial run: {run} (" in err and "counters of s2; none from s1)" in err, err[-3000:]
    assert (run / "counters" / "s2.json").exists() and not (run / "counters" / "s1.json").exists()
    for h in ("h1", "h2"):  # the workers were stopped (SIGTERM) and wrote what they had
        totals = agent_totals(run, h, err)
        assert totals["iterations_done"] >= WARMUP + 2 and totals["error"] == "stopped by signal SIGTERM"
    assert_partial_report(run, err, why)
    assert_clean()


def test_a_killed_fork_server_is_named_and_its_agents_keep_their_records(tmp_path):
    """The agents' fork server dies: the run names it, not one of its agents, and the agents, which
    get SIGTERM from it as it dies, leave their records."""
    proc = start_long_run(tmp_path, report=True)
    run = wait_for_progress(tmp_path / "r", proc, min_iter=WARMUP + 2)
    pid = recorded_pid(proc, "agent-forkserver")
    os.kill(pid, signal.SIGKILL)
    err = finish(proc, 120)
    assert proc.returncode == 1, err[-3000:]
    why = failure(err)
    assert why == (
        f"the agents' fork server (pid {pid}) was killed by SIGKILL; its agents were stopped with it "
        "(SIGTERM) and wrote their records"
    ), err[-3000:]
    for h, role in (("h1", "worker"), ("h2", "worker"), ("h3", "ps")):
        totals = agent_totals(run, h, err)
        assert totals["role"] == role and totals["error"] == "stopped by signal SIGTERM", totals
        assert (run / "records" / f"{h}-messages.csv").stat().st_size > 0
    assert len((run / "records" / "h1-iterations.csv").read_text().splitlines()) >= 1 + WARMUP + 2
    assert_partial_report(run, err, why)
    assert_clean()


def test_a_killed_agent_is_named_and_the_others_keep_their_records(tmp_path):
    proc = start_long_run(tmp_path, report=True)
    run = wait_for_progress(tmp_path / "r", proc, min_iter=WARMUP + 2)
    pid = recorded_pid(proc, "agent-worker", "h2")
    os.kill(pid, signal.SIGKILL)
    err = finish(proc, 120)
    assert proc.returncode == 1, err[-3000:]
    why = failure(err)
    assert why.startswith("worker on h2 was killed by SIGKILL; last lines of "), err[-3000:]
    assert json.loads((run / "records" / "h1-agent.json").read_text())["iterations_done"] >= WARMUP + 2
    assert (run / "counters" / "s1.json").exists() and "counters of s1)" in err
    assert_partial_report(run, err, why)
    assert_clean()


def test_sigterm_while_the_agents_modules_load_says_so_and_leaves_nothing(tmp_path):
    proc = start_long_run(tmp_path)
    while "loading the agents' modules" not in proc.stderr.readline():
        assert proc.poll() is None, proc.communicate()[1][-3000:]
    recorded_pid(proc, "agent-forkserver")  # it is importing torch now
    proc.send_signal(signal.SIGTERM)
    err = finish(proc, 120)
    assert proc.returncode == 143, err[-3000:]
    (results,) = [ln for ln in err.splitlines() if ln.startswith("dlcp run: terminated")]
    assert results.startswith(
        "dlcp run: terminated (SIGTERM) before its first run started; everything it started was stopped "
        f"and nothing was kept ({tmp_path / 'r'}/"
    ) and results.endswith("-short removed)"), err[-3000:]
    assert "Traceback" not in err
    assert not (tmp_path / "r").exists()  # nothing for `dlcp compare results/*` to trip on
    assert_clean()


def test_a_second_run_is_refused_before_it_starts_anything(tmp_path):
    """Mininet runs cannot share a machine: a second `dlcp run` (same --out and --name, which used
    to land in the same directory) is refused in one line naming the live run, which goes on
    untouched."""
    first = start_long_run(tmp_path, args=("--name", "same"))
    try:
        run = wait_for_progress(tmp_path / "r", first)
        before = {p: p.read_bytes() for p in (run / "config.toml", run / "topology.json", run / "meta.json")}
        t0 = time.monotonic()
        second = dlcp("run", str(tmp_path / "short.toml"), "--out", str(tmp_path / "r"), "--name", "same")
        assert second.returncode == 1 and second.stderr.count("\n") == 1, second.stderr
        assert second.stderr.startswith(
            f"dlcp run: another run has this machine (pid {first.pid}, builtin, {run.parent}, running for "
        ), second.stderr
        assert time.monotonic() - t0 < 60
        assert [p.name for p in (tmp_path / "r").iterdir()] == [run.parent.name]
        assert {p: p.read_bytes() for p in before} == before
        assert first.poll() is None
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=120)
    assert first.returncode == 143
    assert_clean()


def test_a_run_dir_that_holds_a_run_is_refused_and_kept(tmp_path):
    cfg = write_config(tmp_path, iterations=2)
    run = tmp_path / "run"
    p = dlcp("run", str(cfg), "--run-dir", str(run), "--no-report", timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    files = {f: f.read_bytes() for f in run.rglob("*") if f.is_file()}
    p = dlcp("run", str(cfg), "--run-dir", str(run), "--no-report", timeout=300)
    assert p.returncode == 2 and p.stderr == (
        f"dlcp run: --run-dir '{run}': holds a run already; run directories are never reused (give a new or "
        "empty one)\n"
    ), p.stderr
    assert {f: f.read_bytes() for f in run.rglob("*") if f.is_file()} == files
    assert_clean()
