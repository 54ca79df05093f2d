"""Test doubles for the bmv2 control plane, in the style of p4runtime-shell's own tests
(p4runtime_sh/test.py): an in-process P4Runtime gRPC servicer and an in-process bmv2 Thrift server,
both recording what they receive. Plus the P4Info the DLCP program must have, built from
dlcp/network/pipeline_names.py (the controller tests run without p4c; test_p4info.py checks it against p4c's)."""

from __future__ import annotations

import queue
import socket
import threading
import time
from concurrent import futures

import grpc
from google.rpc import code_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from dlcp.network.pipeline_names import PIPELINE, PipelineSpec
from emulation.bmv2.simple_switch import free_port

MATCH_TYPES = {
    "exact": p4info_pb2.MatchField.EXACT,
    "lpm": p4info_pb2.MatchField.LPM,
    "ternary": p4info_pb2.MatchField.TERNARY,
}


def expected_p4info(spec: PipelineSpec = PIPELINE) -> p4info_pb2.P4Info:
    """The P4Info implied by a pipeline definition (ids are arbitrary but stable): every name,
    key width, parameter width, size and register width from the one definition."""
    info = p4info_pb2.P4Info()
    action_ids = {}
    for i, action in enumerate(sorted(spec.actions, key=lambda a: a.name), start=1):
        a = info.actions.add()
        a.preamble.id, a.preamble.name = 0x01000000 + i, action.name
        a.preamble.alias = action.name.split(".")[-1]
        action_ids[action.name] = a.preamble.id
        for j, p in enumerate(action.params, start=1):
            a.params.add(id=j, name=p.name, bitwidth=p.bits)
    direct_ids = {}
    for i, (name, table) in enumerate(sorted(spec.direct_counters.items()), start=1):
        d = info.direct_counters.add()
        d.preamble.id, d.preamble.name = 0x14000000 + i, name
        d.spec.unit = p4info_pb2.CounterSpec.BOTH
        direct_ids[table] = d
    for i, table in enumerate(sorted(spec.tables, key=lambda t: t.name), start=1):
        t = info.tables.add()
        t.preamble.id, t.preamble.name = 0x02000000 + i, table.name
        t.preamble.alias = table.name.split(".")[-1]
        for j, key in enumerate(table.keys, start=1):
            t.match_fields.add(id=j, name=key.name, bitwidth=key.bits, match_type=MATCH_TYPES[key.match])
        for a in table.actions:
            t.action_refs.add(id=action_ids[a])
        if table.const_default:
            t.const_default_action_id = action_ids[table.default_action]
        t.size = table.size
        if table.name in direct_ids:
            direct_ids[table.name].direct_table_id = t.preamble.id
            t.direct_resource_ids.append(direct_ids[table.name].preamble.id)
    for i, counter in enumerate(sorted(spec.counters, key=lambda c: c.name), start=1):
        c = info.counters.add()
        c.preamble.id, c.preamble.name = 0x12000000 + i, counter.name
        c.spec.unit = p4info_pb2.CounterSpec.BOTH
        c.size = counter.size
    for i, reg in enumerate(sorted(spec.registers, key=lambda r: r.name), start=1):
        r = info.registers.add()
        r.preamble.id, r.preamble.name = 0x16000000 + i, reg.name
        r.type_spec.bitstring.bit.bitwidth = reg.bits
        r.size = reg.size
    return info


class FakeP4Runtime(p4runtime_pb2_grpc.P4RuntimeServicer):
    """Records pipeline configs and Write requests; serves counter cells set in `counters`."""

    def __init__(self):
        self.pipelines: list[p4runtime_pb2.SetForwardingPipelineConfigRequest] = []
        self.writes: list[p4runtime_pb2.WriteRequest] = []
        self.counters: dict[int, dict[int, tuple[int, int]]] = {}  # counter id -> index -> (pkts, bytes)
        self.arbitrations = queue.Queue()
        self.server = None
        self.addr = None

    def start(self) -> FakeP4Runtime:
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        p4runtime_pb2_grpc.add_P4RuntimeServicer_to_server(self, self.server)
        port = self.server.add_insecure_port("127.0.0.1:0")
        self.addr = f"127.0.0.1:{port}"
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop(grace=None).wait()

    def SetForwardingPipelineConfig(self, request, context):
        self.pipelines.append(request)
        return p4runtime_pb2.SetForwardingPipelineConfigResponse()

    def GetForwardingPipelineConfig(self, request, context):
        rep = p4runtime_pb2.GetForwardingPipelineConfigResponse()
        if self.pipelines:
            rep.config.p4info.CopyFrom(self.pipelines[-1].config.p4info)
        return rep

    def Write(self, request, context):
        self.writes.append(request)
        return p4runtime_pb2.WriteResponse()

    def Read(self, request, context):
        rep = p4runtime_pb2.ReadResponse()
        for ent in request.entities:
            if ent.HasField("counter_entry"):
                cid = ent.counter_entry.counter_id
                for index, (pkts, nbytes) in sorted(self.counters.get(cid, {}).items()):
                    ce = rep.entities.add().counter_entry
                    ce.counter_id = cid
                    ce.index.index = index
                    ce.data.packet_count, ce.data.byte_count = pkts, nbytes
        yield rep

    def StreamChannel(self, request_iterator, context):
        for req in request_iterator:
            if req.HasField("arbitration"):
                self.arbitrations.put(req.arbitration)
                rep = p4runtime_pb2.StreamMessageResponse()
                rep.arbitration.CopyFrom(req.arbitration)
                rep.arbitration.status.code = code_pb2.OK
                yield rep

    def Capabilities(self, request, context):
        return p4runtime_pb2.CapabilitiesResponse(p4runtime_api_version="1.3.0")


class FakeThrift:
    """bmv2's Thrift services `standard` and `simple_switch` (multiplexed, like simple_switch_grpc),
    recording every call as (method, args)."""

    def __init__(self):
        self.calls: list[tuple] = []
        self.port = None

    def start(self) -> FakeThrift:
        from bm_runtime.standard import Standard
        from sswitch_runtime import SimpleSwitch
        from thrift.protocol import TBinaryProtocol
        from thrift.server import TServer
        from thrift.TMultiplexedProcessor import TMultiplexedProcessor
        from thrift.transport import TSocket, TTransport

        calls = self.calls

        class Handler:
            def __getattr__(self, name):
                def record(*args):
                    calls.append((name, *args))
                    return 0

                return record

        proc = TMultiplexedProcessor()
        proc.registerProcessor("standard", Standard.Processor(Handler()))
        proc.registerProcessor("simple_switch", SimpleSwitch.Processor(Handler()))
        self.port = free_port()
        self._socket = TSocket.TServerSocket(host="127.0.0.1", port=self.port)
        server = TServer.TSimpleServer(
            proc, self._socket, TTransport.TBufferedTransportFactory(), TBinaryProtocol.TBinaryProtocolFactory()
        )
        self._thread = threading.Thread(target=self._serve, args=(server,), daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 5
        while True:  # serve() binds in its thread: wait until it accepts
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    @staticmethod
    def _serve(server):
        try:
            server.serve()
        except Exception:  # noqa: BLE001 (the listening socket was closed: the test is over)
            pass

    def stop(self) -> None:
        self._socket.close()
