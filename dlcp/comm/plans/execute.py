"""Run a schedule in-process on numbers: the check that a plan computes what it claims."""

from __future__ import annotations

import numpy as np

from dlcp.comm.plans.paths import PlanError
from dlcp.comm.plans.schedule import Schedule, chunk_bounds


def execute(schedule: Schedule, values: list[np.ndarray]) -> list[np.ndarray]:
    """Run a schedule in-process on one float64 buffer per rank; returns the buffers at the end.

    Lockstep: every transfer of a step reads its sender's chunk as the step began; receives land
    after. Two copies into the same (rank, chunk) in one step are a plan error.
    """
    if len(values) != schedule.ranks:
        raise PlanError(f"{schedule.collective}: {len(values)} buffers for {schedule.ranks} ranks")
    buf = [np.array(v, dtype=np.float64).reshape(-1) for v in values]
    n = buf[0].size
    if any(b.size != n for b in buf):
        raise PlanError(f"{schedule.collective}: buffers of different lengths")
    cuts: dict[int, np.ndarray] = {}
    for s, step in enumerate(schedule.steps):
        arriving = []
        copied = set()
        for t in step:
            b = cuts.setdefault(t.chunks, chunk_bounds(n, t.chunks))
            lo, hi = int(b[t.chunk]), int(b[t.chunk + 1])
            if t.op == "copy":
                key = (t.dst, t.chunks, t.chunk)
                if key in copied:
                    raise PlanError(f"{schedule.collective} step {s}: two copies into rank {t.dst} chunk {t.chunk}")
                copied.add(key)
            arriving.append((t, lo, hi, buf[t.src][lo:hi].copy()))
        for t, lo, hi, data in arriving:
            if t.op == "reduce":
                buf[t.dst][lo:hi] += data
            else:
                buf[t.dst][lo:hi] = data
    return buf
