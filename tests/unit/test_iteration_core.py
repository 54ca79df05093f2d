"""The iteration cores alone (dlcp/iteration): event sequences in, actions out, for PS and
all-reduce workers and the PS; then the cores with the real synthetic workload, a PS exchange
done in-process, training."""

from __future__ import annotations

import numpy as np
import pytest

from dlcp.comm.ps import sum_pushes
from dlcp.experiment import config
from dlcp.experiment.agent_config import agent_configs
from dlcp.iteration import actions as A
from dlcp.iteration.server_core import ServerCore
from dlcp.iteration.worker_core import WorkerCore, WorkerSpec, worker_spec
from dlcp.network import topology
from dlcp.transport.api import RecvResult
from dlcp.workloads.contract import Aggregate, GradMessage, MessageLayout, ParamChunk
from dlcp.workloads.settings import WorkloadConfig
from dlcp.workloads.synthetic import SyntheticServerWorkload, SyntheticWorkload

LAYOUTS = [MessageLayout(0, 4, (0,), (1,)), MessageLayout(1, 3, (0,), (0,))]  # backward order
MSGS = [GradMessage(lay, np.arange(lay.n_values, dtype=np.float32), 2) for lay in LAYOUTS]


def spec(**kw) -> WorkerSpec:
    base = {"host": "h2", "rank": 1, "world": 3, "mode": "allreduce", "iterations": 3, "msg_ids": (0, 1)}
    return WorkerSpec(**{**base, **kw})


def kinds(actions) -> list[str]:
    return [type(a).__name__ for a in actions]


def compute(core: WorkerCore, t0: int, per_msg_us: int = 1000) -> list:
    """Start an iteration at t0 and run its compute: each gradient per_msg_us after the one
    before, each handed over at once; the actions of every event."""
    out = [core.start(t0)]
    t = t0
    for msg in MSGS:
        t += per_msg_us
        acts = core.gradient_ready(t, msg, compute_s=per_msg_us / 1e6)
        if any(isinstance(a, A.Handoff) for a in acts):
            core.handed(t)
        out.append(acts)
    out.append(core.compute_done(t, 0.0))
    return out


def aggregates(counts: dict[int, np.ndarray], world: int = 3) -> dict[int, Aggregate]:
    return {m: Aggregate(m, np.full(c.size, 3.0, np.float32), c.astype(np.uint16), world) for m, c in counts.items()}


def test_ps_worker_pushes_as_gradients_come_then_applies_the_pulls():
    core = WorkerCore(spec(mode="ps", rank=0, host="h1"))
    start, g0, g1, done = compute(core, 10_000)
    assert kinds(start) == ["BeginComm", "Compute"] and start[1].iteration == 0
    assert g0 == [A.Push(0, MSGS[0])] and g1 == [A.Push(0, MSGS[1])]
    assert kinds(done) == ["AwaitComm"]  # no BackwardDone: the PS has nothing to schedule
    lost = np.zeros(4, bool)
    lost[[1, 3]] = True
    chunks = {0: ParamChunk(np.ones(4, np.float32), lost), 1: ParamChunk(np.ones(3, np.float32), np.zeros(3, bool))}
    (apply,) = core.comm_done(15_000, chunks)
    assert apply == A.ApplyParameters(0, chunks)
    (evaluate,) = core.work_done(15_400, cpu_s=0.0004)
    assert evaluate == A.Evaluate(0)
    row, progress, nxt = core.work_done(99_999, 0.0, {"train_loss": 0.5})  # evaluation is not in the iteration
    assert row.row == {
        "host": "h1",
        "rank": 0,
        "iter": 0,
        "start_us": 10_000,
        "end_us": 15_400,
        "iteration_us": 5_400,
        "compute_us": 2_400,  # two gradients of 1 ms and the apply's 0.4 ms
        "comm_us": 15_000 - 11_000,  # from the first push handed over to the pulls in
        "lost_values": 2,
        "train_loss": 0.5,
        "test_loss": None,
        "test_accuracy": None,
    }
    assert progress == A.Progress(1, 3) and nxt == A.NextIteration(1, 15_400)
    assert kinds(core.start(15_400)) == ["BeginComm", "Compute"] and core.iteration == 1


