"""dlcp/runs/signals.py ignored_by_children: what it starts ignores SIGINT and SIGTERM (a series'
local Dask workers outlive a signal to the process group), and a stop that lands meanwhile still
reaches the series."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from dlcp.runs import signals

IGNORED = "import signal; print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN, signal.getsignal(signal.SIGTERM) is signal.SIG_IGN)"


def test_processes_started_inside_ignore_both_and_those_after_do_not():
    with signals.installed():
        with signals.ignored_by_children():
            inside = subprocess.run([sys.executable, "-c", IGNORED], capture_output=True, text=True, check=True)
        after = subprocess.run([sys.executable, "-c", IGNORED], capture_output=True, text=True, check=True)
    assert inside.stdout.split() == ["True", "True"]
    assert after.stdout.split() == ["False", "False"]


@pytest.mark.parametrize("sig, stop", [(signal.SIGTERM, signals.Terminated), (signal.SIGINT, KeyboardInterrupt)])
def test_a_stop_that_lands_inside_is_raised_as_it_ends(sig, stop):
    reached_the_end = False
    with signals.installed(), pytest.raises(stop), signals.ignored_by_children():
        os.kill(os.getpid(), sig)
        reached_the_end = True  # held, not raised here
    assert reached_the_end
