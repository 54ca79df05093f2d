"""The DLCP switch pipeline of docs/pipeline.md, table by table, on one Ethernet frame at a time:
the readable reference model. The C pipeline core (dlcp/switch/c/switch_core.h, in the built-in
switch's C engine and the ns-3 switch) states the same in C, and tests hold the two together.

Pure Python, no sockets: `ingress()` parses a frame (a bytearray, edited in place), applies the
tables, runs admission control (dlcp/queueing/admission.py) and returns where the packet goes;
`egress()` releases its queue slot, counts its queueing time and stamps telemetry. The built-in
switch's Python engine (emulation/builtin_switch/pyengine.py) and the tests drive the same object;
which queue of a port sends next is the port's discipline's (dlcp/queueing).

Per-packet decisions that only depend on header fields are cached (LPM result per destination,
crc16 per 5-tuple) or computed up front (the class of every (dlcp_valid, prio, drop_prec, dscp),
indexed as the classify keys concatenated); the tables are fixed for the life of a Pipeline, so
nothing goes stale. Offsets, widths and sizes come from dlcp/wire/layout.py and
dlcp/network/pipeline_names.py, as the C engine's come from the header generated from them.
"""

from __future__ import annotations

import random
import struct

from dlcp.network import pipeline_names as P
from dlcp.network.runtime_file import Runtime
from dlcp.queueing.admission import ADMIT, TAIL_DROP, admit, marks_ce
from dlcp.switch.counter_dump import DelayHistogram
from dlcp.switch.hashing import crc16
from dlcp.switch.match_tables import ExactTable, Hit, LpmTable, TernaryTable, build_tables, table_of
from dlcp.wire import header as H
from dlcp.wire.layout import LAYOUT

PARSER_ERROR = P.DROP_REASONS["parser_error"]
NOT_IPV4 = P.DROP_REASONS["not_ipv4"]
NO_ROUTE = P.DROP_REASONS["no_route"]
TTL_EXPIRED = P.DROP_REASONS["ttl_expired"]
QUEUE_SLOTS = P.MAX_PORTS * P.N_QUEUES
COUNTER_SLOTS = QUEUE_SLOTS * P.N_COLORS
DROP_SLOTS = P.COUNTERS[P.DROPS].size
PORT_SLOTS = P.N_QUEUES * P.N_COLORS  # queue counter slots per port
DSCP_CLASSES = P.DSCP_CLASSES  # of frames without a DLCP header (their non_dlcp counters)

ETH_LEN = LAYOUT.eth_len
L4 = ETH_LEN + LAYOUT.ipv4_len  # transport header offset (only parsed when IHL is 5)
DLCP_OFF = L4 + LAYOUT.udp_len
TEL_OFF = DLCP_OFF + H.HEADER_LEN
UDP_CSUM = L4 + 6
_CACHE_MAX = 1 << 16

_VER, _PRIO, _DP, _FLAGS = (H.SLOTS[n] for n in ("ver", "prio", "drop_prec", "flags"))
assert _VER.size == _PRIO.size == _DP.size == _FLAGS.size == 1, "the parser reads these fields as single bytes"
_CLASSIFY = P.TABLES[P.CLASSIFY]
_CLS_SHIFT = P.key_shifts(_CLASSIFY)
_SH_VALID, _SH_PRIO, _SH_DP, _SH_DSCP = (_CLS_SHIFT[k] for k in ("dlcp_valid", "dlcp_prio", "dlcp_drop_prec", "dscp"))
CLASSIFY_SLOTS = 1 << sum(k.bits for k in _CLASSIFY.keys)
SPRAY_RANDOM, SPRAY_RR = P.LB_MODES["spray_random"], P.LB_MODES["spray_rr"]
RR_MASK = (1 << P.REGISTERS[P.RR_NEXT].bits) - 1
NQ, NC = P.N_QUEUES, P.N_COLORS

_U16 = struct.Struct("!H")
_TEL_WORDS = struct.Struct(f"!{H.TELEMETRY_LEN // 2}H")  # the block as 16-bit words, for the UDP checksum
_HOPS, _QDEPTH, _QTIME = (H.TEL_SLOTS[n] for n in ("hops", "max_enq_qdepth", "sum_deq_timedelta_us"))
assert not any(s.packed for s in H.TEL_SLOTS.values()), "stamp_telemetry reads whole-word fields"


