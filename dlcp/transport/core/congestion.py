"""The sender's congestion window toward one destination (docs/transport.md, "Congestion control").

`DctcpWindow` follows DCTCP (Alizadeh et al., SIGCOMM 2010; RFC 8257) on the receiver's FEEDBACK
frames, which report cumulative counts of the data packets received from this sender and of those
that carried the ECN mark CE (switches mark ECN-capable packets once their queue holds K packets):

- the window limits packets in flight: sent and neither reported received nor declared lost;
- once per window of data (about one round trip) alpha <- (1 - g) alpha + g F, F the fraction of
  the packets reported in that window that were marked (g = 1/16);
- marks reported for data sent after the last reduction: cwnd <- cwnd (1 - alpha / 2), at most once
  per round trip; otherwise slow start (+1 per packet reported) below ssthresh, +1 per window above;
- a packet not reported within the loss horizon (srtt + 4 rttvar + the receiver's feedback delay)
  is declared lost: it leaves the window, and the window halves (at most once per round trip), as
  DCTCP does on loss. A late report undoes the declaration, and once every packet declared lost
  in that episode has been reported, the halving too (as TCP undoes a spurious reduction): on
  hosts that run the transport in Python, round trips jump by milliseconds without any loss;
- no report at all: every horizon the packets sent before it are declared lost and the window
  halves, so it collapses to one packet within log2(cwnd) horizons and then lets one packet out per
  horizon until reports return. There is no separate retransmission timeout: under strict priority
  a sender whose low-priority packets wait behind other senders' traffic gets no report for a while
  either, and a timeout collapsed such windows for nothing (9 times per sender and run in the
  16-sender incast).

Round-trip samples come from FEEDBACK frames: each names the newest packet it counts, and the
sender knows when it sent that packet. Everything here counts packets, in seconds of the caller's
clock; no I/O.

`Unlimited` is the window of `cc = "none"`: no limit, no state.
"""

from __future__ import annotations

import math
from collections import deque

DCTCP_G = 1 / 16
MIN_WINDOW = 1.0
MAX_WINDOW = 4096.0
HORIZON_FLOOR_S = 0.002  # scheduling noise of the hosts: a packet is not lost before this
WRAP = 1 << 32
UNLIMITED_ROOM = 1 << 30


class Unlimited:
    """No congestion control: as much room as the host will take."""

    cwnd = math.inf
    in_flight = 0

    def room(self, now: float) -> int:
        return UNLIMITED_ROOM

    def on_sent(self, n: int, now: float) -> None:
        pass

    def on_feedback(self, rcvd: int, ce: int, rtt: float | None, now: float) -> None:
        pass

    def next_timer(self) -> float:
        return math.inf

    def on_timer(self, now: float) -> None:
        pass

    def stats(self) -> dict:
        return {}


