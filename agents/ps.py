"""Parameter-server agent: gathers every worker's push, updates, scatters parameters.

    python -m agents.ps --config <run>/agents/hN-<role>.json

Per iteration (dlcp/workloads/contract.py): gather (each message once every worker's push is complete or
forced) -> ServerWorkload.update (fill policy + optimizer) -> scatter the parameters to every
worker. Records and progress: docs/runs.md.
"""

from __future__ import annotations

from agents.common import Agent, exit_fast, open_transport, realtime_work_thread, run_agent
from dlcp.comm.ps import PSServer
from dlcp.workloads.lookup import make_server_workload


def run(agent: Agent) -> None:
    cfg = agent.cfg
    workload = make_server_workload(cfg.workload, cfg.dlcp.fill)
    transport = open_transport(agent)
    transport.connect()  # every worker listening: pulls will find their sockets bound
    server = PSServer(transport, cfg.comm_config(), workload.layouts(), workload.n_layers)
    # aggregation at CFS held the interpreter lock while preempted, and the receive thread waited
    # for it (p99 socket waits of 2.4-3.4 ms with only the transport's threads real-time)
    realtime_work_thread()
    for it in range(agent.iterations):
        agent.check_time()
        server.begin(it)
        aggregates = server.gather(it)
        workload.update(it, aggregates)
        server.scatter(it, {lay.msg_id: workload.parameters(lay.msg_id) for lay in workload.layouts()})
        agent.done = it + 1
        agent.progress()


def main(argv: list[str] | None = None) -> int:
    return run_agent("ps", run, argv)


if __name__ == "__main__":
    exit_fast(main())
