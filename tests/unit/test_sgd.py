"""The trainer's SGD (dlcp/workloads/trainer/sgd.py) makes torch.optim.SGD's update, and the
digits loader gives sklearn's load_digits arrays without importing sklearn."""

import subprocess
import sys

import numpy as np
import pytest
import torch

from dlcp.workloads.trainer.sgd import SGD


def _model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3))


@pytest.mark.parametrize("momentum,weight_decay", [(0.0, 0.0), (0.9, 0.0), (0.9, 1e-3), (0.5, 0.1)])
def test_sgd_matches_torch_optim_over_steps(momentum, weight_decay):
    ours, ref = _model(3), _model(3)
    opt = SGD(ours.parameters(), lr=0.05, momentum=momentum, weight_decay=weight_decay)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=momentum, weight_decay=weight_decay)
    gen = torch.Generator().manual_seed(7)
    for _ in range(6):
        x, y = torch.randn(8, 6, generator=gen), torch.randint(0, 3, (8,), generator=gen)
        for model, o in ((ours, opt), (ref, ref_opt)):
            for p in model.parameters():
                p.grad = None
            torch.nn.functional.cross_entropy(model(x), y).backward()
            o.step()
    for a, b in zip(ours.parameters(), ref.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    assert not torch.equal(next(ours.parameters()), next(_model(3).parameters()))  # it did train


def test_sgd_skips_parameters_without_gradient():
    p, q = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(2))
    p.grad = torch.full((3,), 2.0)
    SGD([p, q], lr=0.5).step()
    assert torch.equal(p.detach(), torch.zeros(3)) and torch.equal(q.detach(), torch.ones(2))


def test_digits_arrays_equal_sklearns():
    from sklearn.datasets import load_digits

    from dlcp.workloads.trainer.data import digits_arrays

    pixels, labels = digits_arrays()
    ref = load_digits()
    assert pixels.shape == (1797, 64)
    np.testing.assert_array_equal(pixels, ref.data)
    np.testing.assert_array_equal(labels, ref.target)


def test_a_worker_workload_starts_without_sklearn_or_torch_compiler():
    # what every agent of every run pays at start-up: neither import may come back unnoticed
    code = (
        "import sys; from dlcp.workloads.settings import WorkloadConfig; "
        "from dlcp.workloads.trainer.torch_workload import TorchWorkload; "
        "w = TorchWorkload(WorkloadConfig(model='cnn', dataset='digits'), 0, 2); "
        "print(sorted(m for m in ('sklearn', 'torch._dynamo', 'scipy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
