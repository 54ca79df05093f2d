import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlcp.wire import control_frames as C
from dlcp.wire import header as H


def common(**kw):
    base = {
        "type": C.DESCRIBE,
        "job_id": 1,
        "src_rank": 2,
        "dst_rank": C.PS_RANK,
        "phase": H.PHASE_RS,
        "iter": 0x1234,
        "msg_id": 77,
        "n_pkts": 9,
    }
    base.update(kw)
    return base


@settings(deadline=None)  # timing is not what is tested; the shared CI machine is slow at times
@given(st.lists(st.integers(0, 3), min_size=1, max_size=200), st.booleans())
def test_describe_roundtrip(dp, with_counts):
    n = len(dp)
    counts = np.arange(n, dtype=np.uint8) if with_counts else None
    m = C.Control(
        **common(n_pkts=n),
        layer_first=1,
        layer_last=9,
        prio=5,
        step=4,
        rec_msg_id=11,
        n_values=n * 10,
        budget_ppm=12_345,
        drop_prec=np.array(dp, np.uint8),
        counts=counts,
    )
    frame = C.encode(m)
    (length,) = struct.unpack_from("!I", frame)
    assert length == len(frame) - 4
    d = C.decode(frame[4:])
    assert (d.type, d.layer_first, d.layer_last, d.prio, d.step, d.rec_msg_id, d.n_values, d.budget_ppm) == (
        C.DESCRIBE,
        1,
        9,
        5,
        4,
        11,
        n * 10,
        12_345,
    )
    assert d.key == (2, 0x1234, H.PHASE_RS, 77) and d.dst_rank == C.PS_RANK
    np.testing.assert_array_equal(d.drop_prec, dp)
    assert (d.counts is None) == (not with_counts)
    if with_counts:
        np.testing.assert_array_equal(d.counts, counts)


@settings(deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=300))
def test_bitmap_roundtrip(bits):
    n = len(bits)
    m = C.Control(
        **common(type=C.BITMAP, n_pkts=n),
        round=2,
        attempt=3,
        held_us=70_000,
        missing=sum(bits),
        protected_missing=0,
        requested=np.array(bits),
    )
    d = C.decode(C.encode(m)[4:])
    np.testing.assert_array_equal(d.requested, bits)
    assert (d.missing, d.round, d.attempt, d.held_us) == (sum(bits), 2, 3, 70_000)


@pytest.mark.parametrize("requested", [None, np.ones(9, bool), np.ones(11, bool)])
def test_bitmap_without_one_bit_per_packet_is_refused(requested):
    # the decoder would reject the frame at the peer (control.length): refuse it at the source
    m = C.Control(**common(type=C.BITMAP, n_pkts=10), requested=requested)
    with pytest.raises(ValueError, match="BITMAP map must have one entry per packet"):
        C.encode(m)


def test_stop_and_force_roundtrip():
    d = C.decode(
        C.encode(
            C.Control(
                **common(type=C.STOP),
                round=2,
                lost_pkts=3,
                protected_lost=1,
                forced=True,
                attempt=C.NO_ATTEMPT,
                held_us=12,
            )
        )[4:]
    )
    assert (d.type, d.round, d.lost_pkts, d.protected_lost, d.forced, d.attempt, d.held_us) == (
        C.STOP,
        2,
        3,
        1,
        True,
        255,
        12,
    )
    d = C.decode(C.encode(C.Control(**common(type=C.FORCE_STOP), round=4))[4:])
    assert (d.type, d.round, d.final) == (C.FORCE_STOP, 4, False)
    d = C.decode(C.encode(C.Control(**common(type=C.FORCE_STOP), round=5, final=True))[4:])
    assert (d.type, d.round, d.final) == (C.FORCE_STOP, 5, True)


def describe_body(**kw):
    return C.encode(C.Control(**common(**kw), n_values=90, drop_prec=np.zeros(kw.get("n_pkts", 9), np.uint8)))[4:]


@pytest.mark.parametrize(
    "field,body",
    [
        ("control.length", b"\x01\x01"),
        ("control.version", bytes([1]) + describe_body()[1:]),  # version 1 had PROBE on this channel
        ("control.type", describe_body()[:1] + bytes([9]) + describe_body()[2:]),
        ("control.phase", describe_body()[:5] + bytes([7]) + describe_body()[6:]),
        ("control.n_pkts", describe_body()[:10] + struct.pack("!I", 0) + describe_body()[14:]),
        ("control.n_pkts", describe_body()[:10] + struct.pack("!I", C.MAX_MSG_PKTS + 1) + describe_body()[14:]),
        ("control.length", describe_body()[:-1]),  # truncated drop_prec map
        ("control.length", describe_body() + b"\x00"),  # trailing garbage
        ("control.budget_ppm", describe_body()[:28] + struct.pack("!I", 2_000_000) + describe_body()[32:]),
        ("control.n_values", describe_body()[:24] + struct.pack("!I", 0) + describe_body()[28:]),
        ("control.lost_pkts", C.encode(C.Control(**common(type=C.STOP), lost_pkts=10))[4:]),
        (
            "control.missing",
            C.encode(C.Control(**common(type=C.BITMAP), missing=3, protected_missing=4, requested=np.zeros(9, bool)))[
                4:
            ],
        ),
    ],
)
def test_malformed_control_names_the_field(field, body):
    with pytest.raises(H.MalformedPacket) as e:
        C.decode(body)
    assert e.value.field == field


def test_frame_reader_splits_and_keeps_frames_before_a_bad_length():
    f1 = C.encode(C.Control(**common(type=C.FORCE_STOP), round=1))
    f2 = C.encode(C.Control(**common(type=C.STOP)))
    r = C.FrameReader()
    stream = f1 + f2 + struct.pack("!I", 2) + b"zz"
    got = r.feed(stream[:5]) + r.feed(stream[5:])
    assert [C.decode(b).type for b in got] == [C.FORCE_STOP, C.STOP]
    assert r.error is not None and r.error.field == "control.length"
    assert r.feed(f1) == []  # nothing more after a framing error
