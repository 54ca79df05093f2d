import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlcp.comm.costmodel import CostModel, paper_fit
from dlcp.comm.prediction import prediction_json, tune
from dlcp.comm.schedulers import SCHEDULERS, make_scheduler
from dlcp.comm.schedulers.bytescheduler import partition_tensor
from dlcp.comm.schedulers.dear import fusion_groups
from dlcp.comm.schedulers.grouped import GroupedAllReduce
from dlcp.comm.schedulers.mgwfbp import mgwfbp_groups
from dlcp.comm.schedulers.usbyte import backward_phase, evaluate, usbyte_blocks
from dlcp.comm.timeline import ready_times, simulate
from dlcp.workloads.profile import Profile, load_profile


def prof(sizes, tb, tf=None):
    n = len(sizes)
    tf = tf if tf is not None else [0.0] * n
    return Profile("hand", tuple(f"t{i}" for i in range(n)), tuple(sizes), tuple(tf), tuple(tb))


def run(name, p, cost, **options):
    s = make_scheduler(name, p, cost, 8, **options)
    return s, simulate(p, s, cost, iterations=2)


# --- MG-WFBP: each branch of the merge rule --------------------------------------------------


def test_mgwfbp_merges_when_the_allreduce_has_not_started():
    # r = [3, 2, 1]; alpha 0.5, beta 1 ms/B: tc2 = 3 (2500 B), tc1 = 1.5 (1000 B).
    # l=2: r1=2 < c2+tc2=4, c2=1 <= r1 and r1-c2 = 1 >= alpha: closed.
    # l=1: c1 = max(1+3, 2) = 4 > r0 = 3: tensor 1's all-reduce has not started -> merge.
    p = prof([250, 250, 625], tb=[1.0, 1.0, 1.0])
    cost = CostModel(alpha=0.5, beta=0.001)
    groups, decisions, end = mgwfbp_groups(p.sizes, p.backward_s, cost)
    assert groups == [[0, 1], [2]] and decisions == {2: None, 1: "not_started"}
    # group [0, 1] (2000 B, 2.5 s) starts when the channel frees at 4: ends 6.5
    assert end == 6.5
    s, tl = run("mgwfbp", p, cost)
    assert s.model_iteration_s == tl.iteration_s == 6.5


def test_mgwfbp_merges_when_waiting_costs_less_than_alpha():
    # r = [2, 1]; c1 = 1, r0 - c1 = 1 < alpha = 1.5, and r0 = 2 < c1 + tc1 = 1 + 2.5
    p = prof([250, 250], tb=[1.0, 1.0])
    groups, decisions, _ = mgwfbp_groups(p.sizes, p.backward_s, CostModel(alpha=1.5, beta=0.001))
    assert groups == [[0, 1]] and decisions == {1: "within_alpha"}


def test_mgwfbp_does_not_merge_when_waiting_costs_alpha_or_more():
    # same, alpha 1.0: r0 - c1 = 1 is not < alpha (the boundary), and alpha 0.5 below it
    for alpha in (1.0, 0.5):
        p = prof([250, 250], tb=[1.0, 1.0])
        groups, decisions, _ = mgwfbp_groups(p.sizes, p.backward_s, CostModel(alpha=alpha, beta=0.001))
        assert groups == [[0], [1]] and decisions == {1: None}


def test_mgwfbp_does_not_merge_when_the_previous_allreduce_ends_first():
    # tc1 = 0.1 + 0.2 = 0.3: tensor 1 is done at 1.3, before tensor 0 is ready at 2
    p = prof([50, 50], tb=[1.0, 1.0])
    groups, decisions, end = mgwfbp_groups(p.sizes, p.backward_s, CostModel(alpha=0.1, beta=0.001))
    assert groups == [[0], [1]] and decisions == {1: None} and end == pytest.approx(2.3)


