import numpy as np
import pytest
import torch

from dlcp.wire import header as H
from dlcp.wire.chunking import MessageId, Reassembler, packetize
from dlcp.wire.tagging import tag_message


def make(n_values=1000, vpp=H.VALUES_PER_PKT, telemetry=False, values=None):
    g = np.arange(n_values, dtype=np.float32) if values is None else values
    tags = tag_message(g, [0], [0], 1, values_per_pkt=vpp)
    return g, packetize(g, MessageId(job_id=1, src_rank=2, iter=3, msg_id=4), tags, vpp, telemetry)


def test_packetize_headers_and_views():
    g, b = make(1000)
    assert len(b) == 3
    hs = [H.unpack_from(b.headers[i]) for i in range(3)]
    assert [h.seq for h in hs] == [0, 1, 2] and [h.offset for h in hs] == [0, 350, 700]
    assert all(h.n_pkts == 3 and h.job_id == 1 and h.src_rank == 2 and h.iter == 3 and h.msg_id == 4 for h in hs)
    assert [bool(h.flags & H.FLAG_LAST) for h in hs] == [False, False, True]
    assert all(bool(h.flags & H.FLAG_PROTECTED) == (h.drop_prec == 0) for h in hs)
    assert len(b.to_bytes(2)) == 24 + 300 * 4
    # payloads are views: changing the message changes the packet
    g[0] = 42.0
    assert np.frombuffer(b.payload(0), np.float32)[0] == 42.0


def test_torch_tensor_is_not_copied():
    t = torch.zeros(700)
    tags = tag_message(t, [0], [0], 1)
    b = packetize(t, MessageId(), tags)
    t[350] = 7.0
    assert np.frombuffer(b.payload(1), np.float32)[0] == 7.0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_reassembly_any_order_with_duplicates(seed):
    rng = np.random.default_rng(seed)
    g, b = make(2000, vpp=64, values=rng.standard_normal(2000).astype(np.float32))
    order = rng.permutation(np.concatenate([np.arange(len(b)), rng.integers(0, len(b), 10)]))
    r = Reassembler(2000, 64)
    added = [r.add_frame(b.to_bytes(i)) for i in order]
    assert sum(added) == len(b) and r.duplicates == 10 and r.complete
    np.testing.assert_array_equal(r.values, g)
    assert not r.loss_mask().any()


def test_loss_mask_marks_missing_values():
    g, b = make(1000, vpp=100)
    r = Reassembler(1000, 100)
    for i in range(len(b)):
        if i not in (3, 9):
            r.add_frame(b.to_bytes(i))
    assert r.missing().tolist() == [3, 9] and not r.complete
    mask = r.loss_mask()
    assert mask.sum() == 200 and mask[300:400].all() and mask[900:].all() and not mask[:300].any()
    np.testing.assert_array_equal(r.values[~mask], g[~mask])
    assert (r.values[mask] == 0).all()


def test_telemetry_block_is_skipped():
    g, b = make(500, vpp=100, telemetry=True)
    assert len(b.to_bytes(0)) == 24 + 8 + 400
    r = Reassembler(500, 100)
    for i in range(len(b)):
        r.add_frame(b.to_bytes(i))
    np.testing.assert_array_equal(r.values, g)


@pytest.mark.parametrize(
    "field,frame",
    [
        ("payload", lambda b: b.to_bytes(0)[:-4]),
        ("offset", lambda b: H.DlcpHeader(seq=1, n_pkts=10, offset=3).pack() + bytes(400)),
        ("n_pkts", lambda b: H.DlcpHeader(seq=1, n_pkts=11, offset=100).pack() + bytes(400)),
        ("length", lambda b: b"\x10\x00"),
    ],
)
def test_inconsistent_packets_rejected_without_change(field, frame):
    _, b = make(1000, vpp=100)
    r = Reassembler(1000, 100)
    with pytest.raises(H.MalformedPacket) as e:
        r.add_frame(frame(b))
    assert e.value.field == field
    assert r.n_received == 0 and not r.values.any()


def test_rejects_non_float32():
    with pytest.raises(ValueError, match="float32"):
        packetize(np.zeros(10), MessageId(), tag_message(np.zeros(10, np.float32), [0], [0], 1))
