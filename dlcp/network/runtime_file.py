"""Read and check a switch runtime file `sN-runtime.json` (format: docs/pipeline.md) into typed
objects: the one reader both switch backends (the built-in switch, the bmv2 control plane) and
`switch_runtime.runtime_for` use.

Everything is checked against the pipeline definition (`pipeline_names.PIPELINE`) up front, so a bad
entry is one line naming the file, the entry and the field before a switch touches a port. Values
come out normalised: numbers (a MAC or IPv4 string where the field is an address), lpm matches as
(value, prefix_len) with the host bits cleared, ternary matches as (value, mask).
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dlcp.backends as backends
from dlcp.network.pipeline_names import (
    PIPELINE,
    QUEUE_THRESHOLDS,
    SET_NHOP,
    SET_NHOP_GROUP,
    SET_THRESHOLDS,
    PipelineSpec,
    Table,
)
from dlcp.queueing.registry import QueueingConfig, QueueingError, configure, from_doc

DEFAULT_QUEUE_DEPTH_PKTS = 128  # per priority queue, when a port does not say
TARGETS = backends.names()  # a runtime file is written for the switches of one backend
DEFAULT_P4INFO = "build/p4/dlcp.p4info.txtpb"
DEFAULT_BMV2_JSON = "build/p4/dlcp.json"
MAX_INTF_NAME = 15  # Linux IFNAMSIZ - 1


class RuntimeFileError(ValueError):
    """A runtime file (or dict) that cannot be used; the message is one line naming the problem."""


@dataclass(frozen=True)
class PortConfig:
    port: int
    intf: str
    peer: str | None = None
    rate_mbps: float | None = None  # drain rate in Mbit/s of frames, or
    rate_pps: float | None = None  # in packets/s (never both); neither: line rate
    queue_depth_pkts: int | None = DEFAULT_QUEUE_DEPTH_PKTS  # per priority queue; None: the target's
    delay_us: float = 0.0  # one-way propagation delay after the queue (built-in switch only)
    loss: float = 0.0  # probability that a dequeued packet is lost on the link (built-in switch only)
    # the peer is a host whose NIC shaper lets a frame go when its slot starts: the built-in switch
    # adds the frame's transmission time at this port's rate, as the host's link would (store and forward)
    host_nic: bool = False
    # which queue sends next (dlcp/queueing); the runtime row `queueing`, missing: strict priority
    queueing: QueueingConfig = field(default_factory=lambda: configure("strict"))

    @property
    def rate_bps(self) -> float | None:
        return None if self.rate_mbps is None else self.rate_mbps * 1e6


@dataclass(frozen=True)
class Entry:
    table: str
    action: str
    params: Mapping[str, int]
    match: Mapping[str, Any] = field(default_factory=dict)  # key -> int | (value, prefix_len) | (value, mask)
    priority: int = 0
    default: bool = False


@dataclass(frozen=True)
class RegisterWrite:
    register: str
    index: int
    value: int


@dataclass(frozen=True)
class Runtime:
    switch: str
    device_id: int
    ports: tuple[PortConfig, ...]
    entries: tuple[Entry, ...]
    registers: tuple[RegisterWrite, ...] = ()
    target: str = backends.RUNTIME_DEFAULT_TARGET
    p4info: str = DEFAULT_P4INFO
    bmv2_json: str = DEFAULT_BMV2_JSON
    source: str = "<runtime>"


# --- values ----------------------------------------------------------------------------------------


def int_value(v: Any, bits: int, where: str) -> int:
    """A number, a MAC string (48-bit fields) or an IPv4 string (32-bit fields) as an int that fits."""
    if isinstance(v, bool):
        raise RuntimeFileError(f"{where}: expected a number, got {v!r}")
    if isinstance(v, int):
        out = v
    elif isinstance(v, str) and bits == 48 and v.count(":") == 5:
        try:
            out = int(v.replace(":", ""), 16)
        except ValueError:
            raise RuntimeFileError(f"{where}: bad MAC address {v!r}") from None
    elif isinstance(v, str) and bits == 32 and v.count(".") == 3:
        try:
            out = int(ipaddress.IPv4Address(v))
        except ValueError:
            raise RuntimeFileError(f"{where}: bad IPv4 address {v!r}") from None
    elif isinstance(v, str):
        try:
            out = int(v, 0)
        except ValueError:
            raise RuntimeFileError(f"{where}: expected a number, got {v!r}") from None
    else:
        raise RuntimeFileError(f"{where}: expected a number, got {v!r}")
    if not 0 <= out < (1 << bits):
        raise RuntimeFileError(f"{where}: {v!r} does not fit in {bits} bits")
    return out


def _number(raw: Mapping, key: str, where: str, default, lo: float, hi: float = float("inf"), *, above: bool = False):
    v = raw.get(key, default)
    if v is None:
        return None
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and (lo < v if above else lo <= v) and v <= hi
    if not ok:
        bound = f"> {lo}" if above else f"in [{lo}, {hi}]"
        raise RuntimeFileError(f"{where}: {key} must be a number {bound}, got {v!r}")
    return v


# --- table entries ---------------------------------------------------------------------------------


def _match(table: Table, raw: Any, where: str) -> dict:
    if not isinstance(raw, dict):
        raise RuntimeFileError(f"{where}: match must be an object")
    keys = {k.name: k for k in table.keys}
    unknown = sorted(set(raw) - set(keys))
    if unknown:
        raise RuntimeFileError(f"{where}: unknown match key {unknown[0]!r} (keys of {table.name}: {', '.join(keys)})")
    out: dict[str, int | tuple[int, int]] = {}
    for key in table.keys:
        w = f"{where}: match.{key.name}"
        if key.name not in raw:
            if key.match == "exact":
                raise RuntimeFileError(f"{w}: exact key missing")
            continue  # lpm / ternary wildcard
        v, bits = raw[key.name], key.bits
        if key.match == "exact":
            out[key.name] = int_value(v, bits, w)
        elif key.match == "lpm":
            if not (isinstance(v, list) and len(v) == 2):
                raise RuntimeFileError(f"{w}: lpm value must be [value, prefix_len]")
            plen = int_value(v[1], 8, w + " prefix_len")
            if plen > bits:
                raise RuntimeFileError(f"{w}: prefix length {plen} > {bits}")
            mask = ((1 << bits) - 1) ^ ((1 << (bits - plen)) - 1)
            out[key.name] = (int_value(v[0], bits, w) & mask, plen)
        else:  # ternary
            if isinstance(v, list):
                if len(v) != 2:
                    raise RuntimeFileError(f"{w}: ternary value must be [value, mask] or a value")
                value, mask = int_value(v[0], bits, w), int_value(v[1], bits, w + " mask")
            else:
                value, mask = int_value(v, bits, w), (1 << bits) - 1
            out[key.name] = (value & mask, mask)
    return out


def _entry(raw: Any, where: str, spec: PipelineSpec) -> Entry:
    if not isinstance(raw, dict):
        raise RuntimeFileError(f"{where}: must be an object")
    name = raw.get("table")
    table = spec.table.get(name) if isinstance(name, str) else None  # a list or a table: no such table
    if table is None:
        raise RuntimeFileError(f"{where}: unknown table {raw.get('table')!r} (tables: {', '.join(spec.table)})")
    action = raw.get("action_name")
    if action not in table.actions:
        raise RuntimeFileError(
            f"{where}: action {action!r} is not an action of {table.name} ({', '.join(table.actions)})"
        )
    params_raw = raw.get("action_params", {}) or {}
    declared = spec.action[action].params
    if not isinstance(params_raw, dict) or set(params_raw) != {p.name for p in declared}:
        raise RuntimeFileError(
            f"{where}: {action} takes parameters ({', '.join(p.name for p in declared) or 'none'}), "
            f"got ({', '.join(sorted(params_raw)) or 'none'})"
        )
    params = {p.name: int_value(params_raw[p.name], p.bits, f"{where}: action_params.{p.name}") for p in declared}
    if raw.get("default_action", False):
        if raw.get("match"):
            raise RuntimeFileError(f"{where}: a default_action entry takes no match")
        if table.const_default:
            raise RuntimeFileError(
                f"{where}: the default action of {table.name} is fixed by the P4 program ({table.default_action})"
            )
        return Entry(table.name, action, params, default=True)
    if not table.keys:
        raise RuntimeFileError(f"{where}: {table.name} is keyless: set its default_action")
    match = _match(table, raw.get("match", {}), where)
    if not match:
        raise RuntimeFileError(
            f"{where}: an entry of {table.name} needs a match (keys: {', '.join(k.name for k in table.keys)})"
        )
    priority = raw.get("priority", None if table.has_ternary else 0)
    if table.has_ternary and (not isinstance(priority, int) or isinstance(priority, bool) or priority < 1):
        raise RuntimeFileError(f"{where}: entries of {table.name} need an integer priority >= 1")
    return Entry(table.name, action, params, match, int(priority or 0))


def _check_entries(
    entries: tuple[Entry, ...], ports: dict[int, PortConfig], target: str, source: str, spec: PipelineSpec
) -> None:
    """What needs more than one entry, or the ports: duplicates, next hops, thresholds vs queue depth."""
    seen: dict = {}
    qmax: dict[int | None, int] = {None: spec.table[QUEUE_THRESHOLDS].default_params["qmax"]}
    must_exceed = backends.capabilities(target).queue_must_exceed_qmax
    for i, e in enumerate(entries):
        where = f"{source}: table_entries[{i}]"
        key = (e.table, e.default, tuple(sorted(e.match.items())), e.priority)
        if key in seen:
            what = "default action" if e.default else f"match {dict(e.match)}"
            raise RuntimeFileError(f"{where}: {e.table} {what} already set by table_entries[{seen[key]}]")
        seen[key] = i
        if e.action == SET_NHOP and e.params["port"] not in ports:
            raise RuntimeFileError(
                f"{where}: set_nhop to port {e.params['port']}, which is not in ports ({sorted(ports)})"
            )
        if e.action == SET_NHOP_GROUP:
            if e.params["size"] < 1:
                raise RuntimeFileError(f"{where}: set_nhop_group size must be >= 1")
            if e.params["group"] >= spec.max_groups:
                raise RuntimeFileError(f"{where}: group {e.params['group']} >= {spec.max_groups}")
        if e.action == SET_THRESHOLDS:
            p = e.params
            if not 0 <= p["k3"] <= p["k2"] <= p["k1"] <= p["qmax"] or p["qmax"] < 1:
                raise RuntimeFileError(
                    f"{where}: need 0 <= k3 <= k2 <= k1 <= qmax and qmax >= 1, got "
                    f"qmax={p['qmax']} k1={p['k1']} k2={p['k2']} k3={p['k3']}"
                )
            qmax[None if e.default else e.match["egress_port"]] = p["qmax"]
    for i, cfg in enumerate(ports.values()):
        why = cfg.queueing.refusal(target)
        if why:
            raise RuntimeFileError(
                f"{source}: ports[{i}]: queueing {cfg.queueing.name!r} cannot run on {target}: {why}"
            )
        limit = qmax.get(cfg.port, qmax[None])
        if must_exceed and cfg.queue_depth_pkts is not None and cfg.queue_depth_pkts <= limit:
            # bmv2's own queue would drop before admission control does, and its occupancy register
            # would never get those packets back (the built-in switch gives them back and counts
            # them as queue_overflow_pkts)
            raise RuntimeFileError(
                f"{source}: ports[{i}]: queue_depth_pkts {cfg.queue_depth_pkts} must exceed qmax {limit}"
            )


# --- ports and registers ---------------------------------------------------------------------------


def _port(raw: Any, where: str, spec: PipelineSpec) -> PortConfig:
    if not isinstance(raw, dict):
        raise RuntimeFileError(f"{where}: must be an object")
    port = raw.get("port")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < spec.max_ports:
        raise RuntimeFileError(f"{where}: port must be an integer 1..{spec.max_ports - 1}, got {port!r}")
    intf = raw.get("intf")
    if not isinstance(intf, str) or not 0 < len(intf) <= MAX_INTF_NAME:
        raise RuntimeFileError(f"{where}: intf must be an interface name (1-{MAX_INTF_NAME} characters), got {intf!r}")
    peer = raw.get("peer")
    if peer is not None and not isinstance(peer, str):
        raise RuntimeFileError(f"{where}: peer must be a node name, got {peer!r}")
    mbps = _number(raw, "rate_mbps", where, None, 0, above=True)
    pps = _number(raw, "rate_pps", where, None, 0, above=True)
    if mbps is not None and pps is not None:
        raise RuntimeFileError(f"{where}: rate_mbps and rate_pps are alternatives: give one")
    depth = _number(raw, "queue_depth_pkts", where, DEFAULT_QUEUE_DEPTH_PKTS, 1)
    if depth is not None and int(depth) != depth:
        raise RuntimeFileError(f"{where}: queue_depth_pkts must be an integer, got {depth!r}")
    host_nic = raw.get("host_nic", False)
    if not isinstance(host_nic, bool):
        raise RuntimeFileError(f"{where}: host_nic must be true or false, got {host_nic!r}")
    try:
        queueing = from_doc(raw.get("queueing"))
    except QueueingError as e:
        raise RuntimeFileError(f"{where}: queueing: {e}") from None
    return PortConfig(
        port=port,
        intf=intf,
        peer=peer,
        rate_mbps=mbps,
        rate_pps=pps,
        queue_depth_pkts=None if depth is None else int(depth),
        delay_us=_number(raw, "delay_us", where, 0, 0),
        loss=_number(raw, "loss", where, 0.0, 0.0, 1.0),
        host_nic=host_nic,
        queueing=queueing,
    )


def _register(raw: Any, where: str, spec: PipelineSpec) -> RegisterWrite:
    name = raw.get("register") if isinstance(raw, dict) else None
    reg = spec.register.get(name) if isinstance(name, str) else None  # a list or a table: no such register
    if reg is None or not reg.writable:
        # occupancy is the live length of the switch's queues: writing it would desynchronise them
        writable = ", ".join(r.name for r in spec.registers if r.writable)
        raise RuntimeFileError(f"{where}: register {name!r} cannot be written (writable: {writable})")
    index = int_value(raw.get("index"), 32, where + ".index")
    if index >= reg.size:
        raise RuntimeFileError(f"{where}: index {index} >= size {reg.size}")
    return RegisterWrite(reg.name, index, int_value(raw.get("value"), reg.bits, where + ".value"))


# --- the file --------------------------------------------------------------------------------------


def _list(doc: Mapping, key: str, source: str) -> list:
    v = doc.get(key)
    if not isinstance(v, list):
        raise RuntimeFileError(f"{source}: key {key!r} missing or not a list")
    return v


def parse_runtime(doc: Any, source: str = "<runtime>", spec: PipelineSpec = PIPELINE) -> Runtime:
    """Check a runtime document (the parsed JSON) against `spec`; raises RuntimeFileError naming the
    first problem."""
    if not isinstance(doc, dict):
        raise RuntimeFileError(f"{source}: top level must be a JSON object")
    switch, device_id = doc.get("switch"), doc.get("device_id")
    if not isinstance(switch, str) or not switch:
        raise RuntimeFileError(f"{source}: key 'switch' missing or not a name")
    if isinstance(device_id, bool) or not isinstance(device_id, int) or not 0 <= device_id < 1 << 16:
        raise RuntimeFileError(f"{source}: key 'device_id' missing or not an integer 0..65535")
    target = doc.get("target", backends.RUNTIME_DEFAULT_TARGET)
    if target not in TARGETS:
        raise RuntimeFileError(f"{source}: unknown target {backends.unknown_backend(target)}")
    for key in ("p4info", "bmv2_json"):
        if not isinstance(doc.get(key, ""), str):
            raise RuntimeFileError(f"{source}: {key} must be a path")
    ports: dict[int, PortConfig] = {}
    intfs: dict[str, int] = {}
    for i, raw in enumerate(_list(doc, "ports", source)):
        p = _port(raw, f"{source}: ports[{i}]", spec)
        for attr, seen in (("port", ports), ("intf", intfs)):
            if getattr(p, attr) in seen:
                raise RuntimeFileError(f"{source}: ports[{i}]: {attr} {getattr(p, attr)!r} already used")
        ports[p.port], intfs[p.intf] = p, i
    entries = tuple(
        _entry(e, f"{source}: table_entries[{i}]", spec) for i, e in enumerate(_list(doc, "table_entries", source))
    )
    _check_entries(entries, ports, target, source, spec)
    registers = tuple(
        _register(r, f"{source}: registers[{i}]", spec) for i, r in enumerate(_list(doc, "registers", source))
    )
    return Runtime(
        switch=switch,
        device_id=device_id,
        ports=tuple(ports.values()),
        entries=entries,
        registers=registers,
        target=target,
        p4info=doc.get("p4info", DEFAULT_P4INFO),
        bmv2_json=doc.get("bmv2_json", DEFAULT_BMV2_JSON),
        source=source,
    )


def load_runtime(path: str | Path, spec: PipelineSpec = PIPELINE) -> Runtime:
    """Read and check `sN-runtime.json`."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except OSError as e:
        raise RuntimeFileError(f"{path}: cannot read: {e.strerror}") from None
    except ValueError as e:
        raise RuntimeFileError(f"{path}: not JSON: {e}") from None
    return parse_runtime(doc, str(path), spec)
