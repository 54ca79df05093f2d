"""A 4x4 torus in Mininet with the built-in switch: the routes topospec writes carry pings between
every pair the test tries, including over wrap-around links and 4-way equal-cost groups.
Run under the lock: flock /work/locks/netns.lock pytest tests/root/test_grid_mininet.py"""

from __future__ import annotations

from dlcp.experiment import config
from dlcp.network import topology as topospec
from dlcp.network.switch_runtime import write_runtime
from emulation import procs


def test_torus_4x4_forwards_between_hosts(tmp_path, monkeypatch):
    from emulation.network import build_network
    from emulation.switches import BuiltinSwitch

    monkeypatch.setattr(procs, "STATE_DIR", tmp_path / "pids")
    cfg = config.validate({"name": "grid", "links": {"host_mbps": 200, "fabric_mbps": 50}})
    spec = topospec.torus((4, 4), 200, 50)
    for runtime in spec.runtimes(cfg).values():
        write_runtime(runtime, tmp_path / "runtime")
    params = {
        s: {"runtime_json": str(tmp_path / "runtime" / f"{s}-runtime.json"), "run_dir": str(tmp_path)}
        for s in spec.switches
    }
    net = build_network(spec, BuiltinSwitch, params, cfg["links"]["host_queue_pkts"])
    try:
        # h1 = (0,0) to everyone: neighbours, wrap-around (h4, h13) and two-away groups (h3, h11)
        for dst in range(2, 17):
            out = net.get("h1").cmd(f"ping -c 1 -W 3 10.0.0.{dst}")
            assert " 0% packet loss" in out, f"h1 -> h{dst}: {out}"
        for src, dst in [(11, 1), (16, 6), (7, 13)]:
            out = net.get(f"h{src}").cmd(f"ping -c 1 -W 3 10.0.0.{dst}")
            assert " 0% packet loss" in out, f"h{src} -> h{dst}: {out}"
    finally:
        net.stop()
    assert procs.recorded() == []


def test_host_fair_queueing_gives_each_destination_its_class(tmp_path, monkeypatch):
    """links.host_fair_queueing: one HTB leaf per other host; traffic to h2 and h3 is counted in
    their own classes (so the NIC serves them round-robin), everything else in the default leaf."""
    from emulation.network import build_network
    from emulation.switches import BuiltinSwitch

    monkeypatch.setattr(procs, "STATE_DIR", tmp_path / "pids")
    cfg = config.validate({"name": "grid", "links": {"host_mbps": 20, "fabric_mbps": 5, "host_fair_queueing": True}})
    spec = topospec.mesh((2, 2), 20, 5)
    for runtime in spec.runtimes(cfg).values():
        write_runtime(runtime, tmp_path / "runtime")
    params = {
        s: {"runtime_json": str(tmp_path / "runtime" / f"{s}-runtime.json"), "run_dir": str(tmp_path)}
        for s in spec.switches
    }
    net = build_network(spec, BuiltinSwitch, params, cfg["links"]["host_queue_pkts"], True)
    try:
        h1 = net.get("h1")
        for dst, count in ((2, 3), (3, 5)):
            out = h1.cmd(f"ping -c {count} -i 0.2 -W 3 10.0.0.{dst}")
            assert " 0% packet loss" in out, out
        classes = h1.cmd("tc -s class show dev h1-eth0")
        sent = {}
        for block in classes.split("class htb ")[1:]:
            cls = block.split()[0]
            sent[cls] = int(block.split(" Sent ")[1].split()[2])  # "Sent B bytes N pkt"
        # leaves 1:2 (default), 1:3 .. 1:5 for h2, h3, h4 in host order
        assert sent["1:4"] >= 5 and sent["1:3"] >= 3 and sent["1:5"] == 0, classes
    finally:
        net.stop()
    assert procs.recorded() == []
