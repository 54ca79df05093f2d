"""One emulated run: everything it starts in Mininet, so it can all be stopped from one place.

    network and switch processes (with their runtime entries) -> agents, forked by the series'
    fork server into their hosts (background senders held) -> progress until every worker and the
    PS are done (or the wall-clock limit), background released after the first iteration ->
    agents stopped, then the switches (they dump counters), then the network.

The series around it (run directories, meta.json, signals, reports) is dlcp/runs/'s; the backend
contract that drives this is emulation/mininet_backend.py.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

from dlcp.exit_status import exit_text
from dlcp.experiment.agent_config import AgentConfig, agent_configs, write_agent_config
from dlcp.experiment.releases import BACKGROUND_GO, JOBS_GO, release
from dlcp.network.topology import TopologySpec
from dlcp.runs import signals
from dlcp.runs.contract import RunCutShort, RunFailed
from dlcp.runs.progress import Progress, read_progress
from emulation import procs
from emulation.forkserver import AgentProcess, ForkServer

PROGRESS_PERIOD_S = 0.5
RELEASE_POLL_S = 0.05
AGENT_READY_S = 10.0  # the longest stop waits for a just-started background agent to take SIGTERM
NET_STOP_TIMEOUT_S = 60


class StopTimeout(Exception):
    """Mininet's stop did not return in time."""


def _raise_stop_timeout(signum, frame):
    raise StopTimeout()


AGENT_NICE = -10


def agent_command(module: str, cfg_path: Path) -> list[str]:
    """The command line an agent stands for (recorded for `dlcp clean`, and how to run one by hand;
    the runner forks agents from agents/forkserver.py, asking for the same nice). Agents run at
    nice -10: they stand for machines of their own, and whatever else runs on the emulation host
    (builds, editors, other runs' reports) must not stretch their compute deadlines or delay their
    packets; on 2 cores at load 6, a nice-0 agent woke from a 4 ms compute wait ~10 ms late half
    the time. Not real-time (the switch is): a busy agent must not starve the switch or the machine."""
    return ["nice", "-n", str(AGENT_NICE), sys.executable, "-m", f"agents.{module}", "--config", str(cfg_path)]


