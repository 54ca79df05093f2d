"""OptiReduce's Transpose AllReduce as a step schedule (dlcp/comm/plans/tar.py): who sends which
chunk where, one step per phase, exact sums on numbers, and its registry entry."""

import numpy as np
import pytest

from dlcp.comm.plans import execute
from dlcp.comm.plans.collective import COLLECTIVES
from dlcp.comm.plans.schedule import chunk_bounds
from dlcp.comm.plans.tar import plan_json, tar_schedule
from dlcp.comm.plans.topology_arg import parse_topology
from dlcp.comm.settings import CommSetup
from dlcp.network import topology as topospec
from dlcp.settings import ConfigError


def test_chunk_j_goes_to_rank_j_then_from_rank_j_to_everyone():
    s = tar_schedule(topospec.star(4, 50))
    assert s.phases == {"reduce_scatter": (0, 1), "all_gather": (1, 2)} and s.steps_per_phase == 1
    rs, ag = s.steps
    assert all(t.op == "reduce" and t.chunk == t.dst != t.src for t in rs)
    assert all(t.op == "copy" and t.chunk == t.src != t.dst for t in ag)
    assert len(rs) == len(ag) == 4 * 3
    # each rank's sends start at the next rank, so the senders rotate
    assert [t.dst for t in rs if t.src == 2] == [3, 0, 1]
    # incast: every rank receives from all the others in each step
    assert {sum(t.dst == d for t in rs) for d in range(4)} == {3}


def test_after_reduce_scatter_rank_j_holds_chunk_j_and_at_the_end_everyone_the_sum():
    spec = parse_topology("leaf_spine:2x2x3")
    P = len(spec.hosts)
    rng = np.random.default_rng(5)
    vals = [rng.normal(size=37) for _ in range(P)]
    full = tar_schedule(spec)
    after_rs = execute(type(full)("tar", full.hosts, full.steps[:1], {}), vals)
    b = chunk_bounds(37, P)
    for j in range(P):
        assert np.allclose(after_rs[j][b[j] : b[j + 1]], sum(vals)[b[j] : b[j + 1]])
    for out in execute(full, vals):
        assert np.allclose(out, sum(vals))


def test_registered_with_its_description_and_json():
    entry = COLLECTIVES["tar"]
    assert "Transpose AllReduce" in entry.description
    d = plan_json(topospec.star(8, 50))
    assert d["collective"] == "tar" and d["steps_per_phase"] == 1 and d["incast_per_step"] == 7
    assert CommSetup(collective="tar").collective == "tar"


def test_one_worker_is_refused():
    with pytest.raises(ConfigError, match="'tar' needs at least 2 workers"):
        CommSetup(collective="tar").check_workers(1)
