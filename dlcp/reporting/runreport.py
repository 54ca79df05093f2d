"""One run's report: summary.json, report.md, report.html and plots/*.png in the run directory
(or another output directory)."""

from __future__ import annotations

import json
import math
import pathlib
from typing import TypeVar

from dlcp.reporting import jobs as jobs_mod
from dlcp.reporting import plots
from dlcp.reporting.keepup_check import FINDINGS_HEADER, finding_line, findings_rows, past_limit
from dlcp.reporting.load import UNFINISHED, RunData, load_run
from dlcp.reporting.plots import TRAFFIC_LABELS
from dlcp.reporting.render import Doc, Image, fmt, to_html, to_markdown
from dlcp.reporting.stats import MIN_SAMPLES_RULE, PERCENTILE_METHOD_TEXT, refused_text
from dlcp.reporting.steady import undilated
from dlcp.reporting.summarise import (
    SIZES_ONLY_TEXT,
    grouped_mct,
    iteration_series,
    json_ready,
    steady_sender_rows,
    summarise,
    training_curves,
)
from dlcp.reporting.traffic import run_timeline

DIST_HEADER = ["count", "mean", "p50", "p90", "p99", "p99.9", "max"]

_V = TypeVar("_V")


def pct_cell(d: dict, key: str, scale: float = 1.0):
    """A percentile of a distribution dict for a table: the number (times scale), or the refusal
    when there were too few samples for it."""
    if key in d.get("too_few", ()):
        return refused_text(d["count"], key)
    v = d.get(key)
    return None if v is None else v * scale


def dist_row(label: str, d: dict, scale: float = 1.0) -> list:
    """A table row from a distribution dict (values multiplied by scale)."""

    def s(v):
        return None if v is None else v * scale

    return [
        label,
        d["count"],
        s(d["mean"]),
        pct_cell(d, "p50", scale),
        pct_cell(d, "p90", scale),
        pct_cell(d, "p99", scale),
        pct_cell(d, "p999", scale),
        s(d["max"]),
    ]


def _ms_text(d: dict, key: str) -> str:
    v = pct_cell(d, key, 1e-3)
    return v if isinstance(v, str) else fmt(v)


def pct(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.3g}%"


def times(v: float | None) -> str:
    return "–" if v is None else f"{v:.3g}×"


def protected_warning(loss: dict) -> str | None:
    if not loss["protected_lost"]:
        return None
    text = (
        f"{loss['protected_lost']} PROTECTED packet(s) lost in {loss['protected_lost_messages']} "
        f"message(s). Protected packets must never be lost."
    )
    if loss["protected_lost_unforced"]:
        text += (
            f" {loss['protected_lost_unforced']} of them in messages that were NOT forced: the transport "
            "accepted a message with a protected hole (a transport bug)."
        )
    else:
        text += " All in forced (FORCE_STOP) messages: the retransmission rounds ran out."
    return text


def headline_lines(s: dict) -> list[str]:
    h, lb = s["headline"], s["lower_bound"]
    mct, it_ms = s["mct_us"]["overall"], s["iteration"]["iteration_ms"]
    it_text = lambda k: pct_cell(it_ms, k) if isinstance(pct_cell(it_ms, k), str) else fmt(pct_cell(it_ms, k))
    lines = [
        f"MCT p50 / p99 / p99.9 (n = {mct['count']:,} messages): {_ms_text(mct, 'p50')} / {_ms_text(mct, 'p99')} / "
        f"{_ms_text(mct, 'p999')} ms",
        f"Iteration p50 / p99 (n = {it_ms['count']:,} iterations): {it_text('p50')} / {it_text('p99')} ms "
        f"(communication share {pct(s['iteration']['comm_share'])})",
        f"Final test accuracy: {SIZES_ONLY_TEXT if s['training'].get('payload') == 'sizes' else fmt(h['final_accuracy'])}",
        f"Lost packets: {pct(h['lost_fraction'])}; forced completions (budget violations): {fmt(h['forced'])}; "
        f"protected packets lost: {fmt(h['protected_lost'])}",
    ]
    it = lb.get("iteration")
    if it:
        lines.append(
            f"Communication p50 / p99 = {times(it['p50_multiple'])} / {times(it['p99_multiple'])} the ideal "
            f"{fmt(it['ideal_comm_ms'])} ms at {fmt(lb['bottleneck_mbps'])} Mbit/s"
        )
    lines.append(scale_line(s["scale"]))
    return lines


