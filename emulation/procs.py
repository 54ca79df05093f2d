"""Processes started by runs, recorded on disk so `dlcp clean` can stop what a killed run left.

Every long-lived process an experiment starts (switch processes, agents, traffic generators) is
recorded under STATE_DIR as one file per PID holding its command line; a clean stop forgets it.
STATE_DIR is under /run (tmpfs, root-only), not /tmp: `mn -c` wipes /tmp/*.log and reboots wipe /run.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

STATE_DIR = Path(os.environ.get("DLCP_STATE_DIR", "/run/dlcp/pids"))


def record(pid: int, role: str, name: str, cmdline: list[str] | str) -> None:
    """Remember a process this run started. The recording process is its owner: while the owner
    lives, `dlcp clean` leaves the process alone (it belongs to an experiment still running)."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    owner = os.getpid()
    info = {"pid": pid, "role": role, "name": name, "cmdline": cmdline, "started_unix": time.time(),
            "starttime": _start_ticks(pid), "owner": owner, "owner_starttime": _start_ticks(owner)}
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


def _start_ticks(pid: int) -> int | None:
    """The process start time from /proc, so a recycled PID is never mistaken for ours."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def is_ours_and_alive(info: dict) -> bool:
    ticks = _start_ticks(info["pid"])
    return ticks is not None and ticks == info.get("starttime")


def owner_alive(info: dict) -> bool:
    """The process that recorded `info` still runs (same PID and start time)."""
    owner = info.get("owner")
    if owner is None or owner == os.getpid():
        return False
    ticks = _start_ticks(owner)
    return ticks is not None and ticks == info.get("owner_starttime")


def stop_pid(pid: int, grace_s: float = 3.0) -> None:
    """SIGTERM, wait up to `grace_s`, then SIGKILL (for processes that are not our children:
    a child must be reaped with stop_child, or it lingers as a zombie for the whole grace time)."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def stop_child(p, grace_s: float = 3.0) -> int | None:
    """Stop a child process (subprocess.Popen): SIGTERM, wait, SIGKILL; reaps it and forgets it."""
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(timeout=grace_s)
        except Exception:  # subprocess.TimeoutExpired
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


def kill_recorded() -> list[dict]:
    """Stop every recorded process that is still ours and whose owner is gone (a killed run);
    returns what was stopped. Processes of experiments still running are left alone."""
    stopped = []
    for info in recorded():
        if owner_alive(info):
            continue
        if is_ours_and_alive(info):
            stop_pid(info["pid"])
            stopped.append(info)
        forget(info["pid"])
    return stopped
