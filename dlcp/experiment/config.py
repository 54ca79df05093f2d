"""Experiment configuration: a typed model over TOML, `--set key=value` overrides, validation.

The model is composed from the layers' own settings (dlcp/settings.py): the `dlcp` section is
TaggingConfig (wire/tagging.py) + TransportSettings (transport/api.py) + CommSettings
(comm/settings.py) + the fill rule (workloads/settings.py) + SwitchSettings
(network/switch_runtime.py) + the data and control ports; `workload` is TrainingSettings
(workloads/settings.py) + mode and workers; `comm` is CommSetup (comm/settings.py: scheduler,
collective and their parameters); `scale` is ScaleSettings (experiment/dilation.py); the other
sections are declared here. `[[jobs]]` (several training jobs on one fabric) takes the
`[workload]`, `[comm]` and the hosts' `[dlcp]` keys of each job, the experiment's sections being
the defaults every job starts from; `[cluster]` names the policy between them
(experiment/job_policy.py), which the validation applies (each job's queues and time-shift). Everything is
checked before anything starts: unknown keys, wrong types and impossible values raise ConfigError
with one line naming the key (`dlcp.loss_budget: 1.5 is not a fraction in 0..1`). The resolved
config is a plain nested dict with every default filled in (`validate`), written back as TOML
into the run directory (`dumps`). Reference: docs/experiments.md (its table is `schema_markdown()`).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, ClassVar, Literal

from pydantic import AfterValidator, Field, ValidationError, field_validator, model_validator

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

import dlcp.backends as backends
from dlcp.comm.settings import CommSettings, CommSetup, Mode
from dlcp.experiment.dilation import ScaleSettings
from dlcp.experiment.job_policy import JOB_POLICIES, QUEUES, SHIFT
from dlcp.experiment.systems import SYSTEMS
from dlcp.network.switch_runtime import SwitchSettings
from dlcp.queueing.settings import QueueingSettings
from dlcp.settings import (
    BadValue,
    ConfigError,
    Fraction,
    Port,
    RegistryValues,
    SectionedSettings,
    Settings,
    config_error,
    reference_rows,
    registered_value_rows,
    registry_name,
)
from dlcp.transport.api import CONTROL_PORT, TransportSettings
from dlcp.wire.header import DATA_PORT, JUMBO_MTU, STANDARD_MTU
from dlcp.wire.tagging import FULL_BAND, POLICIES, TaggingConfig
from dlcp.workloads.settings import TORCH_MODELS, Fill, TrainingSettings

__all__ = [
    "ConfigError",
    "Experiment",
    "apply_override",
    "dumps",
    "load",
    "parse_value",
    "parse_vary",
    "policy_of",
    "schema_markdown",
    "validate",
    "values_markdown",
    "variants",
]


def _system_or_none(v: str) -> str:
    return v if v == "" else SYSTEMS.check(v)


SystemName = Annotated[str, AfterValidator(_system_or_none), RegistryValues(SYSTEMS)]


def _experiment_name(v: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", v):
        raise ValueError(f"{v!r} may only hold letters, digits, '_', '-', '.'")
    return v


# --- sections ----------------------------------------------------------------------------------------


class Star(Settings):
    kind: Literal["star"] = "star"
    hosts: int = Field(6, ge=2, le=64, description="hosts on the switch")

    def n_hosts(self) -> int:
        return self.hosts


class Dumbbell(Settings):
    kind: Literal["dumbbell"] = "dumbbell"
    hosts_left: int = Field(3, ge=1, le=32, description="hosts on s1")
    hosts_right: int = Field(3, ge=1, le=32, description="hosts on s2")

    def n_hosts(self) -> int:
        return self.hosts_left + self.hosts_right


class LeafSpine(Settings):
    kind: Literal["leaf_spine"] = "leaf_spine"
    spines: int = Field(2, ge=1, le=8, description="spine switches")
    leaves: int = Field(2, ge=1, le=16, description="leaf switches")
    hosts_per_leaf: int = Field(3, ge=1, le=16, description="hosts under each leaf")

    def n_hosts(self) -> int:
        return self.leaves * self.hosts_per_leaf


class _Grid(Settings):
    dims: list[Annotated[int, Field(ge=1, le=254)]] = Field(
        [4, 4], min_length=2, max_length=2, description="rows, cols: one switch (and host) per grid point"
    )

    def n_hosts(self) -> int:
        return self.dims[0] * self.dims[1]

    @model_validator(mode="after")
    def _size(self):
        if not 2 <= self.n_hosts() <= 254:
            raise BadValue(
                "dims", f"{self.dims[0]}x{self.dims[1]} needs 2..254 switches (host addresses 10.0.0.1..254)"
            )
        return self


class Torus(_Grid):
    kind: Literal["torus"] = "torus"


class Mesh(_Grid):
    kind: Literal["mesh"] = "mesh"


TOPOLOGIES = {t.model_fields["kind"].default: t for t in (Star, Dumbbell, LeafSpine, Torus, Mesh)}
Topology = Annotated[Star | Dumbbell | LeafSpine | Torus | Mesh, Field(discriminator="kind")]


# the registry's names; mypy cannot see a Literal computed at import
BackendName = Literal[backends.names()]  # type: ignore[valid-type]
MAX_WORKERS = max(b.max_workers for b in map(backends.capabilities, backends.names()))


def _more_workers_than(cap: backends.Capabilities, quoted: bool = True) -> str:
    """Which backends take more workers than `cap`."""
    return backends.offering(lambda other: other.max_workers > cap.max_workers, quoted)


MAX_MBPS = max(b.max_mbps for b in map(backends.capabilities, backends.names()))
_DEFAULT_MAX_MBPS = backends.capabilities(backends.DEFAULT).max_mbps
_FAST_LINKS = (
    f"above {_DEFAULT_MAX_MBPS:g}: backend "
    f"{backends.offering(lambda c: c.max_mbps > _DEFAULT_MAX_MBPS, quoted=False)} only"
)


class Links(Settings):
    host_mbps: float = Field(
        50.0,
        ge=0.1,
        le=MAX_MBPS,
        description=f"host <-> switch links ({_FAST_LINKS})",
    )
    fabric_mbps: float = Field(
        50.0,
        ge=0.1,
        le=MAX_MBPS,
        description=f"switch <-> switch links ({_FAST_LINKS})",
    )
    queue_pkts: int = Field(128, ge=4, le=100000, description="egress queue depth per priority")
    delay_us: int = Field(0, ge=0, le=1_000_000, description="propagation delay per switch egress")
    loss: Fraction = Field(0.0, description="random loss per switch egress")
    host_queue_pkts: int = Field(256, ge=2, le=100000, description="host NIC queue (tc) in packets")
    host_fair_queueing: bool = Field(
        False,
        description="host NIC serves destinations round-robin (a multi-port "
        "NI feeding several router ports at once), not one FIFO",
    )
    mtu: int = Field(
        STANDARD_MTU,
        ge=STANDARD_MTU,
        le=JUMBO_MTU,
        description="IP MTU of every link; data packets fill it (above "
        f"{STANDARD_MTU}: backend {backends.offering(lambda c: c.max_mtu > STANDARD_MTU, quoted=False)} only)",
    )


class Placement(Settings):
    mode: Mode = Field("ps", description="parameter server or ring all-reduce")
    workers: int = Field(
        4,
        ge=1,
        le=MAX_WORKERS,
        description=f"training workers (one host each; more than {backends.capabilities(backends.DEFAULT).max_workers} "
        f"only on backend {_more_workers_than(backends.capabilities(backends.DEFAULT), quoted=False)})",
    )


class Workload(TrainingSettings, Placement):
    """`[workload]`: what is trained (TrainingSettings) and by whom."""

    payload: Literal["values", "sizes"] = Field(
        "values",
        description="what gradient packets carry: real values (trained), or only their sizes (backend "
        f"{backends.offering(lambda c: 'sizes' in c.payloads, quoted=False)}, synthetic model timed by a profile: nothing "
        "trained, memory per worker independent of the model size)",
    )


class HostDlcp(CommSettings, TransportSettings, TaggingConfig):
    """The `[dlcp]` keys the hosts use: tagging, transport, collectives, fill (agent configs carry these)."""

    fill: Fill = Field("rescale", description="how the trainer fills lost values")


class Dlcp(SwitchSettings, HostDlcp):
    """`[dlcp]`: what the hosts use, the switches' load balancing and thresholds, and the ports."""

    data_port: Port = Field(DATA_PORT, description="UDP port of DLCP data")
    control_port: Port = Field(CONTROL_PORT, description="TCP port of the control channel")

    @model_validator(mode="after")
    def _distinct_ports(self):
        if self.data_port == self.control_port:
            raise BadValue("control_port", "must differ from dlcp.data_port")
        return self


