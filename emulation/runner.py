"""`dlcp run`: one experiment (or several policy variants of it) on an emulated network.

    net up -> switches (backend) with their runtime entries -> background traffic -> agents
    -> progress until every worker is done (or the wall-clock limit) -> counters, records, logs
    -> everything stopped, always: on success, on error, on SIGINT/SIGTERM.

Results go to results/<UTC time>-<name>/<variant>/ (docs/runs.md); variants of `--vary key=a,b`
(and `--policies`, which varies dlcp.policy) share the topology and seed and are compared at the end.
With `--repeat N` the variants run as interleaved pairs a1 b1 a2 b2 ... (seed + i - 1 for pair i,
the same within a pair) into <variant>/rep<i>/, and the comparison is over pairs, with confidence
intervals (docs/reports.md). With `scale.dilation` D the network and the agents run D times slower
than the config says (dlcp/experiment/dilation.py); config.toml keeps what the user wrote.
"""

from __future__ import annotations

import json
import os
import platform
import re
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from dlcp.exit_status import exit_text
from dlcp.experiment import config as configmod
from dlcp.experiment import dilation as dilationmod
from dlcp.experiment import run_inputs
from dlcp.experiment.agent_config import AgentConfig, agent_configs, write_agent_config
from dlcp.experiment.background_release import release_background
from dlcp.network import topology as topospec
from dlcp.network.switch_runtime import write_runtime
from emulation import procs
from emulation.clean import clean
from emulation.forkserver import AgentProcess, ForkServer, ForkServerError

REPO = Path(__file__).resolve().parents[1]
PROGRESS_PERIOD_S = 0.5
RELEASE_POLL_S = 0.05
AGENT_READY_S = 10.0  # the longest stop waits for a just-started background agent to take SIGTERM
NET_STOP_TIMEOUT_S = 60


class RunFailed(RuntimeError):
    """The run did not complete; the message says why in one line (plus a log tail)."""


class StopTimeout(Exception):
    """Mininet's stop did not return in time."""


def _raise_stop_timeout(signum, frame):
    raise StopTimeout()


class Terminated(BaseException):
    """SIGTERM: unwind like Ctrl-C so every `finally` runs."""


# The exception a signal handler raises is lost when the signal lands while Python runs a callback
# that cannot raise (an at-fork handler while the runner starts an agent: "Exception ignored in
# _releaseLock"); the handlers also note it here, and the wait loop raises it again.
_pending_signal: list[type[BaseException]] = []


def _raise_terminated(signum, frame):
    _pending_signal.append(Terminated)
    raise Terminated()


def _raise_interrupted(signum, frame):
    _pending_signal.append(KeyboardInterrupt)
    raise KeyboardInterrupt()


# --- run directory ---------------------------------------------------------------------------------


def utc_stamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def make_run_dir(path: Path) -> Path:
    for sub in ("runtime", "agents", "progress", "records", "counters", "logs"):
        (path / sub).mkdir(parents=True, exist_ok=True)
    return path


