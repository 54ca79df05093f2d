"""The runner's side of agents/forkserver.py: start the fork server once per `dlcp run`, ask it for
agents, and hold each agent as an `AgentProcess` (the part of subprocess.Popen the runner and
emulation/procs.py use: pid, poll, wait, terminate, kill, returncode).

The server is the agents' parent, so it reaps them and reports their exit codes on its stdout; a
reader thread collects them. The server dies with the run (`procs.dying_with_parent`) and its
children get SIGTERM when it dies (they write their records and exit), so a killed run leaves no
agent behind. An agent the server did not report before it died is watched by its pid (and start
time) until it is gone; its code is then ORPHAN_EXIT, stopped by that SIGTERM.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from dlcp.exit_status import exit_text
from emulation import procs

REPO = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 60.0  # the server's imports (torch) on a loaded machine
SPAWN_TIMEOUT_S = 10.0
ORPHAN_EXIT = 128 + signal.SIGTERM  # an agent that outlived the server: stopped by its parent-death signal
ORPHAN_POLL_S = 0.05


class ForkServerError(RuntimeError):
    """The fork server did not start or did not fork an agent; the message says why."""


class AgentProcess:
    """An agent the fork server forked: its pid, and its exit code once the server reaped it."""

    def __init__(self, server: ForkServer, pid: int):
        self.server, self.pid = server, pid
        self.returncode: int | None = None
        self.create_time = procs.create_time(pid)  # to tell it from a later process with its pid

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.server.exit_code(self.pid)
        if self.returncode is None and self.server.gone and not self.running():
            self.returncode = self.server.exit_code(self.pid)  # reported just before the server went
            if self.returncode is None:
                self.returncode = ORPHAN_EXIT
        return self.returncode

    def running(self) -> bool:
        """The agent's process has not exited (the server gone, nobody reports it)."""
        return procs.running(self.pid, self.create_time)

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.server.wait_exit(self.pid, timeout, until=lambda: self.poll() is not None)
        if self.poll() is None:
            raise subprocess.TimeoutExpired(f"agent {self.pid}", timeout)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        # not yet reaped, so the pid is still this agent's (a zombie at worst: then no effect)
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class ForkServer:
    """One agents/forkserver.py process; `spawn` an agent into a host's network namespace."""

    def __init__(self, log: Path):
        self._lock = threading.Condition()
        self._replies: dict[int, dict] = {}
        self._exits: dict[int, int] = {}
        self._next_id = 0
        self._ready = False
        self._gone = False  # the server's stdout closed: it exited
        self.log = log
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as err:
            self.proc = subprocess.Popen(
                procs.dying_with_parent([sys.executable, "-m", "agents.forkserver"]),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                cwd=REPO,
                start_new_session=True,
            )  # the terminal's Ctrl-C is the runner's to handle
        procs.record(self.proc.pid, "agent-forkserver", "-", self.proc.args)
        self._reader = threading.Thread(target=self._read, name="forkserver-reader", daemon=True)
        self._reader.start()
        try:
            self._await(lambda: self._ready, START_TIMEOUT_S, "start")
        except BaseException:  # Ctrl-C while it imports, or it failed: leave nothing behind
            self.proc.kill()
            procs.stop_child(self.proc)
            raise

    def _read(self) -> None:
        for line in self.proc.stdout:
            msg = json.loads(line)
            with self._lock:
                if "ready" in msg:
                    self._ready = True
                elif "exit" in msg:
                    self._exits[msg["pid"]] = msg["exit"]
                else:
                    self._replies[msg["id"]] = msg
                self._lock.notify_all()
        with self._lock:  # EOF: the server is gone
            self._gone = True
            self._lock.notify_all()

    def _await(self, done, timeout_s: float, what: str):
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while not done():
                if self.proc.poll() is not None:
                    raise ForkServerError(
                        f"the agents' fork server {exit_text(self.proc.returncode)} "
                        f"before it could {what}; last lines of {self.log}:\n{procs.log_tail(self.log)}"
                    )
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ForkServerError(
                        f"the agents' fork server did not {what} within {timeout_s:g} s (log: {self.log})"
                    )
                self._lock.wait(min(left, 0.2))

    def spawn(self, netns_pid: int, module: str, config: Path, log: Path, nice: int = 0) -> AgentProcess:
        """Fork agent `module` (worker, ps, background) with `config`, in the network namespace of
        process `netns_pid`, at `nice`, output to `log`."""
        with self._lock:
            self._next_id += 1
            rid = self._next_id
        req = {
            "id": rid,
            "netns_pid": netns_pid,
            "module": module,
            "config": str(config),
            "log": str(log),
            "nice": nice,
        }
        try:
            self.proc.stdin.write((json.dumps(req) + "\n").encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise ForkServerError(
                f"the agents' fork server is gone (it {exit_text(self.proc.wait())}); last lines "
                f"of {self.log}:\n{procs.log_tail(self.log)}"
            ) from None
        self._await(lambda: rid in self._replies, SPAWN_TIMEOUT_S, f"fork agent {module}")
        reply = self._replies.pop(rid)
        if "error" in reply:
            raise ForkServerError(f"the agents' fork server could not start {module}: {reply['error']}")
        return AgentProcess(self, reply["pid"])

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def gone(self) -> bool:
        """The server has exited (its stdout closed): it reports no more exits."""
        with self._lock:
            return self._gone

    def exit_code(self, pid: int) -> int | None:
        """`pid`'s exit code as the server reported it; None while it has not."""
        with self._lock:
            return self._exits.get(pid)

    def wait_exit(self, pid: int, timeout: float | None, until=lambda: False) -> None:
        """Until the server reports `pid`'s exit or `until()` holds (checked as the server goes and
        then every ORPHAN_POLL_S: an agent that outlived it), at most `timeout` s."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while pid not in self._exits:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return
                if self._gone:
                    self._lock.release()
                    try:
                        if until():
                            return
                    finally:
                        self._lock.acquire()
                    left = ORPHAN_POLL_S if left is None else min(left, ORPHAN_POLL_S)
                self._lock.wait(left)

    def close(self, grace_s: float = 5.0) -> None:
        """End the server (EOF on its stdin); any agent still running gets SIGTERM with it."""
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=1.0)  # it notices EOF within its poll period
        except (OSError, subprocess.TimeoutExpired):
            pass
        procs.stop_child(self.proc, grace_s=grace_s)
