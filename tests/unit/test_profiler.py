"""`dlcp profile` for any model: the timing arithmetic (CPU and CUDA-event timers), the per-layer
shares, the model zoo's names and errors, and whole profiles of real models on the CPU (torchvision
and transformers when the `models` extra is installed)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from dlcp.workloads.profile import load_profile
from dlcp.workloads.trainer.profiler import CpuTimer, CudaEventTimer, step_layer_times, typical_layer_times
from dlcp.workloads.trainer.zoo import ModelUnavailable, resolve_model

SUPPORT = str(Path(__file__).resolve().parents[1] / "support")


def test_layer_times_follow_call_order_and_readiness():
    # three layers called 1, 0, 2 (a layer's forward runs to the next one called); ready 2, 0, 1
    marks = {"start": 0.0, "loss_end": 10.0, "backward_start": 10.5}
    fwd, bwd = step_layer_times(marks, [(1, 1.0), (0, 4.0), (2, 6.0)], [(2, 12.0), (0, 15.0), (1, 20.0)], 3, CpuTimer())
    assert fwd == [2.0, 4.0, 4.0]  # layer 1 from the step's start to layer 0's call, ...; layer 2 to the loss
    assert bwd == [3.0, 5.0, 1.5]  # layer 2 from the start of backward, then each from the previous ready
    # layer 0 called again (a tied weight's second owner): it sums both calls
    again = [(1, 1.0), (0, 4.0), (2, 6.0), (0, 8.0)]
    assert step_layer_times(marks, again, [(2, 12.0), (0, 15.0), (1, 20.0)], 3, CpuTimer())[0] == [4.0, 4.0, 2.0]
    with pytest.raises(RuntimeError, match="1 layer\\(s\\) not called in forward"):
        step_layer_times(marks, [(0, 1.0), (1, 2.0)], [(2, 12.0), (0, 15.0), (1, 20.0)], 3, CpuTimer())


class _Event:
    """What a CUDA event gives a timer: elapsed_time to another event, in milliseconds."""

    def __init__(self, ms: float):
        self.ms = ms

    def elapsed_time(self, other: _Event) -> float:
        return other.ms - self.ms


def test_cuda_event_timer_reads_milliseconds_between_events():
    timer = CudaEventTimer.__new__(CudaEventTimer)  # no device here: only the arithmetic
    marks = {"start": _Event(0.0), "loss_end": _Event(3.0), "backward_start": _Event(3.0)}
    fwd, bwd = step_layer_times(
        marks, [(0, _Event(0.5)), (1, _Event(2.0))], [(1, _Event(5.0)), (0, _Event(9.0))], 2, timer
    )
    assert fwd == pytest.approx([0.002, 0.001]) and bwd == pytest.approx([0.004, 0.002])


def test_typical_layer_times_split_the_median_step_by_the_layers_medians():
    fwd = [[1.0, 1.0, 1.0], [3.0, 1.0, 1.0], [1.0, 1.0, 3.0]]  # every step slowed in one layer or none
    bwd = [[2.0, 2.0], [2.0, 2.0], [2.0, 6.0]]
    f, b = typical_layer_times(fwd, bwd)
    # the median step is 5 + 4 = 9 (steps 7, 9, 13), not the medians' sum 3 + 4; forward / backward
    # split as the medians of their sums, 5 : 4
    assert sum(f) + sum(b) == pytest.approx(9.0)
    assert f == pytest.approx([5 / 3] * 3) and b == pytest.approx([2.0, 2.0])


def test_zoo_names_our_models_and_refuses_what_it_cannot_have():
    pm = resolve_model("cnn")
    import torch

    x, y = pm.make_inputs(4, torch.device("cpu"))
    assert x.shape[0] == 4 and pm.loss(pm.forward((x, y)), (x, y)).ndim == 0
    with pytest.raises(ModelUnavailable, match="module 'json' has no 'nope'"):
        resolve_model("json:nope")
    with pytest.raises(ModelUnavailable, match="cannot import 'no_such_module_here'"):
        resolve_model("no_such_module_here:make")


def _profile(tmp_path, *args, env_path=SUPPORT):
    out = tmp_path / "p.json"
    p = subprocess.run(
        [sys.executable, "-m", "dlcp_cli", "profile", *args, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**__import__("os").environ, "PYTHONPATH": f"{Path.cwd()}:{env_path}", "HF_HUB_OFFLINE": "1"},
        cwd=tmp_path,
    )
    return p, out


def _check_written(p, out, tensors):
    assert p.returncode == 0, p.stderr
    prof = load_profile(out)
    assert len(prof) == tensors and all(t >= 0 for t in prof.forward_s + prof.backward_s)
    data = json.loads(out.read_text())
    m = data["measured"]
    assert m["step_plain_ms"]["n"] == m["step_hooked_ms"]["n"] == m["repeats"]
    assert m["step_plain_ms"]["p10"] <= m["step_plain_ms"]["median"] <= m["step_plain_ms"]["p90"]
    # forward + backward and the plain step are both printed, with their ratio
    assert "plain timed step (no hooks): median" in p.stdout and "forward + backward vs the plain step:" in p.stdout
    total = 1e3 * prof.compute_s
    assert f"= {total:.3f} ms per step" in p.stdout
    return prof, m


def test_user_factory_profiles_on_the_cpu(tmp_path):
    p, out = _profile(tmp_path, "user_models:make_mlp", "--batch-size", "8", "--repeats", "5", "--warmup", "1")
    prof, m = _check_written(p, out, 6)
    assert prof.name == "user_models.make_mlp-fp32-b8-cpu" and m["device"].startswith("cpu")
    # forward : backward as the medians of their sums
    ratio = m["forward_ms"]["median"] / m["backward_ms"]["median"]
    assert prof.forward_total_s / prof.backward_total_s == pytest.approx(ratio, rel=1e-6)
    bad, _ = _profile(tmp_path, "user_models:module_only")
    assert bad.returncode == 2 and "without inputs" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_layers_whose_modules_are_never_called_are_timed_with_their_caller(tmp_path):
    # nn.MultiheadAttention uses out_proj's weight without calling out_proj, as torchvision's
    # vit_b_16 does twelve times; _Shortcut, owning nothing, uses its child's the same way
    p, out = _profile(tmp_path, "user_models:make_attention", "--batch-size", "4", "--repeats", "3", "--warmup", "1")
    prof, _ = _check_written(p, out, 10)
    fwd = dict(zip(prof.names, prof.forward_s))
    # out_proj's forward is part of the attention call, split with in_proj by size (256 : 768)
    assert fwd["attn.out_proj.weight"] == pytest.approx(fwd["attn.in_proj_weight"] / 3, rel=1e-6)
    assert fwd["shortcut.proj.weight"] > 0 and all(b > 0 for b in prof.backward_s[::2])


def test_a_tied_weight_is_timed_at_both_of_its_owners_calls(tmp_path):
    # the head's call (a 64 x 4000 product and the loss over 4000 classes) is the tied weight's, not
    # the layer called before it (a 64 x 64 product)
    p, out = _profile(tmp_path, "user_models:make_tied", "--batch-size", "8", "--repeats", "5", "--warmup", "1")
    prof, _ = _check_written(p, out, 3)
    fwd = dict(zip(prof.names, prof.forward_s))
    assert fwd["emb.weight"] > 3 * (fwd["mid.weight"] + fwd["mid.bias"])


def test_bf16_autocast_profiles_on_the_cpu(tmp_path):
    p, out = _profile(tmp_path, "user_models:make_mlp", "--precision", "bf16", "--repeats", "3", "--warmup", "1")
    prof, m = _check_written(p, out, 6)
    assert m["precision"] == "bf16" and "bf16 (autocast)" in prof.note


def test_torchvision_resnet18_profiles_on_the_cpu(tmp_path):
    if importlib.util.find_spec("torchvision") is None:  # importing it here would bypass zoo's arrangement
        pytest.skip("torchvision is not installed (the models extra)")
    p, out = _profile(tmp_path, "resnet18", "--device", "cpu", "--batch-size", "2", "--repeats", "3", "--warmup", "1")
    prof, m = _check_written(p, out, 62)
    assert prof.name == "resnet18-fp32-b2-cpu" and prof.parameters == 11_689_512
    assert prof.names[0] == "conv1.weight" and "torchvision" in prof.note


def test_tiny_bert_profiles_on_the_cpu(tmp_path):
    pytest.importorskip("transformers")
    tiny = [
        "num_hidden_layers=2",
        "hidden_size=64",
        "num_attention_heads=2",
        "intermediate_size=128",
        "vocab_size=1000",
    ]
    args = [a for kv in tiny for a in ("--hf-config", kv)]
    p, out = _profile(tmp_path, "bert-base", *args, "--batch-size", "4", "--seq-len", "32", "--repeats", "3")
    prof, m = _check_written(p, out, 41)
    assert prof.names[0] == "bert.embeddings.word_embeddings.weight" and prof.parameters == 168_258
    assert "num_hidden_layers=2" in prof.note and prof.name == "bert-base+custom-fp32-b4-cpu"
    bad, _ = _profile(tmp_path, "bert-base", "--hf-config", "no_such_field=1")
    assert bad.returncode == 2 and "--hf-config no_such_field: not a field of BertConfig" in bad.stderr
