"""Queue disciplines (dlcp/queueing): the Python reference and the C pipeline core pick the same
queue on the same sequence of arrivals; weighted round robin gives backlogged queues their weights'
shares and skips empty ones; the registry feeds the experiment's `[switch]` keys, the runtime
files' `queueing` rows and the refusal on bmv2, each with a one-line error."""

from __future__ import annotations

import random
from collections import deque

import pytest
from switch_frames import runtime_doc

from dlcp.experiment import config
from dlcp.network.runtime_file import RuntimeFileError, parse_runtime
from dlcp.queueing.admission import ADMIT, EARLY_DROP, TAIL_DROP, admit, marks_ce
from dlcp.queueing.registry import DISCIPLINES, N_QUEUES, QUANTUM_BYTES, QueueingError, configure, from_doc
from dlcp.settings import ConfigError


def reference_picks(name: str, ops: list, **options) -> list[int]:
    """The Python reference on `ops`: (qid, frame bytes) enqueues one, None picks one."""
    sched = configure(name, **options).scheduler()
    queues: list[deque] = [deque() for _ in range(N_QUEUES)]
    out = []
    for op in ops:
        if op is None:
            q = sched.pick(queues, lambda size: size)
            if q >= 0:
                queues[q].popleft()
            out.append(q)
        else:
            queues[op[0]].append(op[1])
    return out


def random_ops(rng: random.Random, n: int, queues: tuple[int, ...] = tuple(range(N_QUEUES))) -> list:
    ops = []
    for _ in range(n):
        if rng.random() < 0.55:
            ops.append((rng.choice(queues), rng.choice([64, 130, 1466, 1514, rng.randrange(60, 9000)])))
        else:
            ops.append(None)
    return ops + [None] * n  # drain


def test_strict_serves_the_highest_queue_first():
    ops = [(0, 100), (3, 100), (7, 100), (3, 100), None, None, None, None, None]
    assert reference_picks("strict", ops) == [7, 3, 3, 0, -1]


def test_wrr_shares_follow_the_weights_while_every_queue_is_backlogged():
    """Queues 0 and 5 backlogged with full frames, weights 1 and 3: 3 frames of queue 5 per frame of
    queue 0, in rounds that start at the highest queue."""
    weights = [1, 1, 1, 1, 1, 3, 1, 1]
    ops = [(q, QUANTUM_BYTES) for _ in range(40) for q in (0, 5)] + [None] * 40
    picks = reference_picks("wrr", ops, weights=weights)
    assert picks[:8] == [5, 5, 5, 0, 5, 5, 5, 0]
    assert picks.count(5) == 30 and picks.count(0) == 10


def test_wrr_counts_bytes_not_packets():
    """Equal weights, queue 2 sends 1514-byte frames and queue 1 sends 151-byte ones: each round
    gives both 1514 bytes, so queue 1 sends ten small frames for every large one of queue 2."""
    ops = [(2, 1514) for _ in range(5)] + [(1, 151) for _ in range(50)] + [None] * 55
    picks = reference_picks("wrr", ops, weights=[1] * N_QUEUES)
    assert picks[:11] == [2] + [1] * 10 and picks.count(2) == 5


def test_wrr_is_work_conserving_and_keeps_no_credit_for_an_empty_queue():
    """An empty queue costs no slot, and a queue that emptied starts its next visit with only its
    quantum: queue 6 (weight 8) going idle and coming back does not get a burst of old credit."""
    weights = [1, 1, 1, 1, 1, 1, 8, 1]
    ops = [(6, 1514), None, None] + [(6, 1514)] * 10 + [(0, 1514)] * 10 + [None] * 20
    picks = reference_picks("wrr", ops, weights=weights)
    assert picks[:2] == [6, -1]  # alone: served at once; then nothing to send
    rest = picks[2:]
    assert -1 not in rest[:20] and rest.count(6) == 10 and rest.count(0) == 10
    # the visits go on from where queue 6 emptied (5, 4, ... 0: one frame of queue 0), then
    # 8 frames of queue 6 per round against one of queue 0
    assert rest[:10] == [0] + [6] * 8 + [0]


@pytest.mark.parametrize("name", sorted(DISCIPLINES))
def test_c_core_picks_what_the_reference_picks(name):
    """Random arrivals and departures, frames of every size, several weight vectors: the C core's
    sw_qdisc_pick (through the built-in switch's C engine) and the Python reference agree on every
    pick."""
    from emulation.builtin_switch.process import load_fastpath

    try:
        fastpath = load_fastpath()
    except ImportError as e:
        pytest.skip(f"C engine not usable: {e} (make setup builds it)")
    rng = random.Random(11)
    d = DISCIPLINES[name]
    for trial in range(30):
        options = {}
        if name == "wrr":
            options["weights"] = [rng.randrange(1, 9) for _ in range(N_QUEUES)] if trial % 3 else [1] * N_QUEUES
        queues = tuple(rng.sample(range(N_QUEUES), rng.randrange(1, N_QUEUES + 1)))
        ops = random_ops(rng, 400, queues)
        cfg = configure(name, **options)
        assert fastpath.qdisc_picks(d.c_id, cfg.c_params(), ops) == reference_picks(name, ops, **options), trial


