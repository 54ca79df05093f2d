"""What the worker and PS agents share: config validation, transport set-up, progress, records,
and the exit protocol of docs/runs.md (one line `<role> hN: <what went wrong>` on stderr, progress
state "error", records so far, non-zero exit).
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import logging
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from dlcp import records as R
from dlcp.comm.collectives import RING_BUDGETS, CommConfig
from dlcp.transport.api import Peer, TransportConfig, TransportError
from dlcp.transport.factory import TRANSPORTS, make_transport
from dlcp.wire.control_frames import PS_RANK
from dlcp.wire.tagging import TaggingConfig

MODES = ("ps", "allreduce")
EXIT_ERROR = 1
EXIT_CONFIG = 2
EXIT_SIGNAL = 143


class ConfigError(ValueError):
    """An agent config problem, as one line naming the key."""


class Terminated(Exception):
    """SIGTERM / SIGINT from the runner."""


# --- config ---------------------------------------------------------------------------------------------

def _need(d: dict, key: str, types, where: str = ""):
    """d[key], which must exist and be of `types` (a bool is not an int here)."""
    types = types if isinstance(types, tuple) else (types,)
    name = f"{where}{key}"
    if key not in d:
        raise ConfigError(f"{name}: missing")
    v = d[key]
    if not isinstance(v, types) or (isinstance(v, bool) and bool not in types):
        raise ConfigError(f"{name}: expected {'/'.join(t.__name__ for t in types)}, got {v!r}")
    return v


def _ip(v, name: str) -> str:
    try:
        ipaddress.IPv4Address(v)
    except (ipaddress.AddressValueError, ValueError):
        raise ConfigError(f"{name}: {v!r} is not an IPv4 address") from None
    return v


def _port(v, name: str) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= 65535:
        raise ConfigError(f"{name}: {v!r} is not a port number (1..65535)")
    return v


def validate(cfg: dict, role: str) -> dict:
    """Check an agent config (docs/runs.md); raises ConfigError naming the first bad key."""
    if not isinstance(cfg, dict):
        raise ConfigError("the config is not a JSON object")
    _need(cfg, "run_dir", str)
    _need(cfg, "host", str)
    if _need(cfg, "role", str) != role:
        raise ConfigError(f"role: {cfg['role']!r}, but this is the {role} agent")
    _ip(_need(cfg, "ip", str), "ip")
    world = _need(cfg, "world", int)
    if not 1 <= world <= 254:
        raise ConfigError(f"world: {world} workers (1..254)")
    rank = _need(cfg, "rank", int)
    if role == "worker" and not 0 <= rank < world:
        raise ConfigError(f"rank: {rank} outside 0..{world - 1}")
    if role == "ps" and rank != -1:
        raise ConfigError(f"rank: the PS has rank -1, got {rank}")
    job = _need(cfg, "job_id", int)
    if not 0 <= job <= 255:
        raise ConfigError(f"job_id: {job} outside 0..255")
    mode = _need(cfg, "mode", str)
    if mode not in MODES:
        raise ConfigError(f"mode: {mode!r} is not one of {', '.join(MODES)}")
    if role == "ps" and mode != "ps":
        raise ConfigError(f"mode: {mode!r}, but a PS agent only runs in mode 'ps'")
    if mode == "ps":
        ps = _need(cfg, "ps", dict)
        _ip(_need(ps, "ip", str, "ps."), "ps.ip")
    workers = _need(cfg, "workers", list)
    if len(workers) != world:
        raise ConfigError(f"workers: {len(workers)} entries for world {world}")
    seen = set()
    for i, w in enumerate(workers):
        if not isinstance(w, dict):
            raise ConfigError(f"workers[{i}]: expected an object, got {w!r}")
        r = _need(w, "rank", int, f"workers[{i}].")
        _ip(_need(w, "ip", str, f"workers[{i}]."), f"workers[{i}].ip")
        if not 0 <= r < world or r in seen:
            raise ConfigError(f"workers[{i}].rank: {r} is outside 0..{world - 1} or repeated")
        seen.add(r)
    ports = _need(cfg, "ports", dict)
    _port(_need(ports, "data", int, "ports."), "ports.data")
    _port(_need(ports, "control", int, "ports."), "ports.control")
    _need(cfg, "workload", dict)
    _need(cfg, "dlcp", dict)
    rec = cfg.get("records", {})
    if not isinstance(rec, dict) or not isinstance(rec.get("per_packet", False), bool):
        raise ConfigError(f"records.per_packet: expected true/false, got {rec!r}")
    t = _need(cfg, "timeout_s", (int, float))
    if not t > 0:
        raise ConfigError(f"timeout_s: {t!r} must be > 0")
    it = cfg["workload"].get("iterations", 20)
    if not isinstance(it, int) or isinstance(it, bool) or it < 1:
        raise ConfigError(f"workload.iterations: must be an integer >= 1, got {it!r}")
    d = cfg["dlcp"]
    if d.get("transport", "dlcp") not in TRANSPORTS:
        raise ConfigError(f"dlcp.transport: {d.get('transport')!r} is not one of {', '.join(TRANSPORTS)}")
    if d.get("ring_budget", "protect_rs") not in RING_BUDGETS:
        raise ConfigError(f"dlcp.ring_budget: {d.get('ring_budget')!r} is not one of {', '.join(RING_BUDGETS)}")
    re = d.get("resync_every", 0)
    if not isinstance(re, int) or isinstance(re, bool) or re < 0:
        raise ConfigError(f"dlcp.resync_every: must be an integer >= 0, got {re!r}")
    lb = d.get("layer_budgets", {})
    if not isinstance(lb, dict) or not all(str(k).isdigit() for k in lb):
        raise ConfigError(f"dlcp.layer_budgets: must map layer ids to fractions, got {lb!r}")
    return cfg


def load_config(path: str, role: str) -> dict:
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror or e}") from None
    try:
        cfg = json.loads(text)
    except ValueError as e:
        raise ConfigError(f"{path} is not valid JSON: {e}") from None
    return validate(cfg, role)


def wire_rank(cfg: dict) -> int:
    return PS_RANK if cfg["role"] == "ps" else cfg["rank"]


def transport_config(cfg: dict) -> TransportConfig:
    d = cfg["dlcp"]
    keys = ("loss_budget", "iter_budget", "r_max", "deadline_ms", "reliable", "telemetry", "inject_loss",
            "send_impl", "probe_quiet_ms", "probe_rto_ms", "cc", "cc_init_window", "feedback_every",
            "host_mark_ms")
    kw = {k: d[k] for k in keys if k in d}
    kw["layer_budgets"] = dict(d.get("layer_budgets", {}))
    kw["pacing_mbps"] = d.get("pacing_mbps") or 0.0
    kw["connect_timeout_s"] = min(30.0, float(cfg["timeout_s"]))  # peers start within seconds
    try:
        return TransportConfig(rank=wire_rank(cfg), job_id=cfg["job_id"], ip=cfg["ip"],
                               data_port=cfg["ports"]["data"], control_port=cfg["ports"]["control"],
                               host=cfg["host"], per_packet=cfg.get("records", {}).get("per_packet", False),
                               inject_seed=(cfg["workload"].get("seed", 1) * 1000 + wire_rank(cfg)), **kw)
    except (TypeError, ValueError) as e:
        raise ConfigError(str(e)) from None


def comm_config(cfg: dict) -> CommConfig:
    d = cfg["dlcp"]
    try:
        tagging = TaggingConfig(d.get("policy", "dlcp"), d.get("layer_order", "input_first"),
                                d.get("drop_layer_bias", "none"))
        return CommConfig(rank=wire_rank(cfg), world=cfg["world"], job_id=cfg["job_id"], tagging=tagging,
                          loss_budget=d.get("loss_budget", 0.01), reliable=d.get("reliable", False),
                          ring_budget=d.get("ring_budget", "protect_rs"), telemetry=d.get("telemetry", False),
                          timeout_s=float(cfg["timeout_s"]))
    except (TypeError, ValueError) as e:
        raise ConfigError(str(e)) from None


def peers_of(cfg: dict) -> list[Peer]:
    data, ctl = cfg["ports"]["data"], cfg["ports"]["control"]
    peers = [Peer(w["rank"], w["ip"], data, ctl) for w in cfg["workers"] if w["rank"] != wire_rank(cfg)]
    if cfg["mode"] == "ps" and cfg["role"] != "ps":
        peers.append(Peer(PS_RANK, cfg["ps"]["ip"], data, ctl))
    return peers


# --- run state: progress, records, exit ----------------------------------------------------------------

@dataclass
class Agent:
    role: str
    cfg: dict
    transport: object = None
    iterations: int = 0
    done: int = 0
    iteration_rows: list = field(default_factory=list)
    resync_rows: list = field(default_factory=list)
    start_unix: float = field(default_factory=time.time)
    start_mono: float = field(default_factory=time.monotonic)

    @property
    def host(self) -> str:
        return self.cfg["host"]

    @property
    def run_dir(self) -> Path:
        return Path(self.cfg["run_dir"])

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
        if time.monotonic() - self.start_mono > self.cfg["timeout_s"]:
            raise TransportError(f"timeout_s = {self.cfg['timeout_s']:g} s exceeded after {self.done} iterations")

    def write_records(self, status: str, error: str | None = None) -> None:
        rec = self.run_dir / "records"
        t = self.transport
        if t is not None:
            R.write_rows(rec / f"{self.host}-messages.csv", R.MESSAGE_COLUMNS, list(t.message_rows))
            if self.cfg.get("records", {}).get("per_packet"):
                R.write_packet_arrays(rec / f"{self.host}-packets.csv", list(t.packet_chunks))
        if self.role == "worker":
            R.write_rows(rec / f"{self.host}-iterations.csv", R.ITERATION_COLUMNS, self.iteration_rows)
        if self.resync_rows:
            R.write_rows(rec / f"{self.host}-resync.csv", R.RESYNC_COLUMNS, self.resync_rows)
        end = time.time()
        totals = {"host": self.host, "role": self.role, "rank": self.cfg.get("rank"), "status": status,
                  "error": error, "iterations_done": self.done, "start_unix": self.start_unix, "end_unix": end,
                  "wall_s": end - self.start_unix}
        if t is not None:
            totals.update(t.stats())
        R.write_json(rec / f"{self.host}-agent.json", totals)


def _on_signal(signum, frame):
    raise Terminated(f"stopped by signal {signal.Signals(signum).name}")


def run_agent(role: str, body, argv: list[str] | None = None) -> int:
    """Parse --config, validate, set up logging and signals, run `body(agent)`, and always leave
    progress and records behind. Returns the exit status."""
    ap = argparse.ArgumentParser(prog=f"agents.{role}", description=f"DLCP {role} agent (docs/runs.md)")
    ap.add_argument("--config", required=True, help="agent configuration (agents/hN.json)")
    args = ap.parse_args(argv)
    try:
        cfg = load_config(args.config, role)
    except ConfigError as e:
        print(f"{role} ?: {args.config}: {e}", file=sys.stderr)
        return EXIT_CONFIG
    agent = Agent(role, cfg, iterations=cfg["workload"].get("iterations", 20))
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format=f"{role} {agent.host}: %(message)s")
    sys.setswitchinterval(0.001)  # the receive thread answers PROBEs promptly while numpy computes
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
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
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if agent.transport is not None:
            agent.transport.close()
        try:
            agent.write_records(status, error)
            agent.progress(status, error)
        except OSError as e:
            error = (error + "; " if error else "") + f"cannot write records: {e}"
            code = code or EXIT_ERROR
    if error:
        print(f"{role} {agent.host}: {error}", file=sys.stderr)
    return code


def open_transport(agent: Agent):
    cfg = agent.cfg
    agent.transport = make_transport(transport_config(cfg), peers_of(cfg), cfg["dlcp"].get("transport", "dlcp"))
    return agent.transport