def scale_line(sc: dict) -> str:
    if sc["warmup_iterations"]:
        warm = (
            f"the first {sc['warmup_iterations']} iteration(s) (warm-up, workload.warmup_iterations) are left out "
            "of MCT and iteration statistics"
        )
    elif sc.get("warmup_from", "config.toml") is None:
        warm = "warm-up unknown (no readable config.toml): every iteration counts"
    else:
        warm = "every iteration counts (no warm-up)"
    compute = compute_line(sc)
    if sc["dilation"] != 1:
        return (
            f"Time dilation {sc['dilation']:g}: the emulation ran {sc['dilation']:g}x slower than the system; "
            f"every time shown is measured / {sc['dilation']:g}; {compute}{warm}"
        )
    if sc.get("dilation_from", "config.toml") is None:
        return f"Time dilation unknown (neither meta.json nor config.toml records it): times are shown as measured; {compute}{warm}"
    return f"No time dilation; {compute}{warm}"


def compute_line(sc: dict) -> str:
    """What the compute times were, when they came from a profile: its name and compute scale."""
    if not sc.get("profile") and sc.get("compute_scale", 1) == 1:
        return ""
    k = sc.get("compute_scale", 1)
    scaled = f" x {k:g} (workload.compute_scale: a device {k:g}x slower)" if k != 1 else ""
    name = sc.get("profile") or "(the model's own)"
    fitted = (
        " (another model's: its compute laid over this model's tensors by parameter fraction)"
        if sc.get("profile_fitted")
        else ""
    )
    return f"compute from profile {name}{fitted}{scaled}; "


def keepup_warning(k: dict) -> str | None:
    if k["ok"]:
        return None
    findings = k.get("findings") or []
    w = max(findings, key=past_limit, default=None)
    return (
        "The emulation did not keep up, so these figures partly measure the machine"
        + (f": the worst of {len(findings)} finding(s), {finding_line(w)}" if w else "")
        + " (the table under 'Did the emulation keep up?')."
    )


def build_doc(run: RunData, s: dict, figures: bool = True) -> Doc:
    info = s["run"]
    doc = Doc(
        f"DLCP run report: {info['name']} (policy {info['policy'] or 'unknown'})"
        + (f" — PARTIAL ({info['status']})" if info["partial"] else ""),
        figures=figures,
    )
    if info["partial"]:
        how = (
            "it was killed before it could record its end (meta.json has no status: SIGKILL, or the machine "
            "stopped; or it is still running)"
            if info["status"] == UNFINISHED
            else f"it ended with status {info['status']!r} before finishing"
            + (f" ({info['error']})" if info.get("error") else "")
        )
        doc.warn(
            f"Partial run: {how}; every figure below covers only the {s['iteration']['count']} iteration(s) "
            "recorded until then."
        )
    doc.bullets(headline_lines(s))
    if s.get("jobs"):  # several jobs ([[jobs]]): each its own figures first
        _jobs_section(doc, run, s["jobs"])
    if s.get("trace"):
        doc.p(
            f"Timeline: {s['trace']['file']} (per rank the forward and backward of every layer and every "
            f"message from send to completion; per switch port queue depth and drops): {s['trace']['open']}."
        )
    warning = protected_warning(s["loss"])
    if warning:
        doc.warn(warning)
    keepup = keepup_warning(s["keep_up"])
    if keepup:
        doc.warn(keepup)
    if s["problems"]:
        doc.warn(f"{len(s['problems'])} problem(s) with the run's data; the figures below use what was readable.")
        doc.h("Missing or damaged data")
        doc.bullets(s["problems"])
    if not figures:
        doc.p(
            f"Figures not drawn: this run is one of a repeated series, whose comparison has them. "
            f"`dlcp report {run.path}` draws them."
        )

    _mct_section(doc, run, s)
    _lower_bound_section(doc, s["lower_bound"])
    _iteration_section(doc, run, s["iteration"], s["scale"])
    _loss_section(doc, s["loss"])
    _switch_section(doc, s["switch"], run)
    _training_section(doc, run, s["training"])
    _budget_section(doc, s["budget_schedule"])
    _keepup_section(doc, s["keep_up"])
    _agents_section(doc, s["agents"])
    doc.h("Run")
    doc.table(["field", "value"], [[k, "–" if v is None else str(v)] for k, v in info.items()])
    doc.p(f"Percentiles: {PERCENTILE_METHOD_TEXT}; {MIN_SAMPLES_RULE}.")
    return doc