class EmulatedRun:
    """Everything one run starts, so it can all be stopped from one place. `cfg` is what the
    emulation runs (rates and times dilated: dlcp/experiment/dilation.py), `spec` its topology."""

    def __init__(self, cfg: dict, spec: TopologySpec, run_dir: Path, switch_class, forkserver: ForkServer):
        self.cfg, self.spec, self.run_dir = cfg, spec, run_dir
        self.switch_class = switch_class  # emulation/switches.py: the backend's Mininet switch
        self.forkserver = forkserver
        self.net = None
        self.shell_pids: list[int] = []
        self.background_held = False  # background senders up, waiting for release_background
        self.jobs_held = False  # several jobs: workers connected or connecting, waiting for release_jobs
        self.agents: list[tuple[str, str, AgentProcess, Path]] = []  # host, role, process, log

    def start_network(self) -> None:
        from emulation.network import build_network

        pcap = self.cfg["output"]["pcap_ports"]
        params = {
            s: {
                "runtime_json": str(self.run_dir / "runtime" / f"{s}-runtime.json"),
                "run_dir": str(self.run_dir),
                "debug_log": self.cfg["output"]["debug_log"],
                "pcap_ports": [int(p.rsplit("eth", 1)[1]) for p in pcap if p.startswith(f"{s}-eth")],
            }
            for s in self.spec.switches
        }
        try:
            self.net = build_network(
                self.spec,
                self.switch_class,
                params,
                self.cfg["links"]["host_queue_pkts"],
                self.cfg["links"]["host_fair_queueing"],
            )
        except Exception as e:  # Mininet raises bare Exceptions; the cause is in the message
            hint = " (a killed run may have left it behind: sudo dlcp clean)" if "File exists" in str(e) else ""
            raise RunFailed(f"network set-up failed: {e}{hint}") from e
        for node in self.net.hosts + self.net.switches:  # switches have a shell too (net.stop uses it)
            procs.record(node.pid, "node-shell", node.name, "mininet node shell")
            self.shell_pids.append(node.pid)

    def start_agent(self, host: str, role: str, agent_cfg: AgentConfig) -> None:
        module = agent_cfg.role  # worker, ps, background (senders and sinks)
        cfg_path = write_agent_config(self.run_dir, host, role, agent_cfg)
        log = self.run_dir / "logs" / f"{host}-{role}.log"
        p = self.forkserver.spawn(self.net.get(host).pid, module, cfg_path, log, nice=AGENT_NICE)
        procs.record(p.pid, f"agent-{role}", host, agent_command(module, cfg_path))
        self.agents.append((host, role, p, log))

    def start_agents(self) -> None:
        """Sinks, the PS, the workers, then the background senders, which wait for
        release_background (agents/background.py) before they send."""
        configs = agent_configs(self.cfg, self.spec, self.run_dir)
        order = {"ps": 1, "worker": 2, "background": 3}  # sinks and the PS first, so senders find peers listening
        for host, role, acfg in sorted(configs, key=lambda c: 0 if c[1].startswith("sink") else order.get(c[1], 4)):
            self.start_agent(host, role, acfg)
        self.background_held = any(role == "background" for _, role, _ in configs)
        self.jobs_held = bool(self.cfg.get("jobs"))

    def release_background(self) -> None:
        """Background traffic starts once every worker finished its first iteration: by then every
        control connection is up, so a SYN lost in a full queue (a 1 s kernel timeout) cannot
        masquerade as a slow first iteration. `start_s` counts from here. The senders' processes
        are already up and waiting, so this costs them no start-up time."""
        release(self.run_dir, BACKGROUND_GO, time.time())
        self.background_held = False

    def release_jobs(self) -> None:
        """Several jobs: every worker is connected, so they all start from one origin, each job its
        start_s (arrival + shift, dilated) after it (agents/worker.py, dlcp/experiment/releases.py)."""
        release(self.run_dir, JOBS_GO, time.time())
        self.jobs_held = False

    def workload_agents(self):
        return [a for a in self.agents if a[1] in ("worker", "ps")]

    def dead_process(self) -> str | None:
        """Why the run cannot go on, in one line naming the process it started that died (and, when
        it exited by itself, its log's last lines); None while all live. The switches and the
        fork server come before the agents: an agent that fails because a switch or the server
        died must not be blamed for it."""
        for sw in self.net.switches:
            dp = getattr(sw, "dataplane", None)
            if dp is not None and dp.proc is not None and dp.proc.poll() is not None:
                return died(f"switch {sw.name} (pid {dp.proc.pid})", dp.proc.returncode, dp.log_path)
        server = self.forkserver.proc
        if server.poll() is not None:
            note = "; its agents were stopped with it (SIGTERM) and wrote their records" if self.agents else ""
            return died(f"the agents' fork server (pid {server.pid})", server.returncode, self.forkserver.log, note)
        for node in self.net.hosts + self.net.switches:
            if node.shell is not None and node.shell.poll() is not None:
                return died(f"the shell of Mininet node {node.name} (pid {node.pid})", node.shell.returncode, None)
        for host, role, p, log in self.agents:
            rc = p.poll()
            if rc not in (None, 0):
                return f"{role} on {host} {exit_text(rc)}; last lines of {log}:\n{procs.log_tail(log)}"
        return None

    def wait(self, progress: Progress) -> None:
        """Until every worker and the PS exit; RunCutShort when a process it started dies or the
        wall-clock limit passes."""
        iters = self.cfg["workload"]["iterations"]
        start = time.monotonic()
        limit = self.cfg["timeout_s"]
        while True:
            why = self.dead_process()
            if why:
                raise RunCutShort(why)
            states = {h: read_progress(self.run_dir, h) for h, r, _, _ in self.agents if r == "worker"}
            done = {h: st.get("iter", 0) for h, st in states.items()}
            if self.jobs_held and all(st.get("state") == "connected" for st in states.values()):
                self.release_jobs()
            if self.background_held and min(done.values()) >= 1:
                self.release_background()
            if sum(done.values()) == 0:
                progress.phase("waiting for the first iteration (workers load the model and connect)")
            else:
                progress.iterations(done, iters, start)
            if all(p.poll() is not None for _, _, p, _ in self.workload_agents()):
                return
            signals.raise_pending()  # a stop whose exception a callback swallowed
            if time.monotonic() - start > limit:
                raise RunCutShort(
                    f"the run exceeded timeout_s = {limit:g} s "
                    f"(progress: {sum(done.values())}/{iters * len(done)} iterations)"
                )
            # while agents wait for a release, look often: it should not lag what it waits for
            time.sleep(RELEASE_POLL_S if self.background_held or self.jobs_held else PROGRESS_PERIOD_S)

    def stop_agents(self) -> None:
        # a background agent may still be setting up (a run shorter than that): SIGTERM would kill
        # it before it writes its record (how much it sent), so wait until it can take the signal
        for _, role, p, _ in self.agents:
            if role == "background":
                procs.wait_until_catching_sigterm(p, AGENT_READY_S)
        for _, _, p, _ in self.agents:
            if p.poll() is None:
                p.terminate()  # all at once: they exit in parallel
        for _, _, p, _ in self.agents:
            procs.stop_child(p, grace_s=5.0)

    def sample_switch_cpu(self):
        """Start sampling the CPU time of the run's switch processes (emulation/cpu_sampler.py)."""
        from emulation.cpu_sampler import CpuSampler

        pids = {
            sw.name: sw.dataplane.pid
            for sw in self.net.switches
            if getattr(sw, "dataplane", None) is not None and sw.dataplane.pid
        }
        return CpuSampler(pids).start()

    def stop(self) -> None:
        """Stop agents, then switches (they dump counters) and the network."""
        try:
            self.stop_agents()
        finally:
            if self.net is not None:
                try:
                    self.stop_network()
                finally:
                    for pid in self.shell_pids:
                        procs.forget(pid)
                    self.net = None

    def stop_network(self) -> None:
        """The switch processes first, while their links still exist (Mininet's stop deletes links
        before switches, and a counter dump should still see its ports); then Mininet's own stop,
        which runs commands in every node's shell. If a shell is gone (killed from outside) that
        would block forever, so then `clean` removes the rest; a watchdog covers other hangs."""
        for sw in self.net.switches:
            sw.stop_process()
        nodes = self.net.hosts + self.net.switches
        dead = [n.name for n in nodes if n.shell is None or n.shell.poll() is not None]
        if dead:
            print(f"dlcp run: shells of {', '.join(dead)} are gone; tearing the network down directly", file=sys.stderr)
            return
        old = signal.signal(signal.SIGALRM, _raise_stop_timeout)
        signal.alarm(NET_STOP_TIMEOUT_S)
        try:
            self.net.stop()
        except StopTimeout:
            print(f"dlcp run: Mininet's stop hung for {NET_STOP_TIMEOUT_S} s; tearing down directly", file=sys.stderr)
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, old)


