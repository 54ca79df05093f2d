"""One run on ns-3: the experiment simulated instead of emulated (no root).

    ns-3 network from the topology and runtime files (network.py) -> hosts running the transport
    core (hosts.py) and the workers / PS (agents.py) -> background traffic once every worker
    finished its first iteration -> run until every worker is done -> records and counters

The run directory is an emulated run's (docs/runs.md), written by the series runner (dlcp/runs/)
around this: config.toml, topology.json, runtime/, meta.json, then summary.json and the report,
so `dlcp report` and `dlcp compare` treat both alike. Times in records are simulated microseconds
from the start of the simulation. meta.json's `simulation` section (simulated seconds, events,
wall and CPU seconds, peak memory) is this module's. The contract's side is simulation/ns3/backend.py.
"""

from __future__ import annotations

import resource
import time
from pathlib import Path

from dlcp import records as R
from dlcp.experiment.agent_config import agent_configs
from dlcp.runs import signals
from dlcp.runs.progress import Progress
from dlcp.runs.run_dir import write_json
from simulation.ns3 import loader

CPP_UNITS = ("dlcp_switch", "dlcp_net", "dlcp_host")  # simulation/ns3/cpp/*.h a simulation needs


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def simulated_compute_s(cfg: dict) -> float:
    """Compute time of one iteration in simulated seconds: the profile's forward + backward with
    `workload.compute = "profile"` (the system's time: a simulation needs no dilation), else
    `workload.compute_ms`."""
    from dlcp.experiment.config import Experiment
    from dlcp.workloads.profiled import workload_profile

    profile = workload_profile(Experiment.parse(cfg).workload)
    return profile.compute_s if profile is not None else cfg["workload"]["compute_ms"] / 1e3


def simulated_layer_times(cfg: dict, workload, dilation: float) -> tuple[list[float], list[float]] | None:
    """(forward_s, backward_s) per layer of the workload with `workload.compute = "profile"` (the
    profile's times summed per model layer as the emulated compute model sums them, without
    dilation); None with compute_ms."""
    from dlcp.experiment.config import Experiment
    from dlcp.workloads.profiled import workload_profile

    profile = workload_profile(Experiment.parse(cfg).workload)
    if profile is None:
        return None
    timer = getattr(workload, "timer", None)
    if timer is not None:  # a model whose layers group the profile's tensors; its times are dilated
        return [t / dilation for t in timer.forward_s], [t / dilation for t in timer.backward_s]
    return list(profile.forward_s), list(profile.backward_s)


def simulate(cfg: dict, run_dir: Path, spec, runtimes, progress: Progress | None = None) -> dict:
    """Build, run and record one simulation; returns the `simulation` section of meta.json.
    `progress` hears of every iteration a worker finishes (a long simulation shows how far it is)."""
    from dlcp.experiment.config import Experiment
    from simulation.ns3 import hosts as H
    from simulation.ns3.agents import SimRun
    from simulation.ns3.network import add_background, build_network

    ns = loader.compile_cpp(*CPP_UNITS)
    ns.RngSeedManager.SetSeed(cfg["seed"] + 1)  # ns-3 refuses seed 0
    d = cfg["dlcp"]
    net = build_network(spec, runtimes, cfg["links"], d["data_port"], mtu=cfg["links"]["mtu"])
    stack = H.HostStack(ns, net, d["data_port"], d["control_port"], cfg["links"]["host_queue_pkts"])
    exp = Experiment.parse(cfg)
    views = [exp.job_view(i) for i in range(len(exp.jobs))] if exp.jobs else [cfg]
    configs = agent_configs(cfg, spec, run_dir)
    runs, agents, workers, starts = [], [], [], []
    for job, view in enumerate(views, start=1 if exp.jobs else 0):
        run = SimRun(
            stack.clock,
            view["workload"]["iterations"],
            simulated_compute_s(view),
            view["workload"]["payload"] == "sizes",
        )
        mine = [c for c in configs if c[1] in ("worker", "ps") and (c[2].job_id == job or not exp.jobs)]
        job_agents, job_workers = _job_agents(stack, view, run, mine)
        runs.append(run)
        agents += job_agents
        workers += job_workers
        starts += [(w, mine[0][2].start_s) for w in job_workers]
    started = [0]  # jobs whose every worker finished its first iteration

    def first_iteration_done(t: float) -> None:
        started[0] += 1
        if started[0] == len(runs):  # background traffic once every job is under way, as with one job
            add_background(net, cfg["background"])

    def finished() -> None:
        if any(r.errors for r in runs) or all(r.finished for r in runs):
            ns.Simulator.Stop()

    for run in runs:
        run.first_iteration_done = first_iteration_done
        run.on_finished = finished
    if progress is not None:
        shown_from = time.monotonic()
        most = max(r.iterations for r in runs)

        def show_progress() -> None:
            progress.iterations({w.host.name: w.done for w in workers}, most, shown_from)

        for run in runs:
            run.on_iteration = show_progress
    for w, start_s in starts:
        if start_s:
            stack.clock.at(start_s, w.start)
        else:
            w.start()
    limit = cfg["timeout_s"]
    ns.Simulator.Stop(ns.Seconds(limit))  # a simulated-time limit; the last worker to finish stops sooner
    ev0 = ns.Simulator.GetEventCount()
    t0, c0 = time.time(), time.process_time()
    # Ctrl-C or SIGTERM ends the simulation after the event it is in (the handler runs in a Python
    # up-call from the simulator), so the records of what was simulated are written; the backend
    # raises the stop after that (ns3/backend.py), as an emulated run stops once its agents wrote theirs
    with signals.noted(on_first=ns.Simulator.Stop) as stopped_by:
        ns.Simulator.Run()
    wall, cpu = time.time() - t0, time.process_time() - c0
    sim_s = ns.Simulator.Now().GetSeconds()
    events = int(ns.Simulator.GetEventCount() - ev0)
    stack.take_all()
    taken = sum(int(h.io.Rx().Absorbed()) for h in stack.hosts)
    got = sum(int(h.io.DataReceived()) for h in stack.hosts)
    _write_records(run_dir, agents, net)
    done = all(r.finished for r in runs)
    ns.Simulator.Destroy()
    section = {
        "simulated_s": sim_s,
        "events": events,
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "events_per_cpu_s": round(events / cpu) if cpu else None,
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "iterations_done": min(w.done for w in workers),
        "datagrams_received": got,  # by the hosts' data sockets
        "datagrams_taken_in_c": taken,  # of those, by the receive core (dlcp_rx.h) without Python
    }
    errors = [e for r in runs for e in r.errors]
    if stopped_by:
        section["stopped_by"] = stopped_by[0]
    elif errors:
        section["error"] = errors[0]
    elif not done:
        behind = [(min(w.done for w in ws), r.iterations) for r, ws in _workers_of(runs, workers)]
        section["error"] = (
            f"timeout_s = {limit:g} simulated seconds passed with "
            + ", ".join(f"{n} of {total}" for n, total in behind)
            + " iterations done"
            + (" (per job)" if len(runs) > 1 else "")
        )
    return section