class Background(Settings):
    kind: Literal["udp_cbr", "udp_onoff", "tcp"] = Field(
        "udp_onoff", description="constant-rate UDP, on/off UDP bursts, or one long TCP flow"
    )
    src: str = Field("", description="host name; empty = the next free host")
    dst: str = Field("ps", description="'ps', 'workerN' or a host name")
    rate_mbps: float = Field(20.0, ge=0.01, description="UDP sending rate (during on-periods)")
    on_ms: float = Field(50.0, ge=1, description="udp_onoff: burst length")
    off_ms: float = Field(50.0, ge=0, description="udp_onoff: silence between bursts")
    pattern: Literal["periodic", "exponential"] = Field(
        "periodic",
        description="udp_onoff: every burst on_ms and every silence off_ms, or each drawn from an "
        "exponential distribution with those means (from the run's seed: both runs of a pair get the same sequence)",
    )
    start_s: float = Field(
        0.0,
        ge=0,
        description="start this long after every worker finished its first iteration (the senders' processes start with the other agents and wait)",
    )
    stop_s: float = Field(0.0, ge=0, description="0 = until the workload ends")
    dscp: int = Field(0, ge=0, le=63, description="0 = background priority")
    packet_bytes: int = Field(1400, ge=64, le=1472, description="UDP payload bytes")

    @model_validator(mode="after")
    def _times(self):
        if self.stop_s and self.stop_s <= self.start_s:
            raise BadValue("stop_s", f"{self.stop_s:g} is not after start_s {self.start_s:g}")
        if self.kind == "udp_onoff" and self.off_ms == 0:
            raise BadValue("off_ms", "udp_onoff needs off_ms > 0 (use kind = 'udp_cbr')")
        return self