def test_allreduce_worker_counts_values_short_of_the_group_and_re_syncs_to_rank_0():
    core = WorkerCore(spec(resync_every=2))
    for it in range(2):
        start, g0, g1, done = compute(core, it * 100_000)
        assert g0 == [A.Submit(it, MSGS[0])] and g1 == [A.Submit(it, MSGS[1])]
        assert done == [A.BackwardDone(it), A.AwaitComm(it)]
        counts = {0: np.array([3, 2, 3, 0]), 1: np.array([3, 3, 3])}  # an aggregate arriving with losses
        aggs = aggregates(counts)
        (apply,) = core.comm_done(it * 100_000 + 9_000, aggs)
        assert apply == A.ApplyGradients(it, aggs)
        after = core.work_done(it * 100_000 + 9_100, 0.0001)
        if it == 0:
            assert after == [A.Evaluate(0)]
            (row, _, nxt) = core.work_done(it * 100_000 + 9_500, 0.0, {"train_loss": 1.0})
            assert row.row["lost_values"] == 2 and row.row["compute_us"] == 2_100 and row.row["end_us"] == 9_100
            continue
    # iteration 1 is the second: re-sync (resync_every = 2) before the iteration ends
    assert after == [A.ReadParameters((0, 1))]
    mine = {0: np.ones(4, np.float32), 1: np.ones(3, np.float32)}
    (resync,) = core.work_done(109_200, 0.0, mine)
    assert resync == A.Resync(1, mine)
    rank0 = {0: np.full(4, 2.0, np.float32), 1: np.ones(3, np.float32)}
    (adopt,) = core.resynced(109_800, rank0)
    assert isinstance(adopt, A.ApplyParameters) and list(adopt.chunks) == [0, 1]
    assert all(not c.lost.any() and np.array_equal(c.values, rank0[m]) for m, c in adopt.chunks.items())
    record, evaluate = core.work_done(109_900, 0.0)
    assert record.row["iter"] == 1 and record.row["drift_l2"] == pytest.approx(2.0)
    assert record.row["drift_max"] == 1.0 and evaluate == A.Evaluate(1)
    row, _, _ = core.work_done(110_000, 0.0, {})
    assert row.row["end_us"] == 109_900  # the iteration includes the re-sync


def test_rank_0_records_its_re_sync_without_adopting_anything():
    core = WorkerCore(spec(rank=0, host="h1", resync_every=1))
    compute(core, 0)
    core.comm_done(5_000, aggregates({0: np.full(4, 3), 1: np.full(3, 3)}))
    (read,) = core.work_done(5_000)
    params = {0: np.ones(4, np.float32), 1: np.ones(3, np.float32)}
    assert core.work_done(5_000, 0.0, params) == [A.Resync(0, params)]
    record, evaluate = core.resynced(6_000, params)  # rank 0's reference is its own
    assert record.row["drift_l2"] == 0.0 and record.row["param_l2"] == pytest.approx(np.sqrt(7))
    assert evaluate == A.Evaluate(0)


def test_dssync_parameter_averaging_takes_the_local_step_then_averages():
    core = WorkerCore(spec(average_parameters=True))
    start, g0, g1, done = compute(core, 0)
    assert g0 == [] and g1 == []  # its own gradients wait for the local step
    (step,) = done
    assert isinstance(step, A.LocalStep) and [m.msg_id for m in step.gradients] == [0, 1]
    assert core.first_send_us is None
    assert core.work_done(2_000, 0.0003) == [A.ReadParameters((0, 1))]
    params = {0: np.ones(4, np.float32), 1: np.ones(3, np.float32)}
    submit, wait = core.work_done(2_000, 0.0001, params)
    assert submit == A.SubmitParameters(0, params) and wait == A.AwaitComm(0)
    core.handed(2_000)
    counts = {0: np.array([2, 1, 0, 2]), 1: np.array([2, 2, 2])}  # the group is 2; no rank's value 2 of msg 0
    (apply,) = core.comm_done(7_000, aggregates(counts, world=2))
    assert apply.chunks[0].lost.tolist() == [False, False, True, False]
    assert apply.chunks[0].values.tolist() == [1.5, 3.0, 0.0, 1.5]  # sums over the ranks that arrived
    core.work_done(7_000)
    row, _, _ = core.work_done(7_000, 0.0, {})
    assert row.row["lost_values"] == 1 and row.row["comm_us"] == 5_000 and row.row["compute_us"] == 2_400


