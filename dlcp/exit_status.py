"""How a process ended, in words, for every message that reports one (a signal by its name, not
"status -9")."""

from __future__ import annotations

import signal


def signal_name(number: int) -> str | None:
    try:
        return signal.Signals(number).name
    except ValueError:
        return None


def exit_text(returncode: int | None) -> str:
    """What follows a process's name in a message: "exited with status 3", "was killed by SIGKILL"
    (Python's negative return code), "exited with status 143 (128 + SIGTERM: stopped by that
    signal)" (the shells' convention, which the agents follow), "is still running" (None)."""
    if returncode is None:
        return "is still running"
    if returncode < 0:
        name = signal_name(-returncode)
        return f"was killed by {name}" if name else f"was killed by signal {-returncode}"
    name = signal_name(returncode - 128) if returncode > 128 else None
    if name:
        return f"exited with status {returncode} (128 + {name}: stopped by that signal)"
    return f"exited with status {returncode}"
