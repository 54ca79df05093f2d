"""`workload.payload = "sizes"`: packets of a profile's gradient sizes with no values behind them.
Known answers: the same headers, lengths, priorities and layer ids as packets built from values;
drop precedence in the shares the magnitude ranking gives any message; memory that does not grow
with the message; the same messages as the synthetic workload plans; one-line config errors."""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest

from dlcp.comm.packets import sized_packets, tagged_packets
from dlcp.comm.settings import CommConfig
from dlcp.experiment import config as configmod
from dlcp.settings import ConfigError
from dlcp.transport.core.outputs import DataSend, Round, data_datagrams
from dlcp.wire.chunking import MessageId
from dlcp.wire.header import FLAG_PROTECTED, HEADER_LEN, PHASE_RS, TELEMETRY_LEN, field_values, header_fields
from dlcp.workloads.contract import MessageLayout
from dlcp.workloads.settings import WorkloadConfig
from dlcp.workloads.sizes_only import SizesOnlyWorkload
from dlcp.workloads.synthetic import SyntheticWorkload

VPP = 100
LAYOUT = MessageLayout(3, 2550, (0, 1000, 1050), (4, 5, 6))  # layers 4..6 of a 10-layer model
IDENT = MessageId(7, 2, 5, 3 * 3 + 1, PHASE_RS)


def _fields(batch) -> dict:
    f = header_fields(batch.headers)
    return {
        k: field_values(f, k).copy()
        for k in (
            "type",
            "phase",
            "job_id",
            "src_rank",
            "iter",
            "msg_id",
            "prio",
            "layer_id",
            "flags",
            "seq",
            "n_pkts",
            "offset",
        )
    }


