"""Worker agent: trains its Workload and exchanges gradients with the PS or through the comm layer.

    python -m agents.worker --config <run>/agents/hN-<role>.json

Per iteration (dlcp/workloads/contract.py): backward yields messages, each is pushed (PS) or handed
to the comm layer at once (all-reduce: `[comm] scheduler` decides what runs when over `[comm]
collective`, dlcp/comm/communicator.py); then parameters are pulled (PS) or aggregates awaited and
applied. DS-Sync with `average = "parameters"` takes a local SGD step with the worker's own
gradient and then averages parameters inside its group of the iteration. Every
`dlcp.resync_every` iterations of ring or MultiTree all-reduce, rank 0's parameters replace the
others' and the drift is recorded (records/hN-resync.csv). Records and progress: docs/runs.md.
"""

from __future__ import annotations

import logging
import time

import numpy as np

from agents.common import Agent, exit_fast, open_transport, realtime_work_thread, run_agent
from dlcp.comm.ps import PSClient
from dlcp.comm.transport_communicator import TransportCommunicator
from dlcp.records import now_us
from dlcp.wire.control_frames import PS_RANK
from dlcp.workloads.contract import Aggregate, ParamChunk
from dlcp.workloads.lookup import make_workload

log = logging.getLogger("agent")


def compute_and_send(workload, it: int, send) -> dict:
    """Run the iteration's compute, handing every message to `send(it, msg)` as soon as it is
    produced (overlap); returns the timing dict (start, compute seconds, first send)."""
    t = {"start_us": now_us(), "compute_s": 0.0, "first_send_us": None}
    gen = workload.compute(it)
    while True:
        c0 = time.perf_counter()
        msg = next(gen, None)
        t["compute_s"] += time.perf_counter() - c0
        if msg is None:
            return t
        send(it, msg)
        t["first_send_us"] = t["first_send_us"] or now_us()


def iteration_ps(agent: Agent, workload, client: PSClient, it: int) -> tuple[dict, int]:
    t = compute_and_send(workload, it, client.push)
    chunks = client.pull(it)
    t["comm_end_us"] = now_us()
    c0 = time.perf_counter()
    for msg_id, chunk in chunks.items():
        workload.apply_parameters(it, msg_id, chunk)
    t["compute_s"] += time.perf_counter() - c0
    return t, int(sum(int(c.lost.sum()) for c in chunks.values()))


def iteration_allreduce(agent: Agent, workload, ring: TransportCommunicator, it: int) -> tuple[dict, int]:
    t = compute_and_send(workload, it, ring.submit)
    aggs = ring.wait(it)
    t["comm_end_us"] = now_us()
    c0 = time.perf_counter()
    workload.apply_gradients(it, aggs)
    t["compute_s"] += time.perf_counter() - c0
    return t, int(sum(int((a.count < a.world).sum()) for a in aggs.values()))


def iteration_dssync(agent: Agent, workload, engine: TransportCommunicator, it: int) -> tuple[dict, int]:
    """DS-Sync, parameters: local SGD step with this worker's own gradient, then the group's mean
    parameters (docs/collectives.md)."""
    own = []
    t = compute_and_send(workload, it, lambda it, msg: own.append(msg))
    c0 = time.perf_counter()
    workload.apply_gradients(
        it, {m.msg_id: Aggregate(m.msg_id, m.values, np.ones(m.values.size, np.uint16), 1) for m in own}
    )
    params = {lay.msg_id: workload.parameters(lay.msg_id) for lay in workload.layouts()}
    t["compute_s"] += time.perf_counter() - c0
    t["first_send_us"] = now_us()
    chunks = engine.average(it, params)
    t["comm_end_us"] = now_us()
    c0 = time.perf_counter()
    for msg_id, chunk in chunks.items():
        workload.apply_parameters(it, msg_id, chunk)
    t["compute_s"] += time.perf_counter() - c0
    return t, int(sum(int(c.lost.sum()) for c in chunks.values()))


def planning_backward_ms(workload_cfg) -> float:
    """The backward time the planners assume (dlcp/comm/assemble.py): the synthetic model's
    compute_ms; 0 for real torch compute, which is not known before it runs."""
    return workload_cfg.compute_ms if workload_cfg.model == "synthetic" else 0.0


