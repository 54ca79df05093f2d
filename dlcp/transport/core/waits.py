"""How long received datagrams waited in the host's socket buffer before the endpoint read them: the
host's own receive backlog. A host that stands for a machine of its own reads within microseconds;
waits of milliseconds mean the emulating machine was behind (dlcp/reporting/keepup_check.py judges it).

Kept as a histogram of logarithmic bins (BINS_PER_OCTAVE per doubling from 1 us), so recording
costs one log2 per datagram and the memory is fixed; percentiles are read off the bins' upper edges
(at most 2 ** (1 / BINS_PER_OCTAVE) - 1 = 19 % high), the maximum is exact."""

from __future__ import annotations

import math

BINS_PER_OCTAVE = 4
N_BINS = 30 * BINS_PER_OCTAVE  # 1 us .. 2 ** 30 us (18 minutes): anything longer lands in the last bin
_FLOOR_S = 1e-6


class WaitHistogram:
    def __init__(self):
        self.bins = [0] * N_BINS
        self.count = 0
        self.max_s = 0.0

    @classmethod
    def from_bins(cls, bins, count: int, max_s: float) -> WaitHistogram:
        """Rebuild from recorded bins (the built-in switch's C engine keeps the same ones)."""
        if len(bins) != N_BINS:
            raise ValueError(f"wait histogram: {len(bins)} bins, not {N_BINS}")
        h = cls()
        h.bins, h.count, h.max_s = list(bins), int(count), float(max_s)
        return h

    def record(self, wait_s: float) -> None:
        """One datagram's wait (seconds); negative waits (clock steps) count as none."""
        self.count += 1
        if wait_s > self.max_s:
            self.max_s = wait_s
        if wait_s <= _FLOOR_S:
            self.bins[0] += 1
            return
        b = int(math.log2(wait_s / _FLOOR_S) * BINS_PER_OCTAVE)
        self.bins[min(b, N_BINS - 1)] += 1

    def quantile_s(self, q: float) -> float | None:
        """Upper edge of the bin holding the q-quantile (0 < q <= 1), capped at the maximum; None
        when nothing was recorded."""
        if not self.count:
            return None
        rank = math.ceil(q * self.count)
        seen = 0
        for b, n in enumerate(self.bins):
            seen += n
            if seen >= rank:
                return min(_FLOOR_S * 2 ** ((b + 1) / BINS_PER_OCTAVE), self.max_s)
        return self.max_s

    def as_dict(self) -> dict:
        """count, p50_ms, p99_ms, max_ms (None without datagrams)."""
        ms = lambda s: None if s is None else round(s * 1e3, 4)
        return {
            "count": self.count,
            "p50_ms": ms(self.quantile_s(0.5)),
            "p99_ms": ms(self.quantile_s(0.99)),
            "max_ms": ms(self.max_s) if self.count else None,
        }
