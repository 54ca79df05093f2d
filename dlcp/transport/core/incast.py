"""The sender's incast bound, without I/O: to how many destinations a sender transmits at once
(`dlcp.incast`, `dlcp.incast_adaptive`; docs/bounded-loss.md).

A collective in which every rank sends to every other at once (OptiReduce's Transpose AllReduce,
dlcp/comm/plans/tar.py) puts P - 1 senders on every receiver's link in the same instant: an incast
that overflows the receiver's port. OptiReduce bounds it ("dynamic incast") [V: abstract]; how it
picks the bound is not public to us, so this is our reconstruction [D]:

- A sender transmits the original rounds of at most k destinations at a time, the `active` ones. A
  destination stays active until every round queued for it has been handed out; the next is the
  first waiting destination after this sender's own rank, in rank order (rank r starts at r + 1),
  so with every rank doing the same each receiver has about k senders at once.
- Retransmission rounds are never held back (they are few and the message waits for them).
- Adaptive: k grows by 1/k per message that finished clean (nothing lost or retransmitted) and
  halves, at most once per k messages, after one that did not, within 1..`incast` (additive
  increase, multiplicative decrease per message, as a window does per packet).
"""

from __future__ import annotations

import math

MAX_DESTINATIONS = 254  # `incast = 0` with adaptation: at most every wire rank


class IncastWindow:
    """Which destinations may transmit now (see the module docstring)."""

    def __init__(self, rank: int, limit: int, adaptive: bool):
        self.rank = rank
        self.limit = limit if limit > 0 else MAX_DESTINATIONS
        self.adaptive = adaptive
        self.k = float(self.limit if not adaptive else min(self.limit, 2))
        self.active: set[int] = set()
        self._since_cut = 0  # messages finished since the last halving
        self.cuts = 0

    def _order(self, dst: int) -> int:
        return (dst - self.rank - 1) % 256

    def admits(self, dst: int, waiting, retx: bool) -> bool:
        """May the next round queued for `dst` go now? `waiting`: every destination with a round
        queued (the sender's turn order)."""
        if retx or dst in self.active:
            return True
        self.active.intersection_update(waiting)  # destinations with nothing queued are done
        if len(self.active) >= max(1, math.floor(self.k)):
            return False
        first = min((d for d in waiting if d not in self.active), key=self._order)
        if first != dst:
            return False
        self.active.add(dst)
        return True

    def finished(self, clean: bool) -> None:
        """A message finished: clean (nothing lost or retransmitted) or not."""
        if not self.adaptive:
            return
        self._since_cut += 1
        if clean:
            self.k = min(float(self.limit), self.k + 1.0 / self.k)
        elif self._since_cut >= self.k:
            self.k = max(1.0, self.k / 2)
            self._since_cut = 0
            self.cuts += 1

    def stats(self) -> dict:
        return {"incast_k": round(self.k, 3), "incast_cuts": self.cuts}


def make_incast(cfg) -> IncastWindow | None:
    """The incast bound of `cfg` (None: no bound, every destination transmits)."""
    if cfg.incast == 0 and not cfg.incast_adaptive:
        return None
    return IncastWindow(cfg.rank, cfg.incast, cfg.incast_adaptive)
