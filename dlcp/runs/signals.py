"""SIGINT and SIGTERM during a series: both unwind the run like an exception, so every `finally`
of the runner and the backend runs (processes stopped, meta.json written), and the series stops.

Ctrl-C raises KeyboardInterrupt (status "interrupted", exit 130), SIGTERM raises Terminated
(status "terminated", exit 143). While a run cleans up, `deferred()` ignores both, so a second
Ctrl-C cannot cut the clean-up short; `held()` keeps a stop that lands in a step that must finish
whole and raises it after.
"""

from __future__ import annotations

import contextlib
import gc
import signal


class Terminated(BaseException):
    """SIGTERM: unwind like Ctrl-C so every `finally` runs."""


# The exception a signal handler raises is lost when the signal lands while Python runs a callback
# that cannot raise (a garbage collector callback such as Dask's GC diagnosis, a `__del__`, an
# at-fork handler while a backend starts a process: "Exception ignored in ..."). The handlers note
# every stop here; inside the callbacks they can tell apart they only note it, and the series' loops
# and a backend's wait loop raise it (`raise_pending`).
_pending: list[type[BaseException]] = []


def _swallowed_at(frame) -> bool:
    """Whether an exception raised at `frame` would be swallowed: it runs inside a gc callback or a
    `__del__`."""
    callbacks = {getattr(getattr(cb, "__func__", cb), "__code__", None) for cb in gc.callbacks}
    while frame is not None:
        if frame.f_code in callbacks or frame.f_code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False


def _stop(exc: type[BaseException], frame) -> None:
    _pending.append(exc)
    if not _swallowed_at(frame):
        raise exc()


def _raise_terminated(signum, frame):
    _stop(Terminated, frame)


def _raise_interrupted(signum, frame):
    _stop(KeyboardInterrupt, frame)


def install() -> None:
    """From now on SIGTERM raises Terminated and SIGINT KeyboardInterrupt (a shell starting us in
    the background may have set SIGINT to "ignore": Ctrl-C / kill -INT must still stop the run)."""
    signal.signal(signal.SIGTERM, _raise_terminated)
    signal.signal(signal.SIGINT, _raise_interrupted)
    _pending.clear()


@contextlib.contextmanager
def installed():
    """`install()` inside, the previous handlers back after (a series run from Python, e.g. a
    benchmark, leaves its caller's handlers as it found them)."""
    old_int, old_term = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    install()
    try:
        yield
    finally:
        for sig, old in ((signal.SIGINT, old_int), (signal.SIGTERM, old_term)):
            if old is not None:  # None: a handler set outside Python, which cannot be put back
                signal.signal(sig, old)


def raise_pending() -> None:
    """Raise a stop whose exception a callback swallowed (above)."""
    if _pending:
        raise _pending[-1]()


def handled() -> None:
    """The stop was taken: it ends the series here; forget it."""
    _pending.clear()


STOPS = (signal.SIGINT, signal.SIGTERM)


def handle_stops(handler) -> dict:
    """SIGINT and SIGTERM go to `handler` (a function, or signal.SIG_IGN) from now on; the
    handlers they had, for `restore`."""
    return {sig: signal.signal(sig, handler) for sig in STOPS}


def restore(handlers: dict) -> None:
    for sig, handler in handlers.items():
        signal.signal(sig, handler)


@contextlib.contextmanager
def deferred():
    """SIGINT and SIGTERM ignored inside (a clean-up that must finish), the handlers back after."""
    old = handle_stops(signal.SIG_IGN)
    try:
        yield
    finally:
        restore(old)


@contextlib.contextmanager
def noted(on_first=None):
    """SIGINT and SIGTERM only noted inside: yields the list of those that arrive, in order, and
    calls `on_first()` as the first does (e.g. to ask what runs inside to end soon); the handlers
    back after. What to do about them is the caller's."""
    got: list[int] = []

    def note(signum, frame) -> None:
        if not got and on_first is not None:
            on_first()
        got.append(signum)

    old = handle_stops(note)
    try:
        yield got
    finally:
        restore(old)


@contextlib.contextmanager
def held():
    """SIGINT and SIGTERM held off inside (a step that must finish whole, e.g. a finished run put in
    its place) and raised when it is over: unlike `deferred`, the stop is kept, not dropped."""
    with noted() as got:
        yield
    if got:
        stop = stop_for(128 + got[0])
        _pending.append(type(stop))
        raise stop


def is_stop(exc: BaseException) -> bool:
    return isinstance(exc, (KeyboardInterrupt, Terminated))


def status_of(exc: BaseException) -> str:
    """meta.json `status` of a run stopped by `exc`."""
    return "terminated" if isinstance(exc, Terminated) else "interrupted"


def signal_of(exc: BaseException) -> signal.Signals:
    return signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT


def exit_code(exc: BaseException) -> int:
    """The shell's code for a process stopped by the signal behind `exc`: 130 or 143."""
    return 128 + signal_of(exc)


def stop_for(code: int) -> BaseException:
    """The exception a child that exited with `exit_code` was stopped by."""
    return Terminated() if code == 128 + signal.SIGTERM else KeyboardInterrupt()
