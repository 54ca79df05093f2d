"""Did the emulation keep up with what it emulates? A run whose machine fell behind measured its
own limits, not the system's: the report flags it, with the figure that shows it.

The signs, each with its threshold (figures in wall-clock time, about the emulation machine):

- compute: with `workload.compute = "profile"` each worker records how late its compute steps
  ended against the profile's deadlines (records/hN-agent.json `compute`, warm-up iterations
  excluded; dlcp/workloads/compute_model.py). Deadlines are absolute, so an iteration ends at most
  its worst lateness later than it would have: flagged when the worst lateness per iteration,
  summed, exceeds COMPUTE_OVERRUN_MAX (5 %) of the worker's iteration time (the bound on how much
  the measured iteration time was stretched). The share of the profile's compute time is shown
  too: it says how faithful the compute itself was.
- switch CPU: the runner samples each switch process's CPU time (meta.json `switch_cpu`,
  emulation/cpu_sampler.py). Flagged when a switch was busy SWITCH_BUSY_MAX (90 %) of a CPU or more
  in its busiest 5 s: it sleeps when idle, so that is a switch at its limit.
- kernel drops: frames the kernel dropped at a switch port because the switch did not read them in
  time (counters/sN.json ports `rx_kernel_drops`). Flagged when any: those losses are in none of
  the emulated queues.
- switch timing: the kernel stamps every frame as it reaches a switch port, and the built-in switch
  records how long each waited before it read it (counters/sN.json `read_lag`), and how long after
  its slot on a paced link began it started each packet (`send_late`: the switch woke late). A
  switch stands for hardware that takes a frame as it arrives and sends it when the link is free;
  a frame read late is queued late, and a late wake-up bunches what should have been spaced.
  Flagged when either p99 exceeds RX_WAIT_SHARE_MAX of the run's median message completion time
  (both wall clock), the same limit as the hosts' receive path. The dump's `host_burst` (bytes of a
  host's earlier frames still on its link when the next came: its NIC sends at most its rate, so
  more than a frame or two is the kernel delivering in bursts) is shown, not judged.
- host receive path: each host's transport records how long its data datagrams waited in the
  socket buffer before it read them (records/hN-agent.json `socket_wait`,
  dlcp/transport/core/waits.py). A host that stands for a machine of its own reads in
  microseconds; flagged when a host's p99 wait exceeds RX_WAIT_SHARE_MAX of the run's median
  message completion time (both wall clock): the hosts' CPU, not the network, is then a visible
  part of the MCTs. Flagged too when it exceeds RX_WAIT_FRAMES_MAX (1) full frame's transmission
  time on the host's link as emulated (`links.host_mbps` / D): such a host reacts slower than its
  link delivers, so its answers and next sends come in clumps on the time scale where queues count
  packets (ECN and drop thresholds). Calibrated on the dilation check: its D = 1 runs at 50 Mbit/s,
  whose figures disagree with D = 4, waited 2.1-5.0 frames at p99, the runs that agree 0.2-0.6.
- background start: an emulated background sender records when the runner released it and when
  its first datagram went out (records/hN-background<i>.json). Flagged when it started so late
  that more than BACKGROUND_MISSED_MAX (2 %) of the measured iterations, and more than one, began
  between when it was due (release + `start_s`) and when it sent: those iterations ran without
  the congestion the experiment describes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from dlcp.reporting.load import RunData, Table
from dlcp.reporting.steady import after_warmup, run_time_us

COMPUTE_OVERRUN_MAX = 0.05
SWITCH_BUSY_MAX = 0.9
RX_WAIT_SHARE_MAX = 0.1
RX_WAIT_FRAMES_MAX = 1.0
FULL_FRAME_BYTES = 1514  # a 1500-byte IP packet in its Ethernet frame
BACKGROUND_MISSED_MAX = 0.02


@dataclass(frozen=True)
class Finding:
    """One figure past its limit, as the tables and the one-line warnings show it: where (a host,
    a switch, a background flow), what was measured, the figure and the limit as a person reads
    them, how many times the limit the figure is (`over`; None where any amount is too much:
    kernel drops), and the sentence that says it with its context (summary.json `flags`)."""

    where: str
    what: str
    figure: str
    limit: str
    over: float | None
    sentence: str


def past_limit(f: dict) -> float:
    """How far `f` is past its limit, for ranking (one past a limit of zero ranks first)."""
    return float("inf") if f["over"] is None else f["over"]


def finding_line(f: dict) -> str:
    """A finding in a few words: `h1: socket wait p99 5.79 ms, 27.1% of the median MCT (limit 10%)`."""
    return f"{f['where']}: {f['what']} {f['figure']} (limit {f['limit']})"


FINDINGS_HEADER = ["where", "what", "figure", "limit"]


def findings_rows(findings: list[dict]) -> list[list[str]]:
    """Table rows (FINDINGS_HEADER) of `findings`, the furthest past its limit first."""
    return [[f["where"], f["what"], f["figure"], f["limit"]] for f in sorted(findings, key=past_limit, reverse=True)]


def runs_keepup_line(name: str, bad: list[tuple[str, list[dict]]], n_runs: int) -> str:
    """One line for the runs of `name` that did not keep up; `bad` holds (run label, its findings)."""
    tagged = [(label, f) for label, fs in bad for f in fs]
    line = f"{name}: {len(bad)} of {n_runs} run(s) did not keep up" if n_runs > 1 else f"{name} did not keep up"
    if not tagged:
        return line
    label, w = max(tagged, key=lambda lf: past_limit(lf[1]))
    return line + f"; the worst: {label + ', ' if n_runs > 1 else ''}{finding_line(w)}; {len(tagged)} finding(s) in all"


def pct(x: float) -> str:
    return f"{100 * x:.3g}%"


def iteration_wall_ms(run: RunData, host: str) -> float | None:
    """Wall-clock milliseconds of `host`'s iterations after the warm-up."""
    t = after_warmup(run.iterations, run.facts.warmup_iterations)
    if not len(t):
        return None
    v = t.col("iteration_us")[t.col("host") == host]
    v = v[np.isfinite(v)]
    return float(v.sum()) * run.time_scale / 1e3 if v.size else None


