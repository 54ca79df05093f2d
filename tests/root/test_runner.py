"""The experiment runner end to end, as root: a short real experiment on the built-in switch,
Ctrl-C in the middle, a crashing agent, and `dlcp clean` after a SIGKILLed run. Each test checks
the machine is clean afterwards."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time

import psutil
import pytest
from emulated_runs import (  # noqa: F401 (clean_machine: autouse)
    DLCP,
    ROOT,
    assert_clean,
    clean_machine,
    leftovers,
    read_csv,
    run_dirs,
    start_long_run,
    wait_for_progress,
    write_config,
)

from dlcp.experiment import config as configmod
from emulation import clean, procs


def test_short_experiment_end_to_end(tmp_path):
    cfg = write_config(tmp_path, iterations=4)
    p = subprocess.run(
        DLCP + ["run", str(cfg), "--out", str(tmp_path / "results")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    [run] = run_dirs(tmp_path / "results")
    meta = json.loads((run / "meta.json").read_text())
    assert meta["status"] == "ok" and meta["backend"] == "builtin" and meta["versions"]["torch"]
    for f in ("config.toml", "topology.json", "runtime/s1-runtime.json", "counters/s1.json"):
        assert (run / f).exists(), f
    for h in ("h1", "h2"):  # workers: every iteration recorded, with test accuracy at eval iterations
        its = read_csv(run / "records" / f"{h}-iterations.csv")
        assert [int(r["iter"]) for r in its] == [0, 1, 2, 3]
        assert any(r["test_accuracy"] for r in its)
        msgs = read_csv(run / "records" / f"{h}-messages.csv")
        assert {r["phase"] for r in msgs} >= {"push", "pull"}
        assert all(int(r["protected_lost"]) == 0 for r in msgs if r["forced"] == "0")
    counters = json.loads((run / "counters" / "s1.json").read_text())
    assert sum(q["admitted_pkts"] for q in counters["queues"]) > 0
    assert (run / "summary.json").exists()
    bg = json.loads((run / "records" / "h4-background0.json").read_text())
    assert bg["pkts"] > 0
    # released once both workers finished iteration 0, and its process was waiting by then
    first_done = max(int(read_csv(run / "records" / f"{h}-iterations.csv")[0]["end_us"]) for h in ("h1", "h2"))
    assert first_done / 1e6 <= bg["released_unix"] <= bg["start_unix"] < bg["released_unix"] + 0.1


PROFILED = """
name = "paired"
timeout_s = 120
seed = 3
[scale]
dilation = 2
[topology]
kind = "star"
hosts = 3
[links]
host_mbps = 100
[workload]
mode = "ps"
workers = 2
model = "synthetic"
compute = "profile"
profile = "{profile}"
iterations = 6
warmup_iterations = 1
[dlcp]
deadline_ms = 1000
"""


def test_repeated_pairs_with_profile_compute_and_dilation(tmp_path):
    prof = tmp_path / "tiny.json"
    prof.write_text(
        json.dumps(
            {
                "model": "tiny",
                "note": "test",
                "sizes": [300, 2000, 500],
                "forward_s": [0.001, 0.002, 0.001],
                "backward_s": [0.002, 0.004, 0.002],
            }
        )
    )
    cfg = tmp_path / "paired.toml"
    cfg.write_text(PROFILED.format(profile=prof))
    p = subprocess.run(
        check=False,
        args=DLCP + ["run", str(cfg), "--policies", "fifo,dlcp", "--repeat", "2", "--out", str(tmp_path / "results")],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    [results] = (tmp_path / "results").iterdir()
    for variant in ("fifo", "dlcp"):
        for rep, seed in ((1, 3), (2, 4)):  # a new seed per pair, the same within it
            run = results / variant / f"rep{rep}"
            meta = json.loads((run / "meta.json").read_text())
            assert (meta["repeat"], meta["seed"], meta["dilation"], meta["policy"]) == (rep, seed, 2.0, variant)
            assert "s1" in meta["switch_cpu"] and meta["machine"]["cpus"] >= 1
            assert "host_mbps = 100" in (run / "config.toml").read_text()  # the system, as written
            agent = json.loads((run / "agents" / "h1-worker.json").read_text())
            assert agent["workload"]["dilation"] == 2 and agent["dlcp"]["deadline_ms"] == 2000
            ports = json.loads((run / "runtime" / "s1-runtime.json").read_text())["ports"]
            assert {p["rate_mbps"] for p in ports} == {50.0}  # the emulation, 2x slower
            compute = json.loads((run / "records" / "h1-agent.json").read_text())["compute"]
            assert compute["iterations"] == 5 and compute["deadlines"] == 5 * 2 * 3  # after 1 warm-up iteration
            summary = json.loads((run / "summary.json").read_text())
            assert summary["scale"]["dilation"] == 2.0 and summary["iteration"]["count"] == 5
    data = json.loads((results / "compare.json").read_text())
    assert data["kind"] == "repeats" and data["n_pairs"] == 2 and data["seeds"] == [3, 4]
    assert data["ratios"]["mct_p50"]["verdict"] == "no interval (2 pair(s); at least 5 needed)"
    assert "95% CI" in p.stdout


def test_missing_bmv2_fails_before_anything_starts(tmp_path):
    """Without simple_switch_grpc (or p4c, when the P4 program must be compiled) a bmv2 run stops
    with one line that says how to point the project at an installation; needs no root."""
    cfg = write_config(tmp_path, backend="bmv2")
    env = dict(os.environ, DLCP_BMV2_BIN="/nonexistent/simple_switch_grpc")
    p = subprocess.run(
        DLCP + ["run", str(cfg), "--out", str(tmp_path / "r")], capture_output=True, text=True, cwd=ROOT, env=env
    )
    assert p.returncode == 1 and p.stderr.count("\n") == 1, p.stderr
    assert (
        p.stderr.startswith(
            "dlcp run: failed: backend bmv2: DLCP_BMV2_BIN=/nonexistent/simple_switch_grpc is not an executable"
        )
        and "set DLCP_BMV2_BIN=" in p.stderr
    )
    assert not (tmp_path / "r").exists()
    if shutil.which("simple_switch_grpc") is None:
        return
    env = dict(os.environ, DLCP_P4C="/nonexistent/p4c")  # a data port no build has: p4c must run
    p = subprocess.run(
        DLCP + ["run", str(cfg), "--out", str(tmp_path / "r"), "--set", "dlcp.data_port=9990"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
    )
    assert p.returncode == 1 and p.stderr.count("\n") == 1, p.stderr
    assert p.stderr.startswith("dlcp run: failed: backend bmv2: DLCP_P4C=/nonexistent/p4c is not an executable")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("sig,status,code", [(signal.SIGINT, "interrupted", 130), (signal.SIGTERM, "terminated", 143)])
def test_signal_mid_run_cleans_up_and_writes_a_partial_report(tmp_path, sig, status, code):
    proc = start_long_run(tmp_path, stdout=subprocess.PIPE, report=True)
    # past the warm-up iterations, which iteration statistics leave out (workload.warmup_iterations)
    warmup = configmod.validate({"name": "x"})["workload"]["warmup_iterations"]
    run = wait_for_progress(tmp_path / "r", proc, min_iter=warmup + 3)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == code, err[-2000:]
    assert json.loads((run / "meta.json").read_text())["status"] == status
    assert f"partial run: {run} (" in err and " of 500 iterations)" in err, err[-2000:]
    assert f"partial report: {run / 'report.html'}" in err, err[-2000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["run"]["partial"] and summary["run"]["status"] == status
    assert 1 <= summary["iteration"]["count"] < 500
    assert f"PARTIAL ({status})" in (run / "report.html").read_text()
    assert_clean()


def test_crashed_agent_fails_run_with_its_log(tmp_path):
    proc = start_long_run(tmp_path, stdout=subprocess.PIPE)
    wait_for_progress(tmp_path / "r", proc)
    worker = next(p for p in procs.recorded() if p["role"] == "agent-worker" and p["name"] == "h2")
    os.kill(worker["pid"], signal.SIGKILL)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert "worker on h2 was killed by SIGKILL" in err  # the signal by its name, not "status -9"
    assert_clean()


def run_processes(runner_pid: int) -> list[psutil.Process]:
    """Every process `dlcp run` started that is alive now: its descendants (node shells, switch,
    agents) and whatever it recorded (the switch runs in its own session, still its child)."""
    tree = psutil.Process(runner_pid).children(recursive=True)
    recorded = [
        psutil.Process(p["pid"]) for p in procs.recorded() if p["owner"] == runner_pid and procs.is_ours_and_alive(p)
    ]
    return list({p.pid: p for p in tree + recorded}.values())


def test_sigkilled_run_leaves_no_process_and_clean_removes_links(tmp_path):
    proc = start_long_run(tmp_path)
    wait_for_progress(tmp_path / "r", proc)
    deadline = time.monotonic() + 30  # background senders start with the other agents
    while not any(p["role"] == "agent-background" for p in procs.recorded()):
        assert time.monotonic() < deadline, "background senders never started"
        time.sleep(0.2)
    alive = run_processes(proc.pid)
    roles = {p["role"] for p in procs.recorded() if p["owner"] == proc.pid}
    assert {"node-shell", "switch", "agent-ps", "agent-worker", "agent-background"} <= roles
    assert any(r.startswith("agent-sink") for r in roles)
    proc.kill()
    proc.wait()
    _, still = psutil.wait_procs(alive, timeout=5)
    assert not still, f"alive 5 s after the run was SIGKILLed: {[(p.pid, p.cmdline()) for p in still]}"
    p = subprocess.run(DLCP + ["clean"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "dlcp clean: stopped 0 recorded processes" in p.stdout, p.stdout
    assert_clean()


# Who may not build networks: root with every capability dropped (a container's root, say), and an
# ordinary user. Both can still read the checkout, even one cloned into a 0700 home as root's is
# (the user by CAP_DAC_READ_SEARCH, as the owner of their own clone would): the refusal is tested,
# not a missing module.
UNPRIVILEGED = {
    "root-without-capabilities": ["setpriv", "--bounding-set=-all", "--inh-caps=-all"],
    "ordinary-user": [
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--inh-caps=+dac_read_search",
        "--ambient-caps=+dac_read_search",
    ],
}


@pytest.mark.parametrize("who", sorted(UNPRIVILEGED))
def test_run_refuses_without_root(who, tmp_path):
    cfg = ROOT / "experiments" / "ps-incast.toml"
    out = tmp_path / "results"
    p = subprocess.run(
        UNPRIVILEGED[who] + DLCP + ["run", str(cfg), "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=dict(os.environ, HOME="/"),
    )
    assert p.returncode == 1, p.stderr[-3000:]
    assert (
        p.stderr.strip().splitlines()[-1] == "dlcp run: needs root (Mininet network namespaces); run: sudo dlcp run ..."
    )
    assert not out.exists()  # refused before anything was written


def test_bad_config_fails_before_anything_starts(tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text('name = "x"\n[dlcp]\nloss_budget = 2\n')
    p = subprocess.run(DLCP + ["run", str(cfg), "--out", str(tmp_path / "r")], capture_output=True, text=True)
    assert p.returncode == 2
    assert p.stderr.strip() == "dlcp run: dlcp.loss_budget: 2 is not a fraction in 0..1"
    assert not (tmp_path / "r").exists()


def test_clean_leaves_a_running_experiment_alone(tmp_path):
    proc = start_long_run(tmp_path)
    try:
        wait_for_progress(tmp_path / "r", proc)
        before = leftovers()
        p = subprocess.run(DLCP + ["clean"], capture_output=True, text=True, timeout=60)
        assert p.returncode == 0 and "left alone what running experiments own" in p.stdout
        after = leftovers()
        assert after["links"] == before["links"] and after["node_shells"] == before["node_shells"]
        assert {p["pid"] for p in before["recorded"]} <= {p["pid"] for p in after["recorded"]}
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    assert_clean()


def test_stop_survives_a_node_shell_killed_from_outside(tmp_path):
    proc = start_long_run(tmp_path)
    wait_for_progress(tmp_path / "r", proc)
    shell = next(p for p in procs.recorded() if p["role"] == "node-shell" and p["name"] == "s1")
    os.kill(shell["pid"], signal.SIGKILL)  # Mininet's stop would wait on this shell forever
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=90)
    assert proc.returncode == 130, err[-2000:]
    assert "shells of s1 are gone" in err
    clean.clean(verbose=False)  # the network parts Mininet could not remove without the shell
    assert_clean()
