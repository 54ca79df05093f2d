"""Processes started by runs: they die with the run, and are recorded on disk so `dlcp clean` can
stop what a killed run's children left (there should be none; see `dying_with_parent`).

Every long-lived process an experiment starts (Mininet node shells, switch processes, agents,
traffic generators) is started through `dying_with_parent` and recorded under STATE_DIR as one file per
PID holding its command line; a clean stop forgets it. STATE_DIR is under /run (tmpfs, root-only),
not /tmp: `mn -c` wipes /tmp/*.log and reboots wipe /run. Process facts (alive, start time, waiting
for exits) come from psutil.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import psutil

STATE_DIR = Path(os.environ.get("DLCP_STATE_DIR", "/run/dlcp/pids"))


# Prefix for a command line: the kernel sends the process SIGKILL when the thread that started it
# dies (`dying_with_parent`).
DIES_WITH_PARENT = ("setpriv", "--pdeathsig", "KILL", "--")


def dying_with_parent(cmd: list[str]) -> list[str]:
    """`cmd` run so that it gets SIGKILL when the thread that started it dies, however it dies
    (SIGKILL included), so a killed run leaves no process behind.

    Why a parent-death signal and not a supervisor process: the kernel delivers it, with no extra
    process that could itself be killed first, and it survives the `mnexec` / `ip netns exec` /
    `exec` steps between the runner and the program (none of them forks or changes credentials,
    which would clear it). SIGKILL and not SIGTERM: the run is already gone, nobody reads what a
    graceful exit would write, and a process busy in native code must not outlive it. Caveat: the
    signal follows the *thread* that forked, so runs start their processes from the main thread.

    Why util-linux's `setpriv` sets it and not a `preexec_fn`: a `preexec_fn` makes Popen fork()
    and run Python in the child, which runs every library's at-fork handlers there. With a
    P4Runtime session open (bmv2 runs), gRPC's threads are live, and an agent started that way
    died of SIGABRT in gRPC's poller before reaching exec. Without one, Popen starts the child
    with vfork() and exec at once."""
    return [*DIES_WITH_PARENT, *cmd]


def create_time(pid: int) -> float | None:
    """The process start time, so a recycled PID is never mistaken for ours."""
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


def record(pid: int, role: str, name: str, cmdline: list[str] | str) -> None:
    """Remember a process this run started. The recording process is its owner: while the owner
    lives, `dlcp clean` leaves the process alone (it belongs to an experiment still running)."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    owner = os.getpid()
    info = {
        "pid": pid,
        "role": role,
        "name": name,
        "cmdline": cmdline,
        "started_unix": time.time(),
        "create_time": create_time(pid),
        "owner": owner,
        "owner_create_time": create_time(owner),
    }
    (STATE_DIR / str(pid)).write_text(json.dumps(info))


def forget(pid: int) -> None:
    (STATE_DIR / str(pid)).unlink(missing_ok=True)


def recorded() -> list[dict]:
    if not STATE_DIR.is_dir():
        return []
    out = []
    for f in sorted(STATE_DIR.iterdir()):
        try:
            out.append(json.loads(f.read_text()))
        except (OSError, ValueError):
            f.unlink(missing_ok=True)
    return out


def same_process(pid: int | None, started: float | None) -> bool:
    """Process `pid` is alive and is the one that started at `started` (its create_time)."""
    if pid is None or started is None:
        return False
    now = create_time(pid)
    return now is not None and abs(now - started) < 0.01


def running(pid: int, started: float | None) -> bool:
    """Process `pid` (started at `started`) has not exited: alive and not a zombie (an orphan
    waits as one until whoever adopted it reaps it)."""
    if not same_process(pid, started):
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def is_ours_and_alive(info: dict) -> bool:
    return same_process(info["pid"], info.get("create_time"))


def owner_alive(info: dict) -> bool:
    """The process that recorded `info` still runs (same PID and start time)."""
    owner = info.get("owner")
    if owner is None or owner == os.getpid():
        return False
    return same_process(owner, info.get("owner_create_time"))


def catches_sigterm(pid: int) -> bool:
    """Whether process `pid` has installed a SIGTERM handler (/proc/PID/status SigCgt): an agent
    that has not yet would die at SIGTERM without writing its records. False when it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def wait_until_catching_sigterm(p, timeout_s: float) -> bool:
    """Wait (at most `timeout_s`) until child `p` catches SIGTERM or has exited."""
    deadline = time.monotonic() + timeout_s
    while p.poll() is None and not catches_sigterm(p.pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def stop_pid(pid: int, grace_s: float = 3.0) -> None:
    """SIGTERM, wait up to `grace_s`, then SIGKILL (for processes that are not our children:
    a child must be reaped with stop_child, or it lingers as a zombie for the whole grace time)."""
    try:
        p = psutil.Process(pid)
        p.terminate()
        p.wait(timeout=grace_s)
    except psutil.NoSuchProcess:
        return
    except psutil.TimeoutExpired:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass


def stop_child(p, grace_s: float = 3.0) -> int | None:
    """Stop a child process (subprocess.Popen): SIGTERM, wait, SIGKILL; reaps it and forgets it."""
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(timeout=grace_s)
        except Exception:  # noqa: BLE001 (subprocess.TimeoutExpired)
            p.kill()
            p.wait()
    forget(p.pid)
    return p.returncode


def log_tail(path: Path, lines: int = 15) -> str:
    """The last lines of a process's log file, indented, for error messages."""
    try:
        text = path.read_bytes()[-16384:].decode(errors="replace")
    except OSError:
        return "    (no log)"
    return "\n".join("    " + line for line in text.splitlines()[-lines:]) or "    (empty)"


def kill_recorded(keep: frozenset[int] = frozenset()) -> list[dict]:
    """Stop every recorded process that is still ours and whose owner is gone (a killed run), or
    is the caller (a run's last resort), except the pids in `keep`; returns what was stopped.
    Processes of experiments still running are left alone."""
    stopped = []
    for info in recorded():
        if owner_alive(info) or info["pid"] in keep:
            continue
        if is_ours_and_alive(info):
            stop_pid(info["pid"])
            stopped.append(info)
        forget(info["pid"])
    return stopped
