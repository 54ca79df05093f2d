"""DBLP's phase-aware budget (dlcp/iteration/budget_schedule.py): the critical-period detector on
the aggregated gradient's norm, the budget it sets, and the iteration cores that run it."""

from __future__ import annotations

import numpy as np
import pytest
from test_iteration_core import compute, kinds, spec

from dlcp.comm.budget_settings import BudgetScheduleSettings
from dlcp.iteration import actions as A
from dlcp.iteration.budget_schedule import PhaseBudget, mean_gradient_norm
from dlcp.iteration.server_core import ServerCore
from dlcp.iteration.worker_core import WorkerCore
from dlcp.settings import ConfigError
from dlcp.workloads.contract import Aggregate

S = BudgetScheduleSettings(budget_schedule="phase", phase_every=2, phase_eta=0.5, phase_low=0.01, phase_high=0.3)


def agg(scale: float) -> dict:
    """One message of 4 values whose mean gradient has norm 2 x scale (every contribution in)."""
    return {0: Aggregate(0, np.full(4, 3.0 * scale, np.float32), np.full(4, 3, np.uint16), 3)}


def test_mean_gradient_norm_divides_by_the_contributions_that_arrived():
    a = Aggregate(0, np.array([6.0, 4.0], np.float32), np.array([3, 2], np.uint16), 3)
    assert mean_gradient_norm({0: a}) == pytest.approx(np.hypot(2.0, 2.0))
    assert mean_gradient_norm({0: None}) is None  # sizes only: nothing to measure


def test_critical_until_the_norm_settles_then_high_until_it_jumps_again():
    p = PhaseBudget(S, "h1", 0)
    budget, row = p.start()
    assert budget == 0.01 and row["critical"] == 1 and row["iter"] == -1
    assert p.observe(0, agg(1.0)) is None  # detections after every 2 iterations: 1, 3, 5, ...
    budget, row = p.observe(1, agg(1.0))
    assert budget == 0.01 and row["critical"] == 1 and row["change"] is None  # the first detection
    budget, row = p.observe(3, agg(0.8))  # changed by 20 %: settled
    assert budget == 0.3 and row["critical"] == 0 and row["change"] == pytest.approx(0.2)
    assert row["grad_norm"] == pytest.approx(2 * 0.8)
    budget, row = p.observe(5, agg(0.2))  # changed by 75 %: a critical period again
    assert budget == 0.01 and row["critical"] == 1


def test_phase_settings_are_checked():
    with pytest.raises(ConfigError, match="phase_low: 0.5 is above phase_high 0.3"):
        BudgetScheduleSettings(phase_low=0.5, phase_high=0.3)


def test_all_reduce_worker_schedules_before_it_applies_and_at_its_start():
    core = WorkerCore(spec(iterations=4, budget=S))
    start, *_ = compute(core, 0)
    assert kinds(start) == ["ScheduleBudget", "BeginComm", "Compute"] and start[0].budget == 0.01
    acts = core.comm_done(5000, agg(1.0))  # iteration 0: no detection
    assert kinds(acts) == ["ApplyGradients"]
    core.work_done(5100)
    core.work_done(5200, 0.0, {})
    compute(core, 6000)
    acts = core.comm_done(9000, agg(1.0))  # iteration 1: the first detection
    assert kinds(acts) == ["ScheduleBudget", "ApplyGradients"] and acts[0].row["iter"] == 1


def test_without_a_schedule_nothing_changes():
    core = WorkerCore(spec())
    start, *_ = compute(core, 0)
    assert kinds(start) == ["BeginComm", "Compute"]


def test_the_ps_schedules_on_what_it_gathered():
    core = ServerCore(4, (0,), schedule=PhaseBudget(S, "h5", -1))
    assert kinds(core.start(0)) == ["ScheduleBudget", "BeginComm", "AwaitPushes"]
    assert kinds(core.gathered(10, 0, agg(1.0))) == ["Update"]
    core.work_done(11)
    core.work_done(12, 0.0, {0: np.zeros(4, np.float32)})
    acts = core.gathered(20, 1, agg(1.0))
    assert kinds(acts) == ["ScheduleBudget", "Update"] and isinstance(acts[0], A.ScheduleBudget)
