"""The short experiment of tests/root/test_runner.py with simple_switch_grpc running p4/dlcp.p4
as the switch."""

from __future__ import annotations

import json
import subprocess

from emulated_runs import DLCP, ROOT, clean_machine, read_csv, run_dirs, write_config  # noqa: F401 (clean_machine: autouse)


def test_short_experiment_on_bmv2(tmp_path):
    """The same short experiment with simple_switch_grpc running p4/dlcp.p4 as the switch."""
    from emulation.bmv2.simple_switch import GRPC_PORT_BASE, THRIFT_PORT_BASE, port_busy

    cfg = write_config(tmp_path, iterations=3, backend="bmv2")
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
    assert meta["status"] == "ok" and meta["backend"] == "bmv2"
    assert meta["versions"]["p4c"].startswith("p4c ") and meta["versions"]["simple_switch_grpc"]
    for h in ("h1", "h2"):
        assert [int(r["iter"]) for r in read_csv(run / "records" / f"{h}-iterations.csv")] == [0, 1, 2]
    dump = json.loads((run / "counters" / "s1.json").read_text())
    assert dump["backend"] == "bmv2" and sum(q["admitted_pkts"] for q in dump["queues"]) > 0
    # every frame that reached bmv2's ports went through the P4 program, and what it admitted left
    accounted = sum(dump["drops"].values()) + sum(
        q[k] for q in dump["queues"] for k in ("admitted_pkts", "early_drop_pkts", "tail_drop_pkts")
    )
    assert sum(p["rx_pkts"] for p in dump["ports"]) == accounted
    assert sum(p["tx_pkts"] for p in dump["ports"]) == sum(q["admitted_pkts"] for q in dump["queues"])
    assert "simple_switch_grpc --device-id 1" in (run / "logs" / "s1.log").read_text()
    assert (run / "summary.json").exists()
    assert not port_busy(GRPC_PORT_BASE + 1) and not port_busy(THRIFT_PORT_BASE + 1)
