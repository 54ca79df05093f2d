"""Several training jobs in one run (`[[jobs]]`, docs/reports.md "Several jobs"): each job's own
statistics, its completion time, the cluster's, and when each job communicated.

A job is the hosts topology.json gives its number (`job`, 1..) and the `[[jobs]]` entry of
config.toml in that place. Its statistics are the single-job report's (dlcp/reporting/summarise.py)
on a copy of the run that holds only its hosts' records and its own view of the config (its
workload: warm-up, iterations), so an iteration of a job is the slowest of its own workers. The
switch counters are the fabric's, shared by every job.

Completion time (JCT) of a job: from its arrival (`start_s` after the run's start) to the end of
its last iteration (the slowest worker's), in the system's time. The run's start is where the
jobs' first iterations put it: the earliest first iteration less its job's `start_s + shift_s`
(on ns-3 simulated time 0 exactly; on the emulated backends the agents' start-up spread is in it).
The cluster's mean JCT is over the jobs, its tail the largest, its makespan from the start to the
last job's end. A job's communication phases: the union over its sender rows of [start, complete]
(every iteration, the warm-up included).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from dlcp.reporting import plots
from dlcp.reporting.load import RunData, Table
from dlcp.reporting.steady import undilated

MAX_PHASE_BARS = 20_000  # per job in the plot: closer intervals are drawn merged beyond that


@dataclass(frozen=True)
class JobInfo:
    job: int  # its place in [[jobs]] from 1: the job id on the wire
    name: str
    priority: int
    start_s: float
    shift_s: float
    queues: tuple[int, int]
    workers: tuple[str, ...]
    hosts: frozenset[str]  # workers and PS
    iterations: int
    config: dict  # the run's config as this job alone would run (its workload, comm, dlcp)


def jobs_of(run: RunData) -> list[JobInfo]:
    """The jobs of a run of several ([] for a run of one job, or when config.toml or topology.json
    cannot say which host belongs to which)."""
    cfg, topo = run.config or {}, run.topology or {}
    jobs = cfg.get("jobs")
    hosts = topo.get("hosts")
    if not isinstance(jobs, list) or not jobs or not isinstance(hosts, list):
        return []
    out = []
    for i, job in enumerate(jobs, start=1):
        if not isinstance(job, dict):
            return []
        mine = [h for h in hosts if isinstance(h, dict) and h.get("job") == i and h.get("role") in ("worker", "ps")]
        view = {**cfg, "workload": job.get("workload", {}), "comm": job.get("comm", {}), "jobs": []}
        view["dlcp"] = {**(cfg.get("dlcp") or {}), **(job.get("dlcp") or {})}
        out.append(
            JobInfo(
                job=i,
                name=str(job.get("name") or f"job{i}"),
                priority=int(job.get("priority", 0)),
                start_s=float(job.get("start_s", 0.0)),
                shift_s=float(job.get("shift_s", 0.0)),
                queues=(int(view["dlcp"].get("queues", (1, 6))[0]), int(view["dlcp"].get("queues", (1, 6))[1])),
                workers=tuple(
                    h["name"] for h in sorted(mine, key=lambda h: h.get("rank", -1)) if h["role"] == "worker"
                ),
                hosts=frozenset(h["name"] for h in mine),
                iterations=int((job.get("workload") or {}).get("iterations", 0)),
                config=view,
            )
        )
    return out


def _only(table: Table, hosts: frozenset[str]) -> Table:
    if not len(table):
        return table
    return table.where(np.isin(table.col("host"), list(hosts)))


def job_run(run: RunData, job: JobInfo) -> RunData:
    """`run` reduced to job `job`: its hosts' records, its view of the config (warm-up from its
    workload), the other jobs' hosts idle in the topology. Named `<run>/<job>`."""
    topo = dict(run.topology or {})
    if isinstance(topo.get("hosts"), list):
        topo["hosts"] = [
            h if h.get("name") in job.hosts else {**h, "role": "idle", "rank": -1}
            for h in topo["hosts"]
            if isinstance(h, dict)
        ]
    warmup = job.config.get("workload", {}).get("warmup_iterations", run.facts.warmup_iterations)
    return dataclasses.replace(
        run,
        name=f"{run.name}/{job.name}",
        config=job.config,
        topology=topo,
        messages=_only(run.messages, job.hosts),
        iterations=_only(run.iterations, job.hosts),
        agents={h: a for h, a in run.agents.items() if h in job.hosts},
        background={},
        progress={h: p for h, p in run.progress.items() if h in job.hosts},
        problems=list(run.problems),
        facts=dataclasses.replace(run.facts, warmup_iterations=int(warmup)),
    )


