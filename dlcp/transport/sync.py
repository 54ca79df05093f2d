"""What the threaded drivers hand to callers that block: a handle to wait on a sent message, and
waiting for a received one."""

from __future__ import annotations

import threading
import time

from dlcp.transport.api import SendResult, TransportError, key_text


class SendHandle:
    def __init__(self, key):
        self.key = key
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list = []
        self.result: SendResult | None = None

    def done(self) -> bool:
        return self._event.is_set()

    def add_done_callback(self, fn) -> None:
        """Run fn(handle) once the send is finished: at once if it is, else in the transport's
        thread that finishes it (so fn must not block)."""
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(fn)
                return
        fn(self)

    def wait(self, timeout: float | None = None) -> SendResult:
        if not self._event.wait(timeout):
            raise TransportError(f"message {key_text(self.key)} not finished after {timeout} s")
        assert self.result is not None  # _finish sets it before the event
        return self.result

    def _finish(self, result: SendResult) -> None:
        with self._lock:
            self.result = result
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            fn(self)


def wait_for_done(cond: threading.Condition, done: dict, key, timeout: float | None, closing, received):
    """Pop `done[key]` once a transport thread puts it there (waiting on `cond`); raises
    TransportError when the transport closes or after `timeout` s, saying what `received()` has."""
    deadline = None if timeout is None else time.monotonic() + timeout
    with cond:
        while key not in done:
            if closing():
                raise TransportError("transport closed")
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TransportError(f"no message {key_text(key)} after {timeout} s ({received()} received)")
            cond.wait(1.0 if left is None else min(left, 1.0))
        return done.pop(key)
