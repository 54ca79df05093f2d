"""The emulated backends under the backend contract (dlcp/runs/contract.py): Mininet hosts running
the agents, one switch process per switch, the built-in switch (`BUILTIN`) or bmv2 (`BMV2`).
dlcp/backends.py registers both by these names and says what they can do.

A series shares one fork server (agents/forkserver.py, started by emulation/forkserver.py): it
imports the agents' modules and torch once, and forks every agent of every run.
"""

from __future__ import annotations

import sys
from pathlib import Path

from dlcp.runs import signals
from dlcp.runs.contract import RunContext, RunFailed
from dlcp.runs.progress import Progress
from dlcp.runs.run_dir import package_version
from emulation.clean import clean
from emulation.emulated_run import EmulatedRun, report_unprocessed
from emulation.forkserver import ForkServer, ForkServerError
from emulation.switches import Bmv2Switch, BuiltinSwitch, DlcpSwitch, SwitchStartError

BMV2_RATE_NOTE = (
    "dlcp run: note: on bmv2 every priority queue of a port drains at the link rate on its own "
    "(docs/pipeline.md, bmv2 specifics): priorities do not share a bottleneck's rate"
)


class EmulatedSession:
    """The runs of one series on one emulated backend: the fork server they share."""

    def __init__(self, switch_class: type[DlcpSwitch], forkserver: ForkServer, tools: dict[str, str | None]):
        self.switch_class, self.forkserver, self.tools = switch_class, forkserver, tools

    def run(self, run: RunContext) -> None:
        exp = EmulatedRun(run.run_cfg, run.spec, run.run_dir, self.switch_class, self.forkserver)
        sampler = None
        try:
            run.progress.phase(f"starting the network and {len(run.spec.switches)} switch process(es)")
            exp.start_network()
            sampler = exp.sample_switch_cpu()
            run.progress.phase("starting the agents")
            exp.start_agents()
            exp.wait(run.progress)
        except ForkServerError as e:  # it fails while forking an agent
            raise RunFailed(str(e)) from e
        finally:
            run.progress.phase("stopping agents and switches (counters are written)")
            run.progress.done()
            with signals.deferred():  # a second Ctrl-C must not cut the clean-up short
                try:
                    if sampler is not None:
                        run.meta["switch_cpu"] = sampler.stop()
                        run.meta["machine"] = sampler.machine()
                    exp.stop()
                    report_unprocessed(run.run_dir)
                finally:
                    clean(verbose=False, keep=frozenset({self.forkserver.pid}))  # anything the orderly stop missed

    def close(self) -> None:
        self.forkserver.close()


class MininetBackend:
    """An emulated backend: which Mininet switch class runs its switches."""

    def __init__(self, switch_class: type[DlcpSwitch], note: str | None = None):
        self.switch_class, self.note = switch_class, note

    def check_config(self, cfg: dict) -> None:
        """Nothing beyond what dlcp/backends.py says it can do (the config model checks that)."""

    def open_session(self, cfg: dict, results: Path, progress: Progress) -> EmulatedSession:
        tools = self.toolchain(cfg)
        if self.note:
            print(self.note, file=sys.stderr)
        progress.phase("loading the agents' modules (torch) once for every run")
        try:
            forkserver = ForkServer(results / "logs" / "forkserver.log")
        except ForkServerError as e:
            raise RunFailed(str(e)) from e
        return EmulatedSession(self.switch_class, forkserver, tools)

    def toolchain(self, cfg: dict) -> dict[str, str | None]:
        """What the switches need (bmv2: simple_switch_grpc installed, p4/dlcp.p4 compiled for the
        data port, compiling it if missing or stale), before anything is written; versions for
        meta.json. RunFailed with the one-line reason and how to point the project at an
        installation."""
        try:
            tools = self.switch_class.toolchain(cfg["dlcp"]["data_port"])
        except SwitchStartError as e:
            raise RunFailed(f"backend {cfg['backend']}: {e}") from None
        return {"scapy": package_version("scapy"), "mininet": package_version("mininet"), **tools}


BUILTIN = MininetBackend(BuiltinSwitch)
BMV2 = MininetBackend(Bmv2Switch, note=BMV2_RATE_NOTE)
