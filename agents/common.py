"""What the worker and PS agents share: the run state, progress, records, and the exit protocol of
docs/runs.md (one line `<role> hN: <what went wrong>` on stderr, progress state "error", records so
far, non-zero exit). The config is dlcp.experiment.agent_config's model, checked on load.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from dlcp import records as R
from dlcp.experiment.agent_config import WorkloadAgentConfig, load_agent_config
from dlcp.runs.signals import handle_stops
from dlcp.settings import ConfigError
from dlcp.transport.api import TransportError
from dlcp.transport.factory import make_transport
from dlcp.transport.threadtime import set_realtime, thread_times

EXIT_ERROR = 1
EXIT_CONFIG = 2
EXIT_SIGNAL = 143


class Terminated(Exception):
    """SIGTERM / SIGINT from the runner."""


# --- run state: progress, records, exit ----------------------------------------------------------------


@dataclass
class Agent:
    role: str
    cfg: WorkloadAgentConfig
    transport: object = None
    iterations: int = 0
    done: int = 0
    iteration_rows: list = field(default_factory=list)
    resync_rows: list = field(default_factory=list)
    budget_rows: list = field(default_factory=list)  # a budget schedule's changes (records/hN-budget.csv)
    extra_totals: dict = field(default_factory=dict)  # more agent totals (e.g. compute keep-up)
    start_unix: float = field(default_factory=time.time)
    start_mono: float = field(default_factory=time.monotonic)

    @property
    def host(self) -> str:
        return self.cfg.host

    @property
    def run_dir(self) -> Path:
        return Path(self.cfg.run_dir)

    def progress(self, state: str = "running", error: str | None = None) -> None:
        obj = {"iter": self.done, "iters": self.iterations, "state": state}
        if error:
            obj["error"] = error
        path = self.run_dir / "progress" / self.host
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name("." + path.name + ".tmp")
        tmp.write_text(json.dumps(obj) + "\n")
        os.replace(tmp, path)

    def check_time(self) -> None:
        if time.monotonic() - self.start_mono > self.cfg.timeout_s:
            raise TransportError(f"timeout_s = {self.cfg.timeout_s:g} s exceeded after {self.done} iterations")

    def write_records(self, status: str, error: str | None = None) -> None:
        t = self.transport
        end = time.time()
        totals = R.agent_totals(self.host, self.role, self.cfg.rank, status, error, self.done)
        totals.update(start_unix=self.start_unix, end_unix=end, wall_s=end - self.start_unix)
        if t is not None:
            totals.update(t.stats())
        main = thread_times()  # write_records runs on the agent's main thread
        if main is not None:
            totals["threads"] = {**totals.get("threads", {}), "main": main}
        totals.update(self.extra_totals)
        R.write_agent_records(
            self.run_dir / "records",
            self.host,
            totals,
            message_rows=None if t is None else list(t.message_rows),
            iteration_rows=self.iteration_rows if self.role == "worker" else None,
            resync_rows=self.resync_rows,
            budget_rows=self.budget_rows,
            packet_chunks=list(t.packet_chunks) if t is not None and self.cfg.records.per_packet else None,
        )


def stop_on_first_signal(stop: type[Exception]) -> None:
    """SIGTERM and SIGINT raise `stop` in the main thread, the first of them only: later ones are
    ignored, so a second signal (the runner's SIGTERM just after the parent-death one, a repeated
    Ctrl-C) cannot cut short the cleanup that writes the agent's records. A stuck agent still ends:
    the runner's SIGKILL after its grace period."""

    def on_signal(signum, frame):
        handle_stops(signal.SIG_IGN)
        raise stop(f"stopped by signal {signal.Signals(signum).name}")

    handle_stops(on_signal)


def close_transport(agent: Agent) -> str | None:
    """Close the agent's transport; what went wrong, if anything (traceback in the log), so that a
    failing close still leaves the records behind."""
    if agent.transport is None:
        return None
    try:
        agent.transport.close()
    except Exception as e:  # the records come first; the log has the traceback
        logging.getLogger("agent").exception("closing the transport failed")
        return f"cannot close the transport: {e!r}"
    return None