def test_evaluation_metrics_go_into_the_row_and_the_workload_s_count_wins():
    core = WorkerCore(spec(iterations=1))
    compute(core, 0)
    core.comm_done(4_000, aggregates({0: np.array([3, 3, 3, 1]), 1: np.full(3, 3)}))
    (evaluate,) = core.work_done(4_000)
    assert evaluate == A.Evaluate(0)
    metrics = {"train_loss": 0.25, "test_loss": 0.5, "test_accuracy": 0.9, "lost_values": 7}
    row, progress, finished = core.work_done(4_100, 0.0, metrics)
    assert (row.row["train_loss"], row.row["test_loss"], row.row["test_accuracy"]) == (0.25, 0.5, 0.9)
    assert row.row["lost_values"] == 7  # what the fill rule filled, when the workload says
    assert progress == A.Progress(1, 1) and finished == A.Finished() and core.done == 1
    with pytest.raises(RuntimeError, match="start in iteration 0 while done"):
        core.start(5_000)


def test_a_group_of_one_finishes_before_the_compute_and_the_iteration_waits_for_it():
    core = WorkerCore(spec(world=1, rank=0))
    core.start(0)
    for msg in MSGS:
        core.gradient_ready(1_000, msg)
    assert core.comm_done(1_000, aggregates({0: np.full(4, 1), 1: np.full(3, 1)}, world=1)) == []
    done = core.compute_done(3_000, 0.003)  # the last layer's backward ended later
    assert kinds(done) == ["BackwardDone", "AwaitComm", "ApplyGradients"]
    core.work_done(1_000)
    row, _, _ = core.work_done(1_000, 0.0, {})
    assert row.row["end_us"] == 3_000  # not before the compute's end


def test_a_failed_message_fails_the_iteration_with_one_line():
    core = WorkerCore(spec())
    compute(core, 0)
    (failed,) = core.comm_failed(8_000, "ring reduce_scatter of message 0: no answer to FORCE_STOP")
    assert failed.line == "iteration 0: ring reduce_scatter of message 0: no answer to FORCE_STOP"
    with pytest.raises(RuntimeError, match="comm_done in iteration 0 while failed"):
        core.comm_done(9_000, {})


def test_events_out_of_place_are_driver_bugs():
    core = WorkerCore(spec())
    with pytest.raises(RuntimeError, match="gradient_ready in iteration -1 while idle"):
        core.gradient_ready(0, MSGS[0])
    core.start(0)
    with pytest.raises(RuntimeError, match="resynced"):
        core.resynced(0, None)


def test_sizes_only_counts_short_values_and_re_syncs_traffic_only():
    core = WorkerCore(spec(sizes_only=True, resync_every=1))
    compute(core, 0)
    (apply,) = core.comm_done(5_000, {0: None, 1: None}, short_values=4)
    assert apply == A.ApplyGradients(0, {0: None, 1: None})
    assert core.work_done(5_000) == [A.Resync(0, None)]  # no parameters to read
    assert core.resynced(6_000, None) == [A.Evaluate(0)]  # nothing to compare or record
    row, _, _ = core.work_done(6_000, 0.0, {})
    assert row.row["lost_values"] == 4


def test_worker_spec_from_the_agent_configuration(tmp_path):
    def spec_of(**sections):
        raw = {"name": "t", "topology": {"kind": "star", "hosts": 5}, "workload": {"workers": 4, "model": "synthetic"}}
        for key, value in sections.items():
            raw.setdefault(key, {}).update(value)
        cfg = config.validate(raw)
        acfg = next(a for _, role, a in agent_configs(cfg, topology.from_config(cfg), tmp_path) if role == "worker")
        return worker_spec(acfg, SyntheticWorkload(acfg.workload, acfg.rank, acfg.world))

    ring = spec_of(workload={"mode": "allreduce"}, dlcp={"resync_every": 7})
    assert (ring.mode, ring.resync_every, ring.average_parameters, ring.msg_ids) == (
        "allreduce",
        7,
        False,
        (0, 1, 2, 3, 4),
    )
    dssync = spec_of(workload={"mode": "allreduce"}, comm={"collective": "dssync"}, dlcp={"resync_every": 7})
    assert dssync.average_parameters and dssync.resync_every == 0  # groups shuffle: no re-sync to rank 0
    ps = spec_of(workload={"mode": "ps"}, dlcp={"resync_every": 7})
    assert ps.mode == "ps" and ps.resync_every == 0 and not ps.average_parameters


