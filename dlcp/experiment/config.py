"""Experiment configuration: a strict schema over TOML, `--set key=value` overrides, validation.

Everything is checked before anything starts: unknown keys, wrong types and impossible values
raise ConfigError with one line naming the key (`dlcp.loss_budget: 1.5 is above 1`). The resolved
config is a plain nested dict with every default filled in, written back as TOML into the run
directory. Reference: docs/experiments.md.
"""

from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from dlcp.wire.tagging import LAYER_BIASES, LAYER_ORDERS, POLICIES


class ConfigError(ValueError):
    """A config problem, as one line naming the key."""


@dataclass
class Field:
    type: type | tuple
    default: Any = None
    required: bool = False
    choices: tuple | None = None
    min: float | None = None
    max: float | None = None
    check: Callable[[Any], str | None] | None = None  # returns an error text or None
    doc: str = ""


@dataclass
class Section:
    fields: dict
    doc: str = ""


@dataclass
class SectionList:
    section: Section
    default: list = field(default_factory=list)
    doc: str = ""


@dataclass
class Table:
    """A free-form table of name -> value (e.g. per-layer budgets), values checked by `value`."""
    value: Field
    default: dict = field(default_factory=dict)
    doc: str = ""


FILL_POLICIES = ("zero", "rescale", "stale", "local")
LB_MODES = ("spray_random", "spray_rr", "per_flow")
BACKGROUND_KINDS = ("udp_cbr", "udp_onoff", "tcp")
TOPOLOGIES = ("star", "dumbbell", "leaf_spine")
MODELS = ("mlp", "cnn", "resnet", "synthetic")
DATASETS = ("digits", "synthetic")


def _fraction(v) -> str | None:
    return None if 0 <= v <= 1 else f"{v} is not a fraction in 0..1"


