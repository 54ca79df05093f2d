"""The P4 program against the Python contract, read from its source (no p4c needed): header widths
(dlcp/wire/header.py), constants and sizes, and every control-plane name, key, action parameter and
default action of dlcp/network/pipeline_names.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dlcp.network import pipeline_names as pn
from dlcp.wire import header as H

P4_DIR = Path(__file__).resolve().parents[1] / "p4"
SOURCES = sorted(P4_DIR.rglob("*.p4"))
TEXT = "\n".join(re.sub(r"/\*.*?\*/|//[^\n]*", "", p.read_text(), flags=re.S) for p in SOURCES)


def consts() -> dict[str, int]:
    out = {name: int(v, 0) for name, v in re.findall(r"const\s+(?:bit<\d+>|int)\s+(\w+)\s*=\s*(\w+)\s*;", TEXT)
           if re.fullmatch(r"0x[0-9a-fA-F]+|\d+", v)}
    out.update({name: int(v, 0) for name, v in re.findall(r"#define\s+(\w+)\s+(0x[0-9a-fA-F]+|\d+)", TEXT)})
    return out


def typedef_bits() -> dict[str, int]:
    return {name: int(w) for w, name in re.findall(r"typedef\s+bit<(\d+)>\s+(\w+)\s*;", TEXT)}


def header_fields(name: str) -> list[tuple[str, int]]:
    body = re.search(r"header\s+%s\s*\{(.*?)\}" % name, TEXT, re.S)
    assert body, f"header {name} not found in p4/"
    return [(f, int(w)) for w, f in re.findall(r"bit<(\d+)>\s+(\w+)\s*;", body.group(1))]


def named_blocks(kind: str) -> dict[str, str]:
    """`@name(".X") <kind> ...` -> the declaration text up to the end of its body or statement."""
    out = {}
    for m in re.finditer(r'@name\("\.([\w.]+)"\)\s*(%s)\b' % kind, TEXT):
        start = m.end()
        if kind in ("table", "action"):
            depth, i = 0, TEXT.index("{", start)
            while True:
                depth += {"{": 1, "}": -1}.get(TEXT[i], 0)
                if depth == 0:
                    break
                i += 1
            out[m.group(1)] = TEXT[start:i + 1]
        else:
            out[m.group(1)] = TEXT[start:TEXT.index(";", start)]
    return out


def all_names() -> set[str]:
    return set(re.findall(r'@name\("\.([\w.]+)"\)', TEXT))


def test_dlcp_header_mirrors_header_py():
    assert header_fields("dlcp_t") == list(H.FIELD_BITS)
    assert header_fields("dlcp_telemetry_t") == list(H.TELEMETRY_FIELD_BITS)
    assert sum(w for _, w in header_fields("dlcp_t")) == 8 * H.HEADER_LEN
    assert sum(w for _, w in header_fields("dlcp_telemetry_t")) == 8 * H.TELEMETRY_LEN


def test_standard_headers_have_their_wire_sizes():
    assert sum(w for _, w in header_fields("ethernet_t")) == 14 * 8
    assert sum(w for _, w in header_fields("ipv4_t")) == 20 * 8
    assert sum(w for _, w in header_fields("udp_t")) == 8 * 8


def test_constants_match_python():
    c = consts()
    assert c["DLCP_DATA_PORT"] == H.DATA_PORT
    assert c["DLCP_VERSION"] == H.VERSION
    assert c["DLCP_FLAG_TELEMETRY"] == H.FLAG_TELEMETRY
    assert (c["MAX_PORTS"], c["N_QUEUES"], c["N_COLORS"], c["MAX_GROUPS"]) == \
        (pn.MAX_PORTS, pn.N_QUEUES, pn.N_COLORS, pn.MAX_GROUPS)
    assert c["OCCUPANCY_SIZE"] == pn.REGISTERS[pn.OCCUPANCY] == pn.MAX_PORTS * pn.N_QUEUES
    assert c["QUEUE_COUNTER_SIZE"] == pn.COUNTERS[pn.ADMITTED]
    assert c["DROP_COUNTER_SIZE"] == pn.COUNTERS[pn.DROPS]
    assert {r: c[f"DROP_{r.upper()}"] for r in pn.DROP_REASONS} == pn.DROP_REASONS
    assert {m: c[f"LB_{m.upper()}"] for m in pn.LB_MODES} == pn.LB_MODES
    default = pn.TABLES[pn.QUEUE_THRESHOLDS]["default"][1]
    assert {k: c[f"DEFAULT_{k.upper()}"] for k in default} == default


def test_register_and_counter_sizes():
    c = consts()
    regs = named_blocks("register")
    ctrs = named_blocks("counter")
    for name, size in pn.REGISTERS.items():
        width, arg = re.match(r"<bit<(\d+)>>\((\w+)\)", regs[name].strip()).groups()
        assert c.get(arg, None) == size, name
    assert re.match(r"<bit<16>>", regs[pn.RR_NEXT].strip())
    for name, size in pn.COUNTERS.items():
        arg, kind = re.match(r"\((\w+),\s*CounterType\.(\w+)\)", ctrs[name].strip()).groups()
        assert (c[arg], kind) == (size, "packets_and_bytes"), name
    direct = named_blocks("direct_counter")
    assert set(direct) == set(pn.DIRECT_COUNTERS)
    tables = named_blocks("table")
    for counter, table in pn.DIRECT_COUNTERS.items():
        attached = re.search(r"counters\s*=\s*(\w+)", tables[table]).group(1)
        assert re.search(r'@name\("\.%s"\)\s*direct_counter\([^)]*\)\s*%s\s*;' % (re.escape(counter), attached), TEXT)


def test_every_control_plane_name_is_in_p4names_and_back():
    expected = (set(pn.TABLES) | set(pn.ACTION_PARAMS) | set(pn.REGISTERS) | set(pn.COUNTERS)
                | set(pn.DIRECT_COUNTERS))
    assert all_names() == expected


@pytest.mark.parametrize("table", sorted(pn.TABLES))
def test_table_keys_actions_and_default(table):
    body = named_blocks("table")[table]
    key_block = re.search(r"key\s*=\s*\{(.*?)\}", body, re.S)
    keys = re.findall(r":\s*(\w+)\s*@name\(\"(\w+)\"\)", key_block.group(1)) if key_block else []
    assert [(k, kind) for kind, k in keys] == list(pn.TABLES[table]["keys"])
    actions = re.search(r"actions\s*=\s*\{(.*?)\}", body, re.S).group(1)
    local = {m.group(2): m.group(1) for m in re.finditer(r'@name\("\.([\w.]+)"\)\s*action\s+(\w+)', TEXT)}
    assert [local[a] for a in re.findall(r"(\w+)\s*;", actions)] == pn.TABLES[table]["actions"]
    act, args = re.search(r"default_action\s*=\s*(\w+)\((.*?)\)\s*;", body).groups()
    want_action, want_params = pn.TABLES[table]["default"]
    assert local[act] == want_action
    c = consts()
    values = [c.get(a.strip(), None) if not a.strip().isdigit() else int(a) for a in args.split(",") if a.strip()]
    assert values == [want_params[n] for n, _ in pn.ACTION_PARAMS[want_action]]


@pytest.mark.parametrize("action", sorted(pn.ACTION_PARAMS))
def test_action_parameters(action):
    decl = re.search(r'@name\("\.%s"\)\s*action\s+\w+\((.*?)\)' % re.escape(action), TEXT, re.S)
    assert decl, action
    types = typedef_bits()
    params = []
    for p in filter(None, (s.strip() for s in decl.group(1).split(","))):
        typ, name = p.split()
        m = re.fullmatch(r"bit<(\d+)>", typ)
        params.append((name, int(m.group(1)) if m else types[typ]))
    assert params == pn.ACTION_PARAMS[action]
