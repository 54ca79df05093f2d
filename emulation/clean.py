"""`dlcp clean`: remove what a killed run left behind.

Like `mn -c`, restricted to what experiments create (host shells `mininet:hN`, switch-side links
`sN-ethK`), plus every process recorded in emulation/procs.py (switches, agents, traffic). It never
touches /tmp and never deletes anything by a pattern wider than ours.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess

import psutil

from emulation import procs

HOST_SHELL = re.compile(r"mininet:(h|s)\d+$")
OUR_LINK = re.compile(r"^s\d+-eth\d+$")


def _mininet_shells() -> list[int]:
    return [pid for pid, _ in _mininet_shells_with_parent()]


def _mininet_shells_with_parent() -> list[tuple[int, int]]:
    """(pid, parent pid) of every Mininet node shell on the machine."""
    out = []
    for proc in psutil.process_iter(["cmdline", "ppid"]):
        argv = proc.info["cmdline"] or []
        if any(HOST_SHELL.match(a) for a in argv):
            out.append((proc.pid, proc.info["ppid"]))
    return out


def _our_links() -> list[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    names = [line.split(":", 2)[1].strip().split("@")[0] for line in out.splitlines() if line.count(":") >= 2]
    return [n for n in names if OUR_LINK.match(n)]


def clean(verbose: bool = True, keep: frozenset[int] = frozenset()) -> dict:
    """Stop recorded processes (but those in `keep`: what a run keeps across its runs, the agents'
    fork server), orphaned Mininet node shells and our links; returns what was removed.

    A node shell whose parent (the Mininet process that made it) still runs belongs to a live
    experiment, recorded here or in another checkout's state directory: it is left alone, and so
    are the processes of live owners. While any experiment runs no link is removed: links cannot
    be told apart by run."""
    running = {p["owner"] for p in procs.recorded() if procs.owner_alive(p)}
    stopped = procs.kill_recorded(keep)
    all_shells = _mininet_shells_with_parent()
    ours = (1, os.getpid())  # orphans, or shells of the run calling us (the runner's last resort)
    running |= {ppid for _, ppid in all_shells if ppid not in ours}
    shells = [pid for pid, ppid in all_shells if ppid in ours]
    for pid in shells:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    links = [] if running else _our_links()
    for name in links:
        subprocess.run(["ip", "link", "del", name], capture_output=True)
    summary = {
        "processes": [f"{p['role']} {p['name']} (pid {p['pid']})" for p in stopped],
        "host_shells": len(shells),
        "links": links,
        "running_owners": sorted(running),
    }
    if verbose:
        print(
            f"dlcp clean: stopped {len(stopped)} recorded processes"
            + (f" ({', '.join(summary['processes'])})" if stopped else "")
            + f", {len(shells)} orphaned node shells, removed {len(links)} links"
            + (
                f"; left alone what running experiments own (pids {', '.join(map(str, sorted(running)))})"
                if running
                else ""
            )
        )
    return summary


def main(args) -> int:
    if os.geteuid() != 0:
        raise SystemExit(
            "dlcp clean: needs root (it removes network links and stops root processes); run: sudo dlcp clean"
        )
    clean()
    return 0