SCHEMA = Section({
    "name": Field(str, required=True, check=lambda v: None if re.fullmatch(r"[A-Za-z0-9_.-]+", v)
                  else f"{v!r} may only hold letters, digits, '_', '-', '.'", doc="experiment name"),
    "description": Field(str, "", doc="free text, copied into reports"),
    "backend": Field(str, "ref", choices=("ref", "bmv2"), doc="switch backend"),
    "seed": Field(int, 1, min=0, doc="seeds data order, model init, losses; variants share it"),
    "timeout_s": Field((int, float), 300, min=1, doc="wall-clock limit of one run"),
    "topology": Section({
        "kind": Field(str, "star", choices=TOPOLOGIES),
        "hosts": Field(int, 6, min=2, max=64, doc="star: hosts on the switch"),
        "hosts_left": Field(int, 3, min=1, max=32, doc="dumbbell: hosts on s1"),
        "hosts_right": Field(int, 3, min=1, max=32, doc="dumbbell: hosts on s2"),
        "spines": Field(int, 2, min=1, max=8, doc="leaf_spine"),
        "leaves": Field(int, 2, min=1, max=16, doc="leaf_spine"),
        "hosts_per_leaf": Field(int, 3, min=1, max=16, doc="leaf_spine"),
    }),
    "links": Section({
        "host_mbps": Field((int, float), 50, min=0.1, max=10000, doc="host <-> switch links"),
        "fabric_mbps": Field((int, float), 50, min=0.1, max=10000, doc="switch <-> switch links"),
        "queue_pkts": Field(int, 128, min=4, max=100000, doc="egress queue depth per priority"),
        "delay_us": Field(int, 0, min=0, max=1_000_000, doc="propagation delay per switch egress"),
        "loss": Field((int, float), 0.0, check=_fraction, doc="random loss per switch egress"),
        "host_queue_pkts": Field(int, 256, min=2, max=100000, doc="host NIC queue (tc) in packets"),
    }),
    "workload": Section({
        "mode": Field(str, "ps", choices=("ps", "allreduce"), doc="parameter server or ring all-reduce"),
        "workers": Field(int, 4, min=1, max=64, doc="training workers (one host each)"),
        "model": Field(str, "cnn", choices=MODELS, doc="model registry name"),
        "dataset": Field(str, "digits", choices=DATASETS, doc="scikit-learn digits, or a synthetic task"),
        "iterations": Field(int, 20, min=1, doc="training iterations per worker"),
        "batch_size": Field(int, 32, min=1, doc="per-worker batch"),
        "lr": Field((int, float), 0.05, min=0, doc="SGD learning rate"),
        "momentum": Field((int, float), 0.9, min=0, max=0.999, doc="SGD momentum (torch models)"),
        "weight_decay": Field((int, float), 0.0, min=0, doc="SGD weight decay (torch models)"),
        "eval_every": Field(int, 5, min=0, doc="0 = evaluate only at the end"),
        "bucket_values": Field(int, 0, min=0, doc="0 = one message per layer"),
        "layers": Field(list, [], doc="synthetic model: layer sizes in values (empty = LeNet-5 sizes)"),
        "compute_ms": Field((int, float), 0, min=0, doc="synthetic model: compute time per iteration"),
    }),
    "dlcp": Section({
        "policy": Field(str, "dlcp", choices=POLICIES, doc="tagging policy (fifo also makes switches FIFO)"),
        "layer_order": Field(str, "input_first", choices=LAYER_ORDERS, doc="which layers get the high priorities"),
        "drop_layer_bias": Field(str, "none", choices=LAYER_BIASES, doc="half of the layers made more droppable"),
        "load_balancing": Field(str, "spray_random", choices=LB_MODES, doc="member choice for DLCP packets"),
        "loss_budget": Field((int, float), 0.01, check=_fraction, doc="p_msg: lost fraction a message may end with"),
        "iter_budget": Field((int, float), 0.02, check=_fraction, doc="cap on the lost fraction of an iteration"),
        "layer_budgets": Table(Field((int, float), check=_fraction), doc="layer id -> budget"),
        "r_max": Field(int, 3, min=1, max=100, doc="probe/retransmission rounds before FORCE_STOP"),
        "deadline_ms": Field((int, float), 2000, min=1, doc="message deadline before FORCE_STOP"),
        "fill": Field(str, "rescale", choices=FILL_POLICIES, doc="how the trainer fills lost values"),
        "reliable": Field(bool, False, doc="budget 0: every packet recovered (TCP-like baseline)"),
        "transport": Field(str, "dlcp", choices=("dlcp", "tcp"), doc="gradient transport; tcp = plain TCP baseline"),
        "inject_loss": Field((int, float), 0.0, check=_fraction,
                             doc="fraction of data packets senders skip on purpose (loss without a lossy switch)"),
        "probe_quiet_ms": Field((int, float), 2.0, min=0.1,
                                doc="receiver's initial quiet time before answering a PROBE whose round is incomplete"),
        "probe_rto_ms": Field((int, float), 20.0, min=1, doc="floor of the sender's PROBE timeout (re-probe)"),
        "ring_budget": Field(str, "protect_rs", choices=("protect_rs", "per_step"), doc="ring all-reduce: reliable reduce-scatter, or a budget per step"),
        "resync_every": Field(int, 50, min=0, doc="ring all-reduce: replica re-sync period in iterations (0 = never)"),
        "pacing_mbps": Field((int, float), 0, min=0, doc="0 = no sender pacing"),
        "cc": Field(str, "dctcp", choices=("dctcp", "none"),
                    doc="sender congestion control: an ECN-driven window per destination, or none"),
        "cc_init_window": Field(int, 10, min=1, max=4096, doc="packets in flight before the first FEEDBACK"),
        "feedback_every": Field(int, 16, min=1, max=4096, doc="receivers report at least every this many packets"),
        "host_mark_ms": Field((int, float), 5.0, min=0,
                              doc="a packet that waited longer in its receiving host counts as CE (0 = never)"),
        "ecn_k": Field(int, 10, min=0, max=2**32 - 1,
                       doc="switches mark CE on ECN-capable packets once their queue holds this many"),
        "ecn_k_prio": Table(Field(int, min=0, max=2**32 - 1), doc="priority (queue id 0..7) -> its own ecn_k"),
        "telemetry": Field(bool, False, doc="ask switches to stamp queue telemetry into data packets"),
        "data_port": Field(int, 9910, min=1, max=65535, doc="UDP port of DLCP data"),
        "control_port": Field(int, 9911, min=1, max=65535, doc="TCP port of the control channel"),
        "qmax": Field(int, 64, min=1, doc="tail-drop threshold (packets) per port and priority"),
        "k1": Field(int, 48, min=0, doc="early-drop threshold of drop precedence 1"),
        "k2": Field(int, 32, min=0, doc="early-drop threshold of drop precedence 2"),
        "k3": Field(int, 16, min=0, doc="early-drop threshold of drop precedence 3"),
    }),
    "background": SectionList(Section({
        "kind": Field(str, "udp_onoff", choices=BACKGROUND_KINDS, doc="constant-rate UDP, on/off UDP bursts, or one long TCP flow"),
        "src": Field(str, "", doc="host name; empty = the next free host"),
        "dst": Field(str, "ps", doc="'ps', 'workerN' or a host name"),
        "rate_mbps": Field((int, float), 20, min=0.01, doc="UDP sending rate (during on-periods)"),
        "on_ms": Field((int, float), 50, min=1, doc="udp_onoff: burst length"),
        "off_ms": Field((int, float), 50, min=0, doc="udp_onoff: silence between bursts"),
        "start_s": Field((int, float), 0, min=0, doc="start this long after every worker finished its first iteration"),
        "stop_s": Field((int, float), 0, min=0, doc="0 = until the workload ends"),
        "dscp": Field(int, 0, min=0, max=63, doc="0 = background priority"),
        "packet_bytes": Field(int, 1400, min=64, max=1472, doc="UDP payload bytes"),
    })),
    "output": Section({
        "dir": Field(str, "results", doc="results root"),
        "per_packet": Field(bool, False, doc="also record one row per packet"),
        "pcap_ports": Field(list, [], doc="switch ports to capture, e.g. ['s1-eth5']"),
        "debug_log": Field(bool, False, doc="switch logging on (slower)"),
    }),
})