def git_revision() -> str | None:
    try:
        rev = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        ).stdout.strip()
        # --no-optional-locks: no index refresh, so git run as root (sudo) writes nothing into a
        # user's checkout
        dirty = subprocess.run(
            ["git", "--no-optional-locks", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (rev + ("+dirty" if dirty else "")) if rev else None


def check_backend(cfg: dict) -> dict[str, str]:
    """What the switch backend needs (bmv2: simple_switch_grpc installed, p4/dlcp.p4 compiled for
    the data port, compiling it if missing or stale), before anything starts; the tool versions.
    Raises RunFailed with the one-line reason and how to point the project at an installation."""
    from emulation.dataplane import SwitchStartError
    from emulation.switches import switch_class

    try:
        return switch_class(cfg["backend"]).toolchain(cfg["dlcp"]["data_port"])
    except SwitchStartError as e:
        raise RunFailed(f"backend {cfg['backend']}: {e}") from None


BMV2_RATE_NOTE = (
    "dlcp run: note: on bmv2 every priority queue of a port drains at the link rate on its own "
    "(docs/pipeline.md, bmv2 specifics): priorities do not share a bottleneck's rate"
)


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


def collect_meta(cfg: dict, variant: str, tools: dict[str, str]) -> dict:
    """meta.json: versions (with the backend's tools: p4c and simple_switch_grpc on bmv2), backend,
    git revision, kernel, host, start time."""

    def version(pkg):
        try:
            return metadata.version(pkg)
        except metadata.PackageNotFoundError:
            return None

    meta = {
        "name": cfg["name"],
        "variant": variant,
        "policy": cfg["dlcp"]["policy"],
        "backend": cfg["backend"],
        "versions": {**{p: version(p) for p in ("dlcp", "torch", "numpy", "scapy", "mininet")}, **tools},
        "python": platform.python_version(),
        "kernel": platform.release(),
        "hostname": platform.node(),
        "git_revision": git_revision(),
        "start_utc": datetime.now(timezone.utc).isoformat(),
    }
    return meta


def write_json(path: Path, obj) -> None:
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1))
    os.replace(tmp, path)


AGENT_NICE = -10


def agent_command(module: str, cfg_path: Path) -> list[str]:
    """The command line an agent stands for (recorded for `dlcp clean`, and how to run one by hand;
    the runner forks agents from agents/forkserver.py, asking for the same nice). Agents run at
    nice -10: they stand for machines of their own, and whatever else runs on the emulation host
    (builds, editors, other runs' reports) must not stretch their compute deadlines or delay their
    packets; on 2 cores at load 6, a nice-0 agent woke from a 4 ms compute wait ~10 ms late half
    the time. Not real-time (the switch is): a busy agent must not starve the switch or the machine."""
    return ["nice", "-n", str(AGENT_NICE), sys.executable, "-m", f"agents.{module}", "--config", str(cfg_path)]


# --- progress ------------------------------------------------------------------------------------------


def read_progress(run_dir: Path, host: str) -> dict:
    try:
        return json.loads((run_dir / "progress" / host).read_text())
    except (OSError, ValueError):
        return {}


def progress_line(done: dict[str, int], iters: int, elapsed: float, width: int = 30) -> str:
    """The plain-text progress line (logs, CI): bar, iterations overall and per worker, time."""
    total = iters * max(len(done), 1)
    frac = sum(done.values()) / total if total else 1.0
    bar = "#" * int(frac * width) + "." * (width - int(frac * width))
    per = " ".join(f"{h}:{n}" for h, n in done.items())
    return f"[{bar}] {sum(done.values())}/{total} iterations  {per}  {elapsed:5.1f}s"


