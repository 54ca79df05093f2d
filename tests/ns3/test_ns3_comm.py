"""The `[comm]` schedulers and collectives on ns-3 (simulation/ns3/agents.py drives the comm
layer's EventCommunicator): a timing-dependent scheduler (ByteScheduler: rank 0 announces its order as
simulated messages) and DeAR (reduce-scatter and all-gather apart), each over the ring and
MultiTree, and DS-Sync's parameter averaging, on 4 simulated workers. Every rank runs the same
operations in the same order, every aggregate is the sum of the group's submitted gradients
wherever all of them arrived, and the re-sync to rank 0 records no drift. One child process loads
ns-3 once and runs the four scheduler x collective runs in it, one series of one run each (a series
of several ns-3 runs goes to a Dask cluster's worker processes, which the child's instrumentation
does not reach), then DS-Sync.

Also, without ns-3: profile compute makes gradients ready at the per-layer backward times."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from ns3_scripts import leaf_spine4

from dlcp import records as R
from simulation.ns3.hosts import core_missing

ROOT = Path(__file__).resolve().parents[2]

CONFIG = (
    leaf_spine4("comm-ns3", 50)
    + """
model = "synthetic"
iterations = 2
compute_ms = 4
[comm]
bytescheduler = { partition_bytes = 4000, credit_bytes = 8000 }
dear = { threshold_bytes = 6000 }
[dlcp]
load_balancing = "spray_rr"
resync_every = 1
"""
)

# Child: traces every started operation and checks every collected aggregate against the sum
# of the submitted values of the rank's group, one line per event in <trace>/<run>.txt.
SCRIPT = r"""
import sys
from pathlib import Path
import numpy as np
from dlcp.comm.communicator import Communicator
from dlcp.runs.series import run_series
from dlcp.runs.series_runner import SeriesRequest

cfg_path, out, trace = sys.argv[1], sys.argv[2], Path(sys.argv[3])
submitted = {}  # (iteration, msg_id, rank) -> values (float64)

label = ["start"]  # the run under way: each run's events go to <trace>/<its label>.txt

def log(line):
    with open(trace / f"{label[0]}.txt", "a") as f:
        f.write(line + "\n")

def on_start(rank, it, slot, primitive):
    log(f"op {rank} {it} {slot} {primitive}")

plain_submit, plain_collect = Communicator.submit, Communicator.collect

def submit(self, it, msg):
    submitted[(it, msg.msg_id, self.coll.rank)] = np.asarray(msg.values, np.float64).copy()
    plain_submit(self, it, msg)

def collect(self, it):
    aggs = plain_collect(self, it)
    rank = self.coll.rank
    plan = getattr(self.plan, "pattern", None)  # DS-Sync: the group of this rank in iteration it
    group = next(g for g in plan.groups(it) if rank in g) if plan is not None else range(self.coll.world)
    for msg_id, agg in aggs.items():
        expect = sum(submitted[(it, msg_id, q)] for q in group)
        full = agg.count == len(group)
        ok = bool(np.allclose(agg.total[full], expect[full], rtol=1e-4, atol=1e-5)) and agg.world == len(group)
        log(f"agg {rank} {it} {msg_id} {int(ok)} {int(full.sum())} {agg.count.size}")
    return aggs

Communicator.on_start = staticmethod(on_start)
Communicator.submit, Communicator.collect = submit, collect
for scheduler in ("bytescheduler", "dear"):
    for collective in ("ring", "multitree"):
        label[0] = f"{scheduler}-{collective}"
        run_series(SeriesRequest(cfg_path, [f"comm.scheduler={scheduler}", f"comm.collective={collective}"],
                                 out_root=out, with_report=False))
log("series done")
label[0] = "dssync"
run_series(SeriesRequest(cfg_path, ["comm.collective=dssync", "comm.dssync.group=2", "workload.iterations=3"],
                         out_root=out, with_report=False))
log("dssync done")
"""


@pytest.mark.skipif(core_missing() is not None, reason=str(core_missing()))
def test_schedulers_and_collectives_on_ns3(tmp_path):
    from simulation.ns3 import loader

    reason = loader.available()
    if reason:
        pytest.skip(reason)
    cfg = tmp_path / "comm.toml"
    cfg.write_text(CONFIG)
    trace = tmp_path / "trace"
    trace.mkdir()
    p = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(cfg), str(tmp_path / "out"), str(trace)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    runs, ends = {}, []
    for f in trace.glob("*.txt"):
        lines = f.read_text().splitlines()
        ends += [line for line in lines if line.endswith(" done")]
        runs[f.name] = [line.split() for line in lines if line.startswith(("op", "agg"))]
    assert sorted(ends) == ["dssync done", "series done"]
    assert len(runs) == 5  # the four scheduler x collective runs, then DS-Sync
    saw = set()
    for name, rows in runs.items():
        ops = {}
        for kind, rank, it, *rest in rows:
            if kind == "op":
                ops.setdefault(int(rank), []).append((int(it), int(rest[0]), rest[1]))
                saw.add(rest[1])
        assert len(ops) == 4 and all(ops[r] == ops[0] for r in ops), name  # one order on every rank
        aggs = [row for row in rows if row[0] == "agg"]
        assert aggs and all(ok == "1" for *_, ok, _, _ in aggs), name
        # a quiet network: every value has every contribution
        assert all(full == size for *_, full, size in aggs), name
    assert {"allreduce", "reduce_scatter", "all_gather"} <= saw
    metas = list((tmp_path / "out").rglob("meta.json"))
    assert len(metas) == 5
    # re-sync to rank 0 after every iteration (resync_every = 1) in the four series runs, none with
    # DS-Sync; replicas that lost nothing do not drift
    resyncs = list((tmp_path / "out").rglob("*-resync.csv"))
    assert len(resyncs) == 4 * 4
    for f in resyncs:
        rows = [dict(zip(R.RESYNC_COLUMNS, line.split(","))) for line in f.read_text().splitlines()[1:]]
        assert [int(r["iter"]) for r in rows] == [0, 1]
        assert all(float(r["drift_l2"]) == 0.0 and float(r["param_l2"]) > 0 for r in rows)