def _type_name(t) -> str:
    ts = t if isinstance(t, tuple) else (t,)
    if set(ts) == {int, float}:
        return "number"
    return " or ".join({int: "integer", float: "number", str: "string", bool: "boolean",
                        list: "list", dict: "table"}.get(x, x.__name__) for x in ts)


def _check_field(key: str, f: Field, v):
    types = f.type if isinstance(f.type, tuple) else (f.type,)
    # TOML booleans are not integers here, and integers are fine where floats are
    if isinstance(v, bool) and bool not in types or not isinstance(v, types):
        raise ConfigError(f"{key}: expected {_type_name(f.type)}, got {type(v).__name__} {v!r}")
    if isinstance(v, float) and not math.isfinite(v):
        raise ConfigError(f"{key}: {v} is not a finite number")
    if f.choices is not None and v not in f.choices:
        raise ConfigError(f"{key}: {v!r} is not one of {', '.join(map(str, f.choices))}")
    if f.min is not None and v < f.min:
        raise ConfigError(f"{key}: {v} is below the minimum {f.min}")
    if f.max is not None and v > f.max:
        raise ConfigError(f"{key}: {v} is above the maximum {f.max}")
    if f.check is not None and (err := f.check(v)):
        raise ConfigError(f"{key}: {err}")
    return v


