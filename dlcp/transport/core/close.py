"""Receiver-initiated closes, without I/O: when a receiver ends a message on its own, before (or
instead of) the sender's PROBE asking, taking what arrived (docs/bounded-loss.md).

The bounded-loss transport ends a message when the sender's in-band PROBE finds the loss within
budget; the PROBE queues behind the message's own data, so the receiver waits for all of it. The
newer systems stop waiting earlier, each by its own rule:

- `TimeoutClose` (OptiReduce's Unreliable Bounded Transport, adaptive time-out; our
  reconstruction): a message recurs every iteration (same source, phase and wire id), so the
  receiver keeps the last `close_timeout_window` completion times of each and ends the next one
  `close_timeout_slack` x their `close_timeout_pctl` percentile after it started. Until the window
  is full it waits as the PROBE says.
- `EarlyClose` (LTP's Early Close; our reconstruction): a message ends once a share 1 - b of its
  packets arrived and its data has been quiet for the source's quiet time (the rest is stuck in a
  queue or lost). The loss-tolerant bound b adapts per source to the network: b = gain x the EWMA
  of the share of each finished message's packets that missed their first round (lost or
  retransmitted), within `close_early_min`..`close_early_max`.

Either way a message with a protected packet missing is not closed: the PROBE / BITMAP exchange
recovers it, as it does for every system (docs/transport.md). The receiver (receiver.py) asks a
rule which of its open messages are due (`due`), when the next one is (`next_time`), and tells it
what finished (`finished`); the rule keeps per-message and per-source state only.
"""

from __future__ import annotations

import collections
import math

import numpy as np

EWMA_G = 0.25  # weight of a new message in the early-close loss estimate


def protected_missing(st) -> bool:
    """Whether a protected packet (drop precedence 0) of message `st` has not arrived."""
    recvd = np.frombuffer(st.received, dtype=np.uint8)
    return bool(((recvd == 0) & (st.desc.drop_prec == 0)).any())


class TimeoutClose:
    """OptiReduce's adaptive time-out (see the module docstring)."""

    name = "timeout"

    def __init__(self, pctl: float, window: int, slack: float, wall_offset_s: float):
        self.pctl, self.window, self.slack = pctl, window, slack
        self.wall_offset_s = wall_offset_s
        self._history: dict = {}  # (src, phase, msg_id) -> deque of completion times (s)
        self._deadline: dict = {}  # open message key -> when it closes (inf: it cannot)

    def timeout(self, key) -> float:
        """The time-out of message `key` (inf until its window of completions is full)."""
        h = self._history.get((key[0], key[2], key[3]))
        if h is None or len(h) < self.window:
            return math.inf
        return self.slack * float(np.percentile(np.fromiter(h, float), self.pctl))

    def opened(self, st, now: float) -> None:
        self._deadline[st.key] = self._start(st) + self.timeout(st.key)

    def next_time(self, st) -> float:
        return self._deadline.get(st.key, math.inf)

    def due(self, st, now: float) -> bool:
        """Close `st` now? At its deadline, unless a protected packet is missing (then never: the
        PROBE's answer recovers it)."""
        if now < self._deadline.get(st.key, math.inf):
            return False
        if protected_missing(st):
            self._deadline[st.key] = math.inf
            return False
        return True

    def finished(self, st, missed: int, closed: bool, now: float) -> None:
        self._deadline.pop(st.key, None)
        h = self._history.setdefault((st.key[0], st.key[2], st.key[3]), collections.deque(maxlen=self.window))
        h.append(max(0.0, now - self._start(st)))  # a closed message counts at its time-out: censored, not shorter

    def _start(self, st) -> float:
        return st.start_us / 1e6 - self.wall_offset_s

    def stats(self) -> dict:
        return {}


class EarlyClose:
    """LTP's Early Close (see the module docstring). `quiet_of(src)`: the receiver's quiet time for
    that source (seconds)."""

    name = "early"

    def __init__(self, lo: float, hi: float, gain: float, quiet_of):
        self.lo, self.hi, self.gain = lo, hi, gain
        self.quiet_of = quiet_of
        self._missed: dict[int, float] = {}  # source -> EWMA of the share that missed its first round
        self._checked: dict = {}  # open message key -> its last_t when a protected packet was missing

    def bound(self, src: int) -> float:
        """The loss-tolerant bound b of source `src`."""
        return min(self.hi, max(self.lo, self.gain * self._missed.get(src, 0.0)))

    def opened(self, st, now: float) -> None:
        pass

    def next_time(self, st) -> float:
        if st.n_received < self._needed(st) or self._checked.get(st.key) == st.last_t:
            return math.inf
        return max(st.last_t, st.first_t) + self.quiet_of(st.key[0])

    def due(self, st, now: float) -> bool:
        if now < self.next_time(st):
            return False
        if protected_missing(st):
            self._checked[st.key] = st.last_t  # look again when more data arrives
            return False
        return True

    def finished(self, st, missed: int, closed: bool, now: float) -> None:
        self._checked.pop(st.key, None)
        src = st.key[0]
        share = missed / max(1, st.n_pkts)
        self._missed[src] = (1 - EWMA_G) * self._missed.get(src, share) + EWMA_G * share

    def _needed(self, st) -> int:
        """Packets that must be in before the message may close: at least one, all but b of them."""
        return max(1, math.ceil((1.0 - self.bound(st.key[0])) * st.n_pkts - 1e-9))

    def stats(self) -> dict:
        return {"close_bound": {str(k): round(self.bound(k), 4) for k in self._missed}}


def make_close_rule(cfg, quiet_of, wall_offset_s: float):
    """The close rule `cfg.close` names (None for "probe": only the PROBE's answer ends a message)."""
    if cfg.close == "timeout":
        return TimeoutClose(cfg.close_timeout_pctl, cfg.close_timeout_window, cfg.close_timeout_slack, wall_offset_s)
    if cfg.close == "early":
        return EarlyClose(cfg.close_early_min, cfg.close_early_max, cfg.close_early_gain, quiet_of)
    return None