def compute_keepup(run: RunData) -> dict:
    per_host = {h: dict(a["compute"]) for h, a in run.agents.items() if isinstance(a.get("compute"), dict)}
    found: list[Finding] = []
    for host, c in sorted(per_host.items()):
        wall = iteration_wall_ms(run, host)
        share = c.get("overrun_ms", 0) / wall if wall else None
        c["overrun_share_of_iterations"] = share
        if share is not None and share > COMPUTE_OVERRUN_MAX:
            found.append(
                Finding(
                    host,
                    "compute overrun",
                    f"{pct(share)} of its iteration time",
                    pct(COMPUTE_OVERRUN_MAX),
                    share / COMPUTE_OVERRUN_MAX,
                    f"compute on {host} fell behind its profile: the worst lateness per iteration summed to "
                    f"{pct(share)} of its iteration time (limit {pct(COMPUTE_OVERRUN_MAX)}) and "
                    f"{pct(c.get('overrun_share') or 0)} of the profile's compute time; "
                    f"{c.get('missed', 0)} of {c.get('deadlines', 0)} deadlines missed by more than "
                    f"{c.get('tolerance_ms', 1):g} ms, the worst by {c.get('late_max_ms', 0):.3g} ms",
                )
            )
    return {"per_host": per_host, "findings": found}


