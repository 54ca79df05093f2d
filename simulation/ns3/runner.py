"""`dlcp run` for `backend = "ns3"`: the experiment simulated instead of emulated (no root).

    topology + runtime files -> ns-3 network (network.py) -> hosts running the transport core
    (hosts.py) and the workers / PS (agents.py) -> background traffic once every worker finished
    its first iteration -> run until every worker is done -> counters, records, meta.json, report

The run directory is an emulated run's (docs/runs.md): config.toml, topology.json,
runtime/sN-runtime.json, counters/sN.json, records/hN-{messages,iterations}.csv and
hN-agent.json, meta.json, then summary.json and the report, so `dlcp report` and `dlcp compare`
treat both alike. Times in records are simulated microseconds from the start of the simulation.
meta.json adds `clock = "simulated"` and `simulation` (simulated seconds, events, wall and CPU
seconds, peak memory). One simulation per process: with `--policies`, `--vary` or `--repeat` each
run is a child forked from a parent that loaded ns-3 and compiled the project's C++ once (~7 s
a run saved), so every run starts from the same state a fresh process would reach.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import signal
import subprocess
import sys
import time
import traceback
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from dlcp import records as R
from dlcp.experiment import config as configmod
from dlcp.experiment import run_inputs
from dlcp.experiment.agent_config import agent_configs
from dlcp.network import topology as topospec
from dlcp.network.switch_runtime import write_runtime
from simulation.ns3 import loader

REPO = Path(__file__).resolve().parents[2]
JOB_DIRS = ("runtime", "agents", "progress", "records", "counters", "logs")
CPP_UNITS = ("dlcp_switch", "dlcp_net", "dlcp_host")  # simulation/ns3/cpp/*.h a simulation needs


class SimFailed(RuntimeError):
    """The simulation could not run or did not finish; one line saying why."""


def _version(pkg: str) -> str | None:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


def git_revision() -> str | None:
    try:
        rev = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return rev or None


def write_json(path: Path, obj) -> None:
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1))
    os.replace(tmp, path)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def prepare(cfg: dict, run_dir: Path, variant: str) -> tuple:
    spec = topospec.from_config(cfg)
    for sub in JOB_DIRS:
        (run_dir / sub).mkdir(parents=True, exist_ok=True)
    (run_dir / "config.toml").write_text(configmod.dumps(cfg))
    write_json(run_dir / "topology.json", spec.to_json())
    runtimes = spec.runtimes(cfg)
    for doc in runtimes.values():
        write_runtime(doc, run_dir / "runtime")
    meta = {
        "name": cfg["name"],
        "variant": variant,
        "policy": cfg["dlcp"]["policy"],
        "backend": "ns3",
        "clock": "simulated",
        "payload": cfg["workload"]["payload"],
        "versions": {**{p: _version(p) for p in ("dlcp", "torch", "numpy")}, **loader.versions()},
        "python": platform.python_version(),
        "kernel": platform.release(),
        "hostname": platform.node(),
        "git_revision": git_revision(),
        "start_utc": datetime.now(timezone.utc).isoformat(),
    }
    write_json(run_dir / "meta.json", meta)
    return spec, runtimes, meta


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


def simulate(cfg: dict, run_dir: Path, spec, runtimes) -> dict:
    """Build, run and record one simulation; returns the `simulation` section of meta.json."""
    from simulation.ns3 import hosts as H

    missing = H.core_missing()
    if missing:
        raise SimFailed(missing)
    from dlcp.comm.assemble import cost_model, step_plan
    from dlcp.transport.api import TransportConfig
    from dlcp.wire.header import values_per_pkt_for_mtu
    from dlcp.workloads.lookup import make_server_workload, make_workload
    from dlcp.workloads.sizes_only import SizesOnlyWorkload
    from simulation.ns3.agents import SimPS, SimRun, SimWorker
    from simulation.ns3.network import add_background, build_network

    ns = loader.compile_cpp(*CPP_UNITS)
    ns.RngSeedManager.SetSeed(cfg["seed"] + 1)  # ns-3 refuses seed 0
    d = cfg["dlcp"]
    mtu = cfg["links"]["mtu"]
    net = build_network(spec, runtimes, cfg["links"], d["data_port"], mtu=mtu)
    stack = H.HostStack(ns, net, d["data_port"], d["control_port"], cfg["links"]["host_queue_pkts"])
    sizes_only = cfg["workload"]["payload"] == "sizes"
    run = SimRun(stack.clock, cfg["workload"]["iterations"], simulated_compute_s(cfg), sizes_only)
    agents, workers = [], []
    plan = cost = None  # the collective's step plan and cost model: the same on every rank, built once
    for host, role, acfg in agent_configs(cfg, spec, run_dir):
        if role not in ("worker", "ps"):
            continue  # background senders and sinks are ns-3 applications (network.py)
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
    run.first_iteration_done = lambda t: add_background(net, cfg["background"])
    run.on_finished = ns.Simulator.Stop
    for w in workers:
        w.start()
    limit = cfg["timeout_s"]
    ns.Simulator.Stop(ns.Seconds(limit))  # a simulated-time limit; the last worker to finish stops sooner
    ev0 = ns.Simulator.GetEventCount()
    t0, c0 = time.time(), time.process_time()
    ns.Simulator.Run()
    wall, cpu = time.time() - t0, time.process_time() - c0
    sim_s = ns.Simulator.Now().GetSeconds()
    events = int(ns.Simulator.GetEventCount() - ev0)
    stack.take_all()
    if os.environ.get("DLCP_SIM_RX_STATS"):  # diagnostics: how many datagrams C++ took
        taken = sum(int(h.io.Rx().Absorbed()) for h in stack.hosts)
        got = sum(int(h.io.DataReceived()) for h in stack.hosts)
        print(f"dlcp_rx: {taken} of {got} datagrams received taken in C++", file=sys.stderr)
    _write_records(run_dir, run, agents, net)
    finished = run.finished
    ns.Simulator.Destroy()
    section = {
        "simulated_s": sim_s,
        "events": events,
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "events_per_cpu_s": round(events / cpu) if cpu else None,
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "iterations_done": min(w.done for w in workers),
    }
    if run.errors:
        section["error"] = run.errors[0]
    elif not finished:
        section["error"] = (
            f"timeout_s = {limit:g} simulated seconds passed with {section['iterations_done']} of "
            f"{run.iterations} iterations done"
        )
    return section


def _write_records(run_dir: Path, run, agents, net) -> None:
    rec = run_dir / "records"
    for _host, _role, agent, _h in agents:
        agent.write_records(rec)
    for name, sw in net.switches.items():
        write_json(run_dir / "counters" / f"{name}.json", sw.counter_dump())
    for flow in net.background:  # named as the emulated agents name theirs (docs/runs.md)
        R.write_json(rec / f"{flow.src}-background{flow.index}.json", flow.sender_record())
        R.write_json(rec / f"{flow.dst}-sink{flow.port}.json", flow.sink_record())


def run_variant(cfg: dict, run_dir: Path, variant: str, with_report: bool = True, figures: bool = True) -> Path:
    spec, runtimes, meta = prepare(cfg, run_dir, variant)
    t0 = time.monotonic()
    status = "error"
    try:
        section = simulate(cfg, run_dir, spec, runtimes)
        meta["simulation"] = section
        status = "ok" if "error" not in section else "error"
        if status != "ok":
            raise SimFailed(section["error"])
    finally:
        meta.update(
            end_utc=datetime.now(timezone.utc).isoformat(), wall_s=round(time.monotonic() - t0, 3), status=status
        )
        write_json(run_dir / "meta.json", meta)
    if with_report:
        from dlcp.reporting import report_run

        report_run(run_dir, figures=figures)
    return run_dir


def run(
    config_path: str,
    overrides: list[str],
    policies: list[str] | None,
    out_root: str | None = None,
    with_report: bool = True,
    run_dir: str | None = None,
    vary: list[str] = (),
    repeat: int = 1,
) -> Path:
    """One simulation per variant (`--vary`, `--policies P1,P2` = `--vary dlcp.policy=P1,P2`) and
    repeat (`--repeat N`: N pairs in results/<variant>/repI, a new seed per pair), each in a process
    of its own (ns-3's simulator is a singleton); returns the results directory."""
    raw = configmod.load_raw(config_path, overrides)
    base = configmod.validate(raw)
    varies = ([f"dlcp.policy={','.join(policies)}"] if policies else []) + list(vary)
    runs = configmod.plan_runs(configmod.variants(raw, varies), repeat)
    if run_dir and len(runs) > 1:
        raise configmod.ConfigError("--run-dir: takes one run, not --policies / --vary / --repeat with several")
    for _, _, cfg in runs:  # roles and background placement are checked before anything starts
        topospec.from_config(cfg)
    run_inputs.check_run_inputs([cfg for _, _, cfg in runs], out_root, run_dir)
    reason = loader.available()
    if reason:
        raise SimFailed(reason)
    if run_dir:
        results = Path(run_dir)
    else:
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        results = Path(out_root or base["output"]["dir"]) / f"{stamp}-{base['name']}"
    if len(runs) == 1:
        name, _, cfg = runs[0]
        target = results if run_dir else results / name
        print(f"dlcp run: {base['name']} on ns-3 -> {target}", file=sys.stderr)
        run_variant(cfg, target, name, with_report)
        return results
    load_once(with_report)
    # `kill` stops a series as Ctrl-C does: the running child is interrupted and reaped, not orphaned
    previous = signal.signal(signal.SIGTERM, _interrupt_once)
    try:
        for i, (name, rep, cfg) in enumerate(runs):
            target = results / name / f"rep{rep}" if rep else results / name
            label = f"{name} rep {rep}, seed {cfg['seed']}" if rep else name
            print(f"dlcp run: {base['name']} [{label}] ({i + 1}/{len(runs)}) on ns-3 -> {target}", file=sys.stderr)
            # a repeated series' figures are in its comparison
            if run_forked(cfg, target, name, with_report, figures=repeat == 1):
                raise SimFailed(f"{label} failed (see above)")
    finally:
        signal.signal(signal.SIGTERM, previous)
    ran = list(dict.fromkeys(name for name, _, _ in runs))
    if with_report and len(ran) > 1:
        from dlcp.reporting import compare_runs

        compare_runs([results / name for name in ran], results, echo=True)
    return results


def load_once(with_report: bool) -> None:
    """Load ns-3, compile the project's C++ and import the reports' modules (matplotlib, scipy)
    in this process, before any simulation: the runs forked from it inherit all three."""
    loader.compile_cpp(*CPP_UNITS)
    if with_report:
        import dlcp.reporting  # noqa: F401


def run_forked(cfg: dict, run_dir: Path, variant: str, with_report: bool, figures: bool) -> int:
    """`run_variant` in a forked child (ns-3's simulator is a singleton); the child's exit code.
    The parent alone decides when to stop: the child ignores Ctrl-C (which the terminal sends to
    both) and takes the parent's one SIGTERM as its interrupt, so it writes its meta.json once."""
    sys.stdout.flush()
    sys.stderr.flush()
    stops = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, stops)  # none may land between the fork and the child's handlers
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, _interrupt_once)
        code = 1
        try:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)
            run_variant(cfg, run_dir, variant, with_report, figures)
            code = 0
        except SimFailed as e:
            print(f"dlcp run: failed: {e}", file=sys.stderr)
        except KeyboardInterrupt:
            code = 130
        except BaseException:  # noqa: BLE001 - the child must never return into the parent's loop
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)
        _, status = os.waitpid(pid, 0)
    except BaseException:
        stop_child(pid)
        raise
    return os.waitstatus_to_exitcode(status)


def _interrupt_once(signum, frame):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


def stop_child(pid: int, grace_s: float = 10.0) -> None:
    """Interrupt the child, give it `grace_s` to write what it has, then kill it."""
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if os.waitpid(pid, os.WNOHANG)[0]:
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


def main(args) -> int:
    policies = [p.strip() for p in args.policies.split(",") if p.strip()] if args.policies else None
    try:
        results = run(
            args.config,
            args.set or [],
            policies,
            args.out,
            with_report=not args.no_report,
            run_dir=getattr(args, "run_dir", None),
            vary=getattr(args, "vary", None) or [],
            repeat=getattr(args, "repeat", 1),
        )
    except configmod.ConfigError as e:
        print(f"dlcp run: {e}", file=sys.stderr)
        return 2
    except (SimFailed, loader.Ns3Unavailable) as e:
        print(f"dlcp run: failed: {e}", file=sys.stderr)
        return 1
    print(f"dlcp run: results in {results}")
    return 0
