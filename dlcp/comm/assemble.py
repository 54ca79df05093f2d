"""From an experiment's `[comm]` settings to the objects one worker runs: the planning profile, the
cost model the planners use, the scheduler, the collective's step plan and the wire ids.

Every rank builds the same plan from the same inputs (the config and the workload's message
sizes), so the ranks agree on units, slots and ids without talking (dlcp/comm/wire_ids.py).

**Planning profile** [D]. The planners (MG-WFBP, OASR-WFBP, US-Byte) need each tensor's backward
time. The tensors are the workload's messages in forward order; their times come from
`backward_ms` spread equally over them (the synthetic workload sleeps `compute_ms` that way), or,
when the workload computes from a profile, its per-layer times (in the emulation's time, dilation
included) summed per message, a layer split over messages shared by values. Real torch compute is not known before it
runs and differs per rank, so it plans with zero compute times (every gradient ready at once)
rather than with measurements the ranks would not share.

**Cost model.** `[comm] alpha_s` / `beta_s_per_byte` when given; otherwise, for a collective whose
entry says `link_cost` (the ring), a ring all-reduce over the host links (`CostModel.from_link`:
rate `host_mbps`, `step_latency_s` per step), and for the others their own schedule on the
experiment's topology (`collective_cost`).
"""

from __future__ import annotations

from collections.abc import Sequence

from dlcp.comm.communicator import forward_order
from dlcp.comm.costmodel import CostModel
from dlcp.comm.plans.collective import StepPlan
from dlcp.comm.plans.schedule import Schedule, alpha_beta_cost
from dlcp.comm.schedulers import Scheduler, make_scheduler
from dlcp.comm.settings import CommSetup
from dlcp.comm.wire_ids import WireIds
from dlcp.network.topology import TopologySpec
from dlcp.workloads.contract import MessageLayout
from dlcp.workloads.profile import Profile

LayerTimes = tuple[Sequence[float], Sequence[float]]  # (forward_s, backward_s) per model layer


def planning_profile(
    tensors: list[MessageLayout],
    backward_ms: float = 0.0,
    forward_ms: float = 0.0,
    name: str = "workload",
    layer_times: LayerTimes | None = None,
) -> Profile:
    """The scheduler's view of the workload: one tensor per message (forward order), with the
    per-layer times of `layer_times` (forward_s, backward_s per layer) when the workload computes
    from a profile, else `backward_ms` and `forward_ms` spread equally (see the module docstring)."""
    n = len(tensors)
    names, sizes = tuple(f"msg{t.msg_id}" for t in tensors), tuple(t.n_values for t in tensors)
    if layer_times is not None:
        fwd, bwd = (message_times(tensors, per_layer) for per_layer in layer_times)
        return Profile(
            name=name,
            names=names,
            sizes=sizes,
            forward_s=fwd,
            backward_s=bwd,
            note=f"{n} workload messages, times of the workload's profile summed per message",
        )
    return Profile(
        name=name,
        names=names,
        sizes=sizes,
        forward_s=(forward_ms / 1e3 / n,) * n,
        backward_s=(backward_ms / 1e3 / n,) * n,
        note=f"{n} workload messages, {backward_ms:g} ms backward and {forward_ms:g} ms forward spread equally",
    )


def message_times(tensors: list[MessageLayout], per_layer: Sequence[float]) -> tuple[float, ...]:
    """Each message's share of per-layer times: the sum over its layer segments, a layer split over
    several messages shared in proportion to the values each holds."""

    def segments(t: MessageLayout):
        ends = (*t.layer_starts[1:], t.n_values)
        return [(layer, end - start) for layer, start, end in zip(t.layer_ids, t.layer_starts, ends)]

    layer_values: dict[int, int] = {}
    for t in tensors:
        for layer, size in segments(t):
            layer_values[layer] = layer_values.get(layer, 0) + size
    return tuple(
        sum(per_layer[layer] * size / layer_values[layer] for layer, size in segments(t) if size) for t in tensors
    )


def collective_cost(sched: Schedule, spec: TopologySpec | None, step_latency_s: float, fabric_mbps: float) -> CostModel:
    """An all-reduce over `sched` as (alpha, beta): alpha_beta_cost is affine in the message size
    (steps x latency + bytes x the busiest link's share per step x s/byte), so two sizes give it."""
    link_beta = 8.0 / (fabric_mbps * 1e6)
    a = alpha_beta_cost(sched, 0.0, step_latency_s, link_beta, spec)
    b = (alpha_beta_cost(sched, 1e6, step_latency_s, link_beta, spec) - a) / 1e6
    return CostModel(alpha=a, beta=b, workers=sched.ranks)


def cost_model(
    comm: CommSetup,
    workers: int,
    host_mbps: float,
    plan: StepPlan | None = None,
    spec: TopologySpec | None = None,
    fabric_mbps: float | None = None,
) -> CostModel:
    """The planners' cost model (see the module docstring)."""
    if comm.alpha_s or comm.beta_s_per_byte:
        return CostModel(alpha=comm.alpha_s, beta=comm.beta_s_per_byte, workers=workers)
    if plan is not None and not comm.collective_entry.link_cost and workers > 1:
        return collective_cost(plan.schedule(0), spec, comm.step_latency_s, fabric_mbps or host_mbps)
    return CostModel.from_link(host_mbps * 1e6, comm.step_latency_s, workers)


def build_scheduler(comm: CommSetup, profile: Profile, workers: int, cost: CostModel) -> Scheduler:
    return make_scheduler(comm.scheduler, profile, cost, workers, **comm.scheduler_options())


def step_plan(comm: CommSetup, workers: int, spec: TopologySpec | None = None) -> StepPlan:
    """The collective's schedule(s) for `workers` ranks on `spec` (None: a star; paths do not
    matter to the transport, the switches route by destination)."""
    return comm.collective_entry.plan(comm.collective_options(), workers, spec)


def wire_ids(scheduler: Scheduler, plan: StepPlan, messages: int) -> WireIds:
    return WireIds(
        len(scheduler.units()),
        plan.stride,
        scheduler.ops_per_iteration(),
        messages,
        what=f"{scheduler.name} over {plan.collective} ({plan.workers} ranks)",
    )


def assemble_rank(
    comm: CommSetup,
    workers: int,
    layouts: list[MessageLayout],
    *,
    host_mbps: float = 50.0,
    spec: TopologySpec | None = None,
    backward_ms: float = 0.0,
    fabric_mbps: float | None = None,
    layer_times: LayerTimes | None = None,
    plan: StepPlan | None = None,
    cost: CostModel | None = None,
) -> tuple[Scheduler, StepPlan, WireIds]:
    """One rank's (scheduler, step plan, wire ids) for the `[comm]` settings on the workload's
    messages; `plan`, `cost`: the step plan and cost model when the caller already has them (the
    same for every rank; a 128-rank MultiTree costs seconds to plan and price)."""
    tensors = forward_order(layouts)
    plan = plan if plan is not None else step_plan(comm, workers, spec)
    cost = cost if cost is not None else cost_model(comm, workers, host_mbps, plan, spec, fabric_mbps)
    scheduler = build_scheduler(comm, planning_profile(tensors, backward_ms, layer_times=layer_times), workers, cost)
    return scheduler, plan, wire_ids(scheduler, plan, len(layouts))


def steps_per_phase(plan: StepPlan) -> int:
    return max(plan.schedule(k).steps_per_phase for k in range(plan.period))
