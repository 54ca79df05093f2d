"""The profile compute model on a fake clock: deadlines, backward order, per-layer parameter gates,
and lateness measured (not hidden) when the real work does not fit; then the workloads that use it."""

import threading
import time

import numpy as np
import pytest

from dlcp.workloads.compute_model import ManualClock, MonotonicClock, ParameterGate, ProfileCompute
from dlcp.workloads.contract import ParamChunk
from dlcp.workloads.profile import profile_from_dict
from dlcp.workloads.profiled import check_workload, make_profile_compute, workload_profile
from dlcp.workloads.settings import WorkloadConfig
from dlcp.workloads.synthetic import SyntheticWorkload

FWD = (1.0, 2.0, 3.0)
BWD = (2.0, 4.0, 6.0)


def make(gate=True, tolerance_s=0.001):
    clock = ManualClock(100.0)
    g = ParameterGate(3, clock) if gate else None
    return clock, g, ProfileCompute(FWD, BWD, clock, g, tolerance_s=tolerance_s, gate_timeout_s=5)


def test_one_iteration_follows_the_profile_exactly():
    clock, _, pc = make()
    pc.begin(0)
    assert pc.forward(0) == 101.0  # returns at the layer's start, with its deadline
    assert clock.now() == 100.0
    pc.forward(1)
    assert clock.now() == 101.0  # layer 0's forward ended first
    assert pc.end_forward() == 106.0 == clock.now()
    # gradients become ready in backward order: layer 2 after 6, layer 1 after 6 + 4, layer 0 after + 2
    assert pc.gradient_ready(2) == 112.0 == clock.now()
    assert pc.gradient_ready(1) == 116.0
    assert pc.end() == 118.0 == clock.now()
    assert pc.stats.as_dict()["missed"] == 0 and pc.stats.overrun_share == 0.0
    assert pc.stats.deadlines == 6 and pc.stats.budget_s == sum(FWD) + sum(BWD)


def test_asking_for_a_lower_layer_steps_through_the_ones_above():
    _clock, _, pc = make()
    pc.begin(0)
    assert pc.gradient_ready(0) == 100.0 + 6 + 12  # the whole forward, then the whole backward
    assert pc.ready_at == {2: 112.0, 1: 116.0, 0: 118.0}
    assert pc.gradient_ready(2) == 112.0  # already ready: no wait, no second deadline
    assert pc.stats.deadlines == 6


def test_forward_waits_per_layer_for_released_parameters():
    clock, gate, pc = make()
    pc.begin(0)
    pc.end()  # t = 118
    gate.release(1, [0], at=118.5)  # layer 0's parameters arrive 0.5 s after the backward ended
    gate.release(1, [1], at=125.0)  # layer 1's long after layer 0's forward would have ended
    gate.release(1, [2], at=119.0)  # layer 2's early: no wait for it
    clock.advance(0.1)  # the iteration's bookkeeping between the two computes (t = 118.1)
    pc.begin(1)
    assert pc.forward(0) == 118.5 + 1.0  # starts when its parameters are in
    assert pc.forward(1) == 125.0 + 2.0  # waited for its parameters past layer 0's end
    assert pc.forward(2) == 127.0 + 3.0  # no wait: released before layer 1 ended
    assert pc.end_forward() == 130.0
    assert pc.end() == 130.0 + 12.0
    assert pc.stats.missed == 0


def test_gate_blocks_until_another_thread_releases():
    gate = ParameterGate(2, MonotonicClock())
    got = []
    t = threading.Thread(target=lambda: got.append(gate.wait(1, 1, timeout_s=5)))
    t.start()
    time.sleep(0.05)
    assert not got
    gate.release(1, [0])
    time.sleep(0.05)
    assert not got  # layer 0 is not layer 1
    gate.release(1, [1], at=42.0)
    t.join(5)
    assert got == [42.0]
    with pytest.raises(TimeoutError, match="layer 0 for iteration 2"):
        gate.wait(2, 0, timeout_s=0.01)


