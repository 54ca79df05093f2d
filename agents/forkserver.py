"""Fork server: imports the agents (torch included) once, then forks each agent of a run into its
Mininet host's network namespace.

Started per agent, every worker, the PS and each background process imported Python, pydantic and
torch for itself: in the ps-incast demo 9 processes on 2 cores spent ~7 s of each run's wall time
before iteration 0, a third of the run. Here the imports happen once per `dlcp run` (a whole
repeated series), and an agent starts in milliseconds from a copy of this process.

    python -m agents.forkserver         (started by emulation/forkserver.py, in the root namespace)

Protocol, JSON lines: requests on stdin `{"id": n, "netns_pid": P, "module": "worker", "config":
path, "log": path, "nice": -10}`; on stdout `{"id": n, "pid": child}` once forked (or `{"id": n,
"error": "..."}`) and `{"pid": child, "exit": code}` when the child is reaped (a negative code: killed by
that signal, as subprocess reports it). EOF on stdin ends the server; its children get SIGTERM
then (the parent-death signal), as they do when the server or the run dies.

In the child: the parent-death signal (SIGTERM when the server dies: an agent writes its records
on SIGTERM and exits, so a server killed mid-run does not take the records of its agents with it;
SIGKILL would), a session of its own, the
network namespace of process P (a Mininet host's shell; hosts share the root mount namespace),
the nice value asked, stdin from /dev/null, stdout and stderr to the log, then
`agents.<module>.main(["--config", path])` and `exit_fast`. Nothing here has started a thread,
opened a socket or seeded a generator before the fork, so each child starts from the state a fresh
`python -m agents.<module>` reaches after its imports.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import sys
import traceback

import agents
import agents.background
import agents.ps
import agents.worker
import dlcp.workloads.trainer.torch_workload  # noqa: F401  (torch: the import that costs seconds)
from agents.common import exit_fast

CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1
MODULES = {"worker": agents.worker, "ps": agents.ps, "background": agents.background}

_libc = ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def enter_netns(pid: int) -> None:
    """Join the network namespace of process `pid` (setns(2); os.setns is Python 3.12+)."""
    fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
    try:
        _check(_libc.setns(fd, CLONE_NEWNET), f"setns into the network namespace of pid {pid}")
    finally:
        os.close(fd)


def become_agent(server_pid: int, req: dict) -> int:
    """The child's side: set up as documented above and run the agent; its exit status."""
    _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != server_pid:  # the server died before the signal was armed
        return 1
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    # a session of its own, as `mnexec -d` gave each agent started as a process: with the kernel's
    # autogroups a session is one CFS scheduling group, and in the server's session all agents
    # would share one group's CPU share against the other processes
    os.setsid()
    log = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.close(devnull)
    os.setpriority(os.PRIO_PROCESS, 0, int(req.get("nice", 0)))
    enter_netns(int(req["netns_pid"]))
    try:
        return MODULES[req["module"]].main(["--config", req["config"]]) or 0
    except SystemExit as e:  # as the interpreter reports it
        if isinstance(e.code, str):
            print(e.code, file=sys.stderr)
            return 1
        return e.code or 0


def spawn(req: dict) -> int:
    """Fork one agent; its pid. The child never returns from here."""
    if req.get("module") not in MODULES:
        raise ValueError(f"unknown agent module {req.get('module')!r}")
    server = os.getpid()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        code = become_agent(server, req)
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
    exit_fast(code)


def emit(obj: dict) -> None:
    os.write(1, (json.dumps(obj) + "\n").encode())


def reap() -> None:
    """Report every child that has exited."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        emit({"pid": pid, "exit": os.waitstatus_to_exitcode(status)})


def serve(poll_s: float = 0.02) -> None:
    buf = b""
    while True:
        ready, _, _ = select.select([0], [], [], poll_s)
        if ready:
            chunk = os.read(0, 65536)
            if not chunk:
                return
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                req = json.loads(line)
                try:
                    emit({"id": req["id"], "pid": spawn(req)})
                except (OSError, ValueError) as e:
                    emit({"id": req["id"], "error": str(e)})
        reap()


def main() -> int:
    emit({"ready": os.getpid()})
    serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