def _resolve(prefix: str, spec, raw):
    if isinstance(spec, Field):
        return _check_field(prefix, spec, raw)
    if isinstance(spec, Table):
        if not isinstance(raw, dict):
            raise ConfigError(f"{prefix}: expected a table, got {type(raw).__name__}")
        return {str(k): _check_field(f"{prefix}.{k}", spec.value, v) for k, v in raw.items()}
    if isinstance(spec, SectionList):
        if not isinstance(raw, list):
            raise ConfigError(f"{prefix}: expected a list of tables ([[{prefix}]]), got {type(raw).__name__}")
        return [_resolve(f"{prefix}[{i}]", spec.section, item) for i, item in enumerate(raw)]
    if not isinstance(raw, dict):
        raise ConfigError(f"{prefix}: expected a table, got {type(raw).__name__}")
    for k in raw:
        if k not in spec.fields:
            where = f"{prefix}.{k}" if prefix else k
            raise ConfigError(f"{where}: unknown key (known: {', '.join(spec.fields)})")
    out = {}
    for k, sub in spec.fields.items():
        key = f"{prefix}.{k}" if prefix else k
        if k in raw:
            out[k] = _resolve(key, sub, raw[k])
        elif isinstance(sub, Field):
            if sub.required:
                raise ConfigError(f"{key}: required")
            out[k] = copy.deepcopy(sub.default)
        elif isinstance(sub, (Table, SectionList)):
            out[k] = copy.deepcopy(sub.default)
        else:
            out[k] = _resolve(key, sub, {})
    return out


def topology_hosts(cfg: dict) -> int:
    t = cfg["topology"]
    if t["kind"] == "star":
        return t["hosts"]
    if t["kind"] == "dumbbell":
        return t["hosts_left"] + t["hosts_right"]
    return t["leaves"] * t["hosts_per_leaf"]


def _cross_checks(cfg: dict) -> None:
    w = cfg["workload"]
    needed = w["workers"] + (1 if w["mode"] == "ps" else 0)
    hosts = topology_hosts(cfg)
    if needed > hosts:  # background sources are checked when roles are placed (topospec)
        raise ConfigError(f"workload.workers: {w['workers']} workers"
                          f"{' + 1 PS' if w['mode'] == 'ps' else ''} need {needed} hosts, "
                          f"topology.{cfg['topology']['kind']} has {hosts}")
    if w["mode"] == "allreduce" and w["workers"] < 2:
        raise ConfigError("workload.workers: ring all-reduce needs at least 2 workers")
    d = cfg["dlcp"]
    if not d["k3"] <= d["k2"] <= d["k1"] <= d["qmax"]:
        raise ConfigError(f"dlcp.k1: thresholds must satisfy k3 <= k2 <= k1 <= qmax, got "
                          f"k3={d['k3']} k2={d['k2']} k1={d['k1']} qmax={d['qmax']}")
    if d["qmax"] > cfg["links"]["queue_pkts"]:
        raise ConfigError(f"dlcp.qmax: {d['qmax']} exceeds links.queue_pkts {cfg['links']['queue_pkts']}"
                          " (the admission threshold must fit in the queue)")
    for q in d["ecn_k_prio"]:
        if not (q.isdigit() and int(q) < 8):
            raise ConfigError(f"dlcp.ecn_k_prio.{q}: not a priority 0..7")
    if d["data_port"] == d["control_port"]:
        raise ConfigError("dlcp.control_port: must differ from dlcp.data_port")
    for i, b in enumerate(cfg["background"]):
        if b["stop_s"] and b["stop_s"] <= b["start_s"]:
            raise ConfigError(f"background[{i}].stop_s: {b['stop_s']} is not after start_s {b['start_s']}")
        if b["kind"] == "udp_onoff" and b["off_ms"] == 0:
            raise ConfigError(f"background[{i}].off_ms: udp_onoff needs off_ms > 0 (use kind = 'udp_cbr')")
    if cfg["backend"] == "bmv2" and (cfg["links"]["delay_us"] or cfg["links"]["loss"]):
        raise ConfigError("links.delay_us: delay and loss emulation exist only in the built-in dataplane "
                          "(backend = 'ref'); bmv2 has no such knob")


TOPOLOGY_KEYS = {"star": ("hosts",), "dumbbell": ("hosts_left", "hosts_right"),
                 "leaf_spine": ("spines", "leaves", "hosts_per_leaf")}


