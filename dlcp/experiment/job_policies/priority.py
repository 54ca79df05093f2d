"""`priority`: job priority classes mapped onto the switch queues together with the gradient
priorities (after Crux, SIGCOMM'24, which compresses many job priorities onto a switch's few
queues).

The distinct `jobs[].priority` values, lowest first, are the classes 0..K-1; the six data queues
1..6 (docs/tagging.md: 0 is background, 7 control) are split into K contiguous bands, the highest
class on top: class c gets queues 1 + floor(c * 6 / K) .. floor((c + 1) * 6 / K) (at least one
queue; with more than six classes neighbouring classes share one). Each job's data classes 1..6
(its layers' priorities under `dlcp.policy` = layer or dlcp, all 1 under fifo) then map into its
band (`dlcp.queues`, dlcp/wire/tagging.py `band_priority`), so strict priority serves every
packet of a higher class before any of a lower one, and inside a job its layers keep their order.
Two classes: the lower gets 1..3, the higher 4..6."""

from __future__ import annotations

from dlcp.experiment.job_policy import JOB_POLICIES, QUEUES, JobPolicyEntry
from dlcp.wire.tagging import FULL_BAND, N_DATA_CLASSES


def class_bands(priorities: list[int]) -> list[list[int]]:
    """Each job's band [lo, hi] of the data queues, from the jobs' priorities (higher = served first)."""
    classes = sorted(set(priorities))
    k, lo0 = len(classes), FULL_BAND[0]
    band = {}
    for c, p in enumerate(classes):
        lo = lo0 + (c * N_DATA_CLASSES) // k
        hi = max(lo, lo0 + ((c + 1) * N_DATA_CLASSES) // k - 1)
        band[p] = [lo, hi]
    return [band[p] for p in priorities]


JOB_POLICIES.register(
    JobPolicyEntry(
        "priority",
        "job priority classes as bands of the data queues, higher jobs[].priority served first (Crux-style)",
        sets=(QUEUES,),
        decide=lambda jobs, exp, options: [{QUEUES: b} for b in class_bands([j.priority for j in jobs])],
    )
)