def _keepup_section(doc: Doc, k: dict) -> None:
    doc.h("Did the emulation keep up?")
    if not k["measured"]:
        doc.p(
            "Nothing measured (no compute deadlines, switch CPU samples, port counters, switch read lags or host "
            "receive waits in this run)."
        )
        return
    doc.p(
        ("Yes: " if k["ok"] else "No: ") + f"measured {', '.join(k['measured'])} (dlcp/reporting/keepup_check.py; "
        "wall-clock figures of the emulation machine)."
    )
    if k.get("findings"):
        doc.table(FINDINGS_HEADER, findings_rows(k["findings"]))
        doc.p("In words:")
    doc.bullets(k["flags"])
    if k["compute"]:
        doc.p(
            "Compute deadlines (after warm-up): overrun = the worst lateness of each iteration, summed; it "
            "bounds how much the iterations were stretched."
        )
        doc.table(
            [
                "worker",
                "deadlines",
                "missed (> tolerance)",
                "worst late (ms)",
                "overrun (ms)",
                "of iteration time",
                "of the profile's compute time",
            ],
            [
                [
                    h,
                    c.get("deadlines"),
                    c.get("missed"),
                    c.get("late_max_ms"),
                    c.get("overrun_ms"),
                    pct(c.get("overrun_share_of_iterations")),
                    pct(c.get("overrun_share")),
                ]
                for h, c in sorted(k["compute"].items())
            ],
        )
    m = k.get("machine")
    if m:
        doc.p(
            f"The machine: {m.get('cpus')} CPUs, load average {m.get('loadavg_start')} at the start and "
            f"{m.get('loadavg_end')} at the end; all CPUs together {pct(m.get('busy'))} busy during the run, "
            f"{pct(m.get('busy_peak'))} in the busiest {m.get('window_s', 5):g} s (other work included)."
        )
    if k["switch_cpu"]:
        doc.table(
            ["switch", "CPU (s)", "wall (s)", "busy", "busiest window"],
            [
                [sw, c.get("cpu_s"), c.get("wall_s"), pct(c.get("busy")), pct(c.get("busy_peak"))]
                for sw, c in sorted(k["switch_cpu"].items())
            ],
        )
    if k["kernel_drops"]:
        doc.table(
            ["switch", "kernel drops before the switch"], [[sw, n] for sw, n in sorted(k["kernel_drops"].items())]
        )
    if k.get("switch_timing"):
        doc.p(
            "Switch timing (wall clock; percentiles at most 19 % high): how long frames waited at a switch's "
            "ports, from the kernel's arrival stamp to the switch reading them; how long after its slot on a "
            "paced link began each packet started; and the bytes of a host's earlier frames still on its link "
            "when its next frame came (more than a frame or two: the kernel delivered the host's frames in "
            "bursts)."
        )
        spread = lambda w: f"{w.get('p50_ms')} / {w.get('p99_ms')} / {w.get('max_ms')}"
        rows = []
        for sw, t in sorted(k["switch_timing"].items()):
            read, late, burst = t.get("read_lag", {}), t.get("send_late", {}), t.get("host_burst", {})
            rows.append(
                [
                    sw,
                    spread(read),
                    pct(read.get("p99_share_of_mct_p50")),
                    spread(late),
                    pct(late.get("p99_share_of_mct_p50")),
                    f"{burst.get('p99_bytes')} / {burst.get('max_bytes')}",
                ]
            )
        doc.table(
            [
                "switch",
                "read p50 / p99 / max (ms)",
                "read p99 of the median MCT",
                "late p50 / p99 / max (ms)",
                "late p99 of the median MCT",
                "host burst p99 / max (bytes)",
            ],
            rows,
        )
    if k.get("socket_wait"):
        doc.p(
            "Host receive path: how long data datagrams waited in each host's socket buffer before its "
            "transport read them (wall clock; percentiles at most 19 % high, docs/reports.md), and the "
            "receive thread's CPU time and its wait for a CPU (run queue), per wake-up."
        )
        rx = lambda w, key: (w.get("rx_thread") or {}).get(key)
        frames = lambda w: None if w.get("p99_frames") is None else round(w["p99_frames"], 3)
        doc.table(
            [
                "host",
                "datagrams",
                "p50 (ms)",
                "p99 (ms)",
                "max (ms)",
                "p99 of the median MCT",
                "p99 in full frames on its link",
                "rx thread CPU (s)",
                "run-queue wait (ms/wake-up)",
            ],
            [
                [
                    h,
                    w.get("count"),
                    w.get("p50_ms"),
                    w.get("p99_ms"),
                    w.get("max_ms"),
                    pct(w.get("p99_share_of_mct_p50")),
                    frames(w),
                    rx(w, "cpu_s"),
                    rx(w, "runqueue_ms_per_run"),
                ]
                for h, w in sorted(k["socket_wait"].items())
            ],
        )


