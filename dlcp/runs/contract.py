"""What a backend implements so the series runner (series_runner.py) can drive it.

Two operations: check a config before anything starts (`check_config`: ConfigError, one line
naming the key), and run one run into a run directory (`Session.run`). What a backend can do is
data in dlcp/backends.py, which names the object implementing this (`backends.implementation`).

The runner owns everything the backends share: the plan of a series (variants, repeats, seeds),
names, the run directory and what it writes before a run (config.toml, topology.json, runtime/,
meta.json), signals, reports and partial reports, a process per run when the backend asks for one.
A backend owns what it starts, and stops all of it before `run` returns or raises.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from dlcp.network.topology import TopologySpec
from dlcp.runs.progress import Progress


class RunFailed(RuntimeError):
    """A run (or a series) could not start or did not complete; one line saying why (plus a log
    tail where one helps)."""


class RunCutShort(RunFailed):
    """The run started and could not finish: a process it started died (the line names it) or its
    time ran out. The backend stops everything it started before raising it; what the run
    recorded stays, and the runner writes its partial report."""


@dataclass
class RunContext:
    """One run as the runner hands it to its backend."""

    cfg: dict  # the system as the user described it (config.toml)
    run_cfg: dict  # what the backend runs: on a wall clock, cfg with time dilation applied
    spec: TopologySpec  # the topology of run_cfg (topology.json)
    runtimes: dict[str, dict]  # each switch's runtime entries (runtime/<switch>-runtime.json)
    run_dir: Path  # exists, with config.toml, topology.json, runtime/ and meta.json written
    variant: str
    meta: dict  # meta.json so far: the backend adds its own sections; the runner writes it at the end
    progress: Progress


class Session(Protocol):
    """What the runs of one series share on a backend (a fork server that loaded the agents once,
    ns-3 loaded and our C++ compiled once), open until `close`."""

    tools: dict[str, str | None]  # the backend's own versions, for meta.json `versions`

    def run(self, run: RunContext) -> None:
        """Run one run into `run.run_dir`, stopping whatever it started before returning. Raises
        RunFailed (one line; RunCutShort once the run has started), KeyboardInterrupt or
        signals.Terminated."""
        ...

    def close(self) -> None: ...


class BackendRunner(Protocol):
    """A backend's implementation (`backends.implementation(name)`)."""

    def check_config(self, cfg: dict) -> None:
        """What the backend needs of one run's resolved config beyond the config model's checks,
        before anything starts; ConfigError naming the key."""
        ...

    def open_session(self, cfg: dict, results: Path, progress: Progress) -> Session:
        """Check the tools the backend needs for `cfg` (the series' config without --vary;
        RunFailed, one line, before anything is written or shown), then start what a series shares,
        saying so on `progress`; `results` is the series' directory (its logs/)."""
        ...