def test_admission_by_drop_precedence_and_ecn():
    th = (8, 6, 4, 2)
    assert admit(7, 0, *th) == ADMIT and admit(8, 0, *th) == TAIL_DROP
    assert [admit(occ, 3, *th) for occ in (1, 2)] == [ADMIT, EARLY_DROP]
    assert [admit(occ, 1, *th) for occ in (5, 6, 8)] == [ADMIT, EARLY_DROP, TAIL_DROP]
    assert marks_ce(0b10, 3, 3) and marks_ce(0b01, 3, 3) and not marks_ce(0b10, 2, 3)
    assert not marks_ce(0b00, 9, 3) and not marks_ce(0b11, 9, 3)  # not ECN-capable, already CE


def test_experiment_section_comes_from_the_registry():
    cfg = config.validate({"name": "x"})
    assert cfg["switch"] == {"queueing": "strict", "wrr": {"weights": [q + 1 for q in range(N_QUEUES)]}}
    cfg = config.validate({"name": "x", "backend": "ns3", "switch": {"queueing": "wrr", "wrr": {"weights": [2] * 8}}})
    assert cfg["switch"]["queueing"] == "wrr"
    assert "`switch.wrr.weights`" in config.schema_markdown() and "`switch.queueing`" in config.schema_markdown()
    raw = {"name": "x"}
    config.apply_override(raw, "switch.wrr.weights=[1, 1, 1, 1, 1, 1, 1, 9]")
    assert config.validate(raw)["switch"]["wrr"]["weights"][-1] == 9


@pytest.mark.parametrize(
    ("section", "backend", "message"),
    [
        ({"queueing": "fq"}, "builtin", "switch.queueing: 'fq' is not one of strict, wrr"),
        ({"queueing": "wrr", "wrr": {"weights": [1] * 7}}, "builtin", "switch.wrr.weights: 7 entries, at least 8"),
        (
            {"queueing": "wrr", "wrr": {"weights": [1] * 7 + [0]}},
            "builtin",
            "switch.wrr.weights[7]: 0 is below the minimum 1",
        ),
        ({"wrr": {"weights": [1] * 7 + [1.5]}}, "builtin", "switch.wrr.weights[7]: expected integer"),
        ({"wrr": {"quantum": 3}}, "builtin", "switch.wrr.quantum: unknown key"),
        (
            {"queueing": "wrr"},
            "bmv2",
            "switch.queueing: 'wrr' cannot run on bmv2: its switches serve strict priority only; backend = 'builtin' or 'ns3'",
        ),
        ({"quantum": 3}, "builtin", "switch.quantum: unknown key"),
    ],
)
def test_bad_switch_keys_are_one_line_errors(section, backend, message):
    with pytest.raises(ConfigError) as e:
        config.validate({"name": "x", "backend": backend, "switch": section})
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_runtime_rows_carry_the_discipline():
    doc = runtime_doc(port_cfg={2: {"queueing": {"discipline": "wrr", "weights": [1, 2, 3, 4, 5, 6, 7, 9]}}})
    rt = parse_runtime(doc, "rt.json")
    by_port = {p.port: p.queueing for p in rt.ports}
    assert by_port[1].name == "strict" and by_port[2].name == "wrr" and by_port[2].c_params()[-1] == 9
    assert from_doc(by_port[2].to_doc()) == by_port[2]


@pytest.mark.parametrize(
    ("queueing", "target", "message"),
    [
        (
            {"discipline": "drr"},
            "builtin",
            "rt.json: ports[1]: queueing: queue discipline 'drr' is not one of strict, wrr",
        ),
        (
            {"discipline": "strict", "weights": [1] * 8},
            "builtin",
            "rt.json: ports[1]: queueing: strict takes no options",
        ),
        ({"discipline": "wrr", "weights": [1]}, "builtin", "rt.json: ports[1]: queueing: wrr weights: 1 entries"),
        ("wrr", "builtin", 'rt.json: ports[1]: queueing: expected {"discipline"'),
        ({"discipline": "wrr"}, "bmv2", "rt.json: ports[1]: queueing 'wrr' cannot run on bmv2"),
    ],
)
def test_bad_runtime_queueing_is_one_line_error(queueing, target, message):
    doc = runtime_doc(port_cfg={2: {"queueing": queueing, "queue_depth_pkts": 128}})
    doc["target"] = target
    with pytest.raises(RuntimeFileError) as e:
        parse_runtime(doc, "rt.json")
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_unknown_discipline_name():
    with pytest.raises(QueueingError, match="queue discipline 'fifo' is not one of strict, wrr"):
        configure("fifo")