def test_mgwfbp_small_tensor_rule_is_an_option():
    p = prof([50, 50], tb=[1.0, 1.0])
    cost = CostModel(alpha=0.1, beta=0.001)
    groups, decisions, _ = mgwfbp_groups(p.sizes, p.backward_s, cost, small_merge_elems=8192)
    assert groups == [[0, 1]] and decisions == {1: "small"}
    groups, _, _ = mgwfbp_groups(p.sizes, p.backward_s, cost, small_merge_elems=50)  # 50 is not < 50
    assert groups == [[0], [1]]
    with pytest.raises(ValueError, match="small_merge_elems"):
        make_scheduler("mgwfbp", p, cost, small_merge_elems=-1)


# --- OASR-WFBP (reconstructed): the optimum over contiguous merges ---------------------------


def contiguous_groupings(n):
    for cuts in itertools.product([False, True], repeat=n - 1):
        groups, group = [], [0]
        for t, cut in enumerate(cuts, start=1):
            if cut:
                groups.append(group)
                group = []
            group.append(t)
        groups.append(group)
        yield groups


def brute_force(p, cost):
    best = None
    for groups in contiguous_groupings(len(p)):
        t = simulate(p, GroupedAllReduce(p.sizes, groups), cost).iteration_s
        best = t if best is None else min(best, t)
    return best


small_cases = st.integers(1, 7).flatmap(
    lambda n: st.tuples(
        st.lists(st.integers(1, 2_000_000), min_size=n, max_size=n),
        st.lists(st.floats(1e-5, 0.01), min_size=n, max_size=n),
        st.lists(st.floats(0.0, 0.01), min_size=n, max_size=n),
        st.floats(0.0, 3e-3),
        st.floats(1e-11, 3e-9),
    )
)


@settings(max_examples=80, deadline=None)
@given(small_cases)
def test_oasr_equals_the_brute_force_optimum_and_beats_mgwfbp(case):
    sizes, tb, tf, alpha, beta = case
    p, cost = prof(sizes, tb, tf), CostModel(alpha, beta)
    s, tl = run("oasr", p, cost)
    assert tl.iteration_s == pytest.approx(brute_force(p, cost), rel=1e-12)
    assert s.model_iteration_s == pytest.approx(tl.iteration_s, rel=1e-12)
    mg, mg_tl = run("mgwfbp", p, cost)
    assert mg.model_iteration_s == pytest.approx(mg_tl.iteration_s, rel=1e-12)
    assert tl.iteration_s <= mg_tl.iteration_s * (1 + 1e-12)


def test_oasr_beats_mgwfbp_where_greedy_merging_is_wrong():
    # r = [1.6, 1.1, 1.0]; alpha 0.2 s, beta 1e-7 s/B. MG-WFBP: tensor 2's all-reduce starts at 1.0,
    # tensor 1 is ready 0.1 s later (< alpha), so [1, 2] merge: 1.1 -> 2.100004, then tensor 0
    # (ready at 1.6) 2.100004 -> 2.340004. The optimum sends 2 alone (1.0 -> 2.0) and lets tensor 1
    # ride with tensor 0, whose all-reduce waits for the channel anyway: 2.0 -> 2.240004.
    p = prof([100_000, 10, 2_000_000], tb=[0.5, 0.1, 1.0])
    cost = CostModel(alpha=0.2, beta=1e-7)
    mg, mg_tl = run("mgwfbp", p, cost)
    oasr, oasr_tl = run("oasr", p, cost)
    assert mg.groups == [[0], [1, 2]] and oasr.groups == [[0, 1], [2]]
    assert mg_tl.iteration_s == pytest.approx(2.340004) and oasr_tl.iteration_s == pytest.approx(2.240004)


# --- ByteScheduler -----------------------------------------------------------------------------


def test_partition_tensor_near_equal_and_covering():
    parts = partition_tensor(3, 10, 4)  # ceil(10/4) = 3 parts: 4, 3, 3
    assert [(s.start, s.stop) for s in parts] == [(0, 4), (4, 7), (7, 10)]
    assert [(s.start, s.stop) for s in partition_tensor(0, 8, 4)] == [(0, 4), (4, 8)]
    assert [(s.start, s.stop) for s in partition_tensor(0, 3, 4)] == [(0, 3)]


