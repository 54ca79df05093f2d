"""DBLP's phase-aware loss budget, without I/O (docs/bounded-loss.md): a low budget during the
critical periods of training, a high one elsewhere, switched by a critical-period detector.

DBLP (arXiv 2605.01989) [V: abstract] adjusts the gradient loss tolerance across training phases.
Its code base (ZechenM/bound-tolerance-research, branch `jinyan-gradnorm`, `CLR_Readme.md` and
`server_multithreading.py`) [C] detects a critical learning regime as Accordion does: every
`CLR_freq` (10) aggregation rounds it takes the L2 norm of the aggregated gradient, and when it
changed by at least `CLR_eta` (0.5) relative to the norm at the previous detection the next
`CLR_freq` rounds are critical; the first detection is critical. Its paper settings are a tolerance
of 0.8 % in critical periods and 40.8 % elsewhere [S: seeds-brief, from the repository's
`extract_clr_schedule.py` docstring, not found in the stored snapshot]. Ours [D where noted]:

- every `phase_every` iterations (after iterations every-1, 2 every-1, ...) the aggregate of the
  iteration just applied gives the norm of the mean gradient (sum of contributions / their count,
  per value); critical when |norm - previous| / previous >= `phase_eta`, or when there is no
  previous norm;
- the budget of the next `phase_every` iterations is `phase_low` when critical, else `phase_high`;
- the iterations before the first detection are critical (`phase_low`) [D: early training is the
  canonical critical period; the code starts at its base tolerance until round 10].

Who applies it: whoever aggregates, as in DBLP's code where the receiver decides the tolerance. In
all-reduce every rank (each holds the aggregate); at the PS the parameter server, whose receiver
then caps every worker's push budget and whose pulls take it. The iteration cores
(dlcp/iteration/worker_core.py, server_core.py) run the schedule and ask their driver to apply it
(`ScheduleBudget`); each change is one row of records/hN-budget.csv (dlcp/records.py).
"""

from __future__ import annotations

import numpy as np

from dlcp.comm.budget_settings import BudgetScheduleSettings


def mean_gradient_norm(aggregates: dict) -> float | None:
    """L2 norm of the mean gradient of an iteration's aggregates (None when they carry no values)."""
    sq = 0.0
    for a in aggregates.values():
        if a is None or a.total is None:
            return None
        total = np.asarray(a.total, np.float64)
        mean = total / np.maximum(np.asarray(a.count, np.float64), 1.0)
        sq += float(np.dot(mean, mean))
    return float(np.sqrt(sq))


class PhaseBudget:
    """DBLP's schedule (see the module docstring) for one aggregator: `start` gives the first
    budget, `observe` after each iteration's aggregate a new one at every detection (else None)."""

    def __init__(self, settings: BudgetScheduleSettings, host: str, rank: int):
        self.s, self.host, self.rank = settings, host, rank
        self.previous: float | None = None
        self.budget = settings.phase_low

    def start(self) -> tuple[float, dict]:
        """The budget of the iterations before the first detection (critical) and its row."""
        return self.budget, self._row(-1, None, None, True)

    def observe(self, iteration: int, aggregates: dict) -> tuple[float, dict] | None:
        """After `iteration` was aggregated: at a detection, the budget of the next phase_every
        iterations and its row; else None."""
        if (iteration + 1) % self.s.phase_every:
            return None
        norm = mean_gradient_norm(aggregates)
        if norm is None:
            return None
        prev, self.previous = self.previous, norm
        change = None if not prev else abs(norm - prev) / prev
        critical = change is None or change >= self.s.phase_eta
        self.budget = self.s.phase_low if critical else self.s.phase_high
        return self.budget, self._row(iteration, norm, change, critical)

    def _row(self, iteration: int, norm, change, critical: bool) -> dict:
        return {
            "host": self.host,
            "rank": self.rank,
            "iter": iteration,
            "grad_norm": norm,
            "change": change,
            "critical": int(critical),
            "budget": self.budget,
        }


def phase_budget(settings, host: str, rank: int) -> PhaseBudget | None:
    """The schedule of an agent's `dlcp` settings (None: a fixed budget)."""
    return PhaseBudget(settings, host, rank) if settings.budget_schedule == "phase" else None