class JobWorkload(Workload):
    reference_row: ClassVar[str] = (
        "this job's `[workload]` keys (any of them; the others are the experiment's `[workload]`)"
    )


class JobComm(CommSetup):
    reference_row: ClassVar[str] = "this job's `[comm]` keys (the others are the experiment's `[comm]`)"


class JobDlcp(HostDlcp):
    reference_row: ClassVar[str] = (
        "this job's hosts' `[dlcp]` keys: tagging, transport, collectives, fill (not the switches' "
        "nor the ports; the others are the experiment's `[dlcp]`)"
    )


class Job(Settings):
    """One `[[jobs]]` entry: a training job with its own workers, workload, communication and
    tagging, on the experiment's topology beside the other jobs."""

    name: str = Field("", description="the job's name in reports (letters, digits, '_', '-', '.'); empty = jobN")
    priority: int = Field(
        0, ge=0, le=255, description="priority class: cluster.job_policy = 'priority' serves higher classes first"
    )
    start_s: float = Field(
        0.0,
        ge=0,
        description="arrival: the job starts this long after the run (its completion time counts from "
        "here); its first iteration waits shift_s more",
    )
    shift_s: float = Field(
        0.0,
        ge=0,
        description="time-shift: the first iteration's delay after start_s (cluster.job_policy = 'timeshift' sets it)",
    )
    workload: JobWorkload = Field(default_factory=JobWorkload)
    comm: JobComm = Field(default_factory=JobComm)
    dlcp: JobDlcp = Field(default_factory=JobDlcp)

    @field_validator("name")
    @classmethod
    def _job_name(cls, v: str) -> str:
        return _experiment_name(v) if v else v


class Cluster(SectionedSettings):
    """`[cluster]`: the policy between the jobs of `[[jobs]]` (dlcp/experiment/job_policy.py)."""

    section: ClassVar[str] = "cluster"
    section_registries = (JOB_POLICIES,)
    job_policy: registry_name(JOB_POLICIES) = Field(  # type: ignore[valid-type]
        "fifo", description="what the jobs get from the network and when they start ([[jobs]])"
    )


class Output(Settings):
    dir: str = Field("results", description="results root")
    per_packet: bool = Field(False, description="also record one row per packet")
    pcap_ports: list[str] = Field([], description="switch ports to capture, e.g. ['s1-eth5']")
    debug_log: bool = Field(False, description="switch logging on (slower)")