class DctcpWindow:
    """DCTCP window toward one destination. `init` packets before the first report; `first_horizon_s`
    is the loss horizon before the first round-trip sample; `feedback_delay_s` is how long a receiver
    may hold a report (added to the horizon)."""

    def __init__(
        self, init: int, first_horizon_s: float, feedback_delay_s: float, horizon_floor_s: float = HORIZON_FLOOR_S
    ):
        self.horizon_floor_s = horizon_floor_s
        self.cwnd = float(init)
        self.ssthresh = math.inf
        self.alpha = 1.0  # as Linux starts it: the first marked window halves
        self.sent = 0  # data packets handed to the network (cumulative)
        self.delivered = 0  # reported received (cumulative)
        self.lost = 0  # declared lost and not reported since
        self.ce = 0  # reported marked (cumulative)
        self.srtt: float | None = None
        self.rttvar = 0.0
        self.first_horizon_s = first_horizon_s
        self.feedback_delay_s = feedback_delay_s
        self._raw: tuple[int, int] | None = None  # the last report's counters, as sent (mod 2**32)
        self._ledger: deque = deque()  # (sent count after a send, its time), oldest first, not yet done
        self._recover = 0  # `sent` at the last reduction: no second one before `done` passes it
        self._win_end = 0  # the observation window ends once `done` reaches this
        self._win_pkts = 0
        self._win_ce = 0
        self._undo: list | None = None  # [cwnd, ssthresh, packets] before the last loss reduction
        self.counts = {
            "reductions_ecn": 0,
            "reductions_loss": 0,
            "reductions_undone": 0,
            "declared_lost": 0,
            "spurious_lost": 0,
        }

    # --- state ---------------------------------------------------------------------------------

    @property
    def done(self) -> int:
        return min(self.sent, self.delivered + self.lost)

    @property
    def in_flight(self) -> int:
        return self.sent - self.done

    def horizon(self) -> float:
        """How long a packet may go unreported before it is declared lost."""
        if self.srtt is None:
            return self.first_horizon_s
        return max(self.horizon_floor_s, self.srtt + 4 * self.rttvar + self.feedback_delay_s)

    # --- events --------------------------------------------------------------------------------

    def room(self, now: float) -> int:
        """Packets that may be sent now."""
        self._age(now)
        return max(0, int(self.cwnd) - self.in_flight)

    def on_sent(self, n: int, now: float) -> None:
        self.sent += n
        if not self._win_end:  # the first observation window is the first flight
            self._win_end = self.sent
        self._ledger.append((self.sent, now))

    def on_feedback(self, rcvd: int, ce: int, rtt: float | None, now: float) -> None:
        """A FEEDBACK frame: cumulative counters `rcvd`, `ce` (mod 2**32); `rtt` the round trip of the
        packet it names, when the sender knows it."""
        if self._raw is None:
            d, c = rcvd, ce
        else:
            d, c = (rcvd - self._raw[0]) % WRAP, (ce - self._raw[1]) % WRAP
            if d >= WRAP // 2:  # older than the last report (cannot happen on one TCP stream)
                return
        self._raw = (rcvd, ce)
        if rtt is not None:
            self._rtt_sample(rtt)
        if not d and not c:
            return
        self.delivered += d
        self.ce += c
        over = self.delivered + self.lost - self.sent  # reports of packets declared lost: undo that
        if over > 0 and self.lost:
            undo = min(over, self.lost)
            self.lost -= undo
            self.counts["spurious_lost"] += undo
            if self._undo is not None:
                self._undo[2] -= undo
                if self._undo[2] <= 0:  # every loss of that episode was only late: undo its reduction
                    self.cwnd = max(self.cwnd, self._undo[0])
                    self.ssthresh = max(self.ssthresh, self._undo[1])
                    self._undo = None
                    self.counts["reductions_undone"] += 1
        done = self.done
        led = self._ledger
        while led and led[0][0] <= done:
            led.popleft()
        self._win_pkts += d
        self._win_ce += c
        if c:
            if done > self._recover:  # marks on data sent after the last reduction
                self._undo = None  # real congestion: no undoing an earlier reduction
                self.cwnd = max(MIN_WINDOW, self.cwnd * (1 - self.alpha / 2))
                self.ssthresh = self.cwnd
                self._recover = self.sent
                self.counts["reductions_ecn"] += 1
        elif self.cwnd < self.ssthresh:
            self.cwnd = min(MAX_WINDOW, self.cwnd + d)
        else:
            self.cwnd = min(MAX_WINDOW, self.cwnd + d / self.cwnd)
        if done >= self._win_end:
            f = self._win_ce / self._win_pkts if self._win_pkts else 0.0
            self.alpha = (1 - DCTCP_G) * self.alpha + DCTCP_G * min(1.0, f)
            self._win_pkts = self._win_ce = 0
            self._win_end = self.sent

    def next_timer(self) -> float:
        """When `on_timer` has something to do (a loss to declare), or inf."""
        if not self._ledger:
            return math.inf
        return self._ledger[0][1] + self.horizon()

    def on_timer(self, now: float) -> None:
        self._age(now)

    def stats(self) -> dict:
        return {
            "cwnd": round(self.cwnd, 2),
            "alpha": round(self.alpha, 4),
            "srtt_ms": None if self.srtt is None else round(self.srtt * 1e3, 3),
            "sent": self.sent,
            "delivered": self.delivered,
            "ce": self.ce,
            **self.counts,
        }

    # --- internals -----------------------------------------------------------------------------

    def _age(self, now: float) -> None:
        """Declare lost what was sent longer than the horizon ago and is still unreported."""
        led = self._ledger
        if not led:
            return
        h = self.horizon()
        while led and led[0][1] + h <= now:  # the same sum as next_timer: no rounding gap
            cum = led.popleft()[0]
            gap = cum - self.done
            if gap > 0:
                self.lost += gap
                self.counts["declared_lost"] += gap
                if cum > self._recover:
                    self._undo = [self.cwnd, self.ssthresh, 0]
                    self.cwnd = max(MIN_WINDOW, self.cwnd / 2)
                    self.ssthresh = self.cwnd
                    self._recover = self.sent
                    self.counts["reductions_loss"] += 1
                if self._undo is not None:
                    self._undo[2] += gap

    def _rtt_sample(self, r: float) -> None:
        r = max(r, 0.0)
        if self.srtt is None:
            self.srtt, self.rttvar = r, r / 2
        else:
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - r)
            self.srtt = 0.875 * self.srtt + 0.125 * r