def _topology_keys_fit_kind(cfg: dict, raw: dict) -> None:
    """Keys of another topology kind are mistakes, not noise: reject them, drop their defaults."""
    kind = cfg["topology"]["kind"]
    for key in [k for keys in TOPOLOGY_KEYS.values() for k in keys if k not in TOPOLOGY_KEYS[kind]]:
        if key in raw.get("topology", {}):
            raise ConfigError(f"topology.{key}: not a setting of kind {kind!r} "
                              f"(it takes {', '.join(TOPOLOGY_KEYS[kind])})")
        del cfg["topology"][key]


def validate(raw: dict) -> dict:
    """Resolve defaults and check everything; returns the resolved config."""
    cfg = _resolve("", SCHEMA, raw)
    _topology_keys_fit_kind(cfg, raw)
    _cross_checks(cfg)
    return cfg


def parse_value(text: str):
    """An override value: a TOML literal if it parses as one, else the bare string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def apply_override(raw: dict, assignment: str) -> None:
    """Apply `a.b=value` (or `background.0.rate_mbps=5`) to the raw config in place."""
    if "=" not in assignment:
        raise ConfigError(f"--set {assignment}: expected key=value")
    key, text = assignment.split("=", 1)
    parts = key.strip().split(".")
    if not all(parts):
        raise ConfigError(f"--set {assignment}: empty key part")
    node = raw
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


def load(path: str | Path, overrides: list[str] = ()) -> dict:
    """Read, override and validate an experiment config file."""
    p = Path(path)
    try:
        raw = tomllib.loads(p.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{p}: no such config file") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{p}: not valid TOML ({e})") from None
    for o in overrides:
        apply_override(raw, o)
    return validate(raw)


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
        return "{" + ", ".join(f"{_toml_key(k)} = {_toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(f"cannot write {type(v).__name__} as TOML")


def _toml_key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else _toml_value(k)


def dumps(cfg: dict) -> str:
    """The resolved config as TOML (top-level values, then one table per section)."""
    lines = [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in cfg.items() if not isinstance(v, (dict, list))
             or (isinstance(v, list) and not (v and isinstance(v[0], dict)))]
    for k, v in cfg.items():
        if isinstance(v, dict):
            lines += ["", f"[{k}]"] + [f"{_toml_key(a)} = {_toml_value(b)}" for a, b in v.items()]
        elif isinstance(v, list) and v and isinstance(v[0], dict):
            for item in v:
                lines += ["", f"[[{k}]]"] + [f"{_toml_key(a)} = {_toml_value(b)}" for a, b in item.items()]
    return "\n".join(lines) + "\n"


# --- reference documentation (docs/experiments.md is generated from the schema) -------------------

def _rows(prefix: str, spec) -> list[str]:
    rows = []
    for k, sub in spec.fields.items():
        key = f"{prefix}{k}"
        if isinstance(sub, Section):
            rows += _rows(f"{key}.", sub)
        elif isinstance(sub, SectionList):
            rows += _rows(f"{key}[].", sub.section)
        elif isinstance(sub, Table):
            rows.append(f"| `{key}` | table of {_type_name(sub.value.type)} | `{{}}` | {sub.doc} |")
        else:
            allowed = " / ".join(f"`{c}`" for c in sub.choices) if sub.choices else ""
            bounds = " ".join(x for x in (f">= {sub.min:g}" if sub.min is not None else "",
                                           f"<= {sub.max:g}" if sub.max is not None else "") if x)
            default = "required" if sub.required else f"`{_toml_value(sub.default)}`"
            what = "; ".join(x for x in (sub.doc, allowed, bounds) if x)
            rows.append(f"| `{key}` | {_type_name(sub.type)} | {default} | {what} |")
    return rows


def schema_markdown() -> str:
    """The table of every config key (kept in docs/experiments.md; a test checks it is current)."""
    return "\n".join(["| key | type | default | meaning |", "|---|---|---|---|"] + _rows("", SCHEMA)) + "\n"