def _jobs_section(doc: Doc, run: RunData, section: dict) -> None:
    """The run report's "Jobs" section: a table per job, the cluster's line, the phases plot."""
    c = section["cluster"]
    doc.h("Jobs")
    doc.p(
        f"{c['jobs']} jobs on one fabric. Each job's statistics are over its own workers (an iteration: its "
        "slowest worker; after its own warm-up); the switch counters in the sections below are the fabric's, "
        "shared by every job, and those sections pool every job's messages and iterations. JCT: from the job's "
        "arrival (start_s) to the end of its last iteration."
    )
    doc.p(
        f"Cluster: mean JCT {_secs(c['mean_jct_s'])} s, tail (largest) JCT {_secs(c['tail_jct_s'])} s, makespan "
        f"{_secs(c['makespan_s'])} s" + ("" if c["complete"] else " (NOT every job finished every iteration)")
    )
    doc.table(
        [
            "job",
            "priority",
            "queues",
            "workers",
            "arrival (s)",
            "shift (s)",
            "JCT (s)",
            "iterations",
            "iteration p50 (ms)",
            "iteration p99 (ms)",
            "comm share",
            "MCT p50 (ms)",
            "MCT p99 (ms)",
        ],
        [
            [
                j["name"],
                j["priority"],
                f"{j['queues'][0]}-{j['queues'][1]}",
                j["workers"],
                j["arrival_s"],
                j["shift_s"],
                j["jct_s"],
                f"{j['iterations_done']}/{j['iterations']}",
                pct_cell(j["iteration"]["iteration_ms"], "p50"),
                pct_cell(j["iteration"]["iteration_ms"], "p99"),
                pct(j["iteration"]["comm_share"]),
                _us_as_ms(pct_cell(j["mct_us"]["overall"], "p50")),
                _us_as_ms(pct_cell(j["mct_us"]["overall"], "p99")),
            ]
            for j in section["jobs"]
        ],
    )
    jobs = jobs_mod.jobs_of(run)
    doc.figure(
        lambda: _plot(jobs_mod.phases_figure(run, jobs, section["jobs"]), "job_phases", "communication phases per job")
    )


