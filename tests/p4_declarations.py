"""Names the P4 program declares, from its P4Info (text format) or, without p4c, from its source.

Both give {"tables": {name: {"keys": [(name, kind)], "actions": [names]}}, "actions": {name: [(param,
bits)]}, "counters": set, "direct_counters": set, "registers": set}, with fully qualified names as
P4Info spells them: `Control.local`, `Control.instance.local` for a table of a sub-control
instance, `@name("x")` replacing the local part and `@name(".x")` the whole name.
"""

from __future__ import annotations

import re
from pathlib import Path

# --- P4Info text format --------------------------------------------------------------------------

_TOKEN = re.compile(r'\s*(?:(#[^\n]*)|([A-Za-z_][\w.]*)|("(?:[^"\\]|\\.)*")|(-?[\w.]+)|([{}:<>]))')


def parse_txtpb(text: str) -> dict:
    """A protobuf text message as {field: [values]} (nested messages are dicts)."""
    tokens = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            break
        pos = m.end()
        if m.group(1):
            continue
        tokens.append(m.group(0).strip())

    def message(i: int, end: str | None) -> tuple[dict, int]:
        out: dict = {}
        while i < len(tokens) and tokens[i] != end:
            name = tokens[i]
            i += 1
            if tokens[i] == ":":
                i += 1
            if tokens[i] in ("{", "<"):
                value, i = message(i + 1, "}" if tokens[i] == "{" else ">")
                i += 1
            else:
                value = tokens[i].strip('"') if tokens[i].startswith('"') else tokens[i]
                i += 1
            out.setdefault(name, []).append(value)
        return out, i

    return message(0, None)[0]


def from_p4info(text: str) -> dict:
    info = parse_txtpb(text)
    actions_by_id = {a["preamble"][0]["id"][0]: a["preamble"][0]["name"][0] for a in info.get("actions", [])}
    out = {"tables": {}, "actions": {}, "counters": set(), "direct_counters": set(), "registers": set()}
    for a in info.get("actions", []):
        params = [(p["name"][0], int(p["bitwidth"][0])) for p in a.get("params", [])]
        out["actions"][a["preamble"][0]["name"][0]] = params
    for t in info.get("tables", []):
        keys = [(f["name"][0], f["match_type"][0].lower()) for f in t.get("match_fields", [])]
        acts = [actions_by_id[r["id"][0]] for r in t.get("action_refs", [])]
        out["tables"][t["preamble"][0]["name"][0]] = {"keys": keys, "actions": acts}
    for kind, field in (("counters", "counters"), ("direct_counters", "direct_counters"), ("registers", "registers")):
        out[kind] = {c["preamble"][0]["name"][0] for c in info.get(field, [])}
    return out


# --- P4_16 source ------------------------------------------------------------------------------------

_NAME = r'(?:@name\(\s*"([^"]+)"\s*\)\s*)?'


def _strip(src: str) -> str:
    src = re.sub(r"/\*.*?\*/", " ", src, flags=re.S)
    src = re.sub(r"//[^\n]*", " ", src)
    return re.sub(r"^\s*#[^\n]*", " ", src, flags=re.M)


def _block(src: str, open_at: int) -> tuple[str, int]:
    """The text inside the braces that open at `open_at`, and the index after the closing one."""
    depth = 0
    for i in range(open_at, len(src)):
        if src[i] == "{":
            depth += 1
        elif src[i] == "}":
            depth -= 1
            if depth == 0:
                return src[open_at + 1:i], i + 1
    raise ValueError("unbalanced braces in the P4 source")


def _qualify(prefix: str, local: str, annotated: str | None) -> str:
    if annotated:
        return annotated[1:] if annotated.startswith(".") else prefix + annotated
    return prefix + local


def _controls(src: str) -> tuple[dict[str, str], str]:
    """Control bodies by name, and the source with them cut out (top-level declarations)."""
    out = {}
    top, last = [], 0
    for m in re.finditer(r"\bcontrol\s+(\w+)\s*\(", src):
        depth, i = 0, m.end() - 1
        while True:  # skip the parameter list
            depth += {"(": 1, ")": -1}.get(src[i], 0)
            i += 1
            if depth == 0:
                break
        brace = src.index("{", i)
        if src[i:brace].strip():  # a declaration without a body
            continue
        out[m.group(1)], end = _block(src, brace)
        top.append(src[last:m.start()])
        last = end
    top.append(src[last:])
    return out, " ".join(top)


