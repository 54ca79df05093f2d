"""The bmv2 control plane without a switch: an in-process P4Runtime servicer and Thrift server record
exactly what emulation/bmv2/control.py sends for a runtime file, and serve counters back."""

from __future__ import annotations

import pytest

pytest.importorskip("p4runtime_sh", reason="needs the bmv2 extra (make setup)")
pytest.importorskip("sswitch_runtime", reason="needs the bmv2 extra (make setup)")

from fake_p4runtime import FakeP4Runtime, FakeThrift, expected_p4info
from google.protobuf import text_format
from p4.v1 import p4runtime_pb2
from p4runtime_sh.context import Context

from dlcp.network import pipeline_names as pn
from dlcp.network.runtime_file import Entry, parse_runtime
from dlcp.network.switch_runtime import Port, Route, SwitchConfig, SwitchTopo, Thresholds, runtime_for
from emulation.bmv2 import control as ctl

H1_MAC = "00:00:00:00:00:01"


@pytest.fixture
def build_files(tmp_path):
    p4info = tmp_path / "dlcp.p4info.txtpb"
    p4info.write_text(text_format.MessageToString(expected_p4info()))
    bmv2_json = tmp_path / "dlcp.json"
    bmv2_json.write_text('{"program": "dlcp.p4"}')
    return p4info, bmv2_json


@pytest.fixture
def fakes():
    p4rt, thrift = FakeP4Runtime().start(), FakeThrift().start()
    yield p4rt, thrift
    p4rt.stop()
    thrift.stop()


def topo() -> SwitchTopo:
    return SwitchTopo(
        "s1",
        1,
        ports=(
            Port(1, "s1-eth1", "h1", H1_MAC, rate_mbps=10.0),
            Port(2, "s1-eth2", "s2", "02:dc:00:00:02:01"),
            Port(3, "s1-eth3", "s3", "02:dc:00:00:03:01", rate_pps=500),
        ),
        routes=(Route("10.0.0.1/32", (1,)), Route("10.0.1.0/24", (2, 3))),
    )


def config(build_files) -> SwitchConfig:
    p4info, bmv2_json = build_files
    return SwitchConfig(
        policy="dlcp",
        load_balancing="spray_rr",
        qmax=32,
        k1=24,
        k2=16,
        k3=8,
        port_thresholds={1: Thresholds(qmax=40, k1=30, k2=20, k3=10)},
        ecn_k=12,
        ecn_k_prio={5: 4},
        p4info=str(p4info),
        bmv2_json=str(bmv2_json),
    )


def ids():
    ctx = Context()
    ctx.set_p4info(expected_p4info())
    return ctx


def expected_updates() -> list[p4runtime_pb2.Update]:
    """Written out by hand (bytes and all) so the encoder is checked, not echoed."""
    c = ids()
    t, a = c.get_table_id, c.get_action_id

    def upd(kind, table, action, params=(), matches="", priority=None, default=False):
        text = f"type: {kind} entity {{ table_entry {{ table_id: {t(table)} {matches} "
        text += "action { action { action_id: %d %s } } " % (  # noqa: UP031
            a(action),
            " ".join(f'params {{ param_id: {i} value: "{v}" }}' for i, v in params),
        )
        if priority is not None:
            text += f"priority: {priority} "
        if default:
            text += "is_default_action: true "
        return text_format.Parse(text + "} }", p4runtime_pb2.Update())

    def exact(fid, v):
        return f'match {{ field_id: {fid} exact {{ value: "{v}" }} }}'

    return [
        upd("MODIFY", pn.LB_CONFIG, pn.SET_LB_MODE, [(1, r"\002")], default=True),
        upd(
            "MODIFY",
            pn.QUEUE_THRESHOLDS,
            pn.SET_THRESHOLDS,
            [(1, " "), (2, r"\030"), (3, r"\020"), (4, r"\010")],
            default=True,
        ),
        upd("MODIFY", pn.ECN_THRESHOLD, pn.SET_ECN_THRESHOLD, [(1, r"\014")], default=True),
        upd(
            "INSERT",
            pn.ECN_THRESHOLD,
            pn.SET_ECN_THRESHOLD,
            [(1, r"\004")],
            matches=r'match { field_id: 2 ternary { value: "\005" mask: "\007" } }',
            priority=10,
        ),
        upd(
            "INSERT",
            pn.QUEUE_THRESHOLDS,
            pn.SET_THRESHOLDS,
            [(1, "("), (2, r"\036"), (3, r"\024"), (4, r"\n")],
            matches=exact(1, r"\001"),
        ),
        upd(
            "INSERT",
            pn.IPV4_LPM,
            pn.SET_NHOP_GROUP,
            [(1, r"\001"), (2, r"\001")],
            matches=r'match { field_id: 1 lpm { value: "\n\000\000\001" prefix_len: 32 } }',
        ),
        upd(
            "INSERT",
            pn.IPV4_LPM,
            pn.SET_NHOP_GROUP,
            [(1, r"\002"), (2, r"\002")],
            matches=r'match { field_id: 1 lpm { value: "\n\000\001\000" prefix_len: 24 } }',
        ),
        upd(
            "INSERT", pn.NHOP, pn.SET_NHOP, [(1, r"\001"), (2, r"\001")], matches=exact(1, r"\001") + exact(2, r"\000")
        ),
        upd(
            "INSERT",
            pn.NHOP,
            pn.SET_NHOP,
            [(1, r"\002\334\000\000\002\001"), (2, r"\002")],
            matches=exact(1, r"\002") + exact(2, r"\000"),
        ),
        upd(
            "INSERT",
            pn.NHOP,
            pn.SET_NHOP,
            [(1, r"\002\334\000\000\003\001"), (2, r"\003")],
            matches=exact(1, r"\002") + exact(2, r"\001"),
        ),
        upd("INSERT", pn.CLASSIFY, pn.CLASSIFY_FROM_DLCP, matches=exact(1, r"\001"), priority=10),
        upd("INSERT", pn.CLASSIFY, pn.CLASSIFY_FROM_DSCP, matches=exact(1, r"\000"), priority=10),
    ]