class Progress:
    """Where a run is: its phase (network, switches, agents, first iteration, stopping, report) and
    then the iterations of every worker. On a terminal a live rich progress bar; elsewhere (logs, CI)
    a line per phase and a progress line every 5 s."""

    LINE_PERIOD_S = 5.0

    def __init__(self, stream=sys.stderr):
        self.stream, self.tty = stream, stream.isatty()
        self.bar = None  # rich.progress.Progress while shown
        self.task = None
        self.last_phase, self.last_time = "", 0.0
        self.t0 = time.monotonic()

    def _live(self):
        if self.bar is None:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, SpinnerColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as Bar

            self.bar = Bar(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[detail]}"),
                TimeElapsedColumn(),
                console=Console(file=self.stream),
                transient=False,
            )
            self.bar.start()
            self.task = self.bar.add_task("", total=None, detail="")
        return self.bar

    def phase(self, text: str) -> None:
        """A step without an iteration count yet (e.g. "starting the switches")."""
        if self.tty:
            self._live().update(self.task, description=text, total=None, completed=0, detail="")
        elif text != self.last_phase:
            print(f"dlcp run: {text} ({time.monotonic() - self.t0:.1f} s)", file=self.stream, flush=True)
        self.last_phase = text

    def iterations(self, done: dict[str, int], per_worker: int, started: float) -> None:
        """Training: iterations finished per worker, out of `per_worker` each."""
        total = per_worker * max(len(done), 1)
        if self.tty:
            self._live().update(
                self.task,
                description="training",
                total=total,
                completed=sum(done.values()),
                detail=" ".join(f"{h}:{n}" for h, n in done.items()),
            )
            return
        now = time.monotonic()
        if now - self.last_time >= self.LINE_PERIOD_S:
            print(progress_line(done, per_worker, now - started), file=self.stream, flush=True)
            self.last_time = now
        self.last_phase = "training"

    def done(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
        self.last_phase = ""


# --- one run -------------------------------------------------------------------------------------------


class Experiment:
    """Everything one run starts, so it can all be stopped from one place. `cfg` is the system the
    user described; `self.cfg` what the emulation runs (rates and times dilated)."""

    def __init__(self, cfg: dict, run_dir: Path, variant: str, forkserver: ForkServer):
        self.system_cfg = cfg
        self.forkserver = forkserver
        self.cfg, self.run_dir, self.variant = dilationmod.emulated(cfg), run_dir, variant
        self.spec = topospec.from_config(self.cfg)
        self.net = None
        self.shell_pids: list[int] = []
        self.background_held = False  # background senders up, waiting for release_background
        self.agents: list[tuple[str, str, AgentProcess, Path]] = []  # host, role, process, log

    def prepare(self) -> None:
        make_run_dir(self.run_dir)
        (self.run_dir / "config.toml").write_text(configmod.dumps(self.system_cfg))
        write_json(self.run_dir / "topology.json", self.spec.to_json())
        for runtime in self.spec.runtimes(self.cfg).values():
            write_runtime(runtime, self.run_dir / "runtime")

    def start_network(self) -> None:
        from emulation.network import build_network
        from emulation.switches import switch_class

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
                switch_class(self.cfg["backend"]),
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

    def release_background(self) -> None:
        """Background traffic starts once every worker finished its first iteration: by then every
        control connection is up, so a SYN lost in a full queue (a 1 s kernel timeout) cannot
        masquerade as a slow first iteration. `start_s` counts from here. The senders' processes
        are already up and waiting, so this costs them no start-up time."""
        release_background(self.run_dir, time.time())
        self.background_held = False

    def workload_agents(self):
        return [a for a in self.agents if a[1] in ("worker", "ps")]

    def wait(self, progress: Progress) -> None:
        """Until every worker and the PS exit; fails on a crash or the wall-clock limit."""
        iters = self.cfg["workload"]["iterations"]
        start = time.monotonic()
        limit = self.cfg["timeout_s"]
        while True:
            for host, role, p, log in self.agents:
                rc = p.poll()
                if rc not in (None, 0):
                    raise RunFailed(f"{role} on {host} {exit_text(rc)}; last lines of {log}:\n{procs.log_tail(log)}")
            done = {h: read_progress(self.run_dir, h).get("iter", 0) for h, r, _, _ in self.agents if r == "worker"}
            if self.background_held and min(done.values()) >= 1:
                self.release_background()
            if sum(done.values()) == 0:
                progress.phase("waiting for the first iteration (workers load the model and connect)")
            else:
                progress.iterations(done, iters, start)
            if all(p.poll() is not None for _, _, p, _ in self.workload_agents()):
                return
            if _pending_signal:  # a signal whose exception was swallowed (above)
                raise _pending_signal[-1]()
            if time.monotonic() - start > limit:
                raise RunFailed(
                    f"the run exceeded timeout_s = {limit:g} s "
                    f"(progress: {sum(done.values())}/{iters * len(done)} iterations)"
                )
            # while the background waits, look often: its release should not lag the first iteration
            time.sleep(RELEASE_POLL_S if self.background_held else PROGRESS_PERIOD_S)

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


def run_variant(
    cfg: dict,
    run_dir: Path,
    variant: str,
    progress: Progress,
    tools: dict[str, str],
    forkserver: ForkServer,
    overrides: list[str] = (),
    extra_meta: dict | None = None,
) -> None:
    """One run, start to finish; raises RunFailed (or KeyboardInterrupt/Terminated) on failure."""
    exp = Experiment(cfg, run_dir, variant, forkserver)
    exp.prepare()
    meta = {**collect_meta(cfg, variant, tools), **(extra_meta or {})}
    meta["overrides"] = list(overrides)
    write_json(run_dir / "meta.json", meta)
    t0 = time.monotonic()
    status = "error"
    sampler = None
    try:
        progress.phase(f"starting the network and {len(exp.spec.switches)} switch process(es)")
        exp.start_network()
        sampler = sample_switch_cpu(exp)
        progress.phase("starting the agents")
        exp.start_agents()
        exp.wait(progress)
        status = "ok"
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    except Terminated:
        status = "terminated"
        raise
    finally:
        progress.phase("stopping agents and switches (counters are written)")
        progress.done()
        # a second Ctrl-C must not cut the clean-up short
        old_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
        old_term = signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            if sampler is not None:
                meta["switch_cpu"] = sampler.stop()
                meta["machine"] = sampler.machine()
            exp.stop()
            report_unprocessed(run_dir)
        finally:
            clean(verbose=False, keep=frozenset({forkserver.pid}))  # anything the orderly stop missed
            meta.update(end_utc=datetime.now(timezone.utc).isoformat(), wall_s=time.monotonic() - t0, status=status)
            write_json(run_dir / "meta.json", meta)
            signal.signal(signal.SIGINT, old_int)
            signal.signal(signal.SIGTERM, old_term)


def sample_switch_cpu(exp: Experiment):
    """Start sampling the CPU time of the run's switch processes (emulation/keepup.py)."""
    from emulation.keepup import CpuSampler

    pids = {
        sw.name: sw.dataplane.pid
        for sw in exp.net.switches
        if getattr(sw, "dataplane", None) is not None and sw.dataplane.pid
    }
    return CpuSampler(pids).start()


def report_variant(run_dir: Path, figures: bool = True) -> None:
    from dlcp.reporting import report_run

    report_run(run_dir, figures=figures)


def preflight(cfg: dict) -> None:
    """What the compute and the dilation need, checked before anything starts: the profile loads
    and fits the model, dilation has something it can slow down. ConfigError naming the key."""
    from dlcp.workloads.profiled import check_workload

    try:
        check_workload(configmod.Experiment.parse(cfg).workload)
    except ValueError as e:
        raise configmod.ConfigError(str(e)) from None


def run_dir_of(results: Path, variant: str, rep: int) -> Path:
    return results / variant / f"rep{rep}" if rep else results / variant


# --- names ---------------------------------------------------------------------------------------------

SET_LABEL_CHARS = re.compile(r"[^A-Za-z0-9._=+,-]+")


def set_label(overrides: list[str]) -> str:
    """A directory-safe name from `--set` overrides: the last part of each key with its value,
    e.g. ["dlcp.load_balancing=per_flow", "seed=2"] -> "load_balancing=per_flow,seed=2"."""
    parts = []
    for item in overrides:
        key, _, value = item.partition("=")
        parts.append(f"{key.strip().rsplit('.', 1)[-1]}={value.strip().strip(chr(34) + chr(39))}")
    return SET_LABEL_CHARS.sub("_", ",".join(parts)).strip("_")[:80]


def variant_names(varied: list[str] | None, policy: str, overrides: list[str], name: str | None) -> list[str]:
    """Run directory names: one per variant of --policies / --vary (`varied`: their names from
    config.variants, None when nothing is varied). A single run is named `--name`, else by the keys
    of --set, else by its policy (never "run"); variants keep their names, "<variant>+<name>" with
    `--name` (--set applies to all of them alike, and meta.json records it)."""
    if varied:
        return [f"{v}+{name}" if name else v for v in varied]
    return [name or set_label(overrides) or policy]


def check_name(name: str | None) -> None:
    if name is not None and (not name or SET_LABEL_CHARS.search(name) or name.startswith(".")):
        raise configmod.ConfigError(f"--name {name!r}: use letters, digits and . _ = + , - only")


def write_partial_report(run_dir: Path, progress: Progress) -> Path | None:
    """The report of a run stopped early (Ctrl-C, SIGTERM): what was recorded, marked partial
    (meta.json status). None if even that fails; the records stay either way."""
    progress.phase("writing the partial report")
    progress.done()
    try:
        report_variant(run_dir)
    except Exception as e:  # noqa: BLE001 (a report of a half-written run must not hide the interruption)
        print(f"dlcp run: the partial report could not be written: {e}", file=sys.stderr)
        return None
    return run_dir / "report.html"


def interrupted_message(run_dir: Path, report: Path | None, status: str) -> str:
    what = "interrupted (Ctrl-C)" if status == "interrupted" else "terminated (SIGTERM)"
    lines = [
        f"dlcp run: {what}; everything it started was stopped and cleaned up",
        f"  partial run: {run_dir} ({iterations_done(run_dir)})",
    ]
    if report is not None:
        lines.append(f"  partial report: {report}")
    return "\n".join(lines)


def iterations_done(run_dir: Path) -> str:
    """ "k of n iterations" from the agents' progress files (the slowest agent)."""
    done, total = [], None
    for path in sorted((run_dir / "progress").glob("*")):
        try:
            state = json.loads(path.read_text().strip().splitlines()[-1])
        except (OSError, ValueError, IndexError):
            continue
        if isinstance(state, dict) and "iter" in state:
            done.append(int(state["iter"]))
            total = state.get("iters", total)
    if not done:
        return "no iteration finished"
    return f"{min(done)} of {total if total is not None else '?'} iterations"


def run(
    config_path: str,
    overrides: list[str],
    policies: list[str] | None,
    out_root: str | None = None,
    with_report: bool = True,
    vary: list[str] = (),
    run_dir: str | None = None,
    repeat: int = 1,
    name: str | None = None,
) -> Path:
    """Run an experiment, one variant per combination of `--vary` values (`--policies P1,P2` is
    `--vary dlcp.policy=P1,P2`), `repeat` interleaved pairs; returns the results directory.
    `run_dir`: the one variant's directory itself (dlcp sweep), instead of OUT/<UTC time>-NAME/<variant>."""
    check_name(name)
    raw = configmod.load_raw(config_path, overrides)
    base = configmod.validate(raw)
    varies = ([f"dlcp.policy={','.join(policies)}"] if policies else []) + list(vary)
    variants = configmod.variants(raw, varies)
    names = variant_names([n for n, _ in variants] if varies else None, base["dlcp"]["policy"], overrides, name)
    runs = configmod.plan_runs([(n, cfg) for n, (_, cfg) in zip(names, variants)], repeat)
    if run_dir and len(runs) > 1:
        raise configmod.ConfigError("--run-dir: takes one run, not --policies / --vary / --repeat with several")
    # roles and background placement, compute and dilation, and the backend's tools, are checked
    # before anything starts
    for _, _, cfg in runs:
        topospec.from_config(dilationmod.emulated(cfg))
    run_inputs.check_run_inputs([cfg for _, _, cfg in runs], out_root, run_dir)
    preflight(base)
    tools = check_backend(base)
    if os.geteuid() != 0:
        raise SystemExit("dlcp run: needs root (Mininet network namespaces); run: sudo dlcp run ...")
    if base["backend"] == "bmv2":
        print(BMV2_RATE_NOTE, file=sys.stderr)
    results = Path(out_root or base["output"]["dir"]) / f"{utc_stamp()}-{base['name']}"
    if run_dir:
        results = Path(run_dir)
    created = [p for p in [results, *results.parents] if not p.exists()]  # handed over under sudo
    progress = Progress()
    signal.signal(signal.SIGTERM, _raise_terminated)
    # a shell starting us in the background may have set SIGINT to "ignore": Ctrl-C / kill -INT
    # must still stop the run cleanly
    signal.signal(signal.SIGINT, _raise_interrupted)
    _pending_signal.clear()
    forkserver = None
    try:
        progress.phase("loading the agents' modules (torch) once for every run")
        forkserver = ForkServer(results / "logs" / "forkserver.log")
        for i, (variant, rep, cfg) in enumerate(runs):
            vdir = Path(run_dir) if run_dir else run_dir_of(results, variant, rep)
            label = f"{variant} rep {rep}, seed {cfg['seed']}" if rep else variant
            print(f"dlcp run: {base['name']} [{label}] ({i + 1}/{len(runs)}) -> {vdir}", file=sys.stderr)
            try:
                run_variant(
                    cfg,
                    vdir,
                    variant,
                    progress,
                    tools,
                    forkserver,
                    overrides,
                    extra_meta={"repeat": rep, "seed": cfg["seed"], "dilation": dilationmod.dilation(cfg)},
                )
            except (KeyboardInterrupt, Terminated) as e:
                _pending_signal.clear()  # handled: it stops the series here
                stop_by_signal(vdir, progress, with_report, e)
            if with_report:
                progress.phase("writing the report")
                progress.done()
                report_variant(vdir, figures=repeat == 1)  # a series' figures are in its comparison
        ran = list(dict.fromkeys(v for v, _, _ in runs))
        if with_report and len(ran) > 1:
            from dlcp.reporting import compare_runs

            compare_runs([results / v for v in ran], results, echo=True)
    finally:
        if forkserver is not None:
            forkserver.close()
        hand_over_to_sudo_user(results, created)
    return results


def stop_by_signal(run_dir: Path, progress: Progress, with_report: bool, exc: BaseException) -> None:
    """After Ctrl-C or SIGTERM stopped a variant: its partial report (when reports are on), where
    the partial run and report are, then the same exception again."""
    status = "terminated" if isinstance(exc, Terminated) else "interrupted"
    signal.signal(signal.SIGTERM, _raise_terminated)  # a second signal stops the report, too
    report = write_partial_report(run_dir, progress) if with_report else None
    print(interrupted_message(run_dir, report, status), file=sys.stderr)
    raise exc


def hand_over_to_sudo_user(path: Path, created: list[Path]) -> None:
    """Under sudo, give what the run wrote (results, reports, and the directories above them it
    created) to the user who ran sudo, so a run started as `sudo dlcp run` (or by `make demo` as a
    normal user) leaves nothing root-owned."""
    uid, gid = os.environ.get("SUDO_UID"), os.environ.get("SUDO_GID")
    if os.geteuid() != 0 or not uid or not gid or uid == "0" or not path.exists():
        return
    for p in [*created, *path.rglob("*")]:
        try:
            os.chown(p, int(uid), int(gid), follow_symlinks=False)
        except OSError:
            pass


def main(args) -> int:
    policies = [p.strip() for p in args.policies.split(",") if p.strip()] if args.policies else None
    try:
        results = run(
            args.config,
            args.set or [],
            policies,
            args.out,
            with_report=not args.no_report,
            vary=args.vary or [],
            run_dir=getattr(args, "run_dir", None),
            repeat=getattr(args, "repeat", 1),
            name=getattr(args, "name", None),
        )
    except configmod.ConfigError as e:
        print(f"dlcp run: {e}", file=sys.stderr)
        return 2
    except (RunFailed, ForkServerError) as e:  # the fork server fails at start or while forking an agent
        print(f"dlcp run: failed: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 128 + signal.SIGINT
    except Terminated:
        return 128 + signal.SIGTERM
    print(f"dlcp run: results in {results}")
    for report in (
        sorted(results.glob("*/report.html"))
        + sorted(results.glob("*/rep*/report.html"))
        + sorted(results.glob("compare.html"))
    ):
        print(f"  {report}")
    return 0