class Experiment(Settings):
    """One experiment file."""

    name: Annotated[str, AfterValidator(_experiment_name)] = Field(description="experiment name")
    description: str = Field("", description="free text, copied into reports")
    backend: BackendName = Field(  # type: ignore[valid-type]
        backends.DEFAULT,
        description="; ".join(
            f"{b}: {backends.get(b).description}{' (root)' if backends.capabilities(b).root else ''}"
            for b in backends.names()
        ),
    )
    system: SystemName = Field(
        "",
        description="a named system (docs/bounded-loss.md): its settings are written over the file's, --set "
        "still wins; empty = none",
    )
    seed: int = Field(1, ge=0, description="seeds data order, model init, losses; variants share it")
    timeout_s: float = Field(300.0, ge=1, description="wall-clock limit of one run")
    topology: Topology = Field(
        default_factory=Star,
        description="one switch, two joined by one link, leaves under spines, or a 2-D torus / mesh of switches",
    )
    links: Links = Field(default_factory=Links)
    workload: Workload = Field(default_factory=Workload)
    dlcp: Dlcp = Field(default_factory=Dlcp)
    comm: CommSetup = Field(default_factory=CommSetup)
    switch: QueueingSettings = Field(default_factory=QueueingSettings)
    background: list[Background] = Field([])
    jobs: list[Job] = Field([], description="several training jobs on one fabric (none: the one job of [workload])")
    cluster: Cluster = Field(default_factory=Cluster)
    scale: ScaleSettings = Field(default_factory=ScaleSettings)
    output: Output = Field(default_factory=Output)

    @classmethod
    def parse(cls, data):
        """Settings.parse; with [[jobs]], a mistake the first job and the experiment's sections
        share (they are one, `_jobs_start_from_the_experiment`) is named by the job's key."""
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            jobs = isinstance(data, dict) and isinstance(data.get("jobs"), list) and bool(data["jobs"])
            if jobs:
                _job_views_valid(data)  # a job's own mistake, by its jobs[i] key
            raise config_error(e, cls, prefer="jobs" if jobs else None) from None

    @model_validator(mode="before")
    @classmethod
    def _jobs_start_from_the_experiment(cls, data):
        """Each job's `workload`, `comm` and `dlcp` are the experiment's sections with the job's
        own keys on top (the hosts' `[dlcp]` keys only: the switches' are the fabric's). The
        experiment's sections then resolve to the first job's: whatever reads one workload (a
        report's warm-up, the checks of a profile) reads a job that runs, and the experiment's
        `[workload]` need not be complete on its own (a mistake in the first job is named by its
        `jobs[0]` key: `parse`)."""
        if not isinstance(data, dict) or not isinstance(data.get("jobs"), list):
            return data
        jobs = _jobs_on_the_experiment(data)
        out = {**data, "jobs": jobs}
        if jobs and isinstance(jobs[0], dict):  # the experiment's sections are the first job's (below)
            first = jobs[0]
            out["workload"], out["comm"] = first.get("workload", {}), first.get("comm", {})
            if isinstance(first.get("dlcp"), dict):
                out["dlcp"] = {**_table(data, "dlcp"), **first["dlcp"]}
        return out

    @field_validator("backend", mode="before")
    @classmethod
    def _known_backend(cls, v):
        """A renamed backend gets its new name in the error."""
        if isinstance(v, str) and v in backends.RENAMED:
            raise ValueError(backends.unknown_backend(v))
        return v

    @field_validator("topology", mode="before")
    @classmethod
    def _kind_and_its_keys(cls, v):
        """The kind defaults to star; keys of another kind get their own message."""
        if isinstance(v, dict):
            v = {"kind": "star", **v}
            _keys_fit_kind(v)
        return v

    @model_validator(mode="after")
    def _cross_checks(self):
        w, d, links = self.workload, self.dlcp, self.links
        needed = w.workers + (1 if w.mode == "ps" else 0)
        hosts = self.topology.n_hosts()
        if needed > hosts and not self.jobs:  # background sources are checked when roles are placed (topology.py)
            raise BadValue(
                "workload.workers",
                f"{w.workers} workers{' + 1 PS' if w.mode == 'ps' else ''} need "
                f"{needed} hosts, topology.{self.topology.kind} has {hosts}",
            )
        if self.system and w.mode not in SYSTEMS[self.system].modes:
            runs = " or ".join(repr(m) for m in SYSTEMS[self.system].modes)
            raise BadValue("system", f"{self.system!r} runs in workload.mode {runs}, not {w.mode!r}")
        if w.hadamard and d.fill == "stale":
            raise BadValue(
                "workload.hadamard",
                "the transform needs a fill rule without the previous average (dlcp.fill = 'stale' keeps it "
                "untransformed): use zero, rescale or local",
            )
        if w.mode == "allreduce" and w.workers < 2:
            raise BadValue("workload.workers", "ring all-reduce needs at least 2 workers")
        if d.qmax >= links.queue_pkts:
            raise BadValue(
                "dlcp.qmax",
                f"{d.qmax} must be below links.queue_pkts {links.queue_pkts} (admission "
                "control must act before the queue is full)",
            )
        c = self.comm
        changed = [k for k in ("scheduler", "collective") if getattr(c, k) != CommSetup.model_fields[k].default]
        if w.mode == "ps" and changed:
            raise BadValue(
                f"comm.{changed[0]}",
                f"{getattr(c, changed[0])!r} runs all-reduces: it needs workload.mode = 'allreduce' "
                "(the parameter server pushes and pulls one message per layer)",
            )
        try:
            c.check_workers(w.workers)
        except BadValue as e:
            raise BadValue(f"comm.{e.key}", e.what or "") from None
        cap = backends.capabilities(self.backend)
        if w.workers > cap.max_workers:
            raise BadValue(
                "workload.workers",
                f"{w.workers} workers: more than {cap.max_workers} need backend = {_more_workers_than(cap)} "
                f"({backends.get(self.backend).hosts})",
            )
        for key in ("host_mbps", "fabric_mbps"):
            rate = getattr(links, key)
            if rate > cap.max_mbps:
                raise BadValue(
                    f"links.{key}",
                    f"{rate:g}: above {cap.max_mbps:g} Mbit/s only on backend = "
                    f"{backends.offering(lambda c, rate=rate: c.max_mbps >= rate)} "
                    f"(backend {self.backend!r}: {backends.get(self.backend).hosts})",
                )
        if links.mtu > cap.max_mtu:
            raise BadValue(
                "links.mtu",
                f"{links.mtu}: jumbo links exist only on backend = "
                f"{backends.offering(lambda c: c.max_mtu >= links.mtu)} (backend {self.backend!r} "
                f"takes up to {cap.max_mtu})",
            )
        if self.scale.dilation != 1 and w.model in TORCH_MODELS and w.compute == "real":
            raise BadValue(
                "scale.dilation",
                f"{self.scale.dilation:g} needs workload.compute = 'profile' for the "
                f"torch model {w.model} (real compute cannot be slowed down)",
            )
        if w.payload not in cap.payloads:
            raise BadValue(
                "workload.payload",
                f"{w.payload!r} exists only on backend = {backends.offering(lambda c: w.payload in c.payloads)} "
                f"(backend {self.backend!r} carries {' and '.join(cap.payloads)}: its hosts train on what they carry)",
            )
        if w.payload == "sizes" and (w.model != "synthetic" or w.compute != "profile"):
            raise BadValue(
                "workload.payload",
                f"'sizes' needs model = 'synthetic' with compute = 'profile' (a "
                f"layer profile without a model); model {w.model!r} with compute "
                f"{w.compute!r} trains on the values it carries",
            )
        if self.output.pcap_ports and not cap.captures:
            raise BadValue(
                "output.pcap_ports",
                f"captures exist only on the emulated backends ({backends.offering(lambda c: c.captures)}); "
                f"{self.backend} has no interfaces",
            )
        if (links.delay_us or links.loss) and not cap.link_delay_loss:
            raise BadValue(
                "links.delay_us",
                "delay and loss emulation exist only on backend = "
                f"{backends.offering(lambda c: c.link_delay_loss)}; {self.backend} has no such knob",
            )
        return self

    @model_validator(mode="after")
    def _jobs_fit_and_their_policy(self):
        """Every job runs on its own (the experiment's checks on its view), the jobs fit the
        topology together, and the cluster policy decides what it owns (job_policy.py)."""
        if not self.jobs:
            if self.cluster.job_policy != Cluster.model_fields["job_policy"].default:
                raise BadValue(
                    "cluster.job_policy", f"{self.cluster.job_policy!r} is a policy between jobs: it needs [[jobs]]"
                )
            return self
        if not backends.get(self.backend).capabilities.several_jobs:
            raise BadValue(
                "jobs",
                f"several jobs on one fabric run on backend = {backends.offering(lambda c: c.several_jobs)}; "
                f"{self.backend} runs the one job of [workload]",
            )
        hosts = self.topology.n_hosts()
        needed = sum(j.workload.workers + (1 if j.workload.mode == "ps" else 0) for j in self.jobs)
        if needed > hosts:
            raise BadValue(
                "jobs",
                f"the jobs' {needed} workers and parameter servers need {needed} hosts, "
                f"topology.{self.topology.kind} has {hosts}",
            )
        names = [j.name or f"job{i + 1}" for i, j in enumerate(self.jobs)]
        for i, n in enumerate(names):
            if names.index(n) != i:
                raise BadValue(f"jobs[{i}].name", f"{n!r} names two jobs")
        jobs = [j if j.name else j.model_copy(update={"name": n}) for j, n in zip(self.jobs, names)]
        object.__setattr__(self, "jobs", jobs)  # frozen; and a model validator returns the model it was given
        exp = self
        for i in range(len(jobs)):
            try:
                Experiment.parse(exp.job_view(i))
            except ConfigError as e:
                raise BadValue(f"jobs[{i}].{e.key}" if e.key else f"jobs[{i}]", e.what or str(e)) from None
        entry = JOB_POLICIES.get(self.cluster.job_policy)
        assert entry.decide is not None
        decided = entry.decide(jobs, exp, self.cluster.options_of(entry.name))
        out = [
            _job_as_decided(i, job, sets, self.cluster.job_policy) for i, (job, sets) in enumerate(zip(jobs, decided))
        ]
        object.__setattr__(self, "jobs", out)
        # the experiment's sections: the first job's as the policy decided it
        first = out[0]
        object.__setattr__(self, "workload", Workload.parse(first.workload.model_dump()))
        object.__setattr__(self, "comm", CommSetup.parse(first.comm.model_dump()))
        object.__setattr__(self, "dlcp", self.dlcp.replace(**first.dlcp.model_dump()))
        return self

    def workloads(self) -> list[Workload]:
        """The workload of every job ([[jobs]]), or the experiment's one."""
        return [j.workload for j in self.jobs] if self.jobs else [self.workload]

    def job_view(self, i: int) -> dict:
        """The whole experiment as job `i` alone would run it (its `workload`, `comm` and the hosts'
        `dlcp` keys in place of the experiment's, no jobs): what each job is checked, planned and
        run with (dlcp/experiment/jobs.py)."""
        view = self.model_dump()
        job = view["jobs"][i]
        view["workload"], view["comm"] = job["workload"], job["comm"]
        view["dlcp"] = {**view["dlcp"], **job["dlcp"]}
        view["jobs"], view["cluster"] = [], Cluster().model_dump()
        return view

    @model_validator(mode="after")
    def _queueing_on_backend(self):
        """A discipline the backend's switches cannot run (bmv2: strict priority only) is refused here."""
        try:
            self.switch.check_target(self.backend)
        except BadValue as e:
            raise BadValue(f"switch.{e.key}", e.what or str(e)) from None
        return self


