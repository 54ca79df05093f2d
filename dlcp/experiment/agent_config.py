"""The agent configurations `agents/<host>-<role>.json` (docs/runs.md): typed models, built from a
validated experiment by `agent_configs` (the runner and the agent tests use it), written as JSON,
and read back by the agents with the same classes (`load_agent_config`), which check them again:
a file edited by hand or written by an older version fails with one line naming the key.

A worker or the PS gets the experiment's `workload` keys (TrainingSettings), the run's seed and
time dilation (`scale.dilation`, which multiplies profile compute times), the `dlcp` keys the
hosts use (HostDlcp: tagging, transport, collectives, fill), not the switches', the `[comm]`
section, and the topology and links (a worker plans its collective's steps and groups on them:
`topology_spec`). The transport, collective and tagging settings objects are derived from it
(`transport_config`, `comm_config`), so nothing is read from an unchecked dict.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, model_validator

from dlcp.comm.settings import CommConfig, CommSetup, Mode, World
from dlcp.experiment.config import Background, Experiment, HostDlcp, Links, Topology
from dlcp.network import topology as topospec
from dlcp.network.topology import TopologySpec
from dlcp.settings import BadValue, ConfigError, IPv4, Port, Settings
from dlcp.transport.api import Peer, TransportConfig, WireByte
from dlcp.wire.control_frames import PS_RANK
from dlcp.wire.tagging import TaggingConfig
from dlcp.workloads.settings import WorkloadConfig

BACKGROUND_PORT = 5001  # the first background flow's port; flow i uses BACKGROUND_PORT + i
JOB_ID = 1
CONNECT_TIMEOUT_S = 30.0  # peers start within seconds of each other


class HostAddress(Settings):
    host: str
    ip: IPv4


class WorkerAddress(HostAddress):
    rank: int = Field(ge=0)


class Ports(Settings):
    data: Port
    control: Port


class Records(Settings):
    per_packet: bool = False


class JobSeat(Settings):
    """One job of [[jobs]] as the placement sees it: how many workers, whether it has a PS."""

    workers: World
    mode: Mode


class WorkloadAgentConfig(Settings):
    """A worker's or the PS's configuration."""

    run_dir: str
    host: str
    role: Literal["worker", "ps"]
    ip: IPv4
    rank: int = Field(ge=-1)  # -1: the PS
    world: World
    job_id: WireByte = JOB_ID
    mode: Mode
    ps: HostAddress | None = None
    workers: list[WorkerAddress]
    ports: Ports
    workload: WorkloadConfig
    dlcp: HostDlcp
    comm: CommSetup = CommSetup()
    topology: Topology  # the experiment's: collectives plan their steps and groups on it
    links: Links
    records: Records = Records()
    timeout_s: float = Field(gt=0)
    # several jobs ([[jobs]]): every job's seats, so the placement can be rebuilt (empty: one job),
    # and when this job's first iteration starts, in seconds after the run's start (start_s + shift_s)
    jobs: list[JobSeat] = Field([])
    start_s: float = Field(0.0, ge=0)

    @model_validator(mode="after")
    def _roles_fit(self):
        if self.role == "worker" and not 0 <= self.rank < self.world:
            raise BadValue("rank", f"{self.rank} outside 0..{self.world - 1}")
        if self.role == "ps" and self.rank != -1:
            raise BadValue("rank", f"the PS has rank -1, got {self.rank}")
        if self.role == "ps" and self.mode != "ps":
            raise BadValue("mode", f"{self.mode!r}, but a PS agent only runs in mode 'ps'")
        if self.mode == "ps" and self.ps is None:
            raise BadValue("ps", "required in mode 'ps'")
        if len(self.workers) != self.world:
            raise BadValue("workers", f"{len(self.workers)} entries for world {self.world}")
        seen = set()
        for i, w in enumerate(self.workers):
            if w.rank >= self.world or w.rank in seen:
                raise BadValue(f"workers[{i}].rank", f"{w.rank} is outside 0..{self.world - 1} or repeated")
            seen.add(w.rank)
        return self

    @property
    def wire_rank(self) -> int:
        return PS_RANK if self.role == "ps" else self.rank

    def transport_config(self) -> TransportConfig:
        return self.dlcp.project(
            TransportConfig,
            rank=self.wire_rank,
            job_id=self.job_id,
            ip=self.ip,
            data_port=self.ports.data,
            control_port=self.ports.control,
            host=self.host,
            per_packet=self.records.per_packet,
            inject_seed=self.workload.seed * 1000 + self.wire_rank,
            time_scale=self.workload.dilation,
            connect_timeout_s=min(CONNECT_TIMEOUT_S, self.timeout_s),
        )

    def comm_config(self) -> CommConfig:
        return self.dlcp.project(
            CommConfig,
            rank=self.wire_rank,
            world=self.world,
            job_id=self.job_id,
            tagging=self.dlcp.project(TaggingConfig),
            timeout_s=self.timeout_s,
        )

    def topology_spec(self) -> TopologySpec:
        """The experiment's topology with the roles the runner placed (rank r on the same host);
        with several jobs, this job's view of it (its workers and PS only)."""
        spec = topospec.from_config(
            {
                "topology": self.topology.model_dump(),
                "links": self.links.model_dump(),
                "workload": {"workers": self.world, "mode": self.mode},
                "jobs": [{"workload": seat.model_dump()} for seat in self.jobs],
                "background": [],
            }
        )
        if self.jobs:
            spec = spec.job_view(self.job_id)
        placed = {h.rank: h.name for h in spec.by_role("worker")}
        for w in self.workers:
            if placed.get(w.rank) != w.host:
                raise BadValue(
                    "workers",
                    f"rank {w.rank} is on {w.host}, but topology.{self.topology.kind} places it "
                    f"on {placed.get(w.rank)}",
                )
        return spec

    def peers(self) -> list[Peer]:
        """Every other rank this agent talks to."""
        data, ctl = self.ports.data, self.ports.control
        peers = [Peer(w.rank, w.ip, data, ctl) for w in self.workers if w.rank != self.wire_rank]
        if self.mode == "ps" and self.role != "ps":
            assert self.ps is not None  # required in ps mode (checked on construction)
            peers.append(Peer(PS_RANK, self.ps.ip, data, ctl))
        return peers


