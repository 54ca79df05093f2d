"""Thread CPU and run-queue times from /proc schedstat (dlcp/transport/threadtime.py)."""

from __future__ import annotations

import threading
import time

from dlcp.transport.threadtime import ThreadClock, thread_times


def _spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_cpu_time_of_the_calling_thread_grows_with_its_work():
    before = thread_times()
    _spin(0.05)
    after = thread_times()
    assert after["cpu_s"] - before["cpu_s"] >= 0.045
    assert after["runs"] >= before["runs"]


def test_a_sleeping_thread_uses_no_cpu_and_an_ended_one_keeps_its_last_reading():
    clock = ThreadClock()
    go = threading.Event()

    def body(name, work):
        clock.started(name)
        try:
            go.wait()
            work()
        finally:
            clock.ending(name)

    busy = threading.Thread(target=body, args=("busy", lambda: _spin(0.1)))
    idle = threading.Thread(target=body, args=("idle", lambda: time.sleep(0.1)))
    busy.start()
    idle.start()
    go.set()
    busy.join()
    idle.join()
    t = clock.times()
    assert t["busy"]["cpu_s"] >= 0.095
    assert t["idle"]["cpu_s"] < 0.05


def test_an_unknown_thread_has_no_times():
    assert thread_times(tid=2**22 + 12345) is None
