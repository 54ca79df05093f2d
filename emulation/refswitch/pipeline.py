"""The DLCP switch pipeline of docs/pipeline.md, table by table, on one Ethernet frame at a time.

Pure Python, no sockets: `ingress()` parses a frame (a bytearray, edited in place), applies the
tables, runs admission control and returns where the packet goes; `egress()` releases its queue slot
and stamps telemetry. The switch process (switch.py) and the tests drive the same object.

Per-packet decisions that only depend on header fields are cached (LPM result per destination,
class per (dlcp_valid, prio, drop_prec, dscp), crc16 per 5-tuple); the tables are fixed for the life
of a Pipeline, so the caches never go stale.
"""

from __future__ import annotations

import random
import struct

from dlcp.experiment import pipeline_names as P
from dlcp.wire import header as H
from emulation.refswitch.hashing import crc16
from emulation.refswitch.match_tables import build_tables
from emulation.refswitch.runtime import Runtime, RuntimeFileError

PARSER_ERROR = P.DROP_REASONS["parser_error"]
NOT_IPV4 = P.DROP_REASONS["not_ipv4"]
NO_ROUTE = P.DROP_REASONS["no_route"]
TTL_EXPIRED = P.DROP_REASONS["ttl_expired"]
QUEUE_SLOTS = P.MAX_PORTS * P.N_QUEUES
COUNTER_SLOTS = QUEUE_SLOTS * P.N_COLORS
TOS_CLASSES = 8  # dscp >> 3 of frames without a DLCP header (their non_dlcp counters)

ETH_LEN = 14
IPV4_LEN = 20
UDP_LEN = 8
L4 = ETH_LEN + IPV4_LEN  # transport header offset (only parsed when IHL is 5)
DLCP_OFF = L4 + UDP_LEN
TEL_OFF = DLCP_OFF + H.HEADER_LEN
UDP_CSUM = L4 + 6
_CACHE_MAX = 1 << 16

_U16 = struct.Struct("!H")
_TEL = struct.Struct("!BxHI")
_TEL_QD_TOTAL = struct.Struct("!HI")


def _fold(x: int) -> int:
    while x >> 16:
        x = (x & 0xFFFF) + (x >> 16)
    return x