def planning_layer_times(workload):
    """Per-layer (forward_s, backward_s) of a workload timed by a profile, as the emulation runs
    them (dilation included): what the planners plan with; None for real compute."""
    timer = getattr(workload, "timer", None)
    return None if timer is None else (timer.forward_s, timer.backward_s)


def resync(agent: Agent, workload, ring: TransportCommunicator, it: int) -> None:
    if not hasattr(workload, "parameters"):
        log.warning("re-sync skipped: the workload has no parameters(msg_id)")
        return
    params = {lay.msg_id: workload.parameters(lay.msg_id) for lay in workload.layouts()}
    ref, drift = ring.resync(it, params)
    if agent.cfg.rank != 0:
        for msg_id, values in ref.items():
            workload.apply_parameters(it, msg_id, ParamChunk(values, np.zeros(values.size, bool)))
    agent.resync_rows.append({"host": agent.host, "rank": agent.cfg.rank, "iter": it, **drift})
    log.info("re-sync at iteration %d: drift from rank 0 L2 %.6g, max %.6g", it, drift["drift_l2"], drift["drift_max"])


def run(agent: Agent) -> None:
    cfg = agent.cfg
    rank, world = cfg.rank, cfg.world
    workload = make_workload(cfg.workload, rank, world, cfg.dlcp.fill)
    comm = cfg.comm_config()
    transport = open_transport(agent)
    layouts = workload.layouts()
    if cfg.mode == "ps":
        transport.connect([PS_RANK])
        coll = PSClient(transport, comm, layouts, workload.n_layers)
        step = iteration_ps
    else:
        transport.connect()  # trees, groups and rank 0's order announcements reach any rank
        coll = TransportCommunicator(
            transport,
            comm,
            cfg.comm,
            layouts,
            workload.n_layers,
            host_mbps=cfg.links.host_mbps,
            fabric_mbps=cfg.links.fabric_mbps,
            spec=cfg.topology_spec(),
            backward_ms=planning_backward_ms(cfg.workload),
            layer_times=planning_layer_times(workload),
        )
        params_average = cfg.comm.collective == "dssync" and cfg.comm.dssync.average == "parameters"
        step = iteration_dssync if params_average else iteration_allreduce
        log.info(
            "comm: scheduler %s over %s, %d operations per iteration",
            cfg.comm.scheduler,
            cfg.comm.collective,
            coll.sched.ops_per_iteration(),
        )
    # DS-Sync reaches consensus by shuffling its groups: no re-sync to rank 0
    resync_every = cfg.dlcp.resync_every if cfg.comm.collective != "dssync" else 0
    if planning_layer_times(workload) is not None:  # profile compute sleeps until deadlines; real compute stays CFS
        realtime_work_thread()
    try:
        for it in range(agent.iterations):
            agent.check_time()
            coll.begin(it)
            t, lost_values = step(agent, workload, coll, it)
            if cfg.mode == "allreduce" and world > 1 and resync_every and (it + 1) % resync_every == 0:
                resync(agent, workload, coll, it)
            end = now_us()  # evaluation is the observer's work, not the training's: not in the iteration
            metrics = workload.evaluate(it) or {}
            first = t["first_send_us"] or t["comm_end_us"]
            agent.iteration_rows.append(
                {
                    "host": agent.host,
                    "rank": rank,
                    "iter": it,
                    "start_us": t["start_us"],
                    "end_us": end,
                    "iteration_us": end - t["start_us"],
                    "compute_us": int(t["compute_s"] * 1e6),
                    "comm_us": t["comm_end_us"] - first,
                    "lost_values": metrics.get("lost_values", lost_values),
                    "train_loss": metrics.get("train_loss"),
                    "test_loss": metrics.get("test_loss"),
                    "test_accuracy": metrics.get("test_accuracy"),
                }
            )
            agent.done = it + 1
            agent.progress()
    finally:
        stats = getattr(workload, "compute_stats", lambda: None)()
        if stats is not None:  # how well the machine kept up with the profile (records/hN-agent.json)
            agent.extra_totals["compute"] = stats
        if isinstance(coll, TransportCommunicator):
            coll.close()


def main(argv: list[str] | None = None) -> int:
    return run_agent("worker", run, argv)


if __name__ == "__main__":
    exit_fast(main())