def test_real_work_longer_than_the_profile_is_measured_as_lateness():
    clock, gate, pc = make()
    pc.begin(0)
    pc.forward(0)
    clock.advance(1.5)  # layer 0's real forward took 1.5 s; the profile allows 1
    pc.forward(1)  # its deadline (101) has passed: late by 0.5
    # the next deadline is computed from the deadline, not from the late wake-up: layer 1 ends at 103
    assert pc.end_forward() == 106.0 and clock.now() == 106.0
    pc.end()
    s = pc.stats
    assert s.missed == 1 and s.late_max_s == pytest.approx(0.5) and s.overrun_s == pytest.approx(0.5)
    assert s.overrun_share == pytest.approx(0.5 / 18)
    # a slow backward: the real gradient of layer 2 only exists 8 s after the forward ended
    gate.release_all(1)
    pc.begin(1)
    assert pc.end_forward() == 124.0  # 118 + 6
    clock.advance(8.0)
    assert pc.gradient_ready(2, done_at=132.0) == 130.0  # due at 130, its real work ended at 132
    assert pc.end() == 136.0 and clock.now() == 136.0  # caught up: layers 1 and 0 on time
    assert s.missed == 2 and s.late_max_s == pytest.approx(2.0) and s.overrun_s == pytest.approx(2.5)
    assert s.as_dict()["missed_backward"] == 1


def test_a_consumer_asking_late_does_not_make_the_compute_late():
    """The worker was busy sending the previous message: the gradient was ready on time."""
    clock, _gate, pc = make()
    pc.begin(0)
    pc.end_forward()  # 106
    clock.advance(20.0)  # 126: past every backward deadline
    assert pc.gradient_ready(2, done_at=107.0) == 112.0
    assert pc.end() == 118.0 and clock.now() == 126.0
    assert pc.stats.missed == 0 and pc.stats.late_max_s == 0.0


def test_lateness_within_the_tolerance_is_not_a_miss():
    clock, _, pc = make(tolerance_s=0.01)
    pc.begin(0)
    pc.forward(0)
    clock.advance(1.005)
    pc.end()
    assert pc.stats.missed == 0 and pc.stats.late_max_s == pytest.approx(0.005)


def test_bad_profiles_and_call_orders_are_refused():
    with pytest.raises(ValueError, match="same number"):
        ProfileCompute((1.0,), (1.0, 2.0), ManualClock())
    with pytest.raises(ValueError, match="finite number"):
        ProfileCompute((float("nan"),), (1.0,), ManualClock())
    _, _, pc = make()
    with pytest.raises(RuntimeError, match="begin"):
        pc.forward(0)
    pc.begin(0)
    pc.forward(1)
    with pytest.raises(ValueError, match="after layer 1"):
        pc.forward(0)


# --- workloads on the compute model ----------------------------------------------------------------


def tiny_profile(tmp_path, fwd=(0.001, 0.002, 0.003), bwd=(0.002, 0.004, 0.006)):
    import json

    f = tmp_path / "tiny.json"
    f.write_text(
        json.dumps(
            {
                "model": "tiny",
                "note": "hand-made",
                "sizes": [30, 700, 50],
                "forward_s": list(fwd),
                "backward_s": list(bwd),
            }
        )
    )
    return str(f)


def test_synthetic_workload_takes_the_profiles_sizes_and_times(tmp_path):
    prof = tiny_profile(tmp_path)
    cfg = WorkloadConfig(
        model="synthetic", compute="profile", profile=prof, iterations=3, lr=0.1, dilation=2, warmup_iterations=0
    )  # lateness counted from iteration 0
    w = SyntheticWorkload(cfg, 0, 1)
    w.timer.clock = w.gate.clock = clock = ManualClock(0.0)
    assert [lay.n_values for lay in w.layouts()] == [50, 700, 30]  # backward order
    ref = SyntheticWorkload(WorkloadConfig(model="synthetic", layers=[30, 700, 50], iterations=3, lr=0.1), 0, 1)
    ready = []
    for msg, ref_msg in zip(w.compute(0), ref.compute(0)):
        ready.append(clock.now())
        np.testing.assert_array_equal(msg.values, ref_msg.values)  # the same gradient as real compute
    # times x dilation 2: forward 12 ms, then backward 12, 8, 4 ms
    assert ready == pytest.approx([0.012 + 0.012, 0.012 + 0.020, 0.012 + 0.024])
    assert w.train_loss == pytest.approx(ref.train_loss, rel=1e-5)
    stats = w.compute_stats()
    assert stats["iterations"] == 1 and stats["missed"] == 0