def test_bytescheduler_hand_order():
    # sizes 4, 4, 8 elements; partition 16 B (4 elements), credit 16 B: one partition in flight.
    # Tensor 2 is ready first (t=1) and its first partition goes; by its end (11) tensors 1 and 0
    # are ready, so tensor 0 goes next, then 1, then the rest of 2.
    p = prof([4, 4, 8], tb=[1.0, 1.0, 1.0])
    cost = CostModel(alpha=10.0, beta=0.0)
    _, tl = run("bytescheduler", p, cost, partition_bytes=16, credit_bytes=16)
    order = [(r.op.segments[0].tensor, r.op.segments[0].start, r.start_s) for r in tl.ops_of(0)]
    assert order == [(2, 0, 1.0), (0, 0, 11.0), (1, 0, 21.0), (2, 4, 31.0)]


def test_bytescheduler_sees_a_gradient_ready_at_the_instant_a_partition_completes():
    # tensor 1 (2 partitions) ready at 1, its first partition runs 1->3; tensor 0 is ready at 3
    # exactly: the timeline handles the ready event first, so tensor 0 goes before tensor 1's rest
    p = prof([4, 8], tb=[2.0, 1.0])
    _, tl = run("bytescheduler", p, CostModel(alpha=2.0, beta=0.0), partition_bytes=16, credit_bytes=16)
    order = [(r.op.segments[0].tensor, r.op.segments[0].start, r.start_s) for r in tl.ops_of(0)]
    assert order == [(1, 0, 1.0), (0, 0, 3.0), (1, 4, 5.0)]


def check_bytescheduler_invariants(p, tl, credit):
    r = ready_times(p.backward_s)
    recs = tl.ops_of(0)  # FIFO: start order is release order
    for i, x in enumerate(recs):
        in_flight = sum(y.op.nbytes for y in recs if y.released_s <= x.released_s < y.end_s)
        assert in_flight <= credit
        kx = (x.op.segments[0].tensor, x.op.segments[0].start)
        for y in recs[i + 1 :]:
            ready_y = tl.backward_start_s[0] + r[y.op.segments[0].tensor]
            if ready_y <= x.released_s:  # y was ready and waiting when x was chosen
                assert kx < (y.op.segments[0].tensor, y.op.segments[0].start)


bs_cases = st.integers(1, 6).flatmap(
    lambda n: st.tuples(
        st.lists(st.integers(1, 500), min_size=n, max_size=n),
        st.lists(st.floats(1e-3, 1.0), min_size=n, max_size=n),
        st.integers(10, 500),
        st.integers(1, 4),
        st.floats(0.0, 0.5),
        st.floats(1e-5, 1e-3),
    )
)


@settings(max_examples=80, deadline=None)
@given(bs_cases)
def test_bytescheduler_never_exceeds_credit_and_sends_lower_index_first(case):
    sizes, tb, part_elems, credit_parts, alpha, beta = case
    p = prof(sizes, tb)
    cost = CostModel(alpha, beta)
    credit = 4 * part_elems * credit_parts
    s, tl = run("bytescheduler", p, cost, partition_bytes=4 * part_elems, credit_bytes=credit)
    check_bytescheduler_invariants(p, tl, credit)
    assert s.max_inflight_bytes <= credit


def test_bytescheduler_rejects_credit_below_a_partition():
    p = prof([100], tb=[1.0])
    with pytest.raises(ValueError, match=r"credit_bytes must be an integer >= the largest block \(400 bytes\)"):
        make_scheduler("bytescheduler", p, None, partition_bytes=400, credit_bytes=399)
    with pytest.raises(ValueError, match="partition_bytes"):
        make_scheduler("bytescheduler", p, None, partition_bytes=2)
    with pytest.raises(ValueError, match="unexpected keyword argument 'credit'"):
        make_scheduler("bytescheduler", p, None, credit=5)


