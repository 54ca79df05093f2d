"""The options that say where a series' runs go (`dlcp run`, `dlcp sweep`; dlcp/runs/cluster.py)."""

from __future__ import annotations

import argparse

from dlcp.runs.cluster import ClusterOptions


def add_to(ap: argparse.ArgumentParser, jobs_help: str) -> None:
    ap.add_argument(
        "--cluster",
        metavar="tcp://HOST:PORT|slurm",
        help="run the runs as tasks on this Dask cluster: a running scheduler, or Slurm jobs through "
        "dask-jobqueue (its jobqueue.slurm settings); default: a local cluster, one worker process per core",
    )
    ap.add_argument("--jobs", type=int, metavar="N", help=jobs_help)
    ap.add_argument(
        "--shared-results",
        action="store_true",
        help="the results directory is the same path on every worker (a shared filesystem): workers "
        "write their runs there instead of sending them back",
    )
    ap.add_argument("--cluster-config", metavar="FILE.yaml", help="with --cluster slurm: a dask-jobqueue settings file")


def options_of(args: argparse.Namespace) -> ClusterOptions:
    return ClusterOptions(args.cluster, args.jobs, args.shared_results, args.cluster_config)