def test_synthetic_workload_releases_parameters_per_message(tmp_path):
    w = SyntheticWorkload(WorkloadConfig(model="synthetic", compute="profile", profile=tiny_profile(tmp_path)), 0, 2)
    list(w.compute(0))
    lay = w.layouts()[1]  # layer 1
    w.apply_parameters(0, lay.msg_id, ParamChunk(np.zeros(lay.n_values, np.float32), np.zeros(lay.n_values, bool)))
    assert w.gate.released_at(1, 1) is not None and w.gate.released_at(1, 0) is None


def test_profile_keys_fail_with_one_line():
    with pytest.raises(ValueError, match="workload.profile: compute = 'profile' with the synthetic model needs"):
        WorkloadConfig(compute="profile", model="synthetic")
    with pytest.raises(ValueError, match="workload.profile: no bundled profile 'mlp-digits-b7'"):
        workload_profile(WorkloadConfig(compute="profile", model="mlp", batch_size=7))
    with pytest.raises(ValueError, match="workload.compute: .*'fast'"):
        WorkloadConfig(compute="fast")
    with pytest.raises(ValueError, match="workload.compute_ms: a sleep of the real-compute synthetic model"):
        WorkloadConfig(compute="profile", model="synthetic", profile="vgg16-usbyte", compute_ms=5)
    assert workload_profile(WorkloadConfig(compute="real")) is None
    assert len(workload_profile(WorkloadConfig(compute="profile", model="synthetic", profile="resnet50-usbyte"))) == 161
    with pytest.raises(ValueError, match="workload.layers: set by the profile"):
        check_workload(WorkloadConfig(compute="profile", model="synthetic", profile="vgg16-usbyte", layers=[3, 4]))


def test_torch_model_times_itself_with_a_matching_profile(tmp_path):
    torch = pytest.importorskip("torch")
    from dlcp.workloads.trainer.torch_workload import TorchWorkload

    names, sizes = zip(*[(n, p.numel()) for n, p in _mlp_params(torch)])
    prof = profile_from_dict(
        {
            "model": "mlp",
            "names": list(names),
            "sizes": list(sizes),
            "forward_s": [0.001] * len(sizes),
            "backward_s": [0.002] * len(sizes),
        }
    )
    f = tmp_path / "mlp.json"
    import json

    f.write_text(
        json.dumps(
            {
                "model": "mlp",
                "names": list(prof.names),
                "sizes": list(prof.sizes),
                "forward_s": list(prof.forward_s),
                "backward_s": list(prof.backward_s),
            }
        )
    )
    cfg = WorkloadConfig(model="mlp", compute="profile", profile=str(f), batch_size=8, warmup_iterations=0)
    w = TorchWorkload(cfg, 0, 1)
    ref = TorchWorkload(WorkloadConfig(model="mlp", batch_size=8), 0, 1)
    clock = ManualClock(0.0)
    w.timer.clock = w.gate.clock = clock
    ready = []
    for msg, ref_msg in zip(w.compute(0), ref.compute(0)):
        ready.append(clock.now())
        np.testing.assert_array_equal(msg.values, ref_msg.values)  # values from torch, unchanged
    # 4 layers of 2 tensors: forward 4 x 2 ms, backward 4 ms per layer, output layer first
    assert ready == pytest.approx([0.008 + 0.004 * k for k in (1, 2, 3, 4)])
    assert w.compute_stats()["deadlines"] == 8
    w.evaluate(0)  # evaluation runs the model without touching the compute model
    assert w.timer.iteration is None
    assert w.profile_fit == "exact"
    # another model's profile times this model by parameter fraction: the same total compute
    other = TorchWorkload(cfg.model_copy(update={"model": "cnn"}), 0, 1)
    assert other.profile_fit == "parameter fraction"
    assert sum(other.timer.forward_s) == pytest.approx(sum(w.timer.forward_s))
    assert sum(other.timer.backward_s) == pytest.approx(sum(w.timer.backward_s))