def died(what: str, returncode: int, log: Path | None, note: str = "") -> str:
    """ "<what> was killed by SIGKILL<note>"; a process that exited by itself (a crash) adds its
    log's last lines."""
    line = f"{what} {exit_text(returncode)}{note}"
    if returncode < 0 or log is None:
        return line
    return f"{line}; last lines of {log}:\n{procs.log_tail(log)}"


def unprocessed_frames(dump: dict) -> tuple[int, int]:
    """(frames that reached the switch's ports but not its P4 program, frames that reached them),
    from a counter dump whose `ports` rows count received frames (bmv2: the kernel's counts)."""
    rx = sum(p.get("rx_pkts", 0) for p in dump.get("ports", []))
    seen = sum(dump["drops"].values()) + sum(
        q["admitted_pkts"] + q["early_drop_pkts"] + q["tail_drop_pkts"] for q in dump["queues"]
    )
    return max(0, rx - seen), rx


def report_unprocessed(run_dir: Path) -> None:
    """One line per switch that did not get to process every frame (bmv2's capture falls behind
    beyond its ~10-15 kpps here); those losses are in no P4 counter."""
    for path in sorted((run_dir / "counters").glob("*.json")):
        try:
            lost, rx = unprocessed_frames(json.loads(path.read_text()))
        except (OSError, ValueError, KeyError):
            continue
        if lost:
            print(
                f"dlcp run: {path.stem}: {lost} of {rx} frames reached the switch's ports but not its "
                f"pipeline (lost before the parser: the switch could not keep up)",
                file=sys.stderr,
            )
