import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlcp.comm.costmodel import CostModel
from dlcp.comm.prediction import sweep
from dlcp.comm.schedulers import SCHEDULERS, Op, Scheduler, Segment, make_scheduler
from dlcp.comm.timeline import ready_times, simulate
from dlcp.workloads.profile import Profile, load_profile


def prof(sizes, tb, tf, name="hand"):
    n = len(sizes)
    return Profile(name, tuple(f"t{i}" for i in range(n)), tuple(sizes), tuple(tf), tuple(tb))


def test_ready_times_run_backward_from_the_output_side():
    assert ready_times([1.0, 2.0, 4.0]) == [7.0, 6.0, 4.0]


def test_wfbp_matches_the_hand_computed_timeline():
    # 3 tensors of 1000, 2000, 1000 bytes; alpha 1 s, beta 1 ms/B: all-reduces of 2, 3, 2 s.
    # forward 0..3; backward starts at 3: tensor 2 ready at 4, 1 at 5, 0 at 6.
    # AR2 4->6, AR1 (released 5) 6->9, AR0 (released 6) 9->11; the forward of iteration 1 waits
    # for AR0: tensor 0 runs 11->12, 1 12->13, 2 13->14; iteration = 14 - 3 = 11 = comm end 8 + 3.
    p = prof([250, 500, 250], tb=[1.0, 1.0, 1.0], tf=[1.0, 1.0, 1.0])
    cost = CostModel(alpha=1.0, beta=0.001)
    tl = simulate(p, make_scheduler("wfbp", p, cost), cost, iterations=3)
    assert tl.periods == [11.0, 11.0, 11.0] and tl.iteration_s == 11.0 and tl.compute_s == 6.0
    assert tl.backward_start_s == [3.0, 14.0, 25.0, 36.0]
    assert tl.forward_start_s[1] == [11.0, 12.0, 13.0]
    it0 = [(r.op.tensors, r.released_s, r.start_s, r.end_s) for r in tl.ops_of(0)]
    assert it0 == [([2], 4.0, 4.0, 6.0), ([1], 5.0, 6.0, 9.0), ([0], 6.0, 9.0, 11.0)]


def test_forward_is_gated_per_tensor_not_per_iteration():
    # ByteScheduler, 2 tensors: 1000 B and 10000 B (5 partitions of 2000 B), alpha 0, 1 ms/B,
    # credit one partition. Forward 0: 0->2; tensor 1 ready at 3, tensor 0 at 4.
    # (1,0) 3->5; at 5 tensor 0 outranks the rest of tensor 1: (0,0) 5->6; (1,1..4) 6->14.
    # Forward 1: tensor 0 runs 6->7 while tensor 1 still communicates, tensor 1 waits until 14.
    p = prof([250, 2500], tb=[1.0, 1.0], tf=[1.0, 1.0])
    cost = CostModel(alpha=0.0, beta=0.001)
    s = make_scheduler("bytescheduler", p, cost, partition_bytes=2000, credit_bytes=2000)
    tl = simulate(p, s, cost)
    assert [(r.op.segments[0].tensor, r.start_s, r.end_s) for r in tl.ops_of(0)] == [
        (1, 3.0, 5.0),
        (0, 5.0, 6.0),
        (1, 6.0, 8.0),
        (1, 8.0, 10.0),
        (1, 10.0, 12.0),
        (1, 12.0, 14.0),
    ]
    assert tl.forward_start_s[1] == [6.0, 14.0]
    assert tl.iteration_s == 15.0 - 2.0


class _Twice(Scheduler):
    name = "twice"

    def on_ready(self, iteration, tensor, now):
        return [
            self.new_op(iteration, "allreduce", [self.whole(tensor)], tensor),
            self.new_op(iteration, "allreduce", [Segment(tensor, 0, 1)], tensor),
        ]

    def on_complete(self, op_id, now):
        return []


class _Silent(Scheduler):
    name = "silent"

    def on_ready(self, iteration, tensor, now):
        return []

    def on_complete(self, op_id, now):
        return []


class _Early(Scheduler):
    name = "early"

    def on_ready(self, iteration, tensor, now):
        return [self.new_op(iteration, "allreduce", [self.whole(0)], 0)]

    def on_complete(self, op_id, now):
        return []


class _HalfWay(Scheduler):
    """Reduce-scatter only: nothing is ever final."""

    name = "halfway"

    def on_ready(self, iteration, tensor, now):
        return [self.new_op(iteration, "reduce_scatter", [self.whole(tensor)], tensor)]

    def on_complete(self, op_id, now):
        return []


