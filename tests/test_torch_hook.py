"""DDP with dlcp_hook on 2 local processes (gloo process group, gradients over UDP) trains like
plain DDP when nothing is lost, and still trains when packets are dropped."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from dlcp.hook_transports import GlooAllReduce, UdpAllToAll
from dlcp.torch_hook import DlcpHookState, dlcp_hook
from dlcp.training.data import BatchSchedule, load_dataset
from dlcp.training.models import build_model

WORLD = 2
ITERS = 30
BATCH = 32


def _train(rank, data, variant):
    """Train the digits MLP with DDP; returns (final parameters, losses, hook statistics)."""
    model = build_model("mlp", data.in_shape, data.n_classes, seed=3)
    # small buckets: several per backward, so bucket order, rebuilds and layer mapping matter
    ddp = DDP(model, bucket_cap_mb=0.02)
    state = None
    if variant == "udp":
        state = DlcpHookState(model, UdpAllToAll.for_process_group(timeout_s=60), fill="rescale", loss_budget=0.0)
    elif variant == "udp_lossy":
        state = DlcpHookState(model, UdpAllToAll.for_process_group(timeout_s=60, drop_rate=0.2, seed=5),
                              fill="rescale", loss_budget=0.01)
    elif variant == "gloo":
        state = DlcpHookState(model, GlooAllReduce(), fill="zero")
    if state is not None:
        ddp.register_comm_hook(state, dlcp_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    schedule = BatchSchedule(data.n_train, BATCH * WORLD, seed=3)
    losses = []
    for it in range(ITERS):
        x, y = data.train_batch(schedule.shard(it, rank, WORLD))
        opt.zero_grad()
        loss = F.cross_entropy(ddp(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    stats = {}
    if state is not None:
        stats = {"iteration": state.iteration, "filled": state.filled_values, "violations": state.budget_violations,
                 "exchanged": state.exchanged_values}
        if hasattr(state.transport, "stats"):
            s = state.transport.stats
            stats.update(sent=s.sent_pkts, lost=s.lost_pkts, dropped=s.dropped_pkts, forced=s.forced,
                         forced_keys=s.forced_keys, malformed=s.malformed_pkts)
        state.close()
    params = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()
    return params, losses, stats


def _worker(rank, init_file, out_dir):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    try:
        data = load_dataset("digits")
        results = {v: _train(rank, data, v) for v in ("plain", "udp", "gloo", "udp_lossy")}
        torch.save(results, f"{out_dir}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    d = tmp_path_factory.mktemp("ddp")
    mp.spawn(_worker, args=(str(d / "init"), str(d)), nprocs=WORLD, join=True)
    return [torch.load(d / f"rank{r}.pt") for r in range(WORLD)]


def test_hook_over_udp_trains_like_plain_ddp(results):
    for r in results:
        plain, udp = r["plain"][0], r["udp"][0]
        assert not torch.equal(plain, build_vector_at_init()), "training changed nothing"
        assert torch.allclose(udp, plain, atol=1e-6, rtol=0), (udp - plain).abs().max()
        stats = r["udp"][2]
        assert stats["iteration"] == ITERS and stats["lost"] == 0 and stats["forced"] == 0
        assert stats["filled"] == 0 and stats["sent"] > 0 and stats["malformed"] == 0 and stats["violations"] == 0
    # both replicas hold the same model
    assert torch.equal(results[0]["udp"][0], results[1]["udp"][0])


def test_hook_over_gloo_reference_trains_like_plain_ddp(results):
    for r in results:
        assert torch.allclose(r["gloo"][0], r["plain"][0], atol=1e-6, rtol=0)


def test_hook_with_dropped_packets_still_trains(results):
    for r in results:
        params, losses, stats = r["udp_lossy"]
        assert stats["dropped"] > 0 and stats["filled"] > 0 and stats["forced"] == 0, stats["forced_keys"]
        assert stats["violations"] > 0  # 20 % drops exceed a 1 % budget
        assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.2
        assert torch.isfinite(params).all()


def build_vector_at_init():
    data = load_dataset("digits")
    m = build_model("mlp", data.in_shape, data.n_classes, seed=3)
    return torch.cat([p.detach().reshape(-1) for p in m.parameters()])