def completions(run: RunData, jobs: list[JobInfo]) -> tuple[list[dict], dict]:
    """Each job's arrival, first iteration, end and JCT (seconds from the run's start, the system's
    time), and the cluster's mean and tail JCT and makespan (module docstring)."""
    u = undilated(run)
    it = u.iterations
    spans = {}
    for job in jobs:
        t = _only(it, job.hosts)
        t0, t1 = t.col("start_us") if len(t) else np.empty(0), t.col("end_us") if len(t) else np.empty(0)
        ok = np.isfinite(t0) & np.isfinite(t1)
        spans[job.job] = (
            (float(t0[ok].min()), float(t1[ok].max()), len(np.unique(t.col("iter")[ok]))) if ok.any() else None
        )
    starts = [s[0] - (j.start_s + j.shift_s) * 1e6 for j in jobs if (s := spans[j.job])]
    origin = min(starts) if starts else 0.0
    rows = []
    for job in jobs:
        span = spans[job.job]
        first, end, done = (float("nan"), float("nan"), 0) if span is None else span
        rows.append(
            {
                "name": job.name,
                "job_id": job.job,
                "arrival_s": job.start_s,
                "shift_s": job.shift_s,
                "first_iteration_s": (first - origin) / 1e6,
                "end_s": (end - origin) / 1e6,
                "jct_s": (end - origin) / 1e6 - job.start_s,
                "iterations_done": done,
                "iterations": job.iterations,
                "complete": done == job.iterations,
            }
        )
    jcts = np.array([r["jct_s"] for r in rows], float)
    ends = np.array([r["end_s"] for r in rows], float)
    fin = np.isfinite(jcts)
    cluster = {
        "jobs": len(jobs),
        "complete": all(r["complete"] for r in rows),
        "mean_jct_s": float(jcts[fin].mean()) if fin.any() else None,
        "tail_jct_s": float(jcts[fin].max()) if fin.any() else None,
        "makespan_s": float(np.nanmax(ends)) if np.isfinite(ends).any() else None,
        "definition": "JCT = last iteration's end - arrival (start_s); tail = the largest; makespan = the last end",
    }
    return rows, cluster


def comm_phases(run: RunData, job: JobInfo, origin_us: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) in seconds after `origin_us` of the intervals in which job `job` had a message
    in flight (the union over its sender rows; undilated run)."""
    m = _only(run.messages, job.hosts)
    if not len(m):
        return np.empty(0), np.empty(0)
    send = m.col("side") == "sender"
    s, e = m.col("start_us")[send], m.col("complete_us")[send]
    ok = np.isfinite(s) & np.isfinite(e)
    order = np.argsort(s[ok])
    s, e = s[ok][order], e[ok][order]
    if not s.size:
        return s, e
    reach = np.maximum.accumulate(e)
    new = np.r_[True, s[1:] > reach[:-1]]  # an interval that starts after everything before it ended
    idx = np.flatnonzero(new)
    starts, ends = s[idx], np.r_[reach[idx[1:] - 1], reach[-1]]
    return (starts - origin_us) / 1e6, (ends - origin_us) / 1e6


def phases_figure(run: RunData, jobs: list[JobInfo], rows: list[dict]):
    """Each job's communication phases over time (one lane per job), its arrival and end marked."""
    import matplotlib.pyplot as plt

    u = undilated(run)
    origin = _origin_us(u, jobs, rows)
    lanes = [(j, *comm_phases(u, j, origin)) for j in jobs]
    if not any(s.size for _, s, _ in lanes):
        return None
    fig, ax = plt.subplots(figsize=(10, 0.9 + 0.7 * len(jobs)))
    for k, (_job, s, e) in enumerate(lanes):
        c = plots.COLORS[k % len(plots.COLORS)]
        s, e = _thinned(s, e)
        ax.broken_barh(list(zip(s, e - s)), (k - 0.35, 0.7), facecolors=c, linewidth=0)
        r = rows[k]
        ax.plot([r["arrival_s"]], [k], marker=">", color="black", ms=6)
        if np.isfinite(r["end_s"]):
            ax.plot([r["end_s"]], [k], marker="|", color="black", ms=14)
    ax.set_yticks(range(len(jobs)), [f"{j.name} (q{j.queues[0]}-{j.queues[1]})" for j in jobs])
    ax.set_ylim(len(jobs) - 0.4, -0.6)  # the first job on top
    plots._style(
        ax, "Communication phases per job (a message in flight); ▸ arrival, | end", "time since the run's start (s)", ""
    )
    fig.tight_layout()
    return fig


def _origin_us(u: RunData, jobs: list[JobInfo], rows: list[dict]) -> float:
    """The run's start on the records' clock (the one `completions` measured from)."""
    it = u.iterations
    firsts = []
    for job, row in zip(jobs, rows):
        t = _only(it, job.hosts)
        if len(t) and np.isfinite(t.col("start_us")).any():
            firsts.append(np.nanmin(t.col("start_us")) - row["first_iteration_s"] * 1e6)
    return float(min(firsts)) if firsts else 0.0


def _thinned(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """At most MAX_PHASE_BARS intervals: the closest gaps closed first (what a plot could not show)."""
    if s.size <= MAX_PHASE_BARS:
        return s, e
    gaps = s[1:] - e[:-1]
    keep = np.sort(np.argsort(gaps)[-(MAX_PHASE_BARS - 1) :])  # the widest gaps stay
    starts = np.r_[s[0], s[keep + 1]]
    ends = np.r_[e[keep], e[-1]]
    return starts, ends


def jobs_section(run: RunData) -> dict | None:
    """summary.json `jobs`: per job its statistics and completion, and the cluster's (None for a
    run of one job)."""
    from dlcp.reporting.summarise import summarise

    jobs = jobs_of(run)
    if not jobs:
        return None
    rows, cluster = completions(run, jobs)
    per_job = []
    for job, row in zip(jobs, rows):
        s = summarise(job_run(run, job))
        per_job.append(
            {
                **row,
                "priority": job.priority,
                "queues": list(job.queues),
                "workers": len(job.workers),
                "hosts": sorted(job.hosts, key=lambda h: (len(h), h)),
                "policy": job.config.get("dlcp", {}).get("policy"),
                "profile": job.config.get("workload", {}).get("profile"),
                "iteration": s["iteration"],
                "mct_us": {"overall": s["mct_us"]["overall"]},
                "loss": {
                    k: s["loss"][k]
                    for k in ("lost_fraction", "retx_fraction", "forced", "protected_lost")
                    if k in s["loss"]
                },
                "kept_up": s["keep_up"]["ok"],
            }
        )
    return {"cluster": cluster, "jobs": per_job}