class Pipeline:
    """Tables, registers and counters of one switch."""

    def __init__(self, runtime: Runtime, data_port: int = H.DATA_PORT, seed: int | None = None):
        try:
            self.tables = build_tables(runtime.entries)
        except ValueError as e:
            raise RuntimeFileError(f"{runtime.source}: {e}") from None
        self.data_port = data_port
        self.rng = random.Random(seed)
        lpm, nhop = self.tables[P.IPV4_LPM], self.tables[P.NHOP]
        self.lpm_table = lpm
        self.classify_table = self.tables[P.CLASSIFY]
        # nhop: (group, member) -> (entry index, dmac bytes, port)
        self.nhop = {k: (i, nhop.entries[i].params["dmac"].to_bytes(6, "big"), nhop.entries[i].params["port"])
                     for k, i in nhop.index.items() if nhop.entries[i].action == P.SET_NHOP}
        _, action, params = self.tables[P.LB_CONFIG].default
        self.lb_mode = params["mode"]
        th = self.tables[P.QUEUE_THRESHOLDS]
        self.thresholds = [self._thresholds(th.lookup(port)) for port in range(P.MAX_PORTS)]
        # registers
        self.occupancy = [0] * QUEUE_SLOTS
        self.rr_next = [0] * P.MAX_GROUPS
        for name, index, value in runtime.registers:
            if name == P.RR_NEXT:
                self.rr_next[index] = value
        # counters: queue counters indexed (port * 8 + qid) * 4 + color
        self.admitted = [[0] * COUNTER_SLOTS, [0] * COUNTER_SLOTS]  # [pkts, bytes]
        self.early = [[0] * COUNTER_SLOTS, [0] * COUNTER_SLOTS]
        self.tail = [[0] * COUNTER_SLOTS, [0] * COUNTER_SLOTS]
        self.drops = [[0] * 8, [0] * 8]
        # the share of the packet counts above from frames without a DLCP header (background and
        # control traffic), index counter slot * 8 + dscp class -> [admitted, early, tail]
        self.non_dlcp: dict[int, list[int]] = {}
        self.occ_peak = [0] * QUEUE_SLOTS  # highest occupancy since the last sample()
        self.last_drop = -1  # reason of the last dropped packet (tests, debug log)
        self._lpm_cache: dict[int, tuple] = {}
        self._class_cache: dict[int, tuple] = {}
        self._hash_cache: dict[bytes, int] = {}

    @staticmethod
    def _thresholds(hit) -> tuple[int, int, int, int]:
        _, _, p = hit
        return (p["qmax"], p["k1"], p["k2"], p["k3"])

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

    def _classify(self, key: int) -> tuple:
        """classify for (dlcp_valid, prio/drop_prec byte, dscp): (entry index, qid, color)."""
        r = self._class_cache.get(key)
        if r is None:
            valid, pdp, dscp = key >> 16, (key >> 8) & 0xFF, key & 0xFF
            prio, dp = pdp >> 5, (pdp >> 3) & 3
            i, action, params = self.classify_table.lookup(dlcp_valid=valid, dlcp_prio=prio,
                                                           dlcp_drop_prec=dp, dscp=dscp)
            if action == P.CLASSIFY_FROM_DLCP:
                r = (i, prio, dp)
            elif action == P.CLASSIFY_FROM_DSCP:
                r = (i, dscp >> 3, (dscp >> 1) & 3)
            else:
                r = (i, params["qid"], params["color"])
            self._class_cache[key] = r
        return r

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
                    if n < TEL_OFF or f[DLCP_OFF] >> 4 != H.VERSION:
                        return self._drop(PARSER_ERROR, n)
                    dlcp = 1
                    if f[DLCP_OFF + 11] & H.FLAG_TELEMETRY:
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
        if dlcp and mode == 1:
            member = int(self.rng.random() * size)
        elif dlcp and mode == 2:
            r = self.rr_next[group]
            member = r % size
            self.rr_next[group] = (r + 1) & 0xFFFF
        else:
            member = self._flow_hash(f, proto, sport, dport) % size
        # nhop
        nh = self.nhop.get((group, member))
        if nh is None:
            return self._drop(NO_ROUTE, n)
        _, dmac, port = nh
        f[0:12] = dmac + f[0:6]
        # classify
        ci, qid, color = self._classify((dlcp << 16) | ((f[DLCP_OFF + 1] & 0xF8) << 8 if dlcp else 0) | (f[15] >> 2))
        if ci >= 0:
            hits = self.classify_table.hits[ci]
            hits[0] += 1
            hits[1] += n
        # queue_thresholds + admission
        qmax, k1, k2, k3 = self.thresholds[port]
        oi = port * 8 + qid
        occ = self.occupancy[oi]
        ci = oi * 4 + color
        if occ >= qmax:
            c, kind = self.tail, 2
        elif color and occ >= (k1, k2, k3)[color - 1]:
            c, kind = self.early, 1
        else:
            c, kind = self.admitted, 0
        if not dlcp:
            self.non_dlcp.setdefault(ci * TOS_CLASSES + (f[15] >> 5), [0, 0, 0])[kind] += 1
        if kind == 0:
            self.occupancy[oi] = occ + 1
            if occ + 1 > self.occ_peak[oi]:
                self.occ_peak[oi] = occ + 1
            c[0][ci] += 1
            c[1][ci] += n
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
        no match logic but a longest-prefix scan (classify is precomputed over all 4096 keys)."""
        lpm = []
        for i, e in enumerate(self.lpm_table.entries):
            value, plen = e.match[self.lpm_table.key]
            group, size = (e.params["group"], e.params["size"]) if e.action == P.SET_NHOP_GROUP else (-1, 0)
            lpm.append((value, plen, i, group, size))
        _, action, params = self.lpm_table.default
        if action == P.SET_NHOP_GROUP:  # a default route: the shortest prefix of all, not counted
            lpm.append((0, 0, -1, params["group"], params["size"]))
        lpm.sort(key=lambda t: -t[1])
        nhop = [(g, m, i, dmac, port) for (g, m), (i, dmac, port) in self.nhop.items()]
        classify = []
        for key in range(4096):
            valid, prio, dp, dscp = key >> 11, (key >> 8) & 7, (key >> 6) & 3, key & 63
            classify.append(self._classify((valid << 16) | (((prio << 5) | (dp << 3)) << 8) | dscp))
        return (lpm, nhop, classify, list(self.thresholds), self.lb_mode, list(self.rr_next),
                len(self.lpm_table.entries), len(self.classify_table.entries))

    def counters(self) -> dict:
        """Counters and registers in the layout of `_fastpath.Engine.counters()`."""
        def hits(table):
            return [v for h in table.hits for v in h]
        return {"admitted_pkts": self.admitted[0], "admitted_bytes": self.admitted[1],
                "early_pkts": self.early[0], "early_bytes": self.early[1],
                "tail_pkts": self.tail[0], "tail_bytes": self.tail[1],
                "drops_pkts": self.drops[0], "drops_bytes": self.drops[1],
                "lpm_hits": hits(self.lpm_table), "classify_hits": hits(self.classify_table),
                "occupancy": self.occupancy, "rr_next": self.rr_next, "last_drop": self.last_drop,
                "non_dlcp": {i: tuple(v) for i, v in self.non_dlcp.items()}}

    def sample(self) -> dict:
        """Occupancy now, its peak since the last sample (restarting from now) and per port the packet
        counts so far, all traffic and non-DLCP: `_fastpath.Engine.sample()`'s layout."""
        peak, self.occ_peak = self.occ_peak, list(self.occupancy)
        per_port = lambda counts: [sum(counts[p * 32:(p + 1) * 32]) for p in range(P.MAX_PORTS)]  # noqa: E731
        out = {"occupancy": list(self.occupancy), "peak": peak, "admitted_pkts": per_port(self.admitted[0]),
               "early_pkts": per_port(self.early[0]), "tail_pkts": per_port(self.tail[0])}
        for k, name in enumerate(("admitted", "early", "tail")):
            totals = [0] * P.MAX_PORTS
            for i, v in self.non_dlcp.items():
                totals[i // (32 * TOS_CLASSES)] += v[k]
            out[f"non_dlcp_{name}_pkts"] = totals
        return out

    # --- egress --------------------------------------------------------------------------------

    def egress(self, f: bytearray, port: int, qid: int, tel: int, enq_qdepth: int, deq_timedelta_us: int,
               csum_partial: bool) -> None:
        """Release the queue slot of a dequeued packet and stamp its telemetry block."""
        oi = port * 8 + qid
        if self.occupancy[oi]:
            self.occupancy[oi] -= 1
        if tel >= 0:
            stamp_telemetry(f, tel, enq_qdepth, deq_timedelta_us, csum_partial)


def stamp_telemetry(f: bytearray, tel: int, enq_qdepth: int, deq_timedelta_us: int, csum_partial: bool) -> None:
    """hops += 1, max_enq_qdepth = max(.., enq_qdepth), sum_deq_timedelta_us += wait; the UDP checksum
    follows unless it is zero (none) or partial (completed later by the kernel, per the vnet header)."""
    hops, qd, total = _TEL.unpack_from(f, tel)
    old = (f[tel] << 8 | f[tel + 1], qd, total >> 16, total & 0xFFFF)
    hops = (hops + 1) & 0xFF
    qd = max(qd, min(enq_qdepth, 0xFFFF))
    total = (total + deq_timedelta_us) & 0xFFFFFFFF
    f[tel] = hops  # the reserved byte stays as it came (the P4 program never writes it)
    _TEL_QD_TOTAL.pack_into(f, tel + 2, qd, total)
    csum = (f[UDP_CSUM] << 8) | f[UDP_CSUM + 1]
    if csum == 0 or csum_partial:
        return
    new = (f[tel] << 8 | f[tel + 1], qd, total >> 16, total & 0xFFFF)
    x = ~csum & 0xFFFF
    for m, m2 in zip(old, new):
        x += (~m & 0xFFFF) + m2
    csum = ~_fold(x) & 0xFFFF
    _U16.pack_into(f, UDP_CSUM, csum or 0xFFFF)