def switch_cpu_keepup(meta: dict | None) -> dict:
    cpu = (meta or {}).get("switch_cpu")
    cpu = cpu if isinstance(cpu, dict) else {}
    found: list[Finding] = []
    for sw, c in sorted(cpu.items()):
        peak = c.get("busy_peak") if isinstance(c, dict) else None
        if isinstance(peak, (int, float)) and peak >= SWITCH_BUSY_MAX:
            found.append(
                Finding(
                    sw,
                    "switch CPU, busiest window",
                    f"{pct(peak)} of a CPU",
                    pct(SWITCH_BUSY_MAX),
                    peak / SWITCH_BUSY_MAX,
                    f"switch {sw} used {pct(peak)} of a CPU in its busiest {c.get('window_s', 5):g} s "
                    f"(limit {pct(SWITCH_BUSY_MAX)}): it was at its limit",
                )
            )
    return {"per_switch": cpu, "findings": found}


def kernel_drop_keepup(counters: list[dict]) -> dict:
    per_switch, found = {}, []
    for dump in counters:
        ports = {
            p.get("port"): p.get("rx_kernel_drops", 0)
            for p in dump.get("ports", [])
            if isinstance(p, dict) and isinstance(p.get("rx_kernel_drops", 0), int)
        }
        total = sum(ports.values())
        per_switch[dump.get("switch", "?")] = total
        if total:
            ports_text = ", ".join(f"port {p}: {n:,}" for p, n in sorted(ports.items(), key=lambda kv: -kv[1]) if n)
            name = dump.get("switch", "?")
            found.append(
                Finding(
                    name,
                    "kernel drops",
                    f"{total:,} frame(s)",
                    "0",
                    None,
                    f"switch {name}: {total:,} frame(s) dropped by the kernel before the "
                    f"switch read them ({ports_text}); those losses are in no emulated queue",
                )
            )
    return {"per_switch": per_switch, "findings": found}


SWITCH_WAITS = (
    ("read_lag", "read lag p99", "waited {p99:.3g} ms or more in the kernel before it read them"),
    ("send_late", "send lateness p99", "started {p99:.3g} ms or more after their slot on the link began"),
)


def switch_timing_keepup(counters: list[dict], mct_ms: float | None) -> dict:
    """Per switch its read lag and send lateness (the dump's `read_lag`, `send_late`, each with its
    p99's share of the median MCT) and its hosts' bursts (`host_burst`, shown, not judged); flags
    past RX_WAIT_SHARE_MAX. Dumps without them (ns-3, bmv2, older runs) are left out."""
    per_switch, found = {}, []
    for dump in counters:
        name = dump.get("switch", "?")
        row = {}
        for key, label, what in SWITCH_WAITS:
            w = dump.get(key)
            if not isinstance(w, dict) or not w.get("count"):
                continue
            p99 = w.get("p99_ms")
            share = p99 / mct_ms if isinstance(p99, (int, float)) and mct_ms else None
            row[key] = {**w, "p99_share_of_mct_p50": share}
            if share is not None and share > RX_WAIT_SHARE_MAX:
                found.append(
                    Finding(
                        name,
                        label,
                        f"{p99:.3g} ms, {pct(share)} of the median MCT",
                        pct(RX_WAIT_SHARE_MAX),
                        share / RX_WAIT_SHARE_MAX,
                        f"switch {name} fell behind: 1 % of the frames {what.format(p99=p99)} (the longest "
                        f"{w.get('max_ms', 0):.3g} ms), {pct(share)} of the median message completion "
                        f"time ({mct_ms:.3g} ms, limit {pct(RX_WAIT_SHARE_MAX)}; wall clock)",
                    )
                )
        if row:
            if isinstance(dump.get("host_burst"), dict):
                row["host_burst"] = dump["host_burst"]
            per_switch[name] = row
    return {"per_switch": per_switch, "findings": found}


def median_mct_wall_ms(senders: Table, time_scale: float) -> float | None:
    """Median MCT of `senders` (the steady sender rows the summary uses), wall-clock milliseconds."""
    v = senders.col("mct_us") if len(senders) else np.empty(0)
    v = v[np.isfinite(v)]
    return float(np.median(v)) * time_scale / 1e3 if v.size else None


