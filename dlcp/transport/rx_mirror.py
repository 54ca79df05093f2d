"""The C receive path of one endpoint (dlcp/transport/c/rx_core.h) and what it needs of the protocol
core's receiver (`ReceiverCore`): one mirror for every driver that has the path, the UDP driver (its
extension, `_rxpath.RxPath`) and the ns-3 hosts (`DlcpRxPath`, simulation/ns3/cpp/dlcp_rx.h). Both
have the methods Setup, Open, Close, Budget and Take.

C takes a data packet only where the receiver would do nothing with it but count it, copy its
payload and mark its chunk: a packet of a message opened here (`publish`: one with no PROBE waiting
and no BITMAP out, so the packet cannot complete a round or answer a request) that is not a
duplicate and passes every check of `on_datagram`, while its sender's FEEDBACK budget lasts (the
packets C may count before the core's FEEDBACK rule can do something: one while no FEEDBACK delay
runs, as that packet starts it; `feedback_every` less those unreported while one runs; any while the
sender wants none). On the packet that uses up a budget C stops and the driver calls `decide`: the
core applies its rule (`ReceiverCore.counted`). A driver that watches the FEEDBACK delays C starts
(`starts_delays`: the UDP driver, whose wait in C arms its timer for them) lets C start the delay
too: with the budget C gets the delay's length (`ReceiverCore._feedback_delay`, the one statement of
it), starts it on the sender's first packet as the rule would, and the budget runs to the packet
that makes a FEEDBACK due, so the core decides only when a FEEDBACK goes out; the delay reaches the
core at the next `take`, before its timers are read. Payload, bitmap and per-packet times go
straight into the receiver's numpy / bytearray buffers; counters and times wait in C until `take`,
which every entry into the receiver calls first. After each entry `publish` takes back what the
receiver must see each packet of (messages finished, probed or asked for, dropped) and gives C the
new budgets.

Modes (`DLCP_RX`, read when an endpoint is built): "c" (the default where the path exists),
"python" (every datagram through `ReceiverCore.on_datagram`, the path the C one must equal), and
"c-per-datagram" (C passes up whole every packet on which the FEEDBACK rule may act, and a message's
first data packet: the ns-3 hosts' default, DLCP_SIM_RX=cpp, and `dlcp bench datapath`'s third path).
"""

from __future__ import annotations

import ctypes
import math
import os

import numpy as np

from dlcp.wire.header import HEADER, HEADER_LEN, PHASE_MASK, PHASE_SHIFT, VALUE_BYTES

RX_MODES = ("c", "python", "c-per-datagram")
RX_UP, RX_TAKEN, RX_DECIDE = 0, 1, 2  # what the C path did with a datagram (rx_core.h; the extension's constants)
ROWS = 256  # rows per Take


def rx_mode() -> str:
    """The receive path asked for (DLCP_RX); a bad value is one line naming it."""
    mode = os.environ.get("DLCP_RX", "c")
    if mode not in RX_MODES:
        raise ValueError(f"DLCP_RX={mode!r}: one of {', '.join(RX_MODES)}")
    return mode