def test_push_sends_exactly_the_runtime_entries(fakes, build_files):
    p4rt, thrift = fakes
    rt = runtime_for(topo(), config(build_files))
    sw = ctl.push_runtime(parse_runtime(rt), p4rt.addr, thrift.port)
    try:
        arbitration = p4rt.arbitrations.get(timeout=5)
        assert arbitration.device_id == 1 and arbitration.election_id.low == 1

        (pipeline,) = p4rt.pipelines
        assert pipeline.device_id == 1
        assert pipeline.action == p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT
        assert pipeline.config.p4info == expected_p4info()
        assert pipeline.config.p4_device_config == b'{"program": "dlcp.p4"}'

        (write,) = p4rt.writes  # one batch
        assert write.device_id == 1 and write.election_id.low == 1
        assert list(write.updates) == expected_updates()

        # 10 Mbit/s of full DLCP frames (1466 bytes) = 853 packets/s; depth 128 on every port
        assert thrift.calls == [
            ("set_egress_queue_depth", 1, 128),
            ("set_egress_queue_rate", 1, 853),
            ("set_egress_queue_depth", 2, 128),
            ("set_egress_queue_depth", 3, 128),
            ("set_egress_queue_rate", 3, 500),
        ]
    finally:
        sw.close()


def test_fifo_policy_installs_no_classify_entry_and_registers_go_over_thrift(fakes, build_files):
    p4rt, thrift = fakes
    rt = runtime_for(topo(), SwitchConfig(policy="fifo", p4info=str(build_files[0]), bmv2_json=str(build_files[1])))
    rt["registers"] = [{"register": pn.RR_NEXT, "index": 2, "value": 7}]
    ctl.push_runtime(parse_runtime(rt), p4rt.addr, thrift.port).close()
    tables = {u.entity.table_entry.table_id for u in p4rt.writes[0].updates}
    assert ids().get_table_id(pn.CLASSIFY) not in tables
    assert ("bm_register_write", 0, pn.RR_NEXT, 2, 7) in thrift.calls


def test_counter_dump_from_p4runtime_reads(fakes, build_files):
    p4rt, _ = fakes
    c = ids()
    idx = pn.queue_counter_index(3, 6, 1)
    p4rt.counters = {
        c.get_counter_id(pn.ADMITTED): {idx: (10, 14660), pn.queue_counter_index(1, 0, 0): (0, 0)},
        c.get_counter_id(pn.EARLY_DROPS): {idx: (2, 2932)},
        c.get_counter_id(pn.TAIL_DROPS): {},
        c.get_counter_id(pn.DROPS): {pn.DROP_REASONS["no_route"]: (4, 400), pn.DROP_REASONS["parser_error"]: (1, 60)},
    }
    with ctl.P4RuntimeSwitch(p4rt.addr, 1, build_files[0], name="s1", session=False) as sw:
        dump = sw.counter_dump()
    assert dump["switch"] == "s1" and dump["backend"] == "bmv2" and dump["time_unix"] > 0
    assert dump["queues"] == [
        {
            "port": 3,
            "qid": 6,
            "color": 1,
            "admitted_pkts": 10,
            "admitted_bytes": 14660,
            "early_drop_pkts": 2,
            "early_drop_bytes": 2932,
            "tail_drop_pkts": 0,
            "tail_drop_bytes": 0,
        }
    ]
    assert dump["drops"] == {"parser_error": 1, "not_ipv4": 0, "no_route": 4, "ttl_expired": 0}
    assert not p4rt.writes  # a read-only session writes nothing