def receive_thread_cpu(agent: dict) -> dict | None:
    """The receive thread's CPU time and run-queue wait (agent record `threads.rx`), with the mean
    wait per time it was put on a CPU: large when the thread was runnable but the CPUs were taken."""
    t = (agent.get("threads") or {}).get("rx") if isinstance(agent.get("threads"), dict) else None
    if not isinstance(t, dict) or not t.get("runs"):
        return None
    return {
        "cpu_s": t.get("cpu_s"),
        "runqueue_s": t.get("runqueue_s"),
        "runqueue_ms_per_run": round(1e3 * t.get("runqueue_s", 0) / t["runs"], 4),
    }


def frame_wall_ms(run: RunData) -> float | None:
    """One full frame's transmission time on a host link as the emulation ran it (the config's
    `links.host_mbps` / D), in wall-clock milliseconds; None without a host rate."""
    mbps = ((run.config or {}).get("links") or {}).get("host_mbps")
    if not isinstance(mbps, (int, float)) or mbps <= 0:
        return None
    return FULL_FRAME_BYTES * 8 / (mbps * 1e6 / run.time_scale) * 1e3


def receive_keepup(run: RunData, senders: Table) -> dict:
    per_host = {
        h: dict(a["socket_wait"])
        for h, a in run.agents.items()
        if isinstance(a.get("socket_wait"), dict) and a["socket_wait"].get("count")
    }
    mct = median_mct_wall_ms(senders, run.time_scale)
    frame = frame_wall_ms(run)
    found: list[Finding] = []
    for host, w in sorted(per_host.items()):
        p99 = w.get("p99_ms")
        share = p99 / mct if isinstance(p99, (int, float)) and mct else None
        frames = p99 / frame if isinstance(p99, (int, float)) and frame else None
        w["p99_share_of_mct_p50"] = share
        w["p99_frames"] = frames
        cpu = receive_thread_cpu(run.agents[host])
        if cpu is not None:
            w["rx_thread"] = cpu
        why = (
            ""
            if cpu is None
            else (
                f"; its receive thread used {cpu['cpu_s']:.3g} s of CPU and waited "
                f"{cpu['runqueue_s']:.3g} s for one ({cpu['runqueue_ms_per_run']:.3g} ms "
                f"per wake-up)"
            )
        )
        if share is not None and share > RX_WAIT_SHARE_MAX:
            found.append(
                Finding(
                    host,
                    "socket wait p99",
                    f"{p99:.3g} ms, {pct(share)} of the median MCT",
                    pct(RX_WAIT_SHARE_MAX),
                    share / RX_WAIT_SHARE_MAX,
                    f"the receive path of {host} fell behind: 1 % of its datagrams waited {p99:.3g} ms or more "
                    f"in the socket buffer, {pct(share)} of the median message completion time "
                    f"({mct:.3g} ms, limit {pct(RX_WAIT_SHARE_MAX)}; wall clock){why}",
                )
            )
        elif frames is not None and frames > RX_WAIT_FRAMES_MAX:
            found.append(
                Finding(
                    host,
                    "socket wait p99",
                    f"{p99:.3g} ms, {frames:.3g} frame times",
                    f"{RX_WAIT_FRAMES_MAX:g} frame time",
                    frames / RX_WAIT_FRAMES_MAX,
                    f"the receive path of {host} reacted slower than its link delivers: 1 % of its datagrams "
                    f"waited {p99:.3g} ms or more in the socket buffer, {frames:.3g} times a full frame's "
                    f"{frame:.3g} ms on its link (limit {RX_WAIT_FRAMES_MAX:g}; wall clock){why}",
                )
            )
    return {"per_host": per_host, "findings": found}


def measured_iteration_starts_us(run: RunData) -> np.ndarray:
    """When each measured iteration (after the warm-up) began: its earliest start over the workers,
    on the run's timeline."""
    t = after_warmup(run.iterations, run.facts.warmup_iterations)
    if not len(t) or "start_us" not in t.columns:
        return np.empty(0)
    it, start = t.col("iter"), t.col("start_us")
    ok = np.isfinite(it) & np.isfinite(start)
    return np.array([start[ok & (it == i)].min() for i in np.unique(it[ok])])


