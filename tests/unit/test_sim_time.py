"""Time on the ns-3 backend is the system's: compute comes from the profile when the experiment asks
for profile compute, and `[scale] dilation` (an emulation knob) neither slows nor rescales anything."""

import pytest

from dlcp.experiment import config as configmod
from dlcp.reporting.facts import run_facts
from dlcp.workloads.profile import load_profile
from simulation.ns3.simulated_run import simulated_compute_s

BASE = {"name": "t", "backend": "ns3", "workload": {"model": "synthetic", "iterations": 4}}


def test_profile_compute_is_the_profiles_forward_plus_backward():
    cfg = configmod.validate(
        {**BASE, "workload": {**BASE["workload"], "compute": "profile", "profile": "resnet50-usbyte"}}
    )
    assert simulated_compute_s(cfg) == load_profile("resnet50-usbyte").compute_s > 0


def test_fixed_compute_is_compute_ms():
    cfg = configmod.validate({**BASE, "workload": {**BASE["workload"], "compute_ms": 150}})
    assert simulated_compute_s(cfg) == 0.15


def test_dilation_does_not_rescale_simulated_reports():
    """The clock comes from meta.json, as the backend wrote it (dlcp/runs/run_dir.py); without
    meta.json, from what the config's backend runs on (dlcp/backends.py), not from its name."""
    emulated = configmod.validate({**BASE, "backend": "builtin", "scale": {"dilation": 10}})
    simulated = configmod.validate({**BASE, "scale": {"dilation": 10}})
    assert run_facts({"clock": "wall"}, emulated).dilation == 10 and run_facts(None, emulated).dilation == 10
    assert run_facts({"clock": "simulated"}, simulated).dilation == 1
    assert run_facts(None, simulated).dilation == 1 and run_facts(None, simulated).simulated


def test_compute_scale_multiplies_the_simulated_compute():
    workload = {**BASE["workload"], "compute": "profile", "profile": "bert-base-fp32-b32-h200", "compute_scale": 4}
    cfg = configmod.validate({**BASE, "workload": workload})
    assert simulated_compute_s(cfg) == pytest.approx(4 * load_profile("bert-base-fp32-b32-h200").compute_s)