def test_two_switches_from_one_process(fakes, build_files):
    """No global client: two sessions with different devices side by side."""
    p4rt, thrift = fakes
    other = FakeP4Runtime().start()
    try:
        rt1 = runtime_for(topo(), config(build_files))
        rt2 = dict(rt1, switch="s2", device_id=2)
        with (
            ctl.push_runtime(parse_runtime(rt1), p4rt.addr, thrift.port),
            ctl.push_runtime(parse_runtime(rt2), other.addr, thrift.port),
        ):
            assert p4rt.writes[0].device_id == 1 and other.writes[0].device_id == 2
    finally:
        other.stop()


def test_encoding_of_match_kinds():
    ctx = ids()

    def enc(table, action, params, match, priority=0):
        """An entry as the runtime reader hands it over (values normalised)."""
        return ctl.encode_update(ctx, Entry(table, action, params, match, priority))

    lpm0 = enc(pn.IPV4_LPM, pn.SET_NHOP_GROUP, {"group": 1, "size": 1}, {"ipv4_dst": (0, 0)})
    assert not lpm0.entity.table_entry.match  # a /0 prefix is a don't-care: omitted
    lpm16 = enc(pn.IPV4_LPM, pn.SET_NHOP_GROUP, {"group": 1, "size": 1}, {"ipv4_dst": (0x0A010203, 16)})
    assert lpm16.entity.table_entry.match[0].lpm.value == bytes([10, 1, 0, 0])  # host bits cleared
    tern = enc(
        pn.CLASSIFY,
        pn.SET_CLASS,
        {"qid": 7, "color": 0},
        {"dlcp_valid": 1, "dlcp_prio": (7, 4), "dscp": (46, 63), "dlcp_drop_prec": (3, 0)},
        priority=5,
    )
    m = {f.field_id: f for f in tern.entity.table_entry.match}
    assert sorted(m) == [1, 2, 4]  # mask 0 -> omitted
    assert (m[2].ternary.value, m[2].ternary.mask) == (b"\x04", b"\x04")
    assert (m[4].ternary.value, m[4].ternary.mask) == (b"\x2e", b"\x3f")
    assert tern.entity.table_entry.priority == 5
    assert tern.entity.table_entry.action.action.params[1].value == b"\x00"


@pytest.mark.parametrize(
    "entry, message",
    [
        (Entry("DlcpIngress.nosuch", pn.MARK_NO_ROUTE, {}), "table 'DlcpIngress.nosuch' is not in the P4Info"),
        (Entry(pn.NHOP, "DlcpIngress.nosuch", {}), "action 'DlcpIngress.nosuch' is not in the P4Info"),
        (Entry(pn.NHOP, pn.SET_NHOP, {"dmac": 1}, {"nhop_group": 1, "nhop_member": 0}), "needs parameter 'port'"),
        (
            Entry(pn.NHOP, pn.SET_NHOP, {"dmac": 1, "port": 512}, {"nhop_group": 1, "nhop_member": 0}),
            "512 does not fit 9 bits",
        ),
        (Entry(pn.NHOP, pn.MARK_NO_ROUTE, {"x": 1}, {"nhop_group": 1, "nhop_member": 0}), "has no parameter 'x'"),
        (Entry(pn.NHOP, pn.MARK_NO_ROUTE, {}, {"group": 1}), "has no key 'group' in the P4Info"),
    ],
)
def test_entries_the_p4info_refuses_are_one_line_errors(entry, message):
    with pytest.raises(ctl.ControllerError) as e:
        ctl.encode_update(ids(), entry)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_unreachable_switch_is_a_clear_error(build_files):
    from fake_p4runtime import free_port

    with pytest.raises(ctl.ControllerError, match=r"s9: 127\.0\.0\.1:\d+ \(device 9\): no answer"):
        ctl.P4RuntimeSwitch(f"127.0.0.1:{free_port()}", 9, build_files[0], name="s9")


def test_bmv2_refuses_delay_and_loss(fakes, build_files):
    p4rt, thrift = fakes
    rt = runtime_for(topo(), config(build_files))
    rt["ports"][0]["delay_us"] = 100
    with pytest.raises(ctl.ControllerError, match="s1: port 1: delay_us and loss need the built-in switch"):
        ctl.push_runtime(parse_runtime(rt), p4rt.addr, thrift.port)
