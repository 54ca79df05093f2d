"""Agents under SCHED_RR (agents/common.py): the work thread (realtime_work_thread) and the threads it
starts afterwards (torch's backward thread) change policy, the threads started before it do not; the
transport's threads take their own priorities when they start: the receive thread above the work,
the send thread below it."""

import os
import threading

from agents.common import RECEIVE_RT_PRIORITY, TRANSPORT_RT_PRIORITY, WORK_RT_PRIORITY, realtime_work_thread
from dlcp.transport.api import TransportConfig
from dlcp.transport.udp_driver import UdpTransport


def _policy() -> tuple[int, int]:
    return os.sched_getscheduler(0), os.sched_getparam(0).sched_priority


def test_work_thread_and_its_children_run_realtime_and_earlier_threads_do_not():
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
        seen["ok"] = realtime_work_thread()
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
    assert seen["compute"] == (os.SCHED_RR, WORK_RT_PRIORITY)
    assert seen["child"] == (os.SCHED_RR, WORK_RT_PRIORITY)
    assert seen["earlier"] == (os.SCHED_OTHER, 0)
    assert _policy() == (os.SCHED_OTHER, 0)  # the test's own thread is untouched


def test_transport_threads_take_the_configured_priority_and_the_caller_keeps_its_own():
    assert TRANSPORT_RT_PRIORITY < WORK_RT_PRIORITY < RECEIVE_RT_PRIORITY
    cfg = TransportConfig(
        rank=0,
        data_port=0,
        control_port=0,
        thread_rt_priority=TRANSPORT_RT_PRIORITY,
        rx_rt_priority=RECEIVE_RT_PRIORITY,
    )
    t = UdpTransport(cfg, [])
    want = {"dlcp-rx-0": (os.SCHED_RR, RECEIVE_RT_PRIORITY), "dlcp-tx-0": (os.SCHED_RR, TRANSPORT_RT_PRIORITY)}
    try:
        ids = {th.name: th.native_id for th in threading.enumerate() if th.name in want}
        assert set(ids) == set(want)
        for _ in range(100):  # each thread sets its policy as it starts
            policies = {
                n: (os.sched_getscheduler(tid), os.sched_getparam(tid).sched_priority) for n, tid in ids.items()
            }
            if policies == want:
                break
            threading.Event().wait(0.01)
        assert policies == want
        assert _policy() == (os.SCHED_OTHER, 0)
    finally:
        t.close()
