"""The ns-3 backend under the backend contract (dlcp/runs/contract.py): each run one simulation
(simulated_run.py). dlcp/backends.py registers it as `NS3` and says what it can do: no root,
simulated time, a process per run (ns-3's simulator is a singleton whose random streams continue
across runs), up to 253 workers, jumbo links, size-only payloads.

A series loads ns-3 and compiles the project's C++ once, in its own process, before the first run;
the runs forked from it (dlcp/runs/forked.py) start from there instead of paying ~7 s each.
"""

from __future__ import annotations

import sys
from pathlib import Path

from dlcp.runs import signals
from dlcp.runs.contract import RunContext, RunCutShort, RunFailed
from dlcp.runs.progress import Progress
from simulation.ns3 import loader
from simulation.ns3.simulated_run import CPP_UNITS, simulate


def single_threaded_torch() -> None:
    """Torch's intra-op parallelism off in a forked run. The series' process may have run torch
    (the pre-run check loads a torch model's dataset), which starts libgomp's thread pool; a forked
    child inherits the pool's state but not its threads, so its first parallel torch operation waits
    forever for them. With one thread torch never enters an OpenMP region. Simulated time does not
    depend on how fast torch computes, so no figure changes."""
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


class Ns3Session:
    """ns-3 loaded, our C++ compiled: what the runs of a series share."""

    def __init__(self, tools: dict[str, str | None]):
        self.tools = tools

    def run(self, run: RunContext) -> None:
        single_threaded_torch()
        run.progress.phase("simulating")
        section = simulate(run.run_cfg, run.run_dir, run.spec, run.runtimes, run.progress)
        run.progress.done()
        stopped_by = section.pop("stopped_by", None)
        run.meta["simulation"] = section
        if stopped_by:  # Ctrl-C or SIGTERM ended the simulation; its records are written
            raise signals.stop_for(128 + stopped_by)
        if "error" in section:  # an agent failed or the simulated time ran out: what it recorded is written
            raise RunCutShort(section["error"])

    def close(self) -> None:
        pass


class Ns3Backend:
    def check_config(self, cfg: dict) -> None:
        """Nothing beyond what dlcp/backends.py says it can do (the config model checks that)."""

    def open_session(self, cfg: dict, results: Path, progress: Progress) -> Ns3Session:
        """The sim extra and the transport core's C++ side are there (RunFailed naming what is
        missing), ns-3 loaded and our C++ compiled."""
        from simulation.ns3.hosts import core_missing

        missing = loader.available() or core_missing()
        if missing:
            raise RunFailed(missing)
        progress.phase("loading ns-3 and compiling the simulation's C++ once for every run")
        try:
            loader.compile_cpp(*CPP_UNITS)
        except loader.Ns3Unavailable as e:
            raise RunFailed(str(e)) from e
        return Ns3Session(loader.versions())


NS3 = Ns3Backend()
