"""One run at a time on a machine, for the backends whose runs collide there (`parallel_runs`
false in dlcp/backends.py: the Mininet backends, whose networks, switch processes and clean-up
share the machine's namespaces and links).

A series claims the machine before it starts anything: an exclusive flock(2) on LOCK_PATH (under
/run, root's tmpfs, as the process records of emulation/procs.py), held until the series ends,
whose file names the holder (pid, backend, results directory, start time). A second series is
refused with one line naming the live one. The kernel drops a flock when its holder dies, however
it dies, so a killed run's lock is free at once; its file still names it, and the next series says
it took over from a run that did not end cleanly (`dlcp clean` removes what such a run left).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

LOCK_PATH = Path(os.environ.get("DLCP_RUN_LOCK", "/run/dlcp/run.lock"))


class MachineBusy(RuntimeError):
    """Another series holds the machine (one line naming it), or its lock cannot be opened."""


def process_start(pid: int) -> str | None:
    """The start time of process `pid` in clock ticks since boot (/proc/PID/stat field 22): with
    the pid, what tells a live holder from a later process that reuses its pid; None when gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def holder_alive(holder: dict) -> bool:
    pid = holder.get("pid")
    return isinstance(pid, int) and process_start(pid) == holder.get("pid_start")


def describe(holder: dict) -> str:
    """The holder as a refusal or a note names it: "pid 4242, builtin, results/..., for 12 s"."""
    parts = [f"pid {holder.get('pid', '?')}"]
    if holder.get("backend"):
        parts.append(str(holder["backend"]))
    parts.append(str(holder.get("results") or "its results directory not chosen yet"))
    since = holder.get("started_unix")
    if isinstance(since, (int, float)):
        parts.append(f"running for {max(0.0, time.time() - since):.0f} s")
    return ", ".join(parts)


def read_holder(f) -> dict:
    f.seek(0)
    try:
        holder = json.loads(f.read() or "{}")
    except ValueError:
        return {}
    return holder if isinstance(holder, dict) else {}


class MachineLock:
    """The claim of one series on the machine (`claim`)."""

    def __init__(self, f, holder: dict):
        self.f, self.holder = f, holder

    def note_results(self, results: Path) -> None:
        """Name the series' results directory in the lock, once chosen."""
        self.holder["results"] = str(results)
        self._write()

    def _write(self) -> None:
        self.f.seek(0)
        self.f.truncate()
        self.f.write(json.dumps(self.holder))
        self.f.flush()

    def release(self) -> None:
        self.f.seek(0)
        self.f.truncate()  # an ended series leaves an empty file: nothing to take over
        self.f.flush()
        fcntl.flock(self.f, fcntl.LOCK_UN)
        self.f.close()


@contextlib.contextmanager
def claim(backend, path: Path | None = None) -> Iterator[MachineLock | None]:
    """The machine for one series on `backend` (dlcp/backends.py), or MachineBusy naming the
    series that has it; None (no claim) where the backend's runs share nothing."""
    if backend.capabilities.parallel_runs:
        yield None
        return
    with held(backend.name, path) as lock:
        yield lock


@contextlib.contextmanager
def held(what: str, path: Path | None = None) -> Iterator[MachineLock]:
    """The machine for `what` (a backend's series, or a benchmark that builds namespaces and
    measures the machine: `dlcp bench switch`), or MachineBusy naming whoever has it."""
    lock = acquire(what, path or LOCK_PATH)
    try:
        yield lock
    finally:
        lock.release()


def acquire(backend: str, path: Path) -> MachineLock:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        f = open(path, "a+")  # noqa: SIM115 (held until release)
    except OSError as e:
        raise MachineBusy(f"cannot open the machine's run lock {path} ({e.strerror or e})") from None
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = read_holder(f)
        f.close()
        raise MachineBusy(
            f"another run has this machine ({describe(holder)}): {backend} runs cannot share one "
            f"(dlcp/backends.py, parallel_runs); wait for it to end or stop it"
        ) from None
    except BaseException:
        f.close()
        raise
    earlier = read_holder(f)
    if earlier.get("pid") and not holder_alive(earlier):
        print(
            f"dlcp run: note: the run before ({describe(earlier)}) ended without releasing the machine "
            f"(killed?); taking it over (`sudo dlcp clean` removes what such a run left behind)",
            file=sys.stderr,
        )
    pid = os.getpid()
    lock = MachineLock(
        f, {"pid": pid, "pid_start": process_start(pid), "backend": backend, "started_unix": time.time()}
    )
    lock._write()
    return lock