def _secs(v) -> str:
    return "–" if v is None or not math.isfinite(v) else f"{v:.4g}"


def _us_as_ms(v):
    return v if isinstance(v, str) or v is None else v / 1e3


def _plot(fig, name: str, alt: str) -> Image | None:
    return Image(f"plots/{name}.png", alt, plots.png_bytes(fig)) if fig is not None else None


def _mct_section(doc: Doc, run: RunData, s: dict) -> None:
    mct = s["mct_us"]
    doc.h("Message completion time (MCT)")
    if not mct["overall"]["count"]:
        sc = s["scale"]
        if sc["warmup_messages_left_out"]:
            doc.p(
                f"MCT unavailable: all {sc['warmup_messages_left_out']} sender-side message records are from the "
                f"warm-up (workload.warmup_iterations = {sc['warmup_iterations']}, which statistics leave out)."
            )
        else:
            doc.p("No sender-side message records: MCT unavailable.")
        return
    doc.p(
        "From the sender's first packet to STOP / FORCE_STOP, sender rows only, warm-up iterations left out. "
        "Times in ms."
    )
    header = ["group"] + [f"{h} (ms)" if h != "count" else h for h in DIST_HEADER]
    doc.table(header, [dist_row("all messages", mct["overall"], 1e-3)])
    senders = steady_sender_rows(run)
    by_prio = grouped_mct(senders, "prio")
    lb = s["lower_bound"].get("message")
    marks = {"ideal (median message)": lb["ideal_us"]["p50"] / 1e3} if lb and lb["ideal_us"]["p50"] else None
    strict = run.policy != "fifo"
    title = "CDF of MCT: all messages and by priority class " + (
        "(highest served first)" if strict else "(fifo: one queue, priority unused)"
    )
    doc.figure(
        lambda: _plot(
            plots.mct_cdf({"all": senders.col("mct_us"), **prio_groups(by_prio, strict)}, title, marks),
            "mct_cdf",
            "CDF of MCT",
        )
    )
    doc.h("By priority class (" + ("7 served first" if strict else "fifo: one queue, served in arrival order") + ")", 3)
    doc.table(["prio"] + header[1:], [dist_row(k, d, 1e-3) for k, d in mct["by_prio"].items()])
    doc.h("By phase", 3)
    doc.table(["phase"] + header[1:], [dist_row(k, d, 1e-3) for k, d in mct["by_phase"].items()])
    doc.h("By layer (0 = input side; a message spanning layers counts under its range)", 3)
    doc.figure(lambda: _plot(plots.layer_bars(mct["by_layer"]), "mct_by_layer", "p99 MCT by layer"))
    doc.table(["layer"] + header[1:], [dist_row(k, d, 1e-3) for k, d in mct["by_layer"].items()])


def prio_groups(by_prio: dict[str, _V], strict: bool) -> dict[str, _V]:
    """Legend labels of the per-priority MCT curves: under strict priority each says its turn
    ("prio 6 (served 1st)"), since a higher class is always served before a lower one."""
    ordinal = lambda n: {1: "1st", 2: "2nd", 3: "3rd"}.get(n, f"{n}th")
    keys = [k for k in by_prio if k != "?"]
    out = {}
    for k, v in by_prio.items():
        turn = f" (served {ordinal(keys.index(k) + 1)})" if strict and k in keys else ""
        out[f"prio {k}{turn}"] = v
    return out


