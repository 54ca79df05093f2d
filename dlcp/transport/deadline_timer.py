"""A file descriptor that becomes readable at a deadline on `time.monotonic()`'s clock (Linux
timerfd), so a thread that waits in epoll wakes for its next protocol timer to the microsecond.

Why not epoll's own timeout: epoll_wait (and poll) take whole milliseconds, and Python rounds a
timeout up to the next one, so a 0.5 ms timer fired after 1.09 ms. The receiver's FEEDBACK delay
(0.5 ms of the system) then fired a packet time late at D = 1 but on time at D = 4, and the
receivers sent a FEEDBACK per two packets at D = 1, one per packet at D = 4: the control packets of
experiments/dilation-check differed by half between dilations, and so did the tail drops they
caused in the PS's packet-counted queue. A timerfd in the epoll set has the kernel's hrtimer
precision at any dilation; Python 3.11 has no os.timerfd_create, hence ctypes.
"""

from __future__ import annotations

import ctypes
import math
import os

CLOCK_MONOTONIC = 1  # what time.monotonic() reads on Linux
TFD_NONBLOCK = os.O_NONBLOCK
TFD_CLOEXEC = os.O_CLOEXEC
TFD_TIMER_ABSTIME = 1


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


_libc = ctypes.CDLL(None, use_errno=True)  # the process's own libc, as the other ctypes users load it
_libc.timerfd_create.argtypes = (ctypes.c_int, ctypes.c_int)
_libc.timerfd_settime.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Itimerspec), ctypes.c_void_p)


class DeadlineTimer:
    """`arm(t)`: readable from monotonic time t on (at once if t has passed); `arm(inf)`: never.
    `clear()` after it fired; `fileno()` for a selector."""

    def __init__(self):
        fd = _libc.timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_create: {os.strerror(err)}")
        self._fd = fd
        self._spec = _Itimerspec()
        self.deadline = math.inf  # what it is armed for

    def fileno(self) -> int:
        return self._fd

    def arm(self, deadline: float) -> None:
        if deadline == self.deadline:
            return
        if math.isinf(deadline):
            sec = nsec = 0  # an all-zero value disarms
        else:
            # a zero value would disarm: a deadline at or before the clock's start fires at 1 ns
            ns = max(1, int(deadline * 1e9))
            sec, nsec = divmod(ns, 1_000_000_000)
        self._spec.it_value.tv_sec, self._spec.it_value.tv_nsec = sec, nsec
        if _libc.timerfd_settime(self._fd, TFD_TIMER_ABSTIME, ctypes.byref(self._spec), None) < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_settime: {os.strerror(err)}")
        self.deadline = deadline

    def clear(self) -> None:
        """Take the expiry (so the fd stops being readable); the next `arm` sets it again."""
        try:
            os.read(self._fd, 8)
        except BlockingIOError:
            pass
        self.deadline = math.inf

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