def test_a_profile_fitted_onto_another_models_tensors_keeps_totals_and_shape():
    from dlcp.workloads.profile import Profile

    prof = Profile("p", ("a", "b"), (100, 300), (0.001, 0.003), (0.002, 0.006))
    # two tensors of 200: the first takes all of a and a third of b, the second two thirds of b
    fit = prof.fitted_to([200, 200], "m")
    assert fit.sizes == (200, 200) and fit.names == ("m.0", "m.1")
    assert fit.forward_s == pytest.approx((0.001 + 0.001, 0.002))
    assert fit.backward_s == pytest.approx((0.002 + 0.002, 0.004))
    assert "fitted onto model m's 2 tensors by parameter fraction" in fit.note
    assert prof.fitted_to([1], "one").forward_s == pytest.approx((0.004,))
    with pytest.raises(ValueError, match="at least one element"):
        prof.fitted_to([0, 5], "m")


def _mlp_params(torch):
    from dlcp.workloads.trainer.data import load_dataset
    from dlcp.workloads.trainer.models import build_model

    d = load_dataset("digits")
    return list(build_model("mlp", d.in_shape, d.n_classes, 1).named_parameters())


def test_dlcp_profile_measures_a_model_in_the_profile_format(tmp_path):
    import subprocess
    import sys

    out = tmp_path / "mlp.json"
    p = subprocess.run(
        check=False,
        args=[
            sys.executable,
            "-m",
            "dlcp_cli",
            "profile",
            "mlp",
            "--repeats",
            "3",
            "--warmup",
            "1",
            "--batch-size",
            "8",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stderr
    assert "mlp-digits-b8: 8 tensors, 58,442 parameters" in p.stdout
    from dlcp.workloads.profile import load_profile

    prof = load_profile(out)
    names, sizes = zip(*[(n, q.numel()) for n, q in _mlp_params(pytest.importorskip("torch"))])
    assert prof.names == names and prof.sizes == sizes and prof.name == "mlp-digits-b8"
    assert all(t > 0 for t in prof.forward_s + prof.backward_s)
    # a layer's time is split over its tensors by size: weight / bias = their element counts
    assert prof.forward_s[0] / prof.forward_s[1] == pytest.approx(sizes[0] / sizes[1])
    assert "median of 3 steps" in prof.note and "load average" in prof.note
    assert check_workload(WorkloadConfig(model="mlp", compute="profile", profile=str(out))) == prof
    bad = subprocess.run(
        check=False,
        args=[sys.executable, "-m", "dlcp_cli", "profile", "mlp", "--repeats", "0"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert bad.returncode == 2 and "dlcp profile: repeats" in bad.stderr


def test_the_planners_get_the_profiles_times_per_message_dilated(tmp_path):
    from agents.worker import planning_layer_times
    from dlcp.comm.assemble import planning_profile
    from dlcp.comm.communicator import forward_order

    w = SyntheticWorkload(
        WorkloadConfig(model="synthetic", compute="profile", profile=tiny_profile(tmp_path), dilation=2), 0, 2
    )
    prof = planning_profile(forward_order(w.layouts()), layer_times=planning_layer_times(w))
    assert prof.sizes == (30, 700, 50)
    assert prof.backward_s == pytest.approx((0.004, 0.008, 0.012)) and prof.forward_s == pytest.approx(
        (0.002, 0.004, 0.006)
    )
    assert planning_layer_times(SyntheticWorkload(WorkloadConfig(model="synthetic"), 0, 2)) is None


def test_compute_scale_multiplies_every_profile_time_for_every_consumer():
    cfg = WorkloadConfig(compute="profile", model="synthetic", profile="bert-base-fp32-b32-h200", compute_scale=4)
    base = workload_profile(WorkloadConfig(compute="profile", model="synthetic", profile="bert-base-fp32-b32-h200"))
    scaled = workload_profile(cfg)
    assert scaled.sizes == base.sizes
    assert scaled.forward_s == pytest.approx([4 * t for t in base.forward_s])
    assert scaled.backward_s == pytest.approx([4 * t for t in base.backward_s])
    assert "[compute times x4]" in scaled.note
    # the emulated compute model gets the scaled times, and dilation on top of them
    compute, _ = make_profile_compute(scaled, [[i] for i in range(len(scaled))], dilation=2.0)
    assert compute.compute_s == pytest.approx(8 * base.compute_s)
    with pytest.raises(
        ValueError, match=r"workload.compute_scale: 4 scales a profile's compute times; it needs compute = 'profile'"
    ):
        WorkloadConfig(compute="real", compute_scale=4)
    with pytest.raises(ValueError, match="workload.compute_scale"):
        WorkloadConfig(compute="profile", model="synthetic", profile="vgg16-usbyte", compute_scale=0)
