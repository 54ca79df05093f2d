"""A run in a process of its own, for backends that need one per run (ns-3: its simulator is a
singleton whose random streams continue across runs). The child is forked from the series'
process, so it starts with what that process loaded once (ns-3, our compiled C++, the reports'
modules) instead of paying for it per run, and from the state a fresh process would reach.

The parent alone takes the stop signals: the child sits in a process group of its own (the
terminal's Ctrl-C reaches the parent only), the parent forwards the signal it got, and the child
stops the way an in-process run does (status, partial report, exit 130 or 143). It also dies with
the parent (a parent-death signal), so a killed series leaves no simulation running.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable

from dlcp.runs import signals

STOP_GRACE_S = 30.0  # for the child to write its meta.json and partial report
PR_SET_PDEATHSIG = 1


def _die_with(parent: int) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the signal was asked for
        os.kill(os.getpid(), signal.SIGTERM)


def run_forked(child: Callable[[], int], on_start: Callable[[int], None] | None = None) -> int:
    """`child()` in a forked process; its exit code (the child's return value, 1 after a traceback,
    minus the signal that killed it). `on_start` gets the child's pid once it runs."""
    sys.stdout.flush()
    sys.stderr.flush()
    stops = {signal.SIGINT, signal.SIGTERM}
    parent = os.getpid()
    signal.pthread_sigmask(signal.SIG_BLOCK, stops)  # none may land before the child's handlers are in
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setpgid(0, 0)
            _die_with(parent)
            signals.install()
            signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)
            code = child()
        except BaseException as e:  # noqa: BLE001 - the child must never return into the parent's loop
            if signals.is_stop(e):  # a stop passed on before child() took over: its code, no traceback
                code = signals.exit_code(e)
            else:
                traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)
        if on_start is not None:
            on_start(pid)
        _, status = os.waitpid(pid, 0)
    except BaseException as e:
        stop_child(pid, signals.signal_of(e) if signals.is_stop(e) else signal.SIGTERM)
        raise
    return os.waitstatus_to_exitcode(status)


def stop_child(pid: int, sig: int, grace_s: float = STOP_GRACE_S) -> None:
    """Pass the stop on to the child, give it `grace_s` to write what it has, then kill it. A second
    Ctrl-C does not cut this short."""
    with signals.deferred():
        os.kill(pid, sig)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            if os.waitpid(pid, os.WNOHANG)[0]:
                return
            time.sleep(0.05)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