class BackgroundFlow(Background):
    """One `[[background]]` entry with its resolved destination."""

    dst_ip: IPv4
    port: Port
    index: int = Field(ge=0)
    seed: int = Field(0, description="seeds the on/off durations of pattern 'exponential'")


class Sink(Settings):
    """The receiving end of background flows on the destination host."""

    kind: Literal["sink"]
    port: Port


class BackgroundAgentConfig(Settings):
    run_dir: str
    host: str
    role: Literal["background"]
    ip: IPv4
    background: Annotated[BackgroundFlow | Sink, Field(discriminator="kind")]


AgentConfig = WorkloadAgentConfig | BackgroundAgentConfig
MODEL_OF_ROLE: dict[str, type[WorkloadAgentConfig] | type[BackgroundAgentConfig]] = {
    "worker": WorkloadAgentConfig,
    "ps": WorkloadAgentConfig,
    "background": BackgroundAgentConfig,
}


def _agent_path(profile: str) -> str:
    """A profile file named relative to where `dlcp run` started, absolute (agents run in the
    repository); a bundled profile's name stays a name."""
    return str(Path(profile).resolve()) if profile and Path(profile).is_file() else profile


def agent_configs(cfg: dict, spec: TopologySpec, run_dir: Path) -> list[tuple[str, str, AgentConfig]]:
    """(host, role, config) for every agent of the run of the resolved experiment config `cfg` on
    `spec` (roles placed): workers, PS (of every job of [[jobs]], in job order), background
    senders (role "background") and sinks (role "sinkPORT")."""
    exp = Experiment.parse(cfg)
    out: list[tuple[str, str, AgentConfig]] = []
    if exp.jobs:
        seats = [JobSeat(workers=j.workload.workers, mode=j.workload.mode) for j in exp.jobs]
        for i, job in enumerate(exp.jobs):
            view = Experiment.parse(exp.job_view(i))
            out += _workload_agents(view, spec, run_dir, i + 1, seats, job.start_s + job.shift_s)
    else:
        out += _workload_agents(exp, spec, run_dir, 0)
    sinks: dict[str, tuple] = {}
    for i, bg in enumerate(exp.background):
        src = spec.hosts[spec.background_sources[i]]
        dst = spec.host_named(bg.dst)
        flow = bg.project(BackgroundFlow, dst_ip=dst.ip, port=BACKGROUND_PORT + i, index=i, seed=exp.seed * 1000 + i)
        out.append(
            (
                src.name,
                "background",
                BackgroundAgentConfig(
                    run_dir=str(run_dir), host=src.name, role="background", ip=src.ip, background=flow
                ),
            )
        )
        sinks.setdefault(dst.name, (dst, []))[1].append(BACKGROUND_PORT + i)
    for name, (dst, ports) in sinks.items():
        for port in ports:
            out.append(
                (
                    name,
                    f"sink{port}",
                    BackgroundAgentConfig(
                        run_dir=str(run_dir),
                        host=name,
                        role="background",
                        ip=dst.ip,
                        background=Sink(kind="sink", port=port),
                    ),
                )
            )
    return out


