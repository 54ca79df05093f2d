"""A Dask cluster as on a cluster's machines: `dask scheduler` and `dask worker` as separate
processes (each worker with its nanny, in a process group of its own), their logs in the test's
directory; and what a process left running."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 120.0  # a scheduler and workers importing distributed on a loaded machine


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


class DaskProcesses:
    """`dask scheduler` on a free port and named `dask worker`s (one thread each) attached to it."""

    def __init__(self, tmp: Path, workers: list[str], worker_args: tuple[str, ...] = ()):
        self.tmp = tmp
        self.address = f"tcp://127.0.0.1:{free_port()}"
        self.procs: dict[str, subprocess.Popen] = {}
        port = self.address.rsplit(":", 1)[1]
        self._start("scheduler", ["scheduler", "--host", "127.0.0.1", "--port", port, "--no-dashboard"])
        for name in workers:
            self.start_worker(name, worker_args)
        self.wait_for_workers(len(workers))

    def _start(self, name: str, args: list[str]) -> None:
        log = open(self.tmp / f"dask-{name}.log", "wb")  # noqa: SIM115 (closed with the process)
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-m", "dask", *args],
            cwd=ROOT,
            env=env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: a worker and its nanny die together
        )
        log.close()

    def start_worker(self, name: str, extra: tuple[str, ...] = ()) -> None:
        local = self.tmp / f"worker-{name}"
        local.mkdir(exist_ok=True)
        args = ["worker", self.address, "--name", name, "--nthreads", "1", "--no-dashboard"]
        self._start(name, [*args, "--memory-limit", "0", "--local-directory", str(local), *extra])

    def wait_for_workers(self, n: int) -> None:
        from distributed import Client

        with Client(self.address, timeout=START_TIMEOUT_S) as client:
            client.wait_for_workers(n, timeout=START_TIMEOUT_S)

    def descendants(self, name: str) -> list[psutil.Process]:
        """The worker's nanny, its worker process and whatever those started (a run's process)."""
        try:
            top = psutil.Process(self.procs[name].pid)
            return [top, *top.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def kill(self, name: str) -> None:
        """SIGKILL the worker's process group: the nanny and its worker process, as a machine lost."""
        os.killpg(self.procs[name].pid, signal.SIGKILL)
        self.procs[name].wait(timeout=30)

    def close(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        for p in self.procs.values():
            try:
                p.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=30)


def still_running(procs: list[psutil.Process], timeout_s: float = 30.0) -> list[psutil.Process]:
    """Those of `procs` still running after `timeout_s` (zombies count as gone)."""
    _, alive = psutil.wait_procs(procs, timeout=timeout_s)
    return [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
