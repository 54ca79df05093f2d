"""Collectives as pure, I/O-free plans over a TopologySpec (docs/collectives.md).

- collective: `StepPlan` (a collective's plan for a job) and the `COLLECTIVES` registry;
- schedule: a collective's steps of transfers (src rank, dst rank, chunk, reduce/copy, path),
  `link_conflicts` and the alpha-beta cost;
- execute: runs a schedule on numbers in-process (the tests' check of every plan);
- paths: equal-cost routed paths and per-step link capacities of a topology;
- ring, multitree, dssync: the collectives, one module each, each registering itself with its
  options and a `plan_json` for `dlcp schedule`;
- topology_arg: topologies named like "torus:4x4" on a command line.
"""

from dlcp.comm.plans.execute import execute
from dlcp.comm.plans.paths import PlanError, Router
from dlcp.comm.plans.schedule import Schedule, Transfer, alpha_beta_cost, check_paths, link_conflicts

__all__ = ["PlanError", "Router", "Schedule", "Transfer", "alpha_beta_cost", "check_paths", "execute", "link_conflicts"]