def background_keepup(run: RunData) -> dict:
    starts = measured_iteration_starts_us(run)
    per_flow, found = {}, []
    for name, b in sorted(run.background.items()):
        released = b.get("released_unix")
        if not isinstance(released, (int, float)) or not starts.size:  # sinks, ns-3, older runs
            continue
        due = released + (b.get("start_s") or 0.0)
        started = b.get("start_unix") if isinstance(b.get("start_unix"), (int, float)) else None
        until = run_time_us(run, started) if started is not None else np.inf
        missed = int(((starts >= run_time_us(run, due)) & (starts < until)).sum())
        per_flow[name] = {
            "late_ms": None if started is None else round((started - due) * 1e3, 3),
            "measured_iterations_missed": missed,
            "measured_iterations": int(starts.size),
        }
        if missed > max(1, BACKGROUND_MISSED_MAX * starts.size):  # one may begin as it is due
            when = (
                "never sent"
                if started is None
                else f"started {(started - due) * 1e3:.4g} ms later than due (wall clock)"
            )
            found.append(
                Finding(
                    name,
                    "background start",
                    f"{missed} of {starts.size} measured iterations began without it",
                    pct(BACKGROUND_MISSED_MAX),
                    missed / starts.size / BACKGROUND_MISSED_MAX,
                    f"background sender {name} {when}: {missed} of the {starts.size} measured iterations "
                    f"began without it (limit {pct(BACKGROUND_MISSED_MAX)})",
                )
            )
    return {"per_flow": per_flow, "findings": found}


def keepup_section(run: RunData, senders: Table) -> dict:
    """summary.json `keep_up`: ok, the findings (`flags`: their sentences) and the figures behind them.
    `senders`: the steady sender rows (after the warm-up) whose MCTs the summary reports."""
    compute = compute_keepup(run)
    cpu = switch_cpu_keepup(run.meta)
    drops = kernel_drop_keepup(run.counters)
    reads = switch_timing_keepup(run.counters, median_mct_wall_ms(senders, run.time_scale))
    rx = receive_keepup(run, senders)
    bg = background_keepup(run)
    findings: list[Finding] = [f for part in (compute, cpu, drops, reads, rx, bg) for f in part["findings"]]
    measured = [
        what
        for what, present in (
            ("compute deadlines", bool(compute["per_host"])),
            ("switch CPU", bool(cpu["per_switch"])),
            ("kernel drops", bool(drops["per_switch"])),
            ("switch timing", bool(reads["per_switch"])),
            ("host receive waits", bool(rx["per_host"])),
            ("background start", bool(bg["per_flow"])),
        )
        if present
    ]
    return {
        "ok": not findings,
        "flags": [f.sentence for f in findings],
        "findings": [asdict(f) for f in findings],
        "measured": measured,
        "thresholds": {
            "compute_overrun_share_of_iterations": COMPUTE_OVERRUN_MAX,
            "switch_busy_peak": SWITCH_BUSY_MAX,
            "kernel_drops": 0,
            "switch_read_lag_p99_share_of_mct_p50": RX_WAIT_SHARE_MAX,
            "switch_send_late_p99_share_of_mct_p50": RX_WAIT_SHARE_MAX,
            "socket_wait_p99_share_of_mct_p50": RX_WAIT_SHARE_MAX,
            "socket_wait_p99_frames": RX_WAIT_FRAMES_MAX,
            "background_measured_iterations_missed_share": BACKGROUND_MISSED_MAX,
        },
        "compute": compute["per_host"],
        "switch_cpu": cpu["per_switch"],
        "kernel_drops": drops["per_switch"],
        "switch_timing": reads["per_switch"],
        "socket_wait": rx["per_host"],
        "background": bg["per_flow"],
        "machine": (run.meta or {}).get("machine"),
    }
