"""Parameter-server agent: gathers every worker's push, updates, scatters parameters.

    python -m agents.ps --config <run>/agents/hN-<role>.json

The aggregation loop is dlcp/iteration/server_core.py's (`ServerCore`, the one ns-3 runs too);
this module drives it with the agent's thread and the transport. Per iteration
(dlcp/workloads/contract.py): gather (each message once every worker's push is complete or
forced) -> ServerWorkload.update (fill rule + optimizer) -> scatter the parameters to every
worker. Records and progress: docs/runs.md.
"""

from __future__ import annotations

import time

from agents.common import Agent, exit_fast, open_transport, realtime_work_thread, run_agent
from dlcp.comm.ps import PSServer
from dlcp.iteration import actions as A
from dlcp.iteration.budget_schedule import BudgetScheduleSettings, phase_budget
from dlcp.iteration.server_core import ServerCore
from dlcp.records import now_us
from dlcp.workloads.lookup import make_server_workload


class ThreadedServer:
    """Performs a ServerCore's actions in the agent's thread: gather and scatter block."""

    def __init__(self, agent: Agent, workload, server: PSServer, core: ServerCore):
        self.agent, self.workload, self.server, self.core = agent, workload, server, core

    def run(self) -> None:
        A.drive(self.core.start(now_us()), self.perform)

    def perform(self, a) -> list:
        core = self.core
        if isinstance(a, A.WorkloadCall):
            c0 = time.perf_counter()
            result = a.run(self.workload)
            return core.work_done(now_us(), time.perf_counter() - c0, result)
        if isinstance(a, A.BeginComm):
            self.agent.check_time()
            self.server.begin(a.iteration)
        elif isinstance(a, A.AwaitPushes):
            aggregates = self.server.gather(a.iteration)
            return core.gathered(now_us(), a.iteration, aggregates)
        elif isinstance(a, A.Scatter):
            self.server.scatter(a.iteration, a.params)
            return core.scattered(now_us(), a.iteration)
        elif isinstance(a, A.ScheduleBudget):
            self.agent.transport.set_budget(a.budget)
            self.agent.budget_rows.append(a.row)
        elif isinstance(a, A.Progress):
            self.agent.done = a.done
            self.agent.progress()
        elif not isinstance(a, A.Finished):
            raise TypeError(f"parameter server: no way to perform {a!r}")
        return []


def run(agent: Agent) -> None:
    cfg = agent.cfg
    workload = make_server_workload(cfg.workload, cfg.dlcp.fill)
    transport = open_transport(agent)
    transport.connect()  # every worker listening: pulls will find their sockets bound
    layouts = workload.layouts()
    server = PSServer(transport, cfg.comm_config(), layouts, workload.n_layers, fill=cfg.dlcp.fill)
    # aggregation at CFS held the interpreter lock while preempted, and the receive thread waited
    # for it (p99 socket waits of 2.4-3.4 ms with only the transport's threads real-time)
    realtime_work_thread()
    schedule = phase_budget(cfg.dlcp.project(BudgetScheduleSettings), cfg.host, cfg.rank)
    core = ServerCore(agent.iterations, tuple(lay.msg_id for lay in layouts), schedule=schedule)
    ThreadedServer(agent, workload, server, core).run()


def main(argv: list[str] | None = None) -> int:
    return run_agent("ps", run, argv)


if __name__ == "__main__":
    exit_fast(main())
