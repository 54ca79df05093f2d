"""The one definition of the DLCP switch pipeline's control-plane contract, as data: table names with
their keys (match kind, width), actions with their parameter widths, registers, counters, drop
reasons, load-balancing modes and sizes (semantics: docs/pipeline.md).

Everything else follows from `PIPELINE`: the runtime-file reader (`runtime_file.py`), the runtime
entries (`switch_runtime.py`), the built-in switch, the bmv2 control plane, the P4Info the tests
expect, and the P4 and C definitions that `python -m dlcp.codegen` writes
(`p4/include/generated/dlcp_pipeline.p4`, `dlcp/switch/c/dlcp_wire.h`; `make gen`). Widths of
keys that match DLCP header fields come from `dlcp/wire/layout.py`. How to add a table, an action or
a counter: docs/pipeline.md, "Changing the pipeline".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

from dlcp.queueing.registry import N_QUEUES  # egress queues per port (their disciplines: dlcp/queueing)
from dlcp.wire.layout import LAYOUT

MATCH_KINDS = ("exact", "lpm", "ternary")

MAX_PORTS = 64  # port numbers 0..63 (Mininet interface sN-ethK is port K)
N_COLORS = 4  # drop precedences
MAX_GROUPS = 1024  # next-hop groups
PORT_BITS = 9  # v1model's egress_spec
GROUP_BITS = 16  # next-hop group ids, group sizes and members
MAC_BITS = 48
IPV4_BITS = 32
THRESHOLD_BITS = 32
DSCP_BITS = sum(f.bits for f in LAYOUT.dscp)
QID_BITS = (N_QUEUES - 1).bit_length()
COLOR_BITS = (N_COLORS - 1).bit_length()
# The built-in switch's counters beyond the P4 program's: the part of each queue counter from
# frames without a DLCP header, by the frame's DSCP class (dscp >> 3, the top bits of its TOS byte),
# so reports tell background and transport control from gradients (docs/pipeline.md).
DSCP_CLASSES = 8

# every control-plane name lives under the ingress control, whichever P4 control declares it
_I = "DlcpIngress."

# tables
IPV4_LPM = _I + "ipv4_lpm"
NHOP = _I + "nhop"
LB_CONFIG = _I + "lb_config"
CLASSIFY = _I + "classify"
QUEUE_THRESHOLDS = _I + "queue_thresholds"
ECN_THRESHOLD = _I + "ecn_threshold"  # K per egress port and queue (p4/include/ecn.p4)

# actions
SET_NHOP_GROUP = _I + "set_nhop_group"
SET_NHOP = _I + "set_nhop"
MARK_NO_ROUTE = _I + "mark_no_route"  # sets meta.no_route; the ingress then drops, reason no_route
SET_LB_MODE = _I + "set_lb_mode"
CLASSIFY_FROM_DLCP = _I + "classify_from_dlcp"
CLASSIFY_FROM_DSCP = _I + "classify_from_dscp"
SET_CLASS = _I + "set_class"
SET_THRESHOLDS = _I + "set_thresholds"
SET_ECN_THRESHOLD = _I + "set_ecn_threshold"  # (k, packets; ECN_NEVER = never mark)

# registers
OCCUPANCY = _I + "occupancy"  # index port * N_QUEUES + qid
RR_NEXT = _I + "rr_next"  # next round-robin value per group

# indirect counters (packets and bytes)
ADMITTED = _I + "admitted"  # index (port * N_QUEUES + qid) * N_COLORS + color
EARLY_DROPS = _I + "early_drops"  # same index
TAIL_DROPS = _I + "tail_drops"  # same index
DROPS = _I + "drops"  # index: drop reason
CE_MARKED = _I + "ce_marked"  # index port * N_QUEUES + qid: packets this switch marked CE

# direct counters
IPV4_LPM_HITS = _I + "ipv4_lpm_hits"
CLASSIFY_HITS = _I + "classify_hits"


class _Symbol:
    """`sym` names an item in generated code (P4 macros, C defines: TABLE_<sym>, ACTION_<sym>, ...).
    It defaults to the upper-cased last part of the name and stays when the name changes, so a
    renamed table keeps its macro and the P4 program that uses it."""

    name: str  # fields of each dataclass below (a plain base: not fields here)
    sym: str

    def __post_init__(self):
        if not self.sym:
            object.__setattr__(self, "sym", self.name.rsplit(".", 1)[-1].upper())


@dataclass(frozen=True)
class Key(_Symbol):
    name: str  # the key's @name, as P4Info and runtime files spell it
    match: str  # exact | lpm | ternary
    bits: int
    sym: str = ""


@dataclass(frozen=True)
class Param:
    name: str  # a P4 identifier: renaming one is an edit of the P4 action too
    bits: int


@dataclass(frozen=True)
class Action(_Symbol):
    name: str
    params: tuple[Param, ...] = ()
    sym: str = ""


@dataclass(frozen=True)
class Table(_Symbol):
    name: str
    keys: tuple[Key, ...]
    actions: tuple[str, ...]
    default_action: str  # until the control plane sets another (unless const)
    default_params: Mapping[str, int]
    size: int
    const_default: bool = False  # the P4 program fixes the default action
    direct_counter: str | None = None
    sym: str = ""

    @property
    def has_ternary(self) -> bool:
        return any(k.match == "ternary" for k in self.keys)


@dataclass(frozen=True)
class Register(_Symbol):
    name: str
    bits: int
    size: int
    writable: bool  # by runtime files; occupancy is the live queue length and is not
    sym: str = ""


@dataclass(frozen=True)
class Counter(_Symbol):
    name: str
    size: int
    index: str  # what the index means
    sym: str = ""


@dataclass(frozen=True)
class PipelineSpec:
    max_ports: int
    n_queues: int
    n_colors: int
    max_groups: int
    tables: tuple[Table, ...]
    actions: tuple[Action, ...]
    registers: tuple[Register, ...]
    counters: tuple[Counter, ...]
    drop_reasons: Mapping[str, int]  # index of the drops counter
    lb_modes: Mapping[str, int]  # values of set_lb_mode(mode)

    @cached_property
    def table(self) -> Mapping[str, Table]:
        return {t.name: t for t in self.tables}

    @cached_property
    def action(self) -> Mapping[str, Action]:
        return {a.name: a for a in self.actions}

    @cached_property
    def register(self) -> Mapping[str, Register]:
        return {r.name: r for r in self.registers}

    @cached_property
    def counter(self) -> Mapping[str, Counter]:
        return {c.name: c for c in self.counters}

    @cached_property
    def direct_counters(self) -> Mapping[str, str]:
        """direct counter -> its table."""
        return {t.direct_counter: t.name for t in self.tables if t.direct_counter}


def _queue_counter(name: str) -> Counter:
    return Counter(name, MAX_PORTS * N_QUEUES * N_COLORS, "(port * N_QUEUES + qid) * N_COLORS + color")


PIPELINE = PipelineSpec(
    max_ports=MAX_PORTS,
    n_queues=N_QUEUES,
    n_colors=N_COLORS,
    max_groups=MAX_GROUPS,
    tables=(
        Table(
            IPV4_LPM,
            (Key("ipv4_dst", "lpm", IPV4_BITS),),
            (SET_NHOP_GROUP, MARK_NO_ROUTE),
            MARK_NO_ROUTE,
            {},
            size=1024,
            const_default=True,
            direct_counter=IPV4_LPM_HITS,
        ),
        Table(
            NHOP,
            (Key("nhop_group", "exact", GROUP_BITS), Key("nhop_member", "exact", GROUP_BITS)),
            (SET_NHOP, MARK_NO_ROUTE),
            MARK_NO_ROUTE,
            {},
            size=4096,
            const_default=True,
        ),
        Table(LB_CONFIG, (), (SET_LB_MODE,), SET_LB_MODE, {"mode": 0}, size=1),
        Table(
            CLASSIFY,
            (
                Key("dlcp_valid", "exact", 1),
                Key("dlcp_prio", "ternary", LAYOUT.field("prio").bits),
                Key("dlcp_drop_prec", "ternary", LAYOUT.field("drop_prec").bits),
                Key("dscp", "ternary", DSCP_BITS),
            ),
            (CLASSIFY_FROM_DLCP, CLASSIFY_FROM_DSCP, SET_CLASS),
            SET_CLASS,
            {"qid": 0, "color": 0},
            size=64,
            direct_counter=CLASSIFY_HITS,
        ),
        Table(
            QUEUE_THRESHOLDS,
            (Key("egress_port", "exact", PORT_BITS),),
            (SET_THRESHOLDS,),
            SET_THRESHOLDS,
            {"qmax": 64, "k1": 48, "k2": 32, "k3": 16},
            size=MAX_PORTS,
        ),
        # ternary on both: an entry names a port, a queue or both; the default holds the switch-wide K
        Table(
            ECN_THRESHOLD,
            (Key("egress_port", "ternary", PORT_BITS), Key("qid", "ternary", QID_BITS)),
            (SET_ECN_THRESHOLD,),
            SET_ECN_THRESHOLD,
            {"k": 10},
            size=64,
        ),
    ),
    actions=(
        Action(SET_NHOP_GROUP, (Param("group", GROUP_BITS), Param("size", GROUP_BITS))),
        Action(SET_NHOP, (Param("dmac", MAC_BITS), Param("port", PORT_BITS))),
        Action(MARK_NO_ROUTE),
        Action(SET_LB_MODE, (Param("mode", 2),)),
        Action(CLASSIFY_FROM_DLCP),
        Action(CLASSIFY_FROM_DSCP),
        Action(SET_CLASS, (Param("qid", QID_BITS), Param("color", COLOR_BITS))),
        Action(SET_THRESHOLDS, tuple(Param(p, THRESHOLD_BITS) for p in ("qmax", "k1", "k2", "k3"))),
        Action(SET_ECN_THRESHOLD, (Param("k", THRESHOLD_BITS),)),
    ),
    registers=(
        Register(OCCUPANCY, 32, MAX_PORTS * N_QUEUES, writable=False),
        Register(RR_NEXT, GROUP_BITS, MAX_GROUPS, writable=True),
    ),
    counters=(
        _queue_counter(ADMITTED),
        _queue_counter(EARLY_DROPS),
        _queue_counter(TAIL_DROPS),
        Counter(DROPS, 8, "drop reason"),
        Counter(CE_MARKED, MAX_PORTS * N_QUEUES, "port * N_QUEUES + qid"),
    ),
    drop_reasons={"parser_error": 0, "not_ipv4": 1, "no_route": 2, "ttl_expired": 3},
    lb_modes={"per_flow": 0, "spray_random": 1, "spray_rr": 2},
)


class PipelineSpecError(ValueError):
    """An inconsistent pipeline definition; the message names the table, action or field."""


def check(spec: PipelineSpec) -> None:
    """Raise PipelineSpecError unless every name is unique and every reference resolves."""
    names = [x.name for part in (spec.tables, spec.actions, spec.registers, spec.counters) for x in part]
    names += list(spec.direct_counters)
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise PipelineSpecError(f"{dup[0]}: declared twice")
    for t in spec.tables:
        for k in t.keys:
            if k.match not in MATCH_KINDS:
                raise PipelineSpecError(f"{t.name}: key {k.name}: match kind {k.match!r} (one of {MATCH_KINDS})")
        if [k.match for k in t.keys].count("lpm") > 1:
            raise PipelineSpecError(f"{t.name}: more than one lpm key")
        for a in (*t.actions, t.default_action):
            if a not in spec.action:
                raise PipelineSpecError(f"{t.name}: unknown action {a}")
        if t.default_action not in t.actions:
            raise PipelineSpecError(f"{t.name}: default action {t.default_action} is not one of its actions")
        params = {p.name: p.bits for p in spec.action[t.default_action].params}
        if set(t.default_params) != set(params):
            raise PipelineSpecError(
                f"{t.name}: default parameters {sorted(t.default_params)}, {t.default_action} takes {sorted(params)}"
            )
        for p, v in t.default_params.items():
            if not 0 <= v < 1 << params[p]:
                raise PipelineSpecError(f"{t.name}: default {p}={v} does not fit {params[p]} bits")
    lb = next(a for a in spec.actions if a.sym == "SET_LB_MODE")
    for mode in spec.lb_modes.values():
        if not 0 <= mode < 1 << lb.params[0].bits:
            raise PipelineSpecError(f"lb mode {mode} does not fit {lb.name}(mode)")
    drops = next(c for c in spec.counters if c.sym == "DROPS")
    if max(spec.drop_reasons.values()) >= drops.size:
        raise PipelineSpecError(f"{drops.name}: a drop reason past its size {drops.size}")


check(PIPELINE)

# the pipeline's parts by name (views of PIPELINE)
TABLES = PIPELINE.table
ACTIONS = PIPELINE.action
REGISTERS = PIPELINE.register
COUNTERS = PIPELINE.counter
DIRECT_COUNTERS = PIPELINE.direct_counters
DROP_REASONS = PIPELINE.drop_reasons
LB_MODES = PIPELINE.lb_modes
QUEUE_COUNTERS = (ADMITTED, EARLY_DROPS, TAIL_DROPS)
DEFAULT_THRESHOLDS = TABLES[QUEUE_THRESHOLDS].default_params
DEFAULT_ECN_K = TABLES[ECN_THRESHOLD].default_params["k"]
ECN_NEVER = (1 << THRESHOLD_BITS) - 1  # an ECN threshold no queue reaches: never mark


def queue_counter_index(port: int, qid: int, color: int) -> int:
    return (port * N_QUEUES + qid) * N_COLORS + color


def queue_counter_key(index: int) -> tuple[int, int, int]:
    """(port, qid, color) of a queue counter index."""
    port_q, color = divmod(index, N_COLORS)
    port, qid = divmod(port_q, N_QUEUES)
    return port, qid, color


def non_dlcp_index(port: int, qid: int, color: int, dscp_class: int) -> int:
    return queue_counter_index(port, qid, color) * DSCP_CLASSES + dscp_class


def non_dlcp_key(index: int) -> tuple[int, int, int, int]:
    """(port, qid, color, dscp class) of a non-DLCP counter index."""
    slot, dscp_class = divmod(index, DSCP_CLASSES)
    return (*queue_counter_key(slot), dscp_class)


def occupancy_index(port: int, qid: int) -> int:
    return port * N_QUEUES + qid


def key_shifts(table: Table) -> dict[str, int]:
    """Where each key sits in the concatenation of a table's keys (first key most significant): the
    index of a table small enough to be precomputed as an array (the built-in switch's classify)."""
    out, shift = {}, sum(k.bits for k in table.keys)
    for k in table.keys:
        shift -= k.bits
        out[k.name] = shift
    return out
