"""The receive thread's timer fd (dlcp/transport/deadline_timer.py): it fires at its deadline, not
before, not when disarmed, and to a fraction of a millisecond, which epoll's own timeout cannot."""

import math
import selectors
import statistics
import time

import pytest

from dlcp.transport.deadline_timer import DeadlineTimer


@pytest.fixture
def timer_sel():
    timer, sel = DeadlineTimer(), selectors.DefaultSelector()
    sel.register(timer, selectors.EVENT_READ)
    yield timer, sel
    sel.close()
    timer.close()


def test_a_deadline_that_has_passed_fires_at_once_and_clear_takes_it(timer_sel):
    timer, sel = timer_sel
    timer.arm(time.monotonic() - 1.0)
    assert sel.select(0.5)
    timer.clear()
    assert sel.select(0) == []
    assert timer.deadline == math.inf


def test_it_does_not_fire_before_its_deadline(timer_sel):
    timer, sel = timer_sel
    due = time.monotonic() + 0.05
    timer.arm(due)
    assert sel.select(0) == []
    assert sel.select(1.0)
    assert time.monotonic() >= due


def test_infinity_disarms_it_and_a_new_deadline_replaces_the_old(timer_sel):
    timer, sel = timer_sel
    timer.arm(time.monotonic() + 0.01)
    timer.arm(math.inf)
    assert sel.select(0.05) == []
    timer.arm(time.monotonic() + 10)
    timer.arm(time.monotonic() + 0.01)
    assert sel.select(1.0)


def test_a_sub_millisecond_timer_is_not_rounded_up_to_a_millisecond(timer_sel):
    # epoll_wait's timeout is whole ms, rounded up: a 0.3 ms wait took >= 1 ms, every time.
    # The median of 21 keeps a busy machine's odd late wake-up out of the verdict.
    timer, sel = timer_sel
    took = []
    for _ in range(21):
        start = time.monotonic()
        timer.arm(start + 0.0003)
        assert sel.select(1.0)
        took.append(time.monotonic() - start)
        timer.clear()
    assert statistics.median(took) < 0.0009