def _bits(type_name: str, typedefs: dict) -> int | None:
    while type_name in typedefs:
        type_name = typedefs[type_name]
    m = re.fullmatch(r"bit\s*<\s*(\d+)\s*>", type_name)
    return int(m.group(1)) if m else None


def _instances(body: str, prefix: str, out: dict) -> None:
    for m in re.finditer(_NAME + r"\b(counter|direct_counter|register\s*<[^;]*?>)\s*\(([^;]*)\)\s*(\w+)\s*;", body):
        kind = m.group(2).split("<")[0].strip()
        target = {"counter": "counters", "direct_counter": "direct_counters", "register": "registers"}[kind]
        out[target].add(_qualify(prefix, m.group(4), m.group(1)))


def _declarations(body: str, prefix: str, controls: dict, out: dict, typedefs: dict) -> None:
    local_actions = {}
    for m in re.finditer(_NAME + r"\baction\s+(\w+)\s*\(([^)]*)\)", body):
        params = []
        for p in filter(None, (x.strip() for x in m.group(3).split(","))):
            pm = re.search(r"([\w<>\s]+?)\s+(\w+)$", re.sub(r"^(in|out|inout)\s+", "", p))
            params.append((pm.group(2), _bits(re.sub(r"\s+", "", pm.group(1)), typedefs)) if pm else (p, None))
        name = _qualify(prefix, m.group(2), m.group(1))
        local_actions[m.group(2)] = name
        out["actions"][name] = params
    for m in re.finditer(_NAME + r"\btable\s+(\w+)\s*\{", body):
        tbody, _ = _block(body, m.end() - 1)
        keys = []
        km = re.search(r"\bkey\s*=\s*\{", tbody)
        if km:
            kbody, _ = _block(tbody, km.end() - 1)
            for k in filter(None, (x.strip() for x in kbody.split(";"))):
                km2 = re.match(r"(.+?)\s*:\s*(\w+)\s*" + _NAME + r"$", k, flags=re.S)
                expr, kind, annotated = km2.group(1).strip(), km2.group(2), km2.group(3)
                keys.append((annotated or expr, kind))
        acts = []
        am = re.search(r"\bactions\s*=\s*\{", tbody)
        if am:
            abody, _ = _block(tbody, am.end() - 1)
            for a in filter(None, (x.strip() for x in abody.split(";"))):
                a = re.sub(r"@\w+(\([^)]*\))?\s*", "", a).strip()
                acts.append(a if a == "NoAction" else local_actions.get(a, prefix + a))
        out["tables"][_qualify(prefix, m.group(2), m.group(1))] = {"keys": keys, "actions": acts}
    _instances(body, prefix, out)
    for m in re.finditer(r"\b(\w+)\s*\(\s*\)\s*(\w+)\s*;", body):  # sub-control instances
        if m.group(1) in controls:
            _declarations(controls[m.group(1)], f"{prefix}{m.group(2)}.", controls, out, typedefs)


def from_source(p4_dir: Path) -> dict:
    src = _strip("\n".join(p.read_text() for p in sorted(Path(p4_dir).rglob("*.p4"))))
    typedefs = {m.group(2): re.sub(r"\s+", "", m.group(1))
                for m in re.finditer(r"\btypedef\s+(bit\s*<\s*\d+\s*>|\w+)\s+(\w+)\s*;", src)}
    controls, top = _controls(src)
    instantiated = {m.group(1) for body in controls.values()
                    for m in re.finditer(r"\b(\w+)\s*\(\s*\)\s*\w+\s*;", body) if m.group(1) in controls}
    out = {"tables": {}, "actions": {}, "counters": set(), "direct_counters": set(), "registers": set()}
    _instances(top, "", out)  # global extern instances (P4Info names them by @name or their own name)
    for name, body in controls.items():
        if name not in instantiated:
            _declarations(body, f"{name}.", controls, out, typedefs)
    return out