def test_server_gathers_the_next_iteration_while_its_scatter_is_out():
    core = ServerCore(2, (0, 1))
    assert core.start(0) == [A.BeginComm(0), A.AwaitPushes(0)]
    aggs = aggregates({0: np.full(4, 3), 1: np.full(3, 3)})
    assert core.gathered(1_000, 0, aggs) == [A.Update(0, aggs)]
    assert core.work_done(1_100) == [A.ReadParameters((0, 1))]
    params = {0: np.zeros(4, np.float32), 1: np.zeros(3, np.float32)}
    assert core.work_done(1_200, 0.0, params) == [A.Scatter(0, params), A.BeginComm(1), A.AwaitPushes(1)]
    core.gathered(2_000, 1, aggs)  # before the scatter of iteration 0 finished
    core.work_done(2_000)
    assert core.work_done(2_000, 0.0, params) == [A.Scatter(1, params)]  # the last: no more gathering
    assert core.scattered(2_500, 1) == [A.Progress(2, 2), A.Finished()]
    assert core.scattered(2_600, 0) == [A.Progress(2, 2)]  # finished once
    with pytest.raises(RuntimeError, match="gathered"):
        core.gathered(3_000, 2, aggs)


def test_server_sizes_only_scatters_without_updating():
    core = ServerCore(1, (0, 1), sizes_only=True)
    core.start(0)
    assert core.gathered(1_000, 0, {0: None, 1: None}) == [A.Scatter(0, None)]
    with pytest.raises(RuntimeError, match="pushes of iteration 1 while gathering 1|gathered"):
        core.gathered(1_000, 1, {})


def test_drive_performs_what_an_action_caused_before_the_rest():
    done = []

    def perform(a):
        done.append(a)
        return {"a": ["a1", "a2"], "a1": ["a11"]}.get(a, [])

    A.drive(["a", "b"], perform)
    assert done == ["a", "a1", "a11", "a2", "b"]


def test_cores_train_the_synthetic_workload_through_an_in_process_ps():
    """Two WorkerCores and a ServerCore with the real synthetic workloads; the driver below moves
    pushes and parameters by hand. The test loss falls, and the rows are complete."""
    cfg = WorkloadConfig(model="synthetic", iterations=6, eval_every=3, lr=0.2, seed=3)
    world = 2
    workers = [SyntheticWorkload(cfg, r, world) for r in range(world)]
    server = SyntheticServerWorkload(cfg)
    ids = tuple(lay.msg_id for lay in server.layouts())
    layouts = {lay.msg_id: lay for lay in server.layouts()}
    cores = [WorkerCore(WorkerSpec(f"h{r + 1}", r, world, "ps", cfg.iterations, ids)) for r in range(world)]
    ps = ServerCore(cfg.iterations, ids)
    rows: list[dict] = []
    pushes: dict = {}
    now = [0]

    def clock() -> int:
        now[0] += 10
        return now[0]

    def worker_perform(r):
        core, wl = cores[r], workers[r]

        def perform(a):
            if isinstance(a, A.WorkloadCall):
                return core.work_done(clock(), 0.0, a.run(wl))
            if isinstance(a, A.Compute):
                for msg in wl.compute(a.iteration):
                    A.drive(core.gradient_ready(clock(), msg), perform)
                return core.compute_done(clock())
            if isinstance(a, A.Push):
                values = np.array(a.message.values, np.float32)  # every packet of the push arrived
                got = RecvResult(
                    r, a.iteration, 0, a.message.msg_id, values, np.ones(1, bool), None, values.size, 0, 0, False, 1
                )
                pushes[(r, a.message.msg_id)] = got
                core.handed(clock())
            if isinstance(a, A.RecordIteration):
                rows.append(a.row)
            return []

        return perform

    def ps_perform(a):
        if isinstance(a, A.WorkloadCall):
            return ps.work_done(clock(), 0.0, a.run(server))
        if isinstance(a, A.Scatter):
            for r in range(world):
                chunks = {m: ParamChunk(np.array(v), np.zeros(len(v), bool)) for m, v in a.params.items()}
                A.drive(cores[r].comm_done(clock(), chunks), worker_perform(r))
            return ps.scattered(clock(), a.iteration)
        return []

    A.drive(ps.start(clock()), ps_perform)
    for it in range(cfg.iterations):
        for r in range(world):
            A.drive(cores[r].start(clock()), worker_perform(r))
        A.drive(ps.gathered(clock(), it, sum_pushes(layouts, world, pushes)), ps_perform)
        pushes.clear()
    assert ps.done == cfg.iterations and all(c.done == cfg.iterations for c in cores)
    tests = [row["test_loss"] for row in rows if row["host"] == "h1" and row["test_loss"] is not None]
    assert len(tests) == 2 and tests[1] < tests[0]  # iterations 2 and 5 evaluate; SGD makes progress
    assert [row["iter"] for row in rows if row["host"] == "h2"] == list(range(cfg.iterations))
    assert all(row["comm_us"] > 0 and row["iteration_us"] >= row["comm_us"] for row in rows)
