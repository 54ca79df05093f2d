"""Compute time from a layer profile: when each layer's forward and backward end, as deadlines.

With `workload.compute = "profile"` a worker's compute does not take as long as the CPU happens to
need for it (on a machine shared by several workers, a PS, background senders and the switch, that
time is mostly contention) but as long as a profile says: layer l's forward takes `forward_s[l]`,
its backward `backward_s[l]`. The real work (torch's forward and backward, or the synthetic
gradient) still runs, inside those times; only the timing comes from the profile.

Deadlines, not sleeps: every step ends at a deadline computed from the previous step's deadline,
never from the moment a sleep happened to return, so a late wake-up does not stretch what follows.
While the machine keeps up (the real work of a step finishes before its deadline) the emulated
compute takes exactly the profile's times; when it does not, the step ends late and the lateness
is recorded (`DeadlineStats`), never hidden.

One iteration, for layers 0..L-1 (0 = input side):

    begin(it)                      the iteration's forward may start now (cursor = now)
    forward(l)  for l = 0..L-1     layer l's forward starts at max(end of l-1, its parameters ready);
                                   ends at that + forward_s[l]  (the call returns at its start)
    end_forward()                  wait for the last forward deadline
    gradient_ready(l)  l = L-1..0  layer l's gradient is ready at end of forward + sum of
                                   backward_s[L-1..l]; the call waits until then
    end()                          the iteration's compute is over (backward reached layer 0)

Layers skipped in either direction are stepped through in order, so a caller may ask for a
message's lowest layer only. "Parameters ready" comes from a `ParameterGate`: the communication
layer releases layers of an iteration one by one (a scheduler such as DeAR or ByteScheduler) or
all at once (today's PS pull and ring all-reduce); iteration 0 waits for nothing.

Everything here is driven by a `Clock` (`MonotonicClock` in the agents, `ManualClock` in tests):
the object itself reads no clock and never sleeps on its own.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

DEFAULT_TOLERANCE_S = 0.001  # a wake-up later than this past its deadline counts as a miss


class Clock(Protocol):
    def now(self) -> float:
        """Seconds on a monotonic clock."""

    def sleep_until(self, t: float) -> None:
        """Return at `t` or later (at once if `t` has passed)."""


class MonotonicClock:
    """The real clock: time.monotonic, sleeping in time.sleep."""

    def now(self) -> float:
        return time.monotonic()

    def sleep_until(self, t: float) -> None:
        while True:
            left = t - time.monotonic()
            if left <= 0:
                return
            time.sleep(left)


class ManualClock:
    """A clock that only moves when told: `sleep_until` jumps to the deadline, `advance` stands in
    for real work taking time. For tests and for driving the compute model in virtual time."""

    def __init__(self, t: float = 0.0):
        self.t = float(t)

    def now(self) -> float:
        return self.t

    def sleep_until(self, t: float) -> None:
        self.t = max(self.t, t)

    def advance(self, dt: float) -> None:
        if dt < 0:
            raise ValueError(f"advance: {dt} < 0 (a monotonic clock never goes back)")
        self.t += dt


class ParameterGate:
    """Which layers of an iteration have their parameters, and since when (clock time).

    The communication side calls `release(iteration, layers)` as parameters arrive (per layer or
    all at once); the forward pass of that iteration calls `wait(iteration, layer)` before the
    layer's forward starts. Thread-safe: the two sides may run in different threads. Iteration 0
    (initial parameters) is released from the start. Releases of iterations older than the one
    being waited for are dropped as the forward moves on."""

    def __init__(self, n_layers: int, clock: Clock):
        self.n_layers, self.clock = n_layers, clock
        self._released: dict[int, dict[int, float]] = {0: dict.fromkeys(range(n_layers), -math.inf)}
        self._cond = threading.Condition()

    def release(self, iteration: int, layers: Sequence[int], at: float | None = None) -> None:
        at = self.clock.now() if at is None else at
        with self._cond:
            got = self._released.setdefault(iteration, {})
            for layer in layers:
                if not 0 <= layer < self.n_layers:
                    raise ValueError(f"release: layer {layer} outside 0..{self.n_layers - 1}")
                got.setdefault(layer, at)  # the first release counts
            self._cond.notify_all()

    def release_all(self, iteration: int, at: float | None = None) -> None:
        self.release(iteration, range(self.n_layers), at)

    def released_at(self, iteration: int, layer: int) -> float | None:
        with self._cond:
            return self._released.get(iteration, {}).get(layer)

    def wait(self, iteration: int, layer: int, timeout_s: float | None = None) -> float:
        """Block until `layer` of `iteration` is released; its release time. TimeoutError after
        `timeout_s` (real seconds) without it."""
        with self._cond:
            for old in [i for i in self._released if i < iteration]:
                del self._released[old]
            ok = self._cond.wait_for(lambda: layer in self._released.get(iteration, {}), timeout_s)
            if not ok:
                raise TimeoutError(
                    f"parameters of layer {layer} for iteration {iteration} not released within {timeout_s:g} s"
                )
            return self._released[iteration][layer]


@dataclass
class DeadlineStats:
    """How well the machine kept up with the profile (wall-clock seconds).

    A step is late when its real work (or the wake-up from waiting for its deadline) ends after
    the deadline; a consumer that asks for a gradient after its deadline because it was busy
    elsewhere (sending the previous message) does not make the compute late."""

    iterations: int = 0
    deadlines: int = 0
    missed: int = 0  # deadlines passed by more than the tolerance
    missed_forward: int = 0
    late_max_s: float = 0.0  # the worst lateness of any deadline
    overrun_s: float = 0.0  # sum over iterations of the iteration's worst lateness
    budget_s: float = 0.0  # sum over iterations of the profile's compute time (what the deadlines allow)
    tolerance_s: float = DEFAULT_TOLERANCE_S
    _iter_late: float = field(default=0.0, repr=False)

    def record(self, late_s: float, forward: bool = False) -> None:
        self.deadlines += 1
        if late_s > self.tolerance_s:
            self.missed += 1
            self.missed_forward += forward
        if late_s > 0:
            self.late_max_s = max(self.late_max_s, late_s)
            self._iter_late = max(self._iter_late, late_s)

    def close_iteration(self, budget_s: float) -> None:
        self.iterations += 1
        self.overrun_s += self._iter_late
        self.budget_s += budget_s
        self._iter_late = 0.0

    @property
    def overrun_share(self) -> float | None:
        """Worst lateness per iteration, summed, over the compute time the profile allows: how much
        the emulated compute was stretched at worst (0 = the machine kept up)."""
        return self.overrun_s / self.budget_s if self.budget_s > 0 else None

    def as_dict(self) -> dict:
        return {
            "iterations": self.iterations,
            "deadlines": self.deadlines,
            "missed": self.missed,
            "missed_forward": self.missed_forward,
            "missed_backward": self.missed - self.missed_forward,
            "tolerance_ms": self.tolerance_s * 1e3,
            "late_max_ms": self.late_max_s * 1e3,
            "overrun_ms": self.overrun_s * 1e3,
            "budget_ms": self.budget_s * 1e3,
            "overrun_share": self.overrun_share,
        }


class ProfileCompute:
    """Forward and backward deadlines of one worker's iterations (see the module docstring).

    forward_s / backward_s: seconds per layer (layer 0 = input side), already multiplied by the
    time dilation. gate: where parameters come from (None: never wait)."""

    def __init__(
        self,
        forward_s: Sequence[float],
        backward_s: Sequence[float],
        clock: Clock,
        gate: ParameterGate | None = None,
        tolerance_s: float = DEFAULT_TOLERANCE_S,
        gate_timeout_s: float | None = None,
        count_from: int = 0,
    ):
        if len(forward_s) != len(backward_s) or not forward_s:
            raise ValueError(
                f"compute profile: {len(forward_s)} forward and {len(backward_s)} backward times "
                "(need the same number, at least one)"
            )
        for t in (*forward_s, *backward_s):
            if not (math.isfinite(t) and t >= 0):
                raise ValueError(f"compute profile: time {t!r} is not a finite number of seconds >= 0")
        if gate is not None and gate.n_layers != len(forward_s):
            raise ValueError(f"compute profile: {len(forward_s)} layers but the gate has {gate.n_layers}")
        self.forward_s, self.backward_s = tuple(forward_s), tuple(backward_s)
        self.n_layers = len(self.forward_s)
        self.clock, self.gate, self.gate_timeout_s = clock, gate, gate_timeout_s
        self.stats = DeadlineStats(tolerance_s=tolerance_s)
        self.count_from = count_from  # iterations before it (warm-up) are not in `stats`
        self._counting = False
        self.iteration: int | None = None
        self._cursor = 0.0  # deadline of the last step started (the forward/backward critical path)
        self._next_forward = 0  # next layer whose forward has not started
        self._pending: float | None = None  # deadline of the forward step in progress
        self._next_backward = 0  # next layer (counting down) whose gradient is not ready
        self.forward_end: float | None = None
        self.ready_at: dict[int, float] = {}  # layer -> deadline its gradient became ready (this iteration)

    @property
    def compute_s(self) -> float:
        return math.fsum(self.forward_s) + math.fsum(self.backward_s)

    def begin(self, iteration: int) -> None:
        if self.iteration is not None:
            self.end()
        self.iteration = iteration
        self._counting = iteration >= self.count_from
        self._cursor = self.clock.now()
        self._next_forward, self._pending = 0, None
        self._next_backward = self.n_layers - 1
        self.forward_end = None
        self.ready_at = {}

    def _wait(self, deadline: float, forward: bool, done_at: float | None = None) -> None:
        """Wait for `deadline` and record the step's lateness: the wake-up's when the caller came
        early, else when its real work ended (`done_at`; the call itself for a forward step, whose
        real work ran just before it; nothing known for a backward step = not late)."""
        now = self.clock.now()
        if now < deadline:
            self.clock.sleep_until(deadline)
            late = self.clock.now() - deadline
        elif forward:
            late = now - deadline
        else:
            late = 0.0 if done_at is None else max(0.0, done_at - deadline)
        if self._counting:
            self.stats.record(late, forward)

    def _finish_pending(self) -> None:
        if self._pending is not None:
            self._wait(self._pending, forward=True)
            self._cursor, self._pending = self._pending, None

    def forward(self, layer: int) -> float:
        """Layer `layer`'s forward starts (earlier layers first: their forward ends, in order).
        Returns the deadline by which it ends."""
        iteration = self._need_iteration()
        if not self._next_forward <= layer < self.n_layers:
            raise ValueError(
                f"forward: layer {layer} after layer {self._next_forward - 1} "
                f"(layers run 0..{self.n_layers - 1} once per iteration)"
            )
        while self._next_forward <= layer:
            lay = self._next_forward
            self._finish_pending()
            start = self._cursor
            if self.gate is not None:
                start = max(start, self.gate.wait(iteration, lay, self.gate_timeout_s))
            self._pending = start + self.forward_s[lay]
            self._next_forward += 1
        assert self._pending is not None  # the loop ran: layer >= _next_forward
        return self._pending

    def end_forward(self) -> float:
        """Every layer's forward has ended (the rest run now, in order); returns the end."""
        self._need_iteration()
        if self.forward_end is None:
            if self._next_forward < self.n_layers:
                self.forward(self.n_layers - 1)
            self._finish_pending()
            self.forward_end = self._cursor
        return self.forward_end

    def gradient_ready(self, layer: int, done_at: float | None = None) -> float:
        """Wait until backward has produced `layer`'s gradient (layers above it first); returns
        the deadline at which it became ready. `done_at`: when the real work behind it ended
        (clock time), if there is any; it decides whether the step was late when the caller asks
        after the deadline."""
        self.end_forward()
        if layer in self.ready_at:
            return self.ready_at[layer]
        if not 0 <= layer <= self._next_backward:
            raise ValueError(
                f"gradient_ready: layer {layer} is not below layer {self._next_backward + 1} "
                "(backward runs from the last layer down)"
            )
        while self._next_backward >= layer:
            lay = self._next_backward
            self._cursor += self.backward_s[lay]
            self._wait(self._cursor, forward=False, done_at=done_at)
            self.ready_at[lay] = self._cursor
            self._next_backward -= 1
        return self.ready_at[layer]

    def end(self) -> float:
        """The iteration's compute is over: backward reached layer 0. Returns that deadline."""
        self._need_iteration()
        t = self.gradient_ready(0)
        if self._counting:
            self.stats.close_iteration(self.compute_s)
        self.iteration = None
        return t

    def _need_iteration(self) -> int:
        if self.iteration is None:
            raise RuntimeError("compute model: call begin(iteration) first")
        return self.iteration


def layer_times(tensor_s: Sequence[float], layer_tensors: Sequence[Sequence[int]]) -> tuple[float, ...]:
    """Per-layer seconds from per-tensor seconds: a layer takes the sum of its tensors' times."""
    return tuple(math.fsum(tensor_s[i] for i in tensors) for tensors in layer_tensors)