# --- US-Byte -----------------------------------------------------------------------------------

UNIT = 100
US_COST = CostModel(alpha=1.0, beta=0.0025)  # one unit of 100 elements: 1 + 1 s; k units: 1 + k


@pytest.mark.parametrize(
    "tb0, first_block, expected_t",
    [
        (2.5, (1, 0, 200, 1.0, 4.0), 9.0),  # gap 2.5 >= alpha: ceil((2.5-1)/1) = 2 units reach r0
        (0.5, (1, 0, 100, 1.0, 3.0), 9.0),  # gap 0.5 < alpha: one unit
        (1.0, (1, 0, 100, 1.0, 3.0), 9.0),  # gap == alpha: one unit (the authors' code gives 0)
        (10.0, (1, 0, 300, 1.0, 5.0), 15.0),  # the whole rest fits in the gap
    ],
)
def test_usbyte_block_sizes(tb0, first_block, expected_t):
    # sizes 100, 300 elements; tensor 1 ready at 1, tensor 0 at 1 + tb0; forward 1 s each
    p = prof([100, 300], tb=[tb0, 1.0], tf=[1.0, 1.0])
    blocks, _, t = usbyte_blocks(p.sizes, p.backward_s, p.forward_s, US_COST, UNIT)
    b = blocks[0]
    assert (b.tensor, b.start, b.stop, b.t_start, b.t_end) == first_block and b.phase == "backward"
    assert t == expected_t
    s, tl = run("usbyte", p, US_COST, unit_elems=UNIT)
    assert tl.iteration_s == expected_t == s.model_iteration_s


def test_usbyte_forward_phase_sends_rests_input_side_first():
    # tb0 = 2.5 above: backward block (1, 0..200) 1->4, then tensor 0 whole 4->6, tensor 1 rest 6->8;
    # forward: tensor 0 at max(3.5, 6) -> 7, tensor 1 at max(7, 8) -> 9
    p = prof([100, 300], tb=[2.5, 1.0], tf=[1.0, 1.0])
    blocks, _, _ = usbyte_blocks(p.sizes, p.backward_s, p.forward_s, US_COST, UNIT)
    assert [(b.tensor, b.start, b.stop, b.phase, b.t_start, b.t_end) for b in blocks] == [
        (1, 0, 200, "backward", 1.0, 4.0),
        (0, 0, 100, "forward", 4.0, 6.0),
        (1, 200, 300, "forward", 6.0, 8.0),
    ]


def test_usbyte_grows_the_previous_block_of_the_same_tensor():
    # sizes 100, 100, 300; priorities: tensor 2 most urgent. r2 = 1, r1 = 2.5, r0 = 4.
    # Before r1: tensor 2, one unit 1->3. Before r0 tensor 2 is still the most urgent and its block
    # ended at free = 3: it grows instead, recomputed from 1: gap 3 -> 2 units, 1->4.
    r = ready_times([1.5, 1.5, 1.0])
    blocks, rest, sent, free = backward_phase([100, 100, 300], r, UNIT, US_COST, [1, 2, 0])
    assert [(b.tensor, b.start, b.stop, b.t_start, b.t_end) for b in blocks] == [(2, 0, 200, 1.0, 4.0)]
    assert rest == [100, 100, 100] and sent == [0, 0, 200] and free == 4.0


