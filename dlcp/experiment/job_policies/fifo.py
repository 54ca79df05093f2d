"""`fifo`: no job is favoured. Every job tags its packets as its own `dlcp.policy` says, on the
whole band of data queues 1..6, and starts at its `start_s`; with every job at `dlcp.policy =
"fifo"` the switches are one shared FIFO queue (docs/tagging.md)."""

from __future__ import annotations

from dlcp.experiment.job_policy import JOB_POLICIES, JobPolicyEntry

JOB_POLICIES.register(
    JobPolicyEntry(
        "fifo",
        "no job favoured: each tags as its own dlcp.policy says (all fifo: one shared FIFO queue)",
        decide=lambda jobs, exp, options: [{} for _ in jobs],
    )
)