def _jobs_on_the_experiment(data: dict) -> list:
    """The raw `jobs` of the raw config `data`, each job's `workload`, `comm` and `dlcp` the
    experiment's with its own keys on top (of `[dlcp]`, the hosts' keys only)."""
    host_keys = set(HostDlcp.model_fields)
    tables: dict[str, dict] = {k: _table(data, k) for k in ("workload", "comm", "dlcp")}
    tables["dlcp"] = {k: v for k, v in tables["dlcp"].items() if k in host_keys}
    jobs = []
    for job in data["jobs"]:
        if isinstance(job, dict):
            job = dict(job)
            for section, defaults in tables.items():
                own = job.get(section, {})
                job[section] = _merged(defaults, own) if isinstance(own, dict) else own
        jobs.append(job)
    return jobs


def _job_views_valid(data: dict) -> None:
    """Each job of the raw config `data` validated as it would run alone (its sections merged on
    the experiment's); the first that fails raises BadValue under its `jobs[i]` key."""
    for i, job in enumerate(_jobs_on_the_experiment(data)):
        if not isinstance(job, dict):
            continue
        view = {**data, "jobs": [], "cluster": {}}
        view["workload"], view["comm"] = job.get("workload", {}), job.get("comm", {})
        view["dlcp"] = {**_table(data, "dlcp"), **_table(job, "dlcp")}
        try:
            Experiment.parse(view)
        except ConfigError as e:
            raise BadValue(f"jobs[{i}].{e.key}" if e.key else f"jobs[{i}]", e.what or str(e)) from None