def test_sized_packets_have_the_headers_lengths_and_priorities_of_packets_with_values():
    cfg = CommConfig(rank=2, world=4)
    values = np.random.default_rng(1).standard_normal(LAYOUT.n_values).astype(np.float32)
    for lo, hi in ((0, 2550), (900, 1700), (1049, 1051)):
        real, rf, rl = tagged_packets(values, IDENT, LAYOUT, lo, hi, 10, cfg, VPP)
        sized, sf, sl = sized_packets(IDENT, LAYOUT, lo, hi, 10, cfg, VPP)
        assert (sf, sl) == (rf, rl) and len(sized) == len(real) == -(-(hi - lo) // VPP)
        a, b = _fields(real), _fields(sized)
        for k in ("flags",):  # PROTECTED follows drop precedence 0, which the stand-ins choose
            a[k], b[k] = a[k] & ~np.uint8(FLAG_PROTECTED), b[k] & ~np.uint8(FLAG_PROTECTED)
        for k in a:
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_sized_datagrams_are_as_long_as_real_ones_and_carry_zeros():
    cfg = CommConfig(rank=2, world=4, telemetry=True)
    values = np.ones(LAYOUT.n_values, np.float32)
    real, _, _ = tagged_packets(values, IDENT, LAYOUT, 0, 2550, 10, cfg, VPP)
    sized, _, _ = sized_packets(IDENT, LAYOUT, 0, 2550, 10, cfg, VPP)
    out = {}
    for name, batch in (("real", real), ("sized", sized)):
        wire = np.arange(len(batch))
        rnd = Round(("k",), 1, 1, batch, wire, wire, retx=False, ecn=False)
        out[name] = list(data_datagrams(DataSend(1, rnd, 0, len(batch))))
    assert [len(d) for d, _ in out["sized"]] == [len(d) for d, _ in out["real"]]
    assert (
        len(out["sized"][0][0]) == HEADER_LEN + TELEMETRY_LEN + VPP * 4
        and len(out["sized"][-1][0]) == HEADER_LEN + TELEMETRY_LEN + 50 * 4
    )
    assert all(d[HEADER_LEN + TELEMETRY_LEN :] == bytes(len(d) - HEADER_LEN - TELEMETRY_LEN) for d, _ in out["sized"])
    # the TOS byte carries the same priority (its top bits); drop precedence is the stand-ins'
    assert [t >> 5 for _, t in out["sized"]] == [t >> 5 for _, t in out["real"]]


def test_sized_drop_precedence_has_the_shares_of_the_magnitude_ranking():
    cfg = CommConfig(rank=2, world=4)
    layout = MessageLayout(0, 80 * VPP, (0,), (0,))
    sized, _, _ = sized_packets(MessageId(), layout, 0, layout.n_values, 1, cfg, VPP)
    dp = field_values(header_fields(sized.headers), "drop_prec")
    # n = 80: positions < 40 -> 0, < 60 -> 1, < 70 -> 2, else 3 (dlcp/wire/tagging.py)
    assert np.bincount(dp, minlength=4).tolist() == [40, 20, 10, 10]
    again, _, _ = sized_packets(MessageId(), layout, 0, layout.n_values, 1, cfg, VPP)
    np.testing.assert_array_equal(again.headers, sized.headers)  # drawn from the message's identity
    protected, _, _ = sized_packets(MessageId(), layout, 0, layout.n_values, 1, cfg, VPP, protect=True)
    assert not field_values(header_fields(protected.headers), "drop_prec").any()


def test_sized_packets_do_not_allocate_the_message():
    """10 M values (40 MB as fp32) cut into 2225-value packets: what is allocated is per packet
    (24-byte headers, tags), a few hundred kB, not per value."""
    n = 10_000_000
    layout = MessageLayout(0, n, (0,), (0,))
    tracemalloc.start()
    batch, _, _ = sized_packets(MessageId(), layout, 0, n, 1, CommConfig(rank=2, world=4), 2225)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(batch) == 4495 and batch.values.size == n
    assert peak < 1_000_000, peak


def _profile(tmp_path, sizes) -> str:
    path = tmp_path / "p.json"
    path.write_text(
        json.dumps(
            {"model": "p", "sizes": sizes, "forward_s": [0.001] * len(sizes), "backward_s": [0.002] * len(sizes)}
        )
    )
    return str(path)


def test_sizes_only_workload_plans_the_synthetic_workloads_messages(tmp_path):
    cfg = WorkloadConfig(
        model="synthetic", compute="profile", profile=_profile(tmp_path, [300, 5000, 20, 700]), bucket_values=1000
    )
    sizes_only, synthetic = SizesOnlyWorkload(cfg), SyntheticWorkload(cfg)
    assert sizes_only.layouts() == synthetic.layouts()
    # backward order: layers 3, 2, 1 reach the 1000-value bucket together, layer 0 is left over
    assert [(lay.n_values, lay.layer_ids) for lay in sizes_only.layouts()] == [(5720, (1, 2, 3)), (300, (0,))]
    msgs = list(sizes_only.compute(0))
    assert [m.layout for m in msgs] == synthetic.layouts() and all(m.values is None for m in msgs)
    assert sizes_only.n_layers == 4 and sizes_only.evaluate(0) is None


def test_sizes_only_workload_memory_does_not_grow_with_the_model(tmp_path):
    def held(scale: int) -> int:
        cfg = WorkloadConfig(
            model="synthetic",
            compute="profile",
            bucket_values=0,
            profile=_profile(tmp_path, [1000 * scale, 4000 * scale, 500 * scale]),
        )
        tracemalloc.start()
        wl = SizesOnlyWorkload(cfg)
        list(wl.compute(0))
        size, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        del wl
        return size

    assert held(10_000) < held(1) + 4096  # 55 M values: the same few objects as 5,500


BASE = """
name = "sizes"
backend = "ns3"
[topology]
hosts = 4
[workload]
mode = "allreduce"
workers = 4
model = "synthetic"
compute = "profile"
profile = "resnet50-usbyte"
payload = "sizes"
"""


def test_sizes_payload_validates_only_where_it_makes_sense():
    cfg = configmod.validate(_toml(BASE))
    assert cfg["workload"]["payload"] == "sizes"
    for change, key in (
        ({"backend": "builtin"}, "'sizes' exists only on backend = 'ns3'"),
        ({"workload": {"model": "cnn"}}, "model 'cnn' with compute 'profile'"),
        ({"workload": {"compute": "real", "profile": ""}}, "model = 'synthetic' with compute"),
    ):
        raw = _toml(BASE)
        for sec, val in change.items():
            if isinstance(val, dict):
                raw[sec].update(val)
            else:
                raw[sec] = val
        with pytest.raises(ConfigError) as e:
            configmod.validate(raw)
        assert str(e.value).startswith("workload.payload: ") and key in str(e.value) and "\n" not in str(e.value)


def _toml(text: str) -> dict:
    import tomllib

    return tomllib.loads(text)
