"""A single-node Slurm in a test's directory (Debian's slurm-wlm: `scripts/apt-install slurm-wlm`):
its own munged (key, socket), slurmctld and slurmd on free ports, configured by a slurm.conf there;
`SLURM_CONF` in the environment it returns points the client commands (sbatch, squeue, scancel,
and so dask-jobqueue) at it. Everything it started is stopped after. Root: slurmd runs jobs as
their users."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

TOOLS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo")
START_TIMEOUT_S = 60.0


def missing() -> str | None:
    """Why a single-node Slurm cannot start here, or None."""
    absent = [t for t in TOOLS if shutil.which(t) is None]
    if absent:
        return f"{', '.join(absent)} not installed (scripts/apt-install slurm-wlm)"
    if os.geteuid() != 0:
        return "slurmd needs root"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def slurm_conf(d: Path, munge_socket: Path, host: str, cpus: int, memory_mb: int) -> str:
    return f"""ClusterName=dlcptest
SlurmctldHost={host}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket}
SlurmUser=root
SlurmdUser=root
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName={host} CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


def _wait(what, why: str, timeout_s: float = START_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not what():
        if time.monotonic() > deadline:
            raise TimeoutError(why)
        time.sleep(0.2)


def _stop(pid_file: Path) -> None:
    try:
        pid = int(pid_file.read_text())
    except (OSError, ValueError):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def slurm_node(d: Path, memory_mb: int = 2000) -> Iterator[dict[str, str]]:
    """Start it in `d`; the environment for its client commands."""
    d.mkdir(parents=True, exist_ok=True)
    for sub in ("state", "spool", "munge"):
        (d / sub).mkdir(exist_ok=True)
    munge = d / "munge"
    os.chmod(munge, 0o700)
    key = munge / "munge.key"
    key.write_bytes(os.urandom(1024))
    os.chmod(key, 0o400)
    sock = munge / "munge.socket"
    host = socket.gethostname()
    conf = d / "slurm.conf"
    conf.write_text(slurm_conf(d, sock, host, os.cpu_count() or 1, memory_mb))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    started: list[Path] = []
    try:
        subprocess.run(
            ["munged", "--force", f"--key-file={key}", f"--socket={sock}", f"--pid-file={munge}/munged.pid"]
            + [f"--log-file={munge}/munged.log", f"--seed-file={munge}/munged.seed"],
            check=True,
            capture_output=True,
        )
        started.append(munge / "munged.pid")
        _wait(sock.exists, "munged did not start")
        subprocess.run(["slurmctld", "-f", str(conf)], check=True, capture_output=True, env=env)
        started.append(d / "slurmctld.pid")
        subprocess.run(["slurmd", "-f", str(conf), "-N", host], check=True, capture_output=True, env=env)
        started.append(d / "slurmd.pid")

        def idle() -> bool:
            p = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, env=env)
            return p.stdout.strip() == "idle"

        _wait(idle, f"the node did not come up (see {d}/slurmctld.log, {d}/slurmd.log)")
        yield env
    finally:
        subprocess.run(["scancel", "--full", "-u", "root"], capture_output=True, env=env)
        for pid_file in reversed(started):
            _stop(pid_file)