def _table(data: dict, key: str) -> dict:
    """`data[key]` when it is a table, else an empty one (a wrong type is refused later, by its key)."""
    v = data.get(key)
    return v if isinstance(v, dict) else {}


def _merged(base: dict, own: dict) -> dict:
    """`base` with `own`'s keys on top, tables merged key by key (a job's `[comm.dear]` keeps the
    experiment's other `[comm.dear]` keys)."""
    out = copy.deepcopy(base)
    for k, v in own.items():
        out[k] = _merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _job_as_decided(i: int, job: Job, sets: dict, policy: str) -> Job:
    """Job `i` with what the cluster policy decided; a key the policy owns that the job set to
    something else is refused (a resolved config, validated again, holds the policy's values)."""
    update: dict = {}
    if QUEUES in sets:
        mine = list(job.dlcp.queues)
        if mine != list(FULL_BAND) and mine != list(sets[QUEUES]):
            raise BadValue(
                f"jobs[{i}].dlcp.queues",
                f"{mine}: cluster.job_policy = {policy!r} gives this job {list(sets[QUEUES])} (leave it out)",
            )
        update["dlcp"] = job.dlcp.replace(queues=list(sets[QUEUES]))
    if SHIFT in sets:
        if job.shift_s and abs(job.shift_s - sets[SHIFT]) > 1e-12:
            raise BadValue(
                f"jobs[{i}].shift_s",
                f"{job.shift_s:g}: cluster.job_policy = {policy!r} gives this job {sets[SHIFT]:g} s (leave it out, or "
                "give [cluster.timeshift] shifts_s)",
            )
        update["shift_s"] = float(sets[SHIFT])
    return job.model_copy(update=update) if update else job


def _keys_fit_kind(raw: dict) -> None:
    """Keys of another topology kind are mistakes worth their own message."""
    own = TOPOLOGIES.get(raw["kind"]) if isinstance(raw["kind"], str) else None
    if own is None:
        return  # the discriminator reports an unknown kind
    others = {k for t in TOPOLOGIES.values() for k in t.model_fields} - set(own.model_fields)
    for key in raw:
        if key in others:
            raise BadValue(
                key,
                f"not a setting of kind {raw['kind']!r} "
                f"(it takes {', '.join(k for k in own.model_fields if k != 'kind')})",
            )


def policy_of(cfg: dict) -> str:
    """The policy a run is named and reported by: the experiment's `dlcp.policy`; with [[jobs]],
    the policy between them (`cluster.job_policy`)."""
    return cfg["cluster"]["job_policy"] if cfg.get("jobs") else cfg["dlcp"]["policy"]


def validate(raw: dict) -> dict:
    """Resolve defaults and check everything; returns the resolved config as a plain dict."""
    return Experiment.parse(raw).model_dump()


def parse_value(text: str):
    """An override value: a TOML literal if it parses as one, else the bare string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def apply_system(raw: dict, name, keep=()) -> None:
    """Set `system = name` and write its settings (dlcp/experiment/systems/) over the raw config,
    except the dotted keys in `keep` (those --set gave: they win)."""
    if not isinstance(name, str) or (name and name not in SYSTEMS):
        raise ConfigError(f"system: {SYSTEMS.unknown(name)}")
    raw["system"] = name
    if name:
        for key, value in SYSTEMS[name].settings.items():
            if key not in keep:
                set_key(raw, key, value)


def set_key(raw: dict, key: str, value) -> None:
    """Set the dotted `key` (tables created on the way) to a parsed value."""
    parts = key.split(".")
    node = raw
    for i, p in enumerate(parts[:-1]):
        node = node.setdefault(p, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{'.'.join(parts[: i + 1])}: is a value, not a table")
    node[parts[-1]] = value


def apply_override(raw: dict, assignment: str) -> None:
    """Apply `a.b=value` (or `background.0.rate_mbps=5`) to the raw config in place; `system=name`
    applies that system's settings (apply_system)."""
    if "=" not in assignment:
        raise ConfigError(f"--set {assignment}: expected key=value")
    key, text = assignment.split("=", 1)
    if key.strip() == "system":
        apply_system(raw, parse_value(text))
        return
    parts = key.strip().split(".")
    if not all(parts):
        raise ConfigError(f"--set {assignment}: empty key part")
    node: dict | list = raw  # a table, or a list of tables on the way down
    for i, p in enumerate(parts[:-1]):
        here = ".".join(parts[: i + 1])
        if isinstance(node, list):
            if not p.isdigit() or int(p) >= len(node):
                raise ConfigError(f"{here}: no such list entry")
            node = node[int(p)]
        else:
            node = node.setdefault(p, {})
        if not isinstance(node, (dict, list)):
            raise ConfigError(f"{here}: is a value, not a table")
    last = parts[-1]
    if isinstance(node, list):
        if not last.isdigit() or int(last) >= len(node):
            raise ConfigError(f"{key}: no such list entry")
        node[int(last)] = parse_value(text)
    else:
        node[last] = parse_value(text)