def _lower_bound_section(doc: Doc, lb: dict) -> None:
    doc.h("Lower bound: ideal communication time")
    if lb["bottleneck_mbps"] is None:
        doc.p(f"Unavailable: {lb['rate_source']}.")
        return
    doc.p(f"Bottleneck rate {fmt(lb['bottleneck_mbps'])} Mbit/s (from {lb['rate_source']}). {lb['definition']}")
    rows = []
    msg = lb.get("message")
    ms = lambda us: None if us is None else us / 1e3
    if msg:
        rows.append(
            [
                "message (median)",
                fmt(ms(msg["ideal_us"]["p50"])),
                fmt(ms(msg["mct_p50_us"])),
                fmt(ms(msg["mct_p99_us"])),
                times(msg["slowdown"]["p50"]),
                times(msg["slowdown"]["p99"]),
            ]
        )
    it = lb.get("iteration")
    if it:
        rows.append(
            [
                "iteration communication",
                fmt(it["ideal_comm_ms"]),
                fmt(it["comm_p50_ms"]),
                fmt(it["comm_p99_ms"]),
                times(it["p50_multiple"]),
                times(it["p99_multiple"]),
            ]
        )
    doc.table(["what", "ideal (ms)", "measured p50 (ms)", "measured p99 (ms)", "p50 / ideal", "p99 / ideal"], rows)
    if msg:
        doc.p(
            "For messages the multiples are percentiles of each message's own MCT / ideal (its slowdown); "
            f"measured communication per iteration from {lb['comm_source']}."
        )


def _iteration_section(doc: Doc, run: RunData, it: dict, sc: dict) -> None:
    doc.h("Iteration time")
    if not it["count"]:
        if sc["warmup_iterations_left_out"]:
            doc.p(
                f"Iteration times unavailable: all {sc['warmup_iterations_left_out']} recorded iteration(s) are "
                f"warm-up (workload.warmup_iterations = {sc['warmup_iterations']}, which statistics leave out)."
            )
        else:
            doc.p("No iteration records.")
        return
    doc.p(
        f"{it['count']} iterations after {it['warmup_iterations']} warm-up iteration(s); {it['definition']}. "
        f"Communication share = total communication time / total "
        f"iteration time = {pct(it['comm_share'])} (communication overlaps computation, so shares may add to "
        "more than 100%)."
    )
    header = ["what"] + [f"{h} (ms)" if h != "count" else h for h in DIST_HEADER]
    doc.table(
        header,
        [
            dist_row("iteration", it["iteration_ms"]),
            dist_row("communication", it["comm_ms"]),
            dist_row("compute", it["compute_ms"]),
        ],
    )
    doc.figure(
        lambda: _plot(plots.iteration_times({run.name: iteration_series(run)}), "iteration_time", "iteration time")
    )


def _loss_section(doc: Doc, loss: dict) -> None:
    doc.h("Loss, retransmission, forced completions")
    doc.p(
        f"From {loss['rows']} rows. A forced completion is a message finished by FORCE_STOP after the "
        "retransmission rounds or the deadline ran out: a loss-budget violation."
    )
    r = loss["rounds"]
    doc.table(
        ["metric", "value"],
        [
            ["messages", loss["messages"]],
            ["packets", loss["pkts"]],
            ["lost packets", loss["lost_pkts"]],
            ["lost fraction", pct(loss["lost_fraction"])],
            ["retransmitted packets", loss["retx_pkts"]],
            ["retransmitted fraction", pct(loss["retx_fraction"])],
            ["probe rounds, mean", r["mean"]],
            ["probe rounds, max", r["max"]],
            ["messages with retransmission (rounds > 1)", r["messages_retransmitted"]],
            ["forced completions", loss["forced"]],
            ["forced fraction", pct(loss["forced_fraction"])],
            ["protected packets lost (must be 0)", loss["protected_lost"]],
            ["gradient/parameter values filled (iterations)", loss["lost_values"]],
        ],
    )
    doc.table(
        ["prio", "packets", "lost packets", "lost fraction", "forced"],
        [[k, v["pkts"], v["lost_pkts"], pct(v["lost_fraction"]), v["forced"]] for k, v in loss["by_prio"].items()],
    )