def _workers_of(runs, workers):
    return [(r, [w for w in workers if w.run is r]) for r in runs]


def _job_agents(stack, cfg: dict, run, configs) -> tuple[list, list]:
    """The simulated workers and PS of one job (`cfg` that job's view of the experiment, `configs`
    its agents' configurations): hosts on the stack, each agent fed by its host's completions."""
    from dlcp.comm.assemble import cost_model, step_plan
    from dlcp.transport.api import TransportConfig
    from dlcp.wire.header import values_per_pkt_for_mtu
    from dlcp.workloads.lookup import make_server_workload, make_workload
    from dlcp.workloads.sizes_only import SizesOnlyWorkload
    from simulation.ns3 import hosts as H
    from simulation.ns3.agents import SimPS, SimWorker

    d = cfg["dlcp"]
    mtu = cfg["links"]["mtu"]
    sizes_only = run.sizes_only
    agents, workers = [], []
    plan = cost = None  # the collective's step plan and cost model: the same on every rank, built once
    for host, role, acfg in configs:
        wl_cfg = acfg.workload.model_copy(update={"compute_ms": 0.0})  # compute time is simulated
        tcfg = H.transport_config(
            TransportConfig,
            d,
            rank=acfg.wire_rank,
            job_id=acfg.job_id,
            ip=acfg.ip,
            host=host,
            per_packet=cfg["output"]["per_packet"],
            inject_seed=cfg["seed"] * 1000 + acfg.wire_rank,
            values_per_pkt=values_per_pkt_for_mtu(mtu),
        )
        holder = []  # the agent, once it exists: the host's completions go to it
        h = stack.add(
            host,
            acfg.wire_rank,
            tcfg,
            lambda _h, key, res, a=holder: a[0].on_sent(key, res),
            lambda _h, key, res, a=holder: a[0].on_received(key, res),
        )
        if role == "worker":
            wl = SizesOnlyWorkload(wl_cfg) if sizes_only else make_workload(wl_cfg, acfg.rank, acfg.world, d["fill"])
            if not workers:
                run.set_layer_times(simulated_layer_times(cfg, wl, wl_cfg.dilation))
            if plan is None and cfg["workload"]["mode"] == "allreduce":
                plan = step_plan(acfg.comm, acfg.world, acfg.topology_spec())
                cost = cost_model(
                    acfg.comm, acfg.world, acfg.links.host_mbps, plan, acfg.topology_spec(), acfg.links.fabric_mbps
                )
            agent = SimWorker(run, h, acfg, wl, cfg["workload"]["mode"], plan, cost)
            workers.append(agent)
        else:
            agent = SimPS(
                run, h, acfg, SizesOnlyWorkload(wl_cfg) if sizes_only else make_server_workload(wl_cfg, d["fill"])
            )
        holder.append(agent)
        agents.append((host, role, agent, h))
    run.workers = len(workers)
    return agents, workers


def _write_records(run_dir: Path, agents, net) -> None:
    rec = run_dir / "records"
    for _host, _role, agent, _h in agents:
        agent.write_records(rec)
    for name, sw in net.switches.items():
        write_json(run_dir / "counters" / f"{name}.json", sw.counter_dump())
    for flow in net.background:  # named as the emulated agents name theirs (docs/runs.md)
        R.write_json(rec / f"{flow.src}-background{flow.index}.json", flow.sender_record())
        R.write_json(rec / f"{flow.dst}-sink{flow.port}.json", flow.sink_record())