def parse_vary(text: str) -> tuple[str, list]:
    """`key=v1,v2,...` of `--vary`: the key and its values (TOML literals or bare words; no lists)."""
    if "=" not in text:
        raise ConfigError(f"--vary {text}: expected key=value1,value2,...")
    key, values = text.split("=", 1)
    key = key.strip()
    items = [v.strip() for v in values.split(",") if v.strip()]
    if not key or not items:
        raise ConfigError(f"--vary {text}: expected key=value1,value2,...")
    return key, items


def policies_vary(names: list[str]) -> str:
    """What `--policies a,b` varies: the tagging policy when every name is one (as it always did),
    else the system (dlcp/experiment/systems/: every tagging policy is a system that sets only it)."""
    key = "dlcp.policy" if all(n in POLICIES for n in names) else "system"
    return f"{key}={','.join(names)}"


def _variant_name(values: list[str]) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", "-".join(values))


def variants(raw: dict, varies: list[str], sets: Sequence[str] = ()) -> list[tuple[str, dict]]:
    """(name, validated config) per combination of the `--vary key=v1,v2` values (cartesian product,
    first key slowest); the name is the combination's values joined by '-'. No varies: one variant
    named "run". A varied `system` is applied first, and leaves the keys of the `--set` assignments
    `sets` as --set gave them."""
    import copy
    import itertools

    parsed = [parse_vary(v) for v in varies]
    keys = [k for k, _ in parsed]
    if len(set(keys)) != len(keys):
        raise ConfigError(f"--vary: key {next(k for k in keys if keys.count(k) > 1)} given twice")
    for key, values in parsed:  # the user asked for a comparison: one value would run without one
        if len(set(values)) < 2:
            also = f" (--policies {values[0]} is --vary dlcp.policy={values[0]})" if key == "dlcp.policy" else ""
            raise ConfigError(
                f"--vary {key}={','.join(values)}: one value compares nothing{also}; give two or more, or "
                f"run it alone with --set {key}={values[0]}"
            )
    keep = {a.split("=", 1)[0].strip() for a in sets if "=" in a}
    if "system" in keep and "system" in keys:
        raise ConfigError("--vary system: --set system names one already; give the systems to --vary only")
    out, names = [], set()
    for combo in itertools.product(*(values for _, values in parsed)):
        cfg = copy.deepcopy(raw)
        for key, value in sorted(zip(keys, combo), key=lambda kv: kv[0] != "system"):  # the system first
            if key == "system":
                apply_system(cfg, parse_value(value), keep)
            else:
                apply_override(cfg, f"{key}={value}")
        name = _variant_name(list(combo)) if combo else "run"
        if name in names:
            raise ConfigError(f"--vary: two variants would both be named {name!r}")
        names.add(name)
        try:
            resolved = validate(cfg)
            check_warmup(cfg, resolved)
        except ConfigError as e:
            if not combo:  # nothing varied: the config itself
                raise
            raise ConfigError(f"variant {name}: {e}", e.key, e.what) from None
        out.append((name, resolved))
    return out


def named_variants(raw: dict, named: Sequence[tuple[str, Sequence[str]]]) -> list[tuple[str, dict]]:
    """(name, validated config) per named bundle of `KEY=VALUE` overrides: variants that differ in
    several keys at once without their cartesian product (an ablation's steps: `dlcp reproduce`)."""
    import copy

    names = [n for n, _ in named]
    if len(names) < 2 or len(set(names)) != len(names):
        raise ConfigError(f"variants: need two or more, each named once, got {', '.join(names) or 'none'}")
    out = []
    for name, overrides in named:
        naming_check = name.replace("-", "").replace("_", "").replace("+", "")
        if not naming_check.isalnum():
            raise ConfigError(f"variant {name!r}: use letters, digits and - _ + only")
        cfg = copy.deepcopy(raw)
        for o in overrides:
            apply_override(cfg, o)
        try:
            resolved = validate(cfg)
            check_warmup(cfg, resolved)
        except ConfigError as e:
            raise ConfigError(f"variant {name}: {e}", e.key, e.what) from None
        out.append((name, resolved))
    return out


def check_warmup(raw: dict, resolved: dict) -> None:
    """A warm-up the user set (in the file, by --set or --vary) leaves iterations to measure. The
    default (5) is not held to it: a short test run without the key measures nothing, as its
    report says, rather than failing."""
    workload = raw.get("workload")
    if not isinstance(workload, dict) or "warmup_iterations" not in workload:
        return
    w = resolved["workload"]
    if w["warmup_iterations"] >= w["iterations"]:
        raise BadValue(
            "workload.warmup_iterations",
            f"{w['warmup_iterations']} leaves none of the {w['iterations']} iterations (workload.iterations) to "
            "measure: MCT and iteration statistics leave the warm-up out",
        )


