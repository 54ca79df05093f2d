"""The C fast path against the Python pipeline model: the same frames in, the same decisions, bytes,
registers and counters out. Random frames, truncations and mutations of valid DLCP frames."""

from __future__ import annotations

import random

import pytest
from switch_frames import dlcp_frame, entry, probe_frame, runtime_doc, udp_frame

from dlcp.network import pipeline_names as P
from dlcp.network.runtime_file import parse_runtime
from dlcp.switch.pipeline import Pipeline
from dlcp.wire.header import tos_of
from emulation.builtin_switch.process import load_fastpath

try:
    fastpath = load_fastpath()
except ImportError as e:
    pytest.skip(f"C engine not usable: {e} (make setup builds it)", allow_module_level=True)


def both(extra_entries=(), **kw):
    doc = runtime_doc(**kw)
    doc["table_entries"] += list(extra_entries)
    rt = parse_runtime(doc)
    model = Pipeline(rt, seed=1)
    engine = fastpath.Engine(batch=8, seed=1)
    pipe = Pipeline(rt)
    engine.set_tables(*pipe.compiled_tables())
    engine.set_ecn(pipe.ecn_k)
    return model, engine


def frames(rng: random.Random, n: int):
    """Valid frames of every kind, then truncated and byte-mutated copies, then random bytes."""
    base = [
        dlcp_frame(
            prio=p,
            drop_prec=d,
            dst=f"10.0.0.{rng.randrange(1, 6)}",
            ttl=rng.choice([0, 1, 2, 64]),
            telemetry=rng.random() < 0.3,
            sport=rng.randrange(65536),
            tos=tos_of(p, d) | rng.randrange(4),
        )  # every ECN codepoint
        for p in range(8)
        for d in range(4)
    ]
    base += [probe_frame(prio=p, dst=f"10.0.0.{rng.randrange(1, 6)}", sport=rng.randrange(65536)) for p in range(8)]
    base += [
        udp_frame(dst=f"10.0.0.{rng.randrange(1, 6)}", sport=rng.randrange(65536), tos=rng.randrange(256))
        for _ in range(16)
    ]
    for i in range(n):
        f = bytearray(rng.choice(base))
        kind = i % 4
        if kind == 1:
            f = f[: rng.randrange(len(f) + 1)]
        elif kind == 2:
            for _ in range(rng.randrange(1, 4)):
                if f:
                    f[rng.randrange(len(f))] = rng.randrange(256)
        elif kind == 3:
            f = bytearray(rng.randbytes(rng.randrange(0, 120)))
            if rng.random() < 0.5 and len(f) >= 14:
                f[12:14] = b"\x08\x00"
        yield f


@pytest.mark.parametrize("lb_mode", ["per_flow", "spray_rr"])
def test_c_engine_matches_the_model(lb_mode):
    model, engine = both(
        routes={"10.0.0.0/30": [1, 2], "10.0.0.4/32": [3, 4, None], "10.0.0.2/32": [2]},
        lb_mode=lb_mode,
        thresholds=(4, 3, 2, 1),
        ecn_k=3,
        ecn_entries=[({"qid": 5}, 10, 1), ({"egress_port": 2, "qid": 5}, 20, 2)],
        # an explicit mark_no_route entry: its hit counts, then the packet is dropped (no_route)
        extra_entries=[entry(P.IPV4_LPM, P.MARK_NO_ROUTE, {}, match={"ipv4_dst": ["10.0.0.5", 32]})],
    )
    rng = random.Random(7)
    queued = []
    for i, f in enumerate(frames(rng, 6000)):
        a, b = bytearray(f), bytearray(f)
        ra, rb = model.ingress(a, 1), engine.ingress(b, 1)
        assert ra == rb and a == b, (i, bytes(f).hex(), ra, rb)
        if ra is not None:
            queued.append((ra, a, b))
        if len(queued) > 40 or (queued and rng.random() < 0.1):  # dequeue: egress on both
            (port, qid, _, tel), a, b = queued.pop(rng.randrange(len(queued)))
            depth, wait = rng.randrange(70000), rng.randrange(1 << 20)
            model.egress(a, port, qid, tel, depth, wait, False)
            engine.egress(b, port, qid, tel, depth, wait, False)
            assert a == b
    cm, ce = model.counters(), engine.counters()
    for key in (
        "admitted_pkts",
        "admitted_bytes",
        "early_pkts",
        "early_bytes",
        "tail_pkts",
        "tail_bytes",
        "drops_pkts",
        "drops_bytes",
        "lpm_hits",
        "classify_hits",
        "occupancy",
        "rr_next",
        "ce_pkts",
        "ce_bytes",
        "delay_fine",
    ):
        assert list(cm[key]) == list(ce[key]), key
    for key in ("max_enq_qdepth", "delay_n", "delay_max", "last_drop"):
        assert cm[key] == ce[key], key
    assert {k: v for k, v in cm["delay_coarse"].items() if v} == {k: v for k, v in enumerate(ce["delay_coarse"]) if v}
    assert sum(cm["early_pkts"]) and sum(cm["tail_pkts"]) and all(cm["drops_pkts"][:4])  # every path was taken
    no_route_entry = len(model.lpm_table.entries) - 1
    assert cm["lpm_hits"][2 * no_route_entry] > 0  # the mark_no_route entry was hit and counted
    assert dict(cm["non_dlcp"]) == dict(ce["non_dlcp"]) and cm["non_dlcp"]
    assert model.sample() == {k: list(v) for k, v in engine.sample().items()}
    assert sum(cm["ce_pkts"]) > 0  # marking was exercised (its exact thresholds: test_switch_pipeline.py)


def test_c_engine_spray_random_spreads():
    _, engine = both(routes={"10.0.0.2/32": [1, 2, 3, 4]}, lb_mode="spray_random", thresholds=(10**6,) * 4)
    counts = dict.fromkeys((1, 2, 3, 4), 0)
    frame = dlcp_frame()
    for _ in range(4000):
        counts[engine.ingress(bytearray(frame), 1)[0]] += 1
    assert all(800 < c < 1200 for c in counts.values()), counts