def _workload_agents(
    exp: Experiment,
    spec: TopologySpec,
    run_dir: Path,
    job: int,
    seats: list[JobSeat] | None = None,
    start_s: float = 0.0,
) -> list[tuple[str, str, AgentConfig]]:
    """The workers and PS of one job: `exp` as that job alone would run (its view), `job` its
    number in [[jobs]] from 1 (its wire job id), 0 for an experiment of one job (job id JOB_ID)."""
    workers, ps = spec.by_role("worker", job), spec.by_role("ps", job)
    common = {
        "run_dir": str(run_dir),
        "job_id": job or JOB_ID,
        "world": len(workers),
        "mode": exp.workload.mode,
        "ps": HostAddress(host=ps[0].name, ip=ps[0].ip) if ps else None,
        "workers": [WorkerAddress(rank=h.rank, host=h.name, ip=h.ip) for h in workers],
        "ports": Ports(data=exp.dlcp.data_port, control=exp.dlcp.control_port),
        "workload": exp.workload.project(
            WorkloadConfig, seed=exp.seed, dilation=exp.scale.dilation, profile=_agent_path(exp.workload.profile)
        ),
        "dlcp": exp.dlcp.project(HostDlcp),
        "comm": exp.comm,
        "topology": exp.topology,
        "links": exp.links,
        "records": Records(per_packet=exp.output.per_packet),
        "timeout_s": exp.timeout_s,
        "jobs": seats or [],
        "start_s": start_s,
    }
    out: list[tuple[str, str, AgentConfig]] = [
        (h.name, "worker", WorkloadAgentConfig(**common, host=h.name, role="worker", ip=h.ip, rank=h.rank))
        for h in workers
    ]
    out += [(h.name, "ps", WorkloadAgentConfig(**common, host=h.name, role="ps", ip=h.ip, rank=-1)) for h in ps]
    return out


def agent_config_path(run_dir: Path, host: str, role: str) -> Path:
    return Path(run_dir) / "agents" / f"{host}-{role}.json"


def write_agent_config(run_dir: Path, host: str, role: str, cfg: AgentConfig) -> Path:
    """Write `cfg` as JSON to agents/<host>-<role>.json (atomically); returns the path."""
    path = agent_config_path(run_dir, host, role)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_text(json.dumps(cfg.model_dump(mode="json"), indent=1))
    os.replace(tmp, path)
    return path


def load_agent_config(path: str | Path, role: str) -> AgentConfig:
    """Read and check the configuration of a `role` agent ("worker", "ps", "background");
    raises ConfigError with one line naming the file's problem or the first bad key."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror or e}") from None
    try:
        raw = json.loads(text)
    except ValueError as e:
        raise ConfigError(f"{path} is not valid JSON: {e}") from None
    cfg = MODEL_OF_ROLE[role].parse(raw)
    if role != "background" and cfg.role != role:
        raise ConfigError(f"role: {cfg.role!r}, but this is the {role} agent")
    return cfg