def test_timeline_refuses_broken_schedulers():
    p = prof([10, 10], tb=[1.0, 1.0], tf=[1.0, 1.0])
    cost = CostModel(alpha=0.1, beta=0.0)
    with pytest.raises(ValueError, match=r"'twice': elements \[0, 1\) of tensor 1 \(iteration 0\) made final twice"):
        simulate(p, _Twice(p.sizes), cost)
    with pytest.raises(RuntimeError, match=r"'silent' stalled: the forward of iteration 1 waits for tensor 0"):
        simulate(p, _Silent(p.sizes), cost)
    with pytest.raises(ValueError, match=r"'early': op 0 sends tensor 0 of iteration 0 before its gradient is ready"):
        simulate(p, _Early(p.sizes), cost)
    with pytest.raises(RuntimeError, match="'halfway' stalled"):
        simulate(p, _HalfWay(p.sizes), cost)
    with pytest.raises(ValueError, match="iterations"):
        simulate(p, _Silent(p.sizes), cost, iterations=0)


def test_op_validates_primitive_and_segments():
    with pytest.raises(ValueError, match="primitive 'bcast'"):
        Op(0, 0, "bcast", (Segment(0, 0, 1),), 0)
    with pytest.raises(ValueError, match="no segments"):
        Op(0, 0, "allreduce", (), 0)
    op = Op(3, 0, "all_gather", (Segment(0, 0, 10), Segment(1, 5, 7)), 0)
    assert op.nbytes == 48 and op.final and op.tensors == [0, 1]
    assert not Op(3, 0, "reduce_scatter", (Segment(0, 0, 10),), 0).final


profiles = st.integers(1, 7).flatmap(
    lambda n: st.tuples(
        st.lists(st.integers(1, 3_000_000), min_size=n, max_size=n),
        st.lists(st.floats(1e-5, 0.02), min_size=n, max_size=n),
        st.lists(st.floats(0.0, 0.01), min_size=n, max_size=n),
    )
)
costs = st.tuples(st.floats(0.0, 2e-3), st.floats(0.0, 2e-9))


@settings(max_examples=60, deadline=None)
@given(profiles, costs, st.sampled_from(sorted(SCHEDULERS)))
def test_every_policy_reaches_a_steady_state_at_or_above_compute(pr, ab, name):
    p = prof(*pr)
    cost = CostModel(*ab)
    tl = simulate(p, make_scheduler(name, p, cost, 8), cost, iterations=3)
    assert tl.iteration_s >= p.compute_s * (1 - 1e-12)
    assert tl.periods == pytest.approx([tl.iteration_s] * 3, rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_free_communication_costs_nothing(name):
    p = load_profile("resnet50-usbyte")
    cost = CostModel(alpha=0.0, beta=0.0)
    tl = simulate(p, make_scheduler(name, p, cost, 16), cost)
    assert tl.iteration_s == pytest.approx(p.compute_s, rel=1e-12)


def test_sweep_of_all_policies_profiles_and_worker_counts():
    workers = [4, 8, 16, 32, 64, 128]
    rows = sweep(
        [load_profile("resnet50-usbyte"), load_profile("vgg16-usbyte")],
        workers,
        lambda w: CostModel.from_link(10e9, 30e-6, w),
    )
    assert len(rows) == 6 * 2 * 6
    t = {(r["profile"], r["workers"], r["scheduler"]): r["iteration_s"] for r in rows}
    for r in rows:
        assert r["iteration_s"] >= r["compute_s"]
        assert r["periods_s"] == pytest.approx([r["iteration_s"]] * len(r["periods_s"]), rel=1e-9)
    for prof_name in ("resnet50-usbyte", "vgg16-usbyte"):
        for w in workers:
            # the optimum over contiguous merges is never beaten by its greedy special cases
            assert t[prof_name, w, "oasr"] <= t[prof_name, w, "mgwfbp"] * (1 + 1e-12)
            assert t[prof_name, w, "oasr"] <= t[prof_name, w, "wfbp"] * (1 + 1e-12)
        for name in ("wfbp", "oasr"):
            # ring costs grow with P; FIFO without merging, and the optimum, can only get slower
            series = [t[prof_name, w, name] for w in workers]
            assert series == sorted(series), (prof_name, name, series)
    # communication dominates WFBP on VGG-16 at 10 Gb/s, and exposed communication shrinks with OASR
    assert t["vgg16-usbyte", 16, "wfbp"] > 2 * load_profile("vgg16-usbyte").compute_s