def _switch_section(doc: Doc, sw: dict, run: RunData) -> None:
    doc.h("Switch counters")
    if not sw["switches"]:
        doc.p("No switch counter dumps.")
        return
    tr = sw["traffic"]
    doc.p(
        f"Switches: {', '.join(sw['switches'])}. Packets offered to a queue are admitted, dropped early "
        "(drop precedence above its threshold) or dropped at the tail (queue full). Traffic kinds: gradient "
        "(packets with a DLCP header: data, retransmissions, probes), transport control (TCP at priority 7) "
        f"and background (the `[[background]]` flows); told apart by {tr['source_text']}."
    )
    cols = ["admitted_pkts", "early_drop_pkts", "tail_drop_pkts"]
    header = ["admitted (pkts)", "early-dropped (pkts)", "tail-dropped (pkts)", "dropped"]

    def row(label, r):
        return [label] + [r[c] for c in cols] + [pct(r["drop_fraction"])]

    doc.table(
        ["traffic"] + header,
        [row(TRAFFIC_LABELS[k], r) for k, r in tr["by_traffic"].items()] + [row("all traffic", sw["totals"])],
    )
    doc.figure(
        lambda: _plot(plots.drops_by_traffic(tr["by_traffic_drop_prec"]), "drops_by_traffic", "drops by traffic")
    )
    doc.h("Gradient packets by drop precedence (0 = protected)", 3)
    doc.table(
        ["drop precedence"] + header, [row(k, r) for k, r in tr["by_traffic_drop_prec"].get("gradient", {}).items()]
    )
    doc.h("By priority queue and traffic (7 served first)", 3)
    doc.table(
        ["priority", "traffic"] + header,
        [[q] + row(TRAFFIC_LABELS[k], r) for q, d in tr["by_prio"].items() for k, r in d.items()],
    )
    doc.h("By port and traffic", 3)
    doc.table(
        ["switch:port", "traffic"] + header,
        [[p] + row(TRAFFIC_LABELS[k], r) for p, d in tr["by_port"].items() for k, r in d.items()],
    )
    doc.h("By queue, drop precedence and traffic (non-zero counters)", 3)
    doc.table(
        ["switch:port", "priority", "drop precedence", "traffic"] + header,
        [
            [f"{r['switch']}:{r['port']}", r["qid"], r["color"]] + row(TRAFFIC_LABELS[r["traffic"]], r)
            for r in tr["by_queue"]
        ],
    )
    timeline = run_timeline(run) if doc.figures else None
    if timeline is not None:
        doc.h("Queue depth and drops over time", 3)
        doc.p(
            f"{timeline.switch} port {timeline.port}, the port with the most drops: the highest occupancy of each "
            "priority queue and the drops in each 0.1 s interval (the built-in switch's samples, "
            f"`counters/{timeline.switch}-samples.jsonl`); thin lines mark iteration ends."
        )
        doc.figure(
            lambda: _plot(plots.queue_timelines({run.name: timeline}), "queue_timeline", "queue depth and drops")
        )
    drops = {s: d for s, d in sw["drops"].items() if any(v for v in d.values())}
    if drops:
        doc.h("Pipeline drops (not queue drops)", 3)
        doc.table(["switch"] + list(next(iter(drops.values()))), [[s] + list(d.values()) for s, d in drops.items()])
    if sw["telemetry"]:
        doc.h("Queue telemetry", 3)
        rows = []
        for s, t in sw["telemetry"].items():
            dq = t.get("deq_timedelta_us") or {}
            rows.append([s, t.get("max_enq_qdepth"), dq.get("p50"), dq.get("p99"), dq.get("max")])
        doc.table(
            ["switch", "max queue depth (pkts)", "queueing p50 (us)", "queueing p99 (us)", "queueing max (us)"], rows
        )


def _budget_section(doc: Doc, bs: dict) -> None:
    """The budget schedule's changes (records/hN-budget.csv), one host's: all run the same rule."""
    if not bs["hosts"]:
        return
    doc.h("Budget schedule")
    host, rows = next(iter(bs["hosts"].items()))
    doc.p(
        f"The loss budget a schedule set (dlcp.budget_schedule; DBLP's phases), as {host} ran it; every host's "
        f"changes are in records/*-budget.csv. Iteration -1 is the start. Critical detections: "
        f"{fmt(bs['critical_share'])} of all."
    )
    doc.table(
        ["after iteration", "critical", "budget from then on", "gradient norm", "relative change"],
        [[r["iter"], "yes" if r["critical"] else "no", r["budget"], r["grad_norm"], r["change"]] for r in rows],
    )