def run_agent(role: str, body, argv: list[str] | None = None) -> int:
    """Parse --config, validate, set up logging and signals, run `body(agent)`, and always leave
    progress and records behind. Returns the exit status."""
    ap = argparse.ArgumentParser(prog=f"agents.{role}", description=f"DLCP {role} agent (docs/runs.md)")
    ap.add_argument("--config", required=True, help="agent configuration (agents/hN-<role>.json)")
    args = ap.parse_args(argv)
    try:
        cfg = load_agent_config(args.config, role)
    except ConfigError as e:
        print(f"{role} ?: {args.config}: {e}", file=sys.stderr)
        return EXIT_CONFIG
    agent = Agent(role, cfg, iterations=cfg.workload.iterations)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format=f"{role} {agent.host}: %(message)s")
    sys.setswitchinterval(0.001)  # the receive thread answers PROBEs promptly while numpy computes
    stop_on_first_signal(Terminated)
    status, error, code = "error", None, EXIT_ERROR
    try:
        agent.progress()
        body(agent)
        status, code = "done", 0
    except Terminated as e:
        error, code = str(e), EXIT_SIGNAL
    except ConfigError as e:
        error, code = f"{args.config}: {e}", EXIT_CONFIG
    except (TransportError, OSError, ValueError) as e:
        error = str(e)
    except Exception as e:  # a bug: still one line on stderr, the traceback in the log
        logging.getLogger("agent").exception("unexpected error")
        error = f"internal error: {e!r}"
    finally:
        handle_stops(signal.SIG_IGN)
        closing = close_transport(agent)
        if closing:
            error, code = (error + "; " if error else "") + closing, code or EXIT_ERROR
        try:
            agent.write_records(status, error)
            agent.progress(status, error)
        except OSError as e:
            error = (error + "; " if error else "") + f"cannot write records: {e}"
            code = code or EXIT_ERROR
    if error:
        print(f"{role} {agent.host}: {error}", file=sys.stderr)
    return code


# SCHED_RR priorities. A host stands for a machine of its own, but here it shares 2 cores with the
# switch, the other hosts and the background; a normal (CFS) wake-up waits behind whatever runs.
# The switches (emulation/dataplane.py, 10) stand for hardware and come first. Then the UDP
# transport's receive thread (the NIC taking frames as they arrive): it waits in C and returns
# into Python only for what the protocol core decides on, so it costs the work little; below the
# work the hosts' p99 socket waits were 1.0-1.4 ms in `make demo`, above it 0.15-0.26 ms. Then
# each host's own work (the worker's profile compute, which stands for a GPU, and the PS's
# aggregation), then the transport's other threads (sending: the network stack): measured in
# `make demo` with the whole transport above the work (and its receive path in Python), compute
# overran its profile by 18-56 % and more in dlcp runs than in fifo runs (a bias in the
# comparison); with it below, by 1-5 % (docs/experiments.md, "Keeping up").
RECEIVE_RT_PRIORITY = 8
WORK_RT_PRIORITY = 7
TRANSPORT_RT_PRIORITY = 6


def realtime_work_thread() -> bool:
    """Put the calling thread (and the threads it starts later, e.g. backward) under SCHED_RR at
    WORK_RT_PRIORITY. Measured in the demo at CFS: 20-40 % of profile-compute deadlines missed by
    over 1 ms. False (and a log line) when the system refuses (not root)."""
    return set_realtime(WORK_RT_PRIORITY, "work thread")


def exit_fast(code: int) -> None:
    """Exit with `code` once records are on disk, skipping the interpreter's teardown: with torch
    loaded it takes ~0.5 s of CPU per agent, and every agent of a run pays it at the same moment,
    which the next run of a repeat series waits for."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def open_transport(agent: Agent):
    """The agent's transport, its threads at TRANSPORT_RT_PRIORITY and the UDP driver's receive
    thread at RECEIVE_RT_PRIORITY: with them at CFS the demo's hosts read datagrams up to 28 ms after
    they arrived (p99 socket wait; docs/experiments.md)."""
    cfg = agent.cfg.transport_config().model_copy(
        update={"thread_rt_priority": TRANSPORT_RT_PRIORITY, "rx_rt_priority": RECEIVE_RT_PRIORITY}
    )
    agent.transport = make_transport(cfg, agent.cfg.peers())
    return agent.transport