def _fold(x: int) -> int:
    while x >> 16:
        x = (x & 0xFFFF) + (x >> 16)
    return x


class Pipeline:
    """Tables, registers and counters of one switch."""

    def __init__(self, runtime: Runtime, data_port: int = H.DATA_PORT, seed: int | None = None):
        self.tables = build_tables(runtime.entries)
        self.data_port = data_port
        self.rng = random.Random(seed)
        self.lpm_table = table_of(self.tables, P.IPV4_LPM, LpmTable)
        self.classify_table = table_of(self.tables, P.CLASSIFY, TernaryTable)
        nhop = table_of(self.tables, P.NHOP, ExactTable)
        # nhop: (group, member) -> (entry index, dmac bytes, port)
        self.nhop = {
            k: (i, nhop.entries[i].params["dmac"].to_bytes(6, "big"), nhop.entries[i].params["port"])
            for k, i in nhop.index.items()
            if nhop.entries[i].action == P.SET_NHOP
        }
        _, action, params = self.tables[P.LB_CONFIG].default
        self.lb_mode = params["mode"]
        th = table_of(self.tables, P.QUEUE_THRESHOLDS, ExactTable)
        self.thresholds = [self._thresholds(th.lookup(port)) for port in range(P.MAX_PORTS)]
        self.ecn_k = self._ecn_thresholds()
        # registers
        self.occupancy = [0] * QUEUE_SLOTS
        self.rr_next = [0] * P.MAX_GROUPS
        for w in runtime.registers:
            if w.register == P.RR_NEXT:
                self.rr_next[w.index] = w.value
        # counters: queue counters indexed (port * N_QUEUES + qid) * N_COLORS + color
        self.admitted = [[0] * COUNTER_SLOTS, [0] * COUNTER_SLOTS]  # [pkts, bytes]
        self.early = [[0] * COUNTER_SLOTS, [0] * COUNTER_SLOTS]
        self.tail = [[0] * COUNTER_SLOTS, [0] * COUNTER_SLOTS]
        self.drops = [[0] * DROP_SLOTS, [0] * DROP_SLOTS]
        self.ce_marked = [[0] * QUEUE_SLOTS, [0] * QUEUE_SLOTS]  # [pkts, bytes] per port * N_QUEUES + qid
        # the share of the packet counts above from frames without a DLCP header (background and
        # control traffic), index counter slot * DSCP_CLASSES + dscp class -> [admitted, early, tail]
        self.non_dlcp: dict[int, list[int]] = {}
        self.occ_peak = [0] * QUEUE_SLOTS  # highest occupancy since the last sample()
        self.last_drop = -1  # reason of the last dropped packet (tests, debug log)
        # the queues' telemetry: deepest queue a packet found, queueing times
        self.max_enq_qdepth = 0
        self.delays = DelayHistogram()
        self._lpm_cache: dict[int, tuple] = {}
        self._hash_cache: dict[bytes, int] = {}
        self.classes = [self._class_of(index) for index in range(CLASSIFY_SLOTS)]

    @staticmethod
    def _thresholds(hit: Hit) -> tuple[int, int, int, int]:
        _, _, p = hit
        return (p["qmax"], p["k1"], p["k2"], p["k3"])

    # --- ECN marking (p4/include/ecn.p4) -------------------------------------------------------------

    def _ecn_thresholds(self) -> list[int]:
        """ecn_threshold resolved for every (port, qid): K per queue slot, port * N_QUEUES + qid."""
        table = table_of(self.tables, P.ECN_THRESHOLD, TernaryTable)
        return [
            table.lookup(egress_port=port, qid=qid)[2]["k"] for port in range(P.MAX_PORTS) for qid in range(P.N_QUEUES)
        ]

    def _ecn_mark(self, f: bytearray, oi: int, occ: int, n: int) -> None:
        """An admitted ECN-capable packet whose queue held K or more: CE, IPv4 checksum patched
        over the first header word (RFC 1624), counted."""
        tos = f[15]
        if marks_ce(tos, occ, self.ecn_k[oi]):
            old = (f[14] << 8) | tos
            new = (old & ~H.ECN_MASK) | H.ECN_CE
            f[15] = new & 0xFF
            hc = _fold((~((f[24] << 8) | f[25]) & 0xFFFF) + (~old & 0xFFFF) + new)
            hc = ~hc & 0xFFFF
            f[24] = hc >> 8
            f[25] = hc & 0xFF
            self.ce_marked[0][oi] += 1
            self.ce_marked[1][oi] += n

    # --- ingress -------------------------------------------------------------------------------

    def drop_name(self) -> str:
        """What dropped the last dropped packet (debug log)."""
        for name, i in P.DROP_REASONS.items():
            if i == self.last_drop:
                return name
        return "admission (early or tail drop)"

    def _drop(self, reason: int, nbytes: int) -> None:
        self.drops[0][reason] += 1
        self.drops[1][reason] += nbytes
        self.last_drop = reason
        return None

    def _route(self, dst: int) -> tuple:
        """ipv4_lpm for one destination: (entry index or -1 for the default action, group, size);
        size 0 means the drop action."""
        r = self._lpm_cache.get(dst)
        if r is None:
            i, action, params = self.lpm_table.lookup(dst)
            r = (i, params["group"], params["size"]) if action == P.SET_NHOP_GROUP else (i, 0, 0)
            if len(self._lpm_cache) >= _CACHE_MAX:
                self._lpm_cache.clear()
            self._lpm_cache[dst] = r
        return r

    def _class_of(self, index: int) -> tuple:
        """classify for one index (the keys concatenated, `P.key_shifts`): (entry index, qid, color)."""
        keys = {k.name: (index >> _CLS_SHIFT[k.name]) & ((1 << k.bits) - 1) for k in _CLASSIFY.keys}
        i, action, params = self.classify_table.lookup(**keys)
        if action == P.CLASSIFY_FROM_DLCP:
            return i, keys["dlcp_prio"], keys["dlcp_drop_prec"]
        if action == P.CLASSIFY_FROM_DSCP:
            return i, *H.prio_dp_of_dscp(keys["dscp"])
        return i, params["qid"], params["color"]

    def _flow_hash(self, f, proto: int, sport: int, dport: int) -> int:
        key = bytes(f[26:34]) + bytes((proto, sport >> 8, sport & 0xFF, dport >> 8, dport & 0xFF))
        h = self._hash_cache.get(key)
        if h is None:
            h = crc16(key)
            if len(self._hash_cache) >= _CACHE_MAX:
                self._hash_cache.clear()
            self._hash_cache[key] = h
        return h

    def ingress(self, f: bytearray, in_port: int):
        """Run ingress on frame `f` (edited in place when admitted).

        Returns None when the packet is dropped (reason in `last_drop`, counted), else
        `(egress_port, qid, color, telemetry_offset)`; telemetry_offset is -1 without a telemetry
        block. The caller must enqueue an admitted packet and later call `egress()` for it.
        """
        n = len(f)
        # parser
        if n < ETH_LEN:
            return self._drop(PARSER_ERROR, n)
        if f[12] != 0x08 or f[13] != 0x00:
            return self._drop(NOT_IPV4, n)
        if n < L4:
            return self._drop(PARSER_ERROR, n)
        proto = f[23]
        sport = dport = 0
        dlcp = 0
        tel = -1
        # transport only behind a plain 20-byte header of a first fragment (see docs/pipeline.md)
        if f[14] & 0x0F == 5 and not (f[20] & 0x1F or f[21]):
            if proto == 17:
                if n < DLCP_OFF:
                    return self._drop(PARSER_ERROR, n)
                sport = (f[34] << 8) | f[35]
                dport = (f[36] << 8) | f[37]
                if dport == self.data_port:
                    if n < TEL_OFF or (f[DLCP_OFF + _VER.offset] >> _VER.shift) & _VER.mask != H.VERSION:
                        return self._drop(PARSER_ERROR, n)
                    dlcp = 1
                    if f[DLCP_OFF + _FLAGS.offset] & H.FLAG_TELEMETRY:
                        if n < TEL_OFF + H.TELEMETRY_LEN:
                            return self._drop(PARSER_ERROR, n)
                        tel = TEL_OFF
            elif proto == 6:
                if n < L4 + 4:
                    return self._drop(PARSER_ERROR, n)
                sport = (f[34] << 8) | f[35]
                dport = (f[36] << 8) | f[37]
        ttl = f[22]
        if ttl <= 1:
            return self._drop(TTL_EXPIRED, n)
        # ipv4_lpm
        li, group, size = self._route((f[30] << 24) | (f[31] << 16) | (f[32] << 8) | f[33])
        if li >= 0:
            hits = self.lpm_table.hits[li]
            hits[0] += 1
            hits[1] += n
        if not size:
            return self._drop(NO_ROUTE, n)
        # member choice
        mode = self.lb_mode
        if dlcp and mode == SPRAY_RANDOM:
            member = int(self.rng.random() * size)
        elif dlcp and mode == SPRAY_RR:
            r = self.rr_next[group]
            member = r % size
            self.rr_next[group] = (r + 1) & RR_MASK
        else:
            member = self._flow_hash(f, proto, sport, dport) % size
        # nhop
        nh = self.nhop.get((group, member))
        if nh is None:
            return self._drop(NO_ROUTE, n)
        _, dmac, port = nh
        f[0:12] = dmac + f[0:6]
        # classify
        index = (f[15] >> 2) << _SH_DSCP
        if dlcp:
            index |= (
                (1 << _SH_VALID)
                | (((f[DLCP_OFF + _PRIO.offset] >> _PRIO.shift) & _PRIO.mask) << _SH_PRIO)
                | (((f[DLCP_OFF + _DP.offset] >> _DP.shift) & _DP.mask) << _SH_DP)
            )
        ci, qid, color = self.classes[index]
        if ci >= 0:
            hits = self.classify_table.hits[ci]
            hits[0] += 1
            hits[1] += n
        # queue_thresholds + admission
        oi = port * NQ + qid
        occ = self.occupancy[oi]
        ci = oi * NC + color
        kind = admit(occ, color, *self.thresholds[port])
        c = self.admitted if kind == ADMIT else self.tail if kind == TAIL_DROP else self.early
        if not dlcp:
            self.non_dlcp.setdefault(ci * DSCP_CLASSES + (f[15] >> 5), [0, 0, 0])[kind] += 1
        if kind == ADMIT:
            self.occupancy[oi] = occ + 1
            self.occ_peak[oi] = max(self.occ_peak[oi], occ + 1)
            c[0][ci] += 1
            c[1][ci] += n
            self._ecn_mark(f, oi, occ, n)
            # TTL -= 1 with the IPv4 checksum updated incrementally (RFC 1624 eqn. 3)
            old = (ttl << 8) | proto
            f[22] = ttl - 1
            hc = _fold((~((f[24] << 8) | f[25]) & 0xFFFF) + (~old & 0xFFFF) + old - 0x100)
            hc = ~hc & 0xFFFF
            f[24] = hc >> 8
            f[25] = hc & 0xFF
            return port, qid, color, tel
        c[0][ci] += 1
        c[1][ci] += n
        self.last_drop = -1
        return None

    # --- the same state for the C engine and the counter dump ---------------------------------

    def compiled_tables(self) -> tuple:
        """The arguments of `_fastpath.Engine.set_tables`: every table flattened so the C engine needs
        no match logic but a longest-prefix scan (classify: the class of every index, `classes`)."""
        lpm = []
        for i, e in enumerate(self.lpm_table.entries):
            value, plen = e.match[self.lpm_table.key]
            group, size = (e.params["group"], e.params["size"]) if e.action == P.SET_NHOP_GROUP else (-1, 0)
            lpm.append((value, plen, i, group, size))
        lpm.sort(key=lambda t: -t[1])  # a default route is a /0 entry (the miss action is const)
        nhop = [(g, m, i, dmac, port) for (g, m), (i, dmac, port) in self.nhop.items()]
        return (
            lpm,
            nhop,
            list(self.classes),
            list(self.thresholds),
            self.lb_mode,
            list(self.rr_next),
            len(self.lpm_table.entries),
            len(self.classify_table.entries),
        )

    def counters(self) -> dict:
        """Counters and registers in the layout of `_fastpath.Engine.counters()`."""

        def hits(table):
            return [v for h in table.hits for v in h]

        return {
            "admitted_pkts": self.admitted[0],
            "admitted_bytes": self.admitted[1],
            "early_pkts": self.early[0],
            "early_bytes": self.early[1],
            "tail_pkts": self.tail[0],
            "tail_bytes": self.tail[1],
            "drops_pkts": self.drops[0],
            "drops_bytes": self.drops[1],
            "lpm_hits": hits(self.lpm_table),
            "classify_hits": hits(self.classify_table),
            "occupancy": self.occupancy,
            "rr_next": self.rr_next,
            "last_drop": self.last_drop,
            "ce_pkts": self.ce_marked[0],
            "ce_bytes": self.ce_marked[1],
            "non_dlcp": {i: tuple(v) for i, v in self.non_dlcp.items()},
            "max_enq_qdepth": self.max_enq_qdepth,
            "delay_fine": self.delays.fine,
            "delay_coarse": self.delays.counts,
            "delay_n": self.delays.n,
            "delay_max": self.delays.max,
        }

    def sample(self) -> dict:
        """Occupancy now, its peak since the last sample (restarting from now) and per port the packet
        counts so far, all traffic and non-DLCP: `_fastpath.Engine.sample()`'s layout."""
        peak, self.occ_peak = self.occ_peak, list(self.occupancy)
        per_port = lambda counts: [sum(counts[p * PORT_SLOTS : (p + 1) * PORT_SLOTS]) for p in range(P.MAX_PORTS)]
        out = {
            "occupancy": list(self.occupancy),
            "peak": peak,
            "admitted_pkts": per_port(self.admitted[0]),
            "early_pkts": per_port(self.early[0]),
            "tail_pkts": per_port(self.tail[0]),
        }
        for k, name in enumerate(("admitted", "early", "tail")):
            totals = [0] * P.MAX_PORTS
            for i, v in self.non_dlcp.items():
                totals[i // (PORT_SLOTS * DSCP_CLASSES)] += v[k]
            out[f"non_dlcp_{name}_pkts"] = totals
        return out

    # --- egress --------------------------------------------------------------------------------

    def release(self, port: int, qid: int) -> None:
        """An admitted packet its queue could not take (the physical queue was full): its slot back."""
        oi = port * NQ + qid
        if self.occupancy[oi]:
            self.occupancy[oi] -= 1

    def egress(
        self, f: bytearray, port: int, qid: int, tel: int, enq_qdepth: int, deq_timedelta_us: int, csum_partial: bool
    ) -> None:
        """A dequeued packet leaves: its queue slot back, its queueing time and the depth it found
        counted, its telemetry block stamped."""
        self.release(port, qid)
        if enq_qdepth > self.max_enq_qdepth:
            self.max_enq_qdepth = enq_qdepth
        self.delays.add(deq_timedelta_us)
        if tel >= 0:
            stamp_telemetry(f, tel, enq_qdepth, deq_timedelta_us, csum_partial)


def stamp_telemetry(f: bytearray, tel: int, enq_qdepth: int, deq_timedelta_us: int, csum_partial: bool) -> None:
    """hops += 1, max_enq_qdepth = max(.., enq_qdepth), sum_deq_timedelta_us += wait; the UDP checksum
    follows unless it is zero (none) or partial (completed later by the kernel, per the vnet header).
    The reserved byte stays as it came (the P4 program never writes it)."""
    old = _TEL_WORDS.unpack_from(f, tel)
    w = list(H.TELEMETRY.unpack_from(f, tel))
    w[_HOPS.word] = (w[_HOPS.word] + 1) & _HOPS.mask
    w[_QDEPTH.word] = max(w[_QDEPTH.word], min(enq_qdepth, _QDEPTH.mask))
    w[_QTIME.word] = (w[_QTIME.word] + deq_timedelta_us) & _QTIME.mask
    H.TELEMETRY.pack_into(f, tel, *w)
    csum = (f[UDP_CSUM] << 8) | f[UDP_CSUM + 1]
    if csum == 0 or csum_partial:
        return
    x = ~csum & 0xFFFF
    for m, m2 in zip(old, _TEL_WORDS.unpack_from(f, tel)):
        x += (~m & 0xFFFF) + m2
    csum = ~_fold(x) & 0xFFFF
    _U16.pack_into(f, UDP_CSUM, csum or 0xFFFF)
