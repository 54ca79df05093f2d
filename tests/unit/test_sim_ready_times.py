"""Profile compute on ns-3's simulated workers (simulation/ns3/agents.py), without ns-3: gradients
become ready at the per-layer backward times."""

from __future__ import annotations

import pytest


def test_profile_compute_readies_gradients_at_the_per_layer_backward_times():
    from dlcp.workloads.contract import GradMessage, MessageLayout
    from simulation.ns3.agents import SimRun

    run = SimRun(clock=None, iterations=1, compute_s=0.010)
    msgs = [GradMessage(MessageLayout(k, 10, (0,), (3 - k,)), None, 4) for k in range(4)]  # backward order
    assert run.ready_offsets(msgs) == pytest.approx([0.0025, 0.005, 0.0075, 0.010])  # compute_ms spread evenly
    run.set_layer_times(([0.001] * 4, [0.004, 0.003, 0.002, 0.001]))  # forward 4 ms, backward 10 ms
    # layer 3's gradient after the forward and its own backward; layer 0's at the very end
    assert run.ready_offsets(msgs) == pytest.approx([0.005, 0.007, 0.010, 0.014])
    assert run.planning_backward_ms == 0.0