def test_usbyte_priority_search_promotes_a_tensor_when_it_pays():
    # Identity priorities: 19.5 s. Promoting tensor 2 to the top (k = 0, since it would end at
    # 2.5 + 6 = 8.5 > r0 = 5) grows its backward block to 2 units and gives 18.5 s.
    p = prof([100, 400, 500], tb=[1.0, 1.5, 2.5], tf=[0.0, 1.0, 2.0])
    blocks, prio, t = usbyte_blocks(p.sizes, p.backward_s, p.forward_s, US_COST, UNIT)
    assert prio == [1, 2, 0] and t == 18.5
    assert [(b.tensor, b.start, b.stop, b.t_start) for b in blocks] == [
        (2, 0, 200, 2.5),
        (0, 0, 100, 5.5),
        (1, 0, 400, 7.5),
        (2, 200, 500, 12.5),
    ]
    _, tl = run("usbyte", p, US_COST, unit_elems=UNIT)
    assert tl.iteration_s == 18.5
    assert [r.op.priority for r in tl.ops_of(0)] == [0, 1, 2, 3]  # slot index = send order


us_cases = st.integers(1, 8).flatmap(
    lambda n: st.tuples(
        st.lists(st.integers(1, 5000), min_size=n, max_size=n),
        st.lists(st.floats(1e-3, 2.0), min_size=n, max_size=n),
        st.lists(st.floats(0.0, 1.0), min_size=n, max_size=n),
        st.integers(1, 2000),
        st.floats(0.0, 1.0),
        st.floats(1e-6, 1e-3),
    )
)


@settings(max_examples=100, deadline=None)
@given(us_cases)
def test_usbyte_blocks_cover_every_element_exactly_once(case):
    sizes, tb, tf, unit, alpha, beta = case
    p, cost = prof(sizes, tb, tf), CostModel(alpha, beta)
    blocks, prio, t = usbyte_blocks(p.sizes, p.backward_s, p.forward_s, cost, unit)
    for tensor, n in enumerate(sizes):
        mine = sorted((b.start, b.stop) for b in blocks if b.tensor == tensor)
        assert mine[0][0] == 0 and mine[-1][1] == n
        assert all(a[1] == b[0] for a, b in itertools.pairwise(mine))  # contiguous, no overlap
        assert all(start < stop for start, stop in mine)
    assert sorted(prio) == list(range(len(sizes)))
    # executed one block at a time, the plan is exactly what the timeline does
    _, tl = run("usbyte", p, cost, unit_elems=unit)
    assert tl.iteration_s == pytest.approx(t, rel=1e-9)
    identity_t, _ = evaluate(p.sizes, ready_times(p.backward_s), p.forward_s, unit, cost, list(range(len(sizes))))
    assert t <= identity_t  # the priority search only keeps improvements


# --- DeAR --------------------------------------------------------------------------------------


def test_dear_fusion_groups_by_threshold():
    sizes = [10, 10, 10, 30, 5]  # 40, 40, 40, 120, 20 bytes
    assert fusion_groups(sizes, 100) == [[0, 1], [2], [3], [4]]
    assert fusion_groups(sizes, 120) == [[0, 1], [2], [3], [4]]  # 80 + 40 is not < 120
    assert fusion_groups(sizes, 121) == [[0, 1, 2], [3], [4]]
    assert fusion_groups(sizes, 0) == [[0], [1], [2], [3], [4]]
    assert fusion_groups(sizes, 10**9) == [[0, 1, 2, 3, 4]]


def test_dear_hand_timeline():
    # 2 tensors of 1000 B, no fusion; alpha 1, beta 1 ms/B: RS = AG = 1 s. Forward 0: 0->2.
    # RS1 3->4, RS0 4->5, AG0 (all RS done) 5->6; forward 1 reaches tensor 0 at 4 and waits to 6,
    # then AG1 goes 6->7; tensor 0 runs 6->7, tensor 1 waits for AG1 to 7 -> 8. Iteration 6.
    p = prof([250, 250], tb=[1.0, 1.0], tf=[1.0, 1.0])
    cost = CostModel(alpha=1.0, beta=0.001)
    _, tl = run("dear", p, cost, threshold_bytes=0)
    ops = [(r.op.primitive, r.op.tensors, r.released_s, r.start_s, r.end_s) for r in tl.ops_of(0)]
    assert ops == [
        ("reduce_scatter", [1], 3.0, 3.0, 4.0),
        ("reduce_scatter", [0], 4.0, 4.0, 5.0),
        ("all_gather", [0], 5.0, 5.0, 6.0),
        ("all_gather", [1], 6.0, 6.0, 7.0),
    ]
    assert tl.forward_start_s[1] == [6.0, 7.0] and tl.iteration_s == 6.0
    _, wfbp = run("wfbp", p, cost)
    assert wfbp.iteration_s == 7.0  # all-reduces 3->5, 5->7: the forward waits for both


