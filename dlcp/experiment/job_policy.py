"""Policies between the jobs of one experiment (`cluster.job_policy`; docs/experiments.md, "Several
jobs"): a registry of what each does to the jobs before they run.

A policy decides, from the validated jobs and their experiment, two things per job: the switch
queues its data classes use (`dlcp.queues`, a band of the data queues 1..6; docs/tagging.md,
"Jobs") and its time-shift (`shift_s`, the delay of its first iteration after its arrival
`start_s`). Each policy is one module of dlcp/experiment/job_policies/ that registers a
`JobPolicyEntry`; what it sets (`sets`) it owns: a job that sets one of those keys itself to
something else is refused with one line, so the config says what ran.

    fifo       no job is favoured: every job tags as its own dlcp.policy says, starts at start_s
    priority   job priority classes as bands of the data queues (Crux-style)
    timeshift  shifts that interleave the jobs' communication phases (CASSINI-style)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dlcp.registry import Entry, Registry

QUEUES, SHIFT = "dlcp.queues", "shift_s"  # the job keys a policy may set


@dataclass(frozen=True)
class JobPolicyEntry(Entry):
    """A policy between jobs: `decide(jobs, exp, options)` returns one dict per job of the keys
    it sets (`sets`: QUEUES -> [lo, hi], SHIFT -> seconds), or raises BadValue naming the key."""

    sets: tuple[str, ...] = ()
    decide: Callable[[list, Any, Any], list[dict]] | None = None


JOB_POLICIES: Registry[JobPolicyEntry] = Registry("job policy", discover="dlcp.experiment.job_policies")