def load_raw(path: str | Path, overrides: Sequence[str] = ()) -> dict:
    """Read an experiment config file and apply `--set` overrides (not validated yet)."""
    p = Path(path)
    try:
        raw = tomllib.loads(p.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{p}: no such config file") from None
    except IsADirectoryError:
        raise ConfigError(f"{p}: a directory, not a config file") from None
    except OSError as e:
        raise ConfigError(f"{p}: cannot read the config file ({e.strerror or type(e).__name__})") from None
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"{p}: not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start}), as TOML must be"
        ) from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{p}: not valid TOML ({e})") from None
    if raw.get("system"):  # a system named in the file: its settings over the file's own
        apply_system(raw, raw["system"])
    for o in overrides:
        apply_override(raw, o)
    return raw


def load(path: str | Path, overrides: Sequence[str] = ()) -> dict:
    """Read, override and validate an experiment config file."""
    return validate(load_raw(path, overrides))


# --- writing TOML (tomllib only reads) ------------------------------------------------------------


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_toml_key(str(k))} = {_toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(f"cannot write {type(v).__name__} as TOML")


def _toml_key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else _toml_value(k)


def dumps(cfg: dict) -> str:
    """The resolved config as TOML (top-level values, then one table per section)."""
    lines = [
        f"{_toml_key(k)} = {_toml_value(v)}"
        for k, v in cfg.items()
        if not isinstance(v, (dict, list)) or (isinstance(v, list) and not (v and isinstance(v[0], dict)))
    ]
    for k, v in cfg.items():
        if isinstance(v, dict):
            lines += ["", f"[{k}]"] + [f"{_toml_key(a)} = {_toml_value(b)}" for a, b in v.items()]
        elif isinstance(v, list) and v and isinstance(v[0], dict):
            for item in v:
                lines += ["", f"[[{k}]]"] + [f"{_toml_key(a)} = {_toml_value(b)}" for a, b in item.items()]
    return "\n".join(lines) + "\n"


# --- reference documentation (docs/experiments.md is generated from the model) --------------------


def schema_markdown() -> str:
    """The table of every config key (kept in docs/experiments.md; a test checks it is current)."""
    rows = reference_rows(Experiment, "", _toml_value)
    return (
        "\n".join(
            ["| key | type | default | meaning |", "|---|---|---|---|"]
            + [f"| `{k}` | {t} | {d} | {m} |" for k, t, d, m in rows]
        )
        + "\n"
    )


def values_markdown() -> str:
    """The table of every registered value of the keys that take one (a scheduler, a collective, a
    fill rule...) with its one-line description (kept in docs/experiments.md like the keys)."""
    rows = registered_value_rows(Experiment)
    return (
        "\n".join(["| key | value | what it is |", "|---|---|---|"] + [f"| `{k}` | `{v}` | {d} |" for k, v, d in rows])
        + "\n"
    )


def write_reference(path: str | Path) -> None:
    """Replace the tables in the Markdown file `path` (the lines starting with `|` after the lines
    `REFERENCE_MARK` and `VALUES_MARK`) with `schema_markdown()` and `values_markdown()`."""
    p = Path(path)
    text = p.read_text()
    for mark, table in ((REFERENCE_MARK, schema_markdown()), (VALUES_MARK, values_markdown())):
        lines = text.splitlines(keepends=True)
        start = next((i for i, line in enumerate(lines) if line.strip() == mark), None)
        if start is None:
            raise ConfigError(f"{p}: no line {mark}")
        start += 1
        end = start
        while end < len(lines) and lines[end].startswith("|"):
            end += 1
        text = "".join(lines[:start]) + table + "".join(lines[end:])
    p.write_text(text)


REFERENCE_MARK = "<!-- generated: python -m dlcp.experiment.config docs/experiments.md -->"
VALUES_MARK = "<!-- generated (registered values): python -m dlcp.experiment.config docs/experiments.md -->"


def plan_runs(variants: list[tuple[str, dict]], repeat: int) -> list[tuple[str, int, dict]]:
    """(variant, repeat index, config) in the order they run: a1 b1 a2 b2 ... Pair i runs with seed
    `seed + i - 1`, the same for every variant of the pair; repeat index 0 = not repeated. Every
    backend plans its runs with it."""
    if repeat < 1:
        raise ConfigError(f"--repeat: {repeat} is not a number of runs >= 1")
    runs = []
    for i in range(1, repeat + 1):
        for name, cfg in variants:
            seeded = validate(dict(cfg, seed=cfg["seed"] + i - 1)) if i > 1 else cfg
            runs.append((name, i if repeat > 1 else 0, seeded))
    return runs


if __name__ == "__main__":  # regenerate the table of docs/experiments.md after changing a settings model
    import sys

    write_reference(sys.argv[1] if len(sys.argv) > 1 else "docs/experiments.md")