dear_cases = st.integers(1, 8).flatmap(
    lambda n: st.tuples(
        st.lists(st.integers(1, 3_000_000), min_size=n, max_size=n),
        st.lists(st.floats(1e-5, 0.01), min_size=n, max_size=n),
        st.lists(st.floats(0.0, 0.01), min_size=n, max_size=n),
        st.integers(0, 20_000_000),
        st.floats(0.0, 3e-3),
        st.floats(1e-11, 3e-9),
    )
)


@settings(max_examples=80, deadline=None)
@given(dear_cases)
def test_dear_all_gather_ends_before_its_groups_next_forward(case):
    sizes, tb, tf, threshold, alpha, beta = case
    p, cost = prof(sizes, tb, tf), CostModel(alpha, beta)
    s, tl = run("dear", p, cost, threshold_bytes=threshold)
    r = ready_times(p.backward_s)
    for k in range(tl.iterations):
        recs = tl.ops_of(k)
        rs = {tuple(x.op.tensors): x for x in recs if x.op.primitive == "reduce_scatter"}
        ag = {tuple(x.op.tensors): x for x in recs if x.op.primitive == "all_gather"}
        assert sorted(rs) == sorted(ag) == sorted(tuple(g) for g in s.groups)
        bwd_end = tl.backward_start_s[k] + r[0]
        for g, members in enumerate(s.groups):
            x = ag[tuple(members)]
            # the defining property: parameters of the group are back before its forward starts
            assert x.end_s <= tl.forward_start_s[k + 1][members[0]]
            # reduce-scatter once the group's last gradient (its lowest tensor) is ready
            assert rs[tuple(members)].released_s == pytest.approx(tl.backward_start_s[k] + r[members[0]], rel=1e-12)
            if g == 0:
                assert x.released_s == max(y.end_s for y in rs.values())
            else:
                prev = s.groups[g - 1][0]
                # all-gather g goes at max(all-gather g-1 done, forward reaches group g-1)
                reach = bwd_end if prev == 0 else tl.forward_start_s[k + 1][prev - 1] + p.forward_s[prev - 1]
                assert x.released_s == pytest.approx(max(ag[tuple(s.groups[g - 1])].end_s, reach), rel=1e-12)


# --- plans -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_plan_json_is_json_and_self_consistent(name):
    p = load_profile("resnet50-usbyte")
    cost = paper_fit("10GbE", 16)
    d = json.loads(json.dumps(prediction_json(name, p, 16, cost)))
    assert d["scheduler"] == name and d["workers"] == 16 and d["profile"] == "resnet50-usbyte"
    assert sorted(t for g in d["groups"] for t in g) == list(range(len(p)))
    assert all(g == sorted(g) for g in d["groups"])
    assert d["predicted_iteration_s"] >= d["compute_s"] == p.compute_s
    finals = {}
    for op in d["send_order"]:
        if op["primitive"] in ("allreduce", "all_gather"):
            for t, a, b in op["segments"]:
                finals[t] = finals.get(t, 0) + b - a
    assert finals == dict(enumerate(p.sizes))
    starts = [op["start_s"] for op in d["send_order"]]
    assert starts == sorted(starts)
    if name in ("bytescheduler", "usbyte"):
        assert sorted(map(tuple, d["partitions"])) == sorted(
            tuple(seg) for op in d["send_order"] for seg in op["segments"]
        )