class RxMirror:
    """See the module docstring. `rx`: the ReceiverCore; `path`: its C receive path; `mode`: one of
    RX_MODES ("python" leaves the path unused); `starts_delays`: C starts the FEEDBACK delays (the
    driver takes before it reads the core's timers, and sees a delay C started end)."""

    def __init__(self, rx, path, mode: str = "c", starts_delays: bool = False):
        assert VALUE_BYTES == 4, "rx_core.h copies fp32 values"
        if mode not in RX_MODES:
            raise ValueError(f"receive path mode {mode!r}: one of {', '.join(RX_MODES)}")
        self.rx, self.path, self.mode = rx, path, mode
        self.enabled = mode != "python"
        self.batched = mode == "c"
        self.starts_delays = starts_delays and self.enabled
        self.feedback_every = rx.cfg.feedback_every
        self.opened: dict = {}  # key -> (slot, _Rx, pinned bitmap): C writes into these buffers
        self.key_of: dict[int, tuple] = {}  # slot -> key
        self.budget: dict[int, tuple[int, bool, float | None]] = {}  # source -> what C holds (packets, decide, delay)
        self._slot = 0
        self.width = 12  # doubles per row (rx_core.h RX_ROW_LEN)
        self._rows = np.zeros(ROWS * self.width + 4 + 120, dtype=np.float64)  # rows, then the wait area
        self._waits = self._rows[ROWS * self.width :]
        self._pending = bytearray(1)  # C sets it while there is something to take
        self._pending_pin = (ctypes.c_char * 1).from_buffer(self._pending)
        path.Setup(
            self.enabled,
            rx.cfg.job_id,
            rx.cfg.values_per_pkt,
            rx.wall_offset_s,
            rx._host_mark_s,
            self._rows.ctypes.data,
            ROWS,
            ctypes.addressof(self._pending_pin),
        )

    def take(self) -> None:
        """Add what C counted to the receiver's messages, sources, totals and socket waits."""
        if not self._pending[0]:
            return
        rx, rows, w = self.rx, self._rows, self.width
        while True:
            n = int(self.path.Take())
            for r in rows[: n * w].reshape(n, w).tolist():
                pkts = int(r[2])
                if r[0] == 0:
                    st = self.opened[self.key_of[int(r[1])]][1]
                    st.n_received += pkts
                    st.retx += int(r[3])
                    st.n_orig += int(r[4])
                    rx.totals["pkts_rcvd"] += pkts
                    rx.totals["bytes_rcvd"] += int(r[5])
                    if r[6] >= 0:
                        st.orig_last_t = r[6]
                    st.last_t = r[7]
                    if r[8] >= 0:
                        st.last_len = int(r[8])
                    if r[9] >= 0:  # its first data packet
                        st.first_t = r[9]
                        st.first_byte_us = rx._wall_us(r[9])
                else:
                    src = int(r[1])
                    s = rx._sources[src]
                    if s.rcvd == s.reported:  # the first of these is the oldest packet not reported yet
                        s.first_t = r[6]
                        s.span += int(r[8]) - int(r[9])  # the bytes after it
                    else:
                        s.span += int(r[8])
                    s.last_t = r[7]
                    s.rcvd += pkts
                    s.ce += int(r[3])
                    key = self.key_of[int(r[4])]
                    s.key, s.n_pkts, s.seq = key, self.opened[key][1].n_pkts, int(r[5])
                    left, decide, delay = self.budget.get(src, (0, False, None))
                    if left > 0:
                        left -= pkts
                    if r[10]:  # C started its FEEDBACK delay, as the rule would have
                        s.due, delay = r[11], None
                        rx._fb_due.add(src)
                    self.budget[src] = (left, decide, delay)
            waits = self._waits
            if waits[0]:
                self._add_waits(waits)
            if n < ROWS:
                break

    def _add_waits(self, waits: np.ndarray) -> None:
        h = self.rx.socket_wait
        h.count += int(waits[1])
        h.max_s = max(h.max_s, float(waits[2]))
        self.rx.totals["host_marked"] += int(waits[3])
        bins = waits[4:]
        for b in np.flatnonzero(bins).tolist():  # a few of the 120 bins at a time
            h.bins[b] += int(bins[b])
        waits[0] = 0

    def decide(self, src: int, now: float) -> None:
        """C took a packet of `src` that used up its budget: the core's FEEDBACK rule decides. The
        rule touches only that sender's FEEDBACK state, so only its budget can change."""
        self.take()
        self.rx.counted(src, now)
        self._give_budget(src, self.rx._sources[src])

    def open_after(self, data) -> None:
        """After the receiver took datagram `data` (per-datagram mode: a message opens once its first
        data packet went through the receiver)."""
        if self.batched or not self.enabled or len(data) < HEADER_LEN:
            return
        _vt, pdp, _j, src, it, msg, *_rest = HEADER.unpack_from(data, 0)
        key = (src, it, (pdp >> PHASE_SHIFT) & PHASE_MASK, msg)
        st = self.rx._rx.get(key)
        if key not in self.opened and st is not None and st.first_byte_us is not None and self._openable(st):
            self._open(key, st)

    def _open(self, key, st) -> None:
        self._slot += 1
        pin = (ctypes.c_char * st.n_pkts).from_buffer(st.received)  # and the bitmap cannot be resized
        self.opened[key] = (self._slot, st, pin)
        self.key_of[self._slot] = key
        self.path.Open(
            key[0],
            key[1],
            key[2],
            key[3],
            st.n_pkts,
            self._slot,
            st.buf.ctypes.data,
            st.buf.nbytes,
            ctypes.addressof(pin),
            st.recv_us.ctypes.data if st.recv_us is not None else 0,
            st.first_byte_us is not None,
        )

    @staticmethod
    def _openable(st) -> bool:
        """C may take packets of this message: none of them can complete a PROBE's round or a
        BITMAP's request (which the receiver answers or counts)."""
        return not st.probe_round and st.requested is None

    def publish(self, scan: bool = False) -> None:
        """After the receiver acted: take back the messages it finished, dropped or must now see
        each packet of; with `scan` (after a datagram or a control frame went through it: a message
        may have been created) open the new ones; give C each sender's budget."""
        if not self.enabled:
            return
        rx = self.rx
        for key, (slot, st, _pin) in list(self.opened.items()):
            if rx._rx.get(key) is not st or not self._openable(st):
                self.path.Close(key[0], key[1], key[2], key[3])
                del self.opened[key], self.key_of[slot]
        if scan and self.batched:
            for key, st in rx._rx.items():
                if key not in self.opened and self._openable(st):
                    self._open(key, st)
        for src, s in rx._sources.items():
            self._give_budget(src, s)

    def _give_budget(self, src: int, s) -> None:
        """Tell C how many packets of `src` it may count before the FEEDBACK rule can act (its
        _Source `s`): any while the sender wants no FEEDBACK; batched, up to and including the one
        that starts the delay or makes a FEEDBACK due (with `starts_delays`, up to the one that
        makes a FEEDBACK due, and the delay C starts); per datagram, those before it."""
        every = self.feedback_every
        left = every - (s.rcvd - s.reported)
        b: tuple[int, bool, float | None]
        if not s.want:
            b = (-1, False, None)
        elif s.due == math.inf and not self.starts_delays:  # the packet that starts the delay: the core's
            b = (1, True, None) if self.batched else (0, False, None)
        else:
            delay = self.rx._feedback_delay(s) if s.due == math.inf else None
            b = (max(1, left), True, delay) if self.batched else (max(0, left - 1), False, delay)
        if self.budget.get(src) != b:
            if b[2] is None:
                self.path.Budget(src, b[0], b[1])
            else:
                self.path.Budget(src, b[0], b[1], b[2])
            self.budget[src] = b

    def datagram(self, data, ecn: int, now: float, queued_s: float = 0.0) -> None:
        """A datagram the C path did not take (or, in "python" mode, any): through the receiver."""
        self.take()
        self.rx.on_datagram(data, ecn, now, queued_s)
        self.open_after(data)
        self.publish(scan=True)


def load_rxpath():
    """The UDP driver's C receive path module, checked to be built from the sources beside it;
    ImportError (with the reason) when it is absent or stale."""
    from dlcp.transport import _rxpath, rxpath_source  # type: ignore[attr-defined]

    if all(path.exists() for path in rxpath_source.SOURCES):  # noqa: SIM102
        if getattr(_rxpath, "SOURCE_SHA", None) != rxpath_source.source_sha():
            raise ImportError(
                "the built _rxpath module is stale (built from another _rxpath.c, rx_core.h or dlcp_wire.h); "
                "rebuild with make setup"
            )
    return _rxpath
