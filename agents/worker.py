"""Worker agent: trains its Workload and exchanges gradients with the PS or through the comm layer.

    python -m agents.worker --config <run>/agents/hN-<role>.json

The iteration is dlcp/iteration/worker_core.py's (`WorkerCore`, the one ns-3 runs too); this
module drives it with the agent's thread, the real clock and the transport. Per iteration
(dlcp/workloads/contract.py): backward yields messages, each is pushed (PS) or handed to the comm
layer at once (all-reduce: `[comm] scheduler` decides what runs when over `[comm] collective`,
dlcp/comm/communicator.py); then parameters are pulled (PS) or aggregates awaited and applied. DS-Sync
with `average = "parameters"` takes a local SGD step with the worker's own gradient and then
averages parameters inside its group of the iteration. Every `dlcp.resync_every` iterations of
ring or MultiTree all-reduce, rank 0's parameters replace the others' and the drift is recorded
(records/hN-resync.csv). With several jobs ([[jobs]]) a worker, once connected, waits for the
runner's release of every job and then its job's start_s (dlcp/experiment/releases.py). Records
and progress: docs/runs.md.
"""

from __future__ import annotations

import logging
import time

from agents.common import Agent, exit_fast, open_transport, realtime_work_thread, run_agent
from dlcp.comm.ps import PSClient
from dlcp.comm.transport_communicator import TransportCommunicator
from dlcp.experiment.releases import JOBS_GO, wait_for_release
from dlcp.iteration import actions as A
from dlcp.iteration.worker_core import WorkerCore, worker_spec
from dlcp.records import now_us, workload_totals
from dlcp.transport.api import TransportError
from dlcp.wire.control_frames import PS_RANK
from dlcp.workloads.lookup import make_workload

log = logging.getLogger("agent")


class ThreadedWorker:
    """Performs a WorkerCore's actions in the agent's thread: the compute and the comm layer's
    waits block, and their ends are the core's events (dlcp/iteration/actions.py)."""

    def __init__(self, agent: Agent, workload, coll, core: WorkerCore):
        self.agent, self.workload, self.coll, self.core = agent, workload, coll, core

    def run(self) -> None:
        self.agent.check_time()
        A.drive(self.core.start(now_us()), self.perform)

    def perform(self, a) -> list:
        core, coll = self.core, self.coll
        if isinstance(a, A.WorkloadCall):
            c0 = time.perf_counter()
            result = a.run(self.workload)
            return core.work_done(now_us(), time.perf_counter() - c0, result)
        if isinstance(a, A.Compute):
            return self.compute(a.iteration)
        if isinstance(a, A.Handoff):
            if isinstance(a, A.Push):
                coll.push(a.iteration, a.message)
            elif isinstance(a, A.Submit):
                coll.submit(a.iteration, a.message)
            else:
                coll.submit_parameters(a.iteration, a.params)
            core.handed(now_us())
        elif isinstance(a, A.AwaitComm):
            try:
                result = coll.pull(a.iteration) if isinstance(coll, PSClient) else coll.wait(a.iteration)
            except TransportError as e:
                return core.comm_failed(now_us(), str(e))
            return core.comm_done(now_us(), result)
        elif isinstance(a, A.Resync):
            reference, _ = coll.resync(a.iteration, a.params)
            return core.resynced(now_us(), reference)
        elif isinstance(a, A.BeginComm):
            coll.begin(a.iteration)
        elif isinstance(a, A.BackwardDone):
            coll.backward_done(a.iteration)
        elif isinstance(a, A.ScheduleBudget):
            self.agent.transport.set_budget(a.budget)
            self.agent.budget_rows.append(a.row)
        elif isinstance(a, A.RecordIteration):
            self.agent.iteration_rows.append(a.row)
        elif isinstance(a, A.RecordResync):
            self.agent.resync_rows.append(a.row)
            r = a.row
            log.info(
                "re-sync at iteration %d: drift from rank 0 L2 %.6g, max %.6g", r["iter"], r["drift_l2"], r["drift_max"]
            )
        elif isinstance(a, A.Progress):
            self.agent.done = a.done
            self.agent.progress()
        elif isinstance(a, A.NextIteration):
            self.agent.check_time()
            return core.start(now_us())
        elif isinstance(a, A.Failed):
            raise TransportError(a.line)
        elif not isinstance(a, A.Finished):
            raise TypeError(f"worker: no way to perform {a!r}")
        return []

    def compute(self, it: int) -> list:
        """The iteration's compute, each message handed over as soon as backward yields it
        (overlap); the compute time is what the workload's steps took."""
        gen = self.workload.compute(it)
        while True:
            c0 = time.perf_counter()
            msg = next(gen, None)
            dt = time.perf_counter() - c0
            if msg is None:
                return self.core.compute_done(now_us(), dt)
            A.drive(self.core.gradient_ready(now_us(), msg, dt), self.perform)


def planning_backward_ms(workload_cfg) -> float:
    """The backward time the planners assume (dlcp/comm/assemble.py): the synthetic model's
    compute_ms; 0 for real torch compute, which is not known before it runs."""
    return workload_cfg.compute_ms if workload_cfg.model == "synthetic" else 0.0


def planning_layer_times(workload):
    """Per-layer (forward_s, backward_s) of a workload timed by a profile, as the emulation runs
    them (dilation included): what the planners plan with; None for real compute."""
    timer = getattr(workload, "timer", None)
    return None if timer is None else (timer.forward_s, timer.backward_s)


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
        log.info(
            "comm: scheduler %s over %s, %d operations per iteration",
            cfg.comm.scheduler,
            cfg.comm.collective,
            coll.sched.ops_per_iteration(),
        )
    spec = worker_spec(cfg, workload)
    if cfg.dlcp.resync_every and cfg.mode == "allreduce" and not hasattr(workload, "parameters"):
        log.warning("re-sync skipped: the workload has no parameters(msg_id)")
    if planning_layer_times(workload) is not None:  # profile compute sleeps until deadlines; real compute stays CFS
        realtime_work_thread()
    if cfg.jobs:
        wait_for_the_jobs_start(agent)
    try:
        ThreadedWorker(agent, workload, coll, WorkerCore(spec)).run()
    finally:
        agent.extra_totals.update(workload_totals(workload))
        stats = getattr(workload, "compute_stats", lambda: None)()
        if stats is not None:  # how well the machine kept up with the profile (records/hN-agent.json)
            agent.extra_totals["compute"] = stats
        if isinstance(coll, TransportCommunicator):
            coll.close()


def wait_for_the_jobs_start(agent: Agent) -> None:
    """Several jobs: say this worker is connected (progress state "connected"), wait for the
    runner's release of every job, then this job's start_s more (its arrival and time-shift,
    dilated): the jobs' first iterations keep their offsets from one origin."""
    agent.progress("connected")
    go = wait_for_release(str(agent.run_dir), JOBS_GO)
    delay = go + agent.cfg.start_s - time.time()
    if delay > 0:
        time.sleep(delay)


def main(argv: list[str] | None = None) -> int:
    return run_agent("worker", run, argv)


if __name__ == "__main__":
    exit_fast(main())