def tta_clock(clock: str | None) -> str:
    """Which time a time-to-accuracy is in, in words."""
    return {"simulated": "simulated time", "wall": "wall clock / dilation"}.get(clock or "", "time unknown")


def _training_section(doc: Doc, run: RunData, tr: dict) -> None:
    doc.h("Training")
    if tr.get("payload") == "sizes":
        doc.p(f"Accuracy and losses: {SIZES_ONLY_TEXT}.")
        return
    if not tr["iterations"]:
        doc.p("No iteration records: no training curves.")
        return
    doc.table(
        ["metric", "value"],
        [
            ["final test accuracy", tr["final_accuracy"]],
            ["best test accuracy", tr["best_accuracy"]],
            ["final test loss", tr["final_test_loss"]],
            ["final training loss", tr["final_train_loss"]],
            ["evaluations", tr["evaluations"]],
            ["wall time of the iterations (s)", tr["wall_time_s"]],
            [
                f"time to {fmt(tr.get('target_accuracy'))} test accuracy (s, {tta_clock(tr.get('clock'))})",
                "not reached" if tr.get("time_to_accuracy_s") is None else tr["time_to_accuracy_s"],
            ],
            ["iterations to that accuracy", tr.get("iterations_to_accuracy")],
        ],
    )
    doc.figure(lambda: _plot(plots.training({run.name: training_curves(run)}), "training", "loss and accuracy"))


def _agents_section(doc: Doc, agents: dict) -> None:
    if not agents:
        return
    doc.h("Agent totals")
    keys = sorted({k for a in agents.values() for k in a})
    doc.table(["host"] + keys, [[h] + [a.get(k) for k in keys] for h, a in agents.items()])


def write_outputs(out_dir: pathlib.Path, doc: Doc, data: dict, *, json_name: str, stem: str) -> dict[str, pathlib.Path]:
    """data as json_name, the document as stem.md and stem.html, its images under plots/."""
    out_dir.mkdir(parents=True, exist_ok=True)
    images = doc.images()
    if images:
        (out_dir / "plots").mkdir(exist_ok=True)
    for img in images:
        (out_dir / img.filename).write_bytes(img.png)
    paths = {"json": out_dir / json_name, "md": out_dir / f"{stem}.md", "html": out_dir / f"{stem}.html"}
    paths["json"].write_text(json.dumps(json_ready(data), indent=1, allow_nan=False) + "\n")
    paths["md"].write_text(to_markdown(doc))
    paths["html"].write_text(to_html(doc))
    return paths


def _write_trace(run_dir: pathlib.Path, out: pathlib.Path) -> dict | None:
    """The run's timeline beside its report (dlcp/reporting/trace.py); None when the run has no
    records to draw it from."""
    from dlcp.reporting.trace import OPEN_HINT, TRACE_NAME, write_trace

    out.mkdir(parents=True, exist_ok=True)
    try:
        write_trace(run_dir, out / TRACE_NAME)
    except ValueError:
        return None
    return {"file": TRACE_NAME, "open": OPEN_HINT}


def report_run(run_dir: str | pathlib.Path, out_dir: str | pathlib.Path | None = None, figures: bool = True) -> dict:
    """Write summary.json, report.md, report.html and plots/ for one run (into the run directory
    unless out_dir is given) and return the summary. `figures=False`: no plots (a run of a repeated
    series, whose comparison draws them; drawing is most of a report's time)."""
    run = undilated(load_run(run_dir))
    summary = summarise(run)
    jobs = jobs_mod.jobs_section(run)
    if jobs is not None:
        summary["jobs"] = jobs
    out = pathlib.Path(out_dir) if out_dir is not None else run.path
    summary["trace"] = _write_trace(run.path, out)
    write_outputs(out, build_doc(run, summary, figures), summary, json_name="summary.json", stem="report")
    return json_ready(summary)