def test_plan_json_rejects_a_cost_model_for_other_workers():
    with pytest.raises(ValueError, match="holds for 16 workers, not 8"):
        prediction_json("wfbp", load_profile("vgg16-usbyte"), 8, paper_fit("10GbE", 16))
    with pytest.raises(ValueError, match="scheduler 'fifo' is not one of"):
        prediction_json("fifo", load_profile("vgg16-usbyte"), 16, paper_fit("10GbE", 16))


def test_tune_picks_the_best_grid_point():
    p = load_profile("resnet50-usbyte")
    cost = paper_fit("10GbE", 16)
    grid = [m << 20 for m in (0, 5, 25, 100)]
    best, t = tune("dear", p, 16, cost, {"threshold_bytes": grid})
    by_hand = {g: run("dear", p, cost, threshold_bytes=g)[1].iteration_s for g in grid}
    assert t == min(by_hand.values()) and by_hand[best["threshold_bytes"]] == t
    with pytest.raises(ValueError, match="no valid combination"):
        tune(
            "bytescheduler",
            load_profile("vgg16-usbyte"),
            16,
            cost,
            {"partition_bytes": [4 << 20], "credit_bytes": [10]},
        )


def test_bytescheduler_defaults_are_its_docs_allreduce_values_and_say_so():
    # ByteScheduler's docs: partition 8,000,000 and credit 16,000,000 parameters for all-reduce;
    # 1,000,000 / 4,000,000 (bytecore's defaults) are the parameter server's
    p = load_profile("vgg16-usbyte")
    s = make_scheduler("bytescheduler", p, None)
    assert (s.partition_bytes, s.credit_bytes) == (32_000_000, 64_000_000)
    d = s.describe()
    assert d["architecture"] == "allreduce" and "scheduling.md" in d["defaults"]
    ps = make_scheduler("bytescheduler", p, None, architecture="ps")
    assert (ps.partition_bytes, ps.credit_bytes) == (4_000_000, 16_000_000)
    mixed = make_scheduler("bytescheduler", p, None, partition_bytes=8_000_000)
    assert (mixed.partition_bytes, mixed.credit_bytes) == (8_000_000, 64_000_000)
    assert mixed.describe()["defaults"].startswith("credit_bytes:")


def test_bytescheduler_with_allreduce_defaults_no_longer_loses_to_wfbp_on_vgg16_at_64_workers():
    # the case: VGG-16, 64 workers, 100 Gbit/s; with the PS sizes 165 operations and
    # about 3x WFBP's iteration, with the all-reduce sizes within a few percent of it
    p = load_profile("vgg16-usbyte")
    cost = CostModel.from_link(100e9, 30e-6, 64)
    ops = {
        a: len(simulate(p, make_scheduler("bytescheduler", p, cost, 64, architecture=a), cost).ops_of(1))
        for a in ("allreduce", "ps")
    }
    it = {
        a: simulate(p, make_scheduler("bytescheduler", p, cost, 64, architecture=a), cost).iteration_s
        for a in ("allreduce", "ps")
    }
    wfbp = simulate(p, make_scheduler("wfbp", p, cost, 64), cost).iteration_s
    assert ops["ps"] > 3 * ops["allreduce"]
    assert it["ps"] > 1.5 * wfbp and it["allreduce"] < 1.1 * wfbp


def test_a_merging_scheduler_that_collapses_to_one_group_says_so():
    # DeAR's 64-GPU 10GbE fit: MG-WFBP's own rule merges ResNet-50 (H200 profile) into one group
    p = load_profile("resnet50-fp32-b64-h200")
    s = make_scheduler("mgwfbp", p, paper_fit("10GbE", 64), 64)
    assert len(s.groups) == 1
    assert any("one group" in n and "no overlap" in n for n in s.describe()["notes"])
    plan = prediction_json("mgwfbp", p, 64, paper_fit("10GbE", 64))
    assert plan["notes"] == s.describe()["notes"]
    assert "notes" not in make_scheduler("wfbp", p, None).describe()
    assert "notes" not in make_scheduler("mgwfbp", p, paper_fit("56GbIB", 8), 8).describe()
