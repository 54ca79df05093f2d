"""Load and check a switch runtime file `sN-runtime.json` (format: docs/pipeline.md).

Everything is validated against `dlcp.p4names` up front, so a bad entry is one clear line naming the
file, the entry and the field, before the switch touches a port.
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass, field
from pathlib import Path

from dlcp.experiment import pipeline_names as P

KEY_BITS = {"ipv4_dst": 32, "nhop_group": 16, "nhop_member": 16, "dlcp_valid": 1, "dlcp_prio": 3,
            "dlcp_drop_prec": 2, "dscp": 6, "egress_port": 9, "qid": 3}
REGISTER_BITS = {P.OCCUPANCY: 32, P.RR_NEXT: 16}
DEFAULT_QUEUE_DEPTH = 128


class RuntimeFileError(ValueError):
    """A runtime file that cannot be loaded; the message is one line naming the problem."""


@dataclass(frozen=True)
class PortConfig:
    port: int
    intf: str
    peer: str | None = None
    rate_bps: float | None = None  # drain rate in bits/s (from rate_mbps); wins over rate_pps
    rate_pps: float | None = None
    queue_depth: int = DEFAULT_QUEUE_DEPTH  # packets per priority queue
    delay_s: float = 0.0  # one-way propagation delay added after the queue
    loss: float = 0.0  # probability that a dequeued packet is lost on the link


@dataclass(frozen=True)
class Entry:
    table: str
    action: str
    params: dict
    match: dict = field(default_factory=dict)  # key -> int | (value, prefix_len) | (value, mask)
    priority: int = 0
    default: bool = False


@dataclass(frozen=True)
class Runtime:
    switch: str
    ports: tuple[PortConfig, ...]
    entries: tuple[Entry, ...]
    registers: tuple[tuple[str, int, int], ...] = ()
    source: str = "<runtime>"


def _int_value(v, bits: int, where: str) -> int:
    """A number, a MAC string (48-bit fields) or an IPv4 string (32-bit fields) as an int."""
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


def _match(table: str, raw: dict, where: str) -> dict:
    keys = dict(P.TABLES[table]["keys"])
    if not isinstance(raw, dict):
        raise RuntimeFileError(f"{where}: match must be an object")
    unknown = sorted(set(raw) - set(keys))
    if unknown:
        raise RuntimeFileError(f"{where}: unknown match key {unknown[0]!r} (keys of {table}: {', '.join(keys)})")
    out = {}
    for key, kind in keys.items():
        bits = KEY_BITS[key]
        w = f"{where}: match.{key}"
        if key not in raw:
            if kind == "exact":
                raise RuntimeFileError(f"{w}: exact key missing")
            continue  # lpm / ternary wildcard
        v = raw[key]
        if kind == "exact":
            out[key] = _int_value(v, bits, w)
        elif kind == "lpm":
            if not (isinstance(v, list) and len(v) == 2):
                raise RuntimeFileError(f"{w}: lpm value must be [value, prefix_len]")
            plen = _int_value(v[1], 8, w + " prefix_len")
            if plen > bits:
                raise RuntimeFileError(f"{w}: prefix length {plen} > {bits}")
            mask = ((1 << bits) - 1) ^ ((1 << (bits - plen)) - 1)
            out[key] = (_int_value(v[0], bits, w) & mask, plen)
        else:  # ternary
            if isinstance(v, list):
                if len(v) != 2:
                    raise RuntimeFileError(f"{w}: ternary value must be [value, mask] or a value")
                value, mask = _int_value(v[0], bits, w), _int_value(v[1], bits, w + " mask")
            else:
                value, mask = _int_value(v, bits, w), (1 << bits) - 1
            out[key] = (value & mask, mask)
    return out


def _entry(raw: dict, where: str) -> Entry:
    if not isinstance(raw, dict):
        raise RuntimeFileError(f"{where}: must be an object")
    table = raw.get("table")
    if table not in P.TABLES:
        raise RuntimeFileError(f"{where}: unknown table {table!r} (tables: {', '.join(P.TABLES)})")
    action = raw.get("action_name")
    if action not in P.TABLES[table]["actions"]:
        raise RuntimeFileError(f"{where}: action {action!r} is not an action of {table} "
                            f"({', '.join(P.TABLES[table]['actions'])})")
    params_raw = raw.get("action_params", {}) or {}
    declared = dict(P.ACTION_PARAMS[action])
    if set(params_raw) != set(declared):
        raise RuntimeFileError(f"{where}: {action} takes parameters ({', '.join(declared) or 'none'}), "
                            f"got ({', '.join(sorted(params_raw)) or 'none'})")
    params = {k: _int_value(params_raw[k], bits, f"{where}: action_params.{k}") for k, bits in declared.items()}
    default = bool(raw.get("default_action", False))
    has_ternary = any(kind == "ternary" for _, kind in P.TABLES[table]["keys"])
    if default:
        if raw.get("match"):
            raise RuntimeFileError(f"{where}: a default_action entry takes no match")
        return Entry(table, action, params, default=True)
    if not P.TABLES[table]["keys"]:
        raise RuntimeFileError(f"{where}: {table} is keyless: set its default_action")
    priority = raw.get("priority", 0 if not has_ternary else None)
    if has_ternary and not isinstance(priority, int):
        raise RuntimeFileError(f"{where}: entries of {table} need an integer priority")
    return Entry(table, action, params, _match(table, raw.get("match", {}), where), int(priority or 0))


def _number(raw: dict, key: str, where: str, default, lo: float, hi: float = float("inf")):
    v = raw.get(key, default)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
        raise RuntimeFileError(f"{where}: {key} must be a number in [{lo}, {hi}], got {v!r}")
    return v


def _port(raw: dict, where: str) -> PortConfig:
    if not isinstance(raw, dict):
        raise RuntimeFileError(f"{where}: must be an object")
    port = raw.get("port")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port < P.MAX_PORTS:
        raise RuntimeFileError(f"{where}: port must be an integer 0..{P.MAX_PORTS - 1}, got {port!r}")
    intf = raw.get("intf")
    if not isinstance(intf, str) or not intf or len(intf) > 15:
        raise RuntimeFileError(f"{where}: intf must be an interface name (1-15 characters), got {intf!r}")
    mbps = _number(raw, "rate_mbps", where, None, 1e-6)
    pps = _number(raw, "rate_pps", where, None, 1e-6)
    depth = _number(raw, "queue_depth_pkts", where, DEFAULT_QUEUE_DEPTH, 1)
    if int(depth) != depth:
        raise RuntimeFileError(f"{where}: queue_depth_pkts must be an integer, got {depth!r}")
    return PortConfig(port=port, intf=intf, peer=raw.get("peer"),
                      rate_bps=None if mbps is None else mbps * 1e6,
                      rate_pps=None if (pps is None or mbps is not None) else float(pps),
                      queue_depth=int(depth), delay_s=_number(raw, "delay_us", where, 0, 0) / 1e6,
                      loss=_number(raw, "loss", where, 0.0, 0.0, 1.0))


def parse_runtime(doc: dict, source: str = "<runtime>") -> Runtime:
    if not isinstance(doc, dict):
        raise RuntimeFileError(f"{source}: top level must be a JSON object")
    entries = tuple(_entry(e, f"{source}: table_entries[{i}]") for i, e in enumerate(doc.get("table_entries", [])))
    ports = tuple(_port(p, f"{source}: ports[{i}]") for i, p in enumerate(doc.get("ports", [])))
    seen: dict = {}
    for i, p in enumerate(ports):
        for attr in ("port", "intf"):
            key = (attr, getattr(p, attr))
            if key in seen:
                raise RuntimeFileError(f"{source}: ports[{i}]: {attr} {key[1]!r} already used by ports[{seen[key]}]")
            seen[key] = i
    known_ports = {p.port for p in ports}
    for i, e in enumerate(entries):
        if e.table == P.NHOP and e.default and e.action != P.DROP:
            raise RuntimeFileError(f"{source}: table_entries[{i}]: the default action of {P.NHOP} must be "
                                   f"{P.DROP} (a miss is a broken group)")
        if e.action == P.SET_NHOP and e.params["port"] not in known_ports:
            raise RuntimeFileError(f"{source}: table_entries[{i}]: set_nhop to port {e.params['port']}, "
                                f"which is not in ports ({sorted(known_ports)})")
        if e.action == P.SET_NHOP_GROUP:
            if e.params["size"] < 1:
                raise RuntimeFileError(f"{source}: table_entries[{i}]: set_nhop_group size must be >= 1")
            if e.params["group"] >= P.MAX_GROUPS:
                raise RuntimeFileError(f"{source}: table_entries[{i}]: group {e.params['group']} >= {P.MAX_GROUPS}")
    registers = []
    for i, r in enumerate(doc.get("registers", []) or []):
        where = f"{source}: registers[{i}]"
        name = r.get("register") if isinstance(r, dict) else None
        if name != P.RR_NEXT:
            # occupancy is the live length of the switch's queues: writing it would desynchronise them
            raise RuntimeFileError(f"{where}: register {name!r} cannot be written (writable: {P.RR_NEXT})")
        index = _int_value(r.get("index"), 32, where + ".index")
        if index >= P.REGISTERS[name]:
            raise RuntimeFileError(f"{where}: index {index} >= size {P.REGISTERS[name]}")
        registers.append((name, index, _int_value(r.get("value"), REGISTER_BITS[name], where + ".value")))
    switch = doc.get("switch", "")
    if not isinstance(switch, str):
        raise RuntimeFileError(f"{source}: switch must be a name")
    return Runtime(switch=switch, ports=ports, entries=entries, registers=tuple(registers), source=source)


def load_runtime(path: str | Path) -> Runtime:
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except OSError as e:
        raise RuntimeFileError(f"{path}: cannot read: {e.strerror}") from None
    except ValueError as e:
        raise RuntimeFileError(f"{path}: not JSON: {e}") from None
    return parse_runtime(doc, str(path))
