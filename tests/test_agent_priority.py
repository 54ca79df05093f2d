"""The worker's compute thread under SCHED_RR (agents/common.py realtime_compute_thread): the
calling thread and the threads it starts afterwards (torch's backward thread) change policy, the
threads started before it (the transport's) do not."""

import os
import threading

import pytest

from agents.common import COMPUTE_RT_PRIORITY, realtime_compute_thread

pytestmark = pytest.mark.root


def _policy() -> tuple[int, int]:
    return os.sched_getscheduler(0), os.sched_getparam(0).sched_priority


def test_compute_thread_and_its_children_run_realtime_and_earlier_threads_do_not():
    seen: dict[str, tuple[int, int]] = {}
    before_started = threading.Event()
    release_before = threading.Event()

    def earlier():  # stands for the transport's threads, started before the switch to SCHED_RR
        before_started.set()
        release_before.wait(10)
        seen["earlier"] = _policy()

    def compute():
        t_before = threading.Thread(target=earlier)
        t_before.start()
        before_started.wait(10)
        seen["ok"] = realtime_compute_thread()
        seen["compute"] = _policy()
        child = threading.Thread(target=lambda: seen.__setitem__("child", _policy()))
        child.start()
        child.join()
        release_before.set()
        t_before.join()

    t = threading.Thread(target=compute)
    t.start()
    t.join()
    assert seen["ok"] is True
    assert seen["compute"] == (os.SCHED_RR, COMPUTE_RT_PRIORITY)
    assert seen["child"] == (os.SCHED_RR, COMPUTE_RT_PRIORITY)
    assert seen["earlier"] == (os.SCHED_OTHER, 0)
    assert _policy() == (os.SCHED_OTHER, 0)  # the test's own thread is untouched
