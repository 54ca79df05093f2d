"""The Dask cluster a series runs on (docs/runs.md, "On a cluster"): a local one sized to this
machine (no `--cluster`), a running scheduler (`--cluster tcp://HOST:8786`), or Slurm jobs through
dask-jobqueue (`--cluster slurm`); and whether its workers can take the series' runs.

A worker runs one run per thread, each in a process of its own (tasks.py), so the local cluster
has one single-threaded worker process per core, and a machine of a remote cluster needs one
`dask worker` with a thread per run it should hold at once. A backend whose runs need the machine
to themselves (`parallel_runs` false: the emulated backends, Mininet as root) runs only on a
worker that offers the resource `emulation` (`dask worker ... --nthreads 1 --resources
emulation=1`, as root, one per machine).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import dlcp.backends as backends
from dlcp.runs import local_worker
from dlcp.settings import ConfigError

EMULATION = "emulation"  # the worker resource of a machine that holds one emulated run at a time
TCP = re.compile(r"(tcp|tls)://[^\s:/]+:\d+")
CONNECT_TIMEOUT_S = 30.0
FIRST_WORKER_TIMEOUT_S = 60.0  # a running scheduler without a worker: refused after this


class ClusterError(RuntimeError):
    """The cluster cannot take the series (no scheduler answers, no worker can run its runs); one
    line naming the option."""


@dataclass(frozen=True)
class ClusterOptions:
    """Where a series' runs go."""

    address: str | None = None  # --cluster: None (this machine), tcp://HOST:PORT, or "slurm"
    jobs: int | None = None  # --jobs: worker processes (local) or workers (Slurm); default: cores / runs
    shared: bool = False  # --shared-results: the workers write the results directory themselves
    config: str | None = None  # --cluster-config: a dask-jobqueue YAML file (Slurm)

    @property
    def local(self) -> bool:
        return self.address is None


def check_options(options: ClusterOptions) -> None:
    """The cluster options, before anything starts; ConfigError naming the option."""
    if options.jobs is not None and options.jobs < 1:
        raise ConfigError(f"--jobs {options.jobs}: must be >= 1", "--jobs")
    a = options.address
    if a is not None and a != "slurm" and not TCP.fullmatch(a):
        raise ConfigError(f"--cluster {a}: expected tcp://HOST:PORT (a running Dask scheduler) or slurm", "--cluster")
    if options.config is not None:
        if a != "slurm":
            raise ConfigError("--cluster-config: only with --cluster slurm (the dask-jobqueue settings)")
        if not Path(options.config).is_file():
            raise ConfigError(f"--cluster-config {options.config}: no such file", "--cluster-config")


def resources(backend: backends.Backend) -> dict[str, float] | None:
    """What a worker must offer to take one of `backend`'s runs."""
    return None if backend.capabilities.parallel_runs else {EMULATION: 1}


@dataclass
class Engine:
    """A client of the cluster a series runs on."""

    client: object  # distributed.Client
    where: str  # for messages: "a local cluster of 2 workers", "tcp://host:8786", "Slurm"
    shared: bool  # the workers write the results directory themselves


@contextlib.contextmanager
def connect(options: ClusterOptions, backend: backends.Backend, runs: int) -> Iterator[Engine]:
    """The cluster for a series of `runs` runs on `backend`, with at least one worker, closed
    (its local workers or Slurm jobs gone) after. ClusterError, one line, when none answers."""
    import dask
    from distributed import Client

    # a run holds a worker thread until it ends: give each worker only what it runs (a queue on the
    # scheduler leaves the next run free to go to whichever worker ends first)
    with dask.config.set({"distributed.scheduler.worker-saturation": 1.0}), contextlib.ExitStack() as stack:
        if options.local:
            n = min(options.jobs or os.cpu_count() or 1, runs)
            cluster = stack.enter_context(local_cluster(n))
            client = stack.enter_context(Client(cluster))
            engine = Engine(client, f"a local cluster of {n} worker process{'es' if n > 1 else ''}", True)
        elif options.address == "slurm":
            cluster = stack.enter_context(slurm_cluster(options, runs))
            client = stack.enter_context(Client(cluster))
            engine = Engine(client, "Slurm", options.shared)
            print("dlcp run: waiting for Slurm to start a worker job (squeue shows it)", file=sys.stderr)
            client.wait_for_workers(1)
        else:
            try:
                client = stack.enter_context(Client(options.address, timeout=CONNECT_TIMEOUT_S))
            except OSError as e:
                raise ClusterError(f"--cluster {options.address}: no Dask scheduler answers there ({e})") from None
            engine = Engine(client, options.address or "", options.shared)
            try:
                client.wait_for_workers(1, timeout=FIRST_WORKER_TIMEOUT_S)
            except TimeoutError:
                raise ClusterError(
                    f"--cluster {options.address}: the scheduler has no worker (start one: dask worker "
                    f"{options.address})"
                ) from None
        check_placement(engine, backend)
        yield engine


@contextlib.contextmanager
def local_cluster(n: int) -> Iterator[object]:
    """`n` single-threaded worker processes on this machine. They ignore SIGINT and SIGTERM (a
    terminal's Ctrl-C or a `kill` of the process group reaches them too; the series stops its runs
    itself, and the cluster's close stops them) and have no memory limit (a run's process is not
    theirs to kill)."""
    from distributed import LocalCluster

    cluster = LocalCluster(
        n_workers=n,
        threads_per_worker=1,
        processes=True,
        memory_limit=0,
        dashboard_address=":0",  # its HTTP endpoints on any free port (8787 may be taken)
        silence_logs=logging.ERROR,
        preload=[local_worker.__name__],  # each worker, once up, ignores SIGINT and SIGTERM
    )
    try:
        yield cluster
    finally:
        cluster.close()


@contextlib.contextmanager
def slurm_cluster(options: ClusterOptions, runs: int) -> Iterator[object]:
    """Workers as Slurm jobs (dask-jobqueue), configured by its settings (`jobqueue.slurm` in
    Dask's configuration files, or the file --cluster-config names): up to `--jobs` workers, else
    one per run."""
    import dask

    try:
        from dask_jobqueue import SLURMCluster
    except ImportError:
        raise ClusterError("--cluster slurm needs dask-jobqueue: pip install dask-jobqueue") from None
    if options.config:
        import yaml

        dask.config.update(dask.config.config, yaml.safe_load(Path(options.config).read_text()) or {}, priority="new")
    try:
        cluster = SLURMCluster()
    except ValueError as e:  # cores / memory not configured
        raise ClusterError(f"--cluster slurm: {e} (dask-jobqueue's jobqueue.slurm settings: docs/runs.md)") from None
    try:
        cluster.scale(n=min(options.jobs or runs, runs))
        yield cluster
    finally:
        cluster.close()


def check_placement(engine: Engine, backend: backends.Backend) -> None:
    """ClusterError, one line, when no worker can take `backend`'s runs."""
    need = resources(backend)
    if not need:
        return
    workers = engine.client.scheduler_info(n_workers=-1)["workers"]  # type: ignore[attr-defined]
    if not any(w.get("resources", {}).get(EMULATION, 0) >= 1 for w in workers.values()):
        raise ClusterError(
            f"{engine.where}: no worker offers the resource {EMULATION}=1 that backend {backend.name}'s runs need "
            f"(a root worker with Mininet, the machine to itself: dask worker ADDRESS --nthreads 1 "
            f"--resources {EMULATION}=1, as root, one per machine)"
        )
