"""DBLP (arXiv 2605.01989; code base ZechenM/bound-tolerance-research), as this framework runs it:
the MLT-style bounded-loss transport (priorities, drop precedence, spraying: the `dlcp` system)
with a phase-aware budget, low in critical learning periods and high elsewhere
(`dlcp.budget_schedule = "phase"`, dlcp/iteration/budget_schedule.py). The schedule sets both the
budget senders ask for and the cap receivers apply, so the per-iteration cap is lifted
(`iter_budget = 1`)."""

from dlcp.experiment.systems import SystemEntry, register_system

register_system(
    SystemEntry(
        name="dblp",
        description="DBLP (arXiv 2605.01989): DLCP's transport with a phase-aware budget (0.8 % critical, 40.8 % else)",
        settings={
            "dlcp.policy": "dlcp",
            "dlcp.budget_schedule": "phase",
            "dlcp.phase_low": 0.008,
            "dlcp.phase_high": 0.408,
            "dlcp.phase_every": 10,
            "dlcp.phase_eta": 0.5,
            "dlcp.loss_budget": 0.408,
            "dlcp.iter_budget": 1.0,
        },
        source="arXiv 2605.01989 abstract [V]; detector from its code base [C]; budgets 0.8 % / 40.8 % [S]",
    )
)
