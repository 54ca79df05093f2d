"""The parameter server's aggregation loop without I/O (docs/runs.md, "The iteration core").

Per iteration, as `ServerCore` orders it:

    start(now)                        -> BeginComm(0), AwaitPushes(0)   (after ScheduleBudget with
                                                            a budget schedule: its first budget)
    gathered(now, it, aggregates)     -> Update             every worker's push of every message,
                                                            summed (None per message: sizes only);
                                                            ScheduleBudget first at a new phase
    work_done(...)                    -> ReadParameters
    work_done(now, cpu_s, params)     -> Scatter(it, params), BeginComm(it + 1), AwaitPushes(it + 1)
    scattered(now, it)                -> Progress, Finished after the last iteration

Gathering the next iteration need not wait for the scatter before it to finish (an event-driven
PS may have every push of iteration it + 1 before the last STOP of its scatter of it; the
threaded PS performs Scatter to its end first); the iterations done are those whose scatter
finished, and the last one's ends the PS (the emulated PS waits for its scatter before it exits). Sizes only, there are no parameters:
nothing is updated or read, the scatter carries packets of the right sizes.
"""

from __future__ import annotations

from dlcp.iteration.actions import (
    AwaitPushes,
    BeginComm,
    Finished,
    Progress,
    ReadParameters,
    Scatter,
    ScheduleBudget,
    Update,
)
from dlcp.iteration.budget_schedule import PhaseBudget

IDLE, GATHERING, UPDATING, READING, DRAINING, DONE = "idle", "gathering", "updating", "reading", "draining", "done"


class ServerCore:
    """The PS's iterations (see the module docstring). `msg_ids`: the workload's messages;
    `schedule`: a budget schedule the PS runs on the aggregates (None: a fixed budget)."""

    def __init__(
        self, iterations: int, msg_ids: tuple[int, ...], sizes_only: bool = False, schedule: PhaseBudget | None = None
    ):
        if iterations < 1 or not msg_ids:
            raise ValueError(f"a parameter server needs iterations ({iterations}) and messages ({len(msg_ids)})")
        self.iterations, self.msg_ids, self.sizes_only = iterations, tuple(msg_ids), sizes_only
        self.gathering = 0  # the iteration whose pushes come next
        self.done = 0  # iterations whose scatter finished
        self.phase = IDLE
        self.schedule = None if sizes_only else schedule

    def start(self, now: int) -> list:
        self._expect("start", IDLE)
        self.phase = GATHERING
        first = [ScheduleBudget(*self.schedule.start())] if self.schedule is not None else []
        return [*first, BeginComm(0), AwaitPushes(0)]

    def gathered(self, now: int, iteration: int, aggregates: dict) -> list:
        """Every push of `iteration` is in (complete or forced), summed per message."""
        self._expect("gathered", GATHERING)
        if iteration != self.gathering:
            raise RuntimeError(f"parameter server: pushes of iteration {iteration} while gathering {self.gathering}")
        if self.sizes_only:
            return self._scatter(None)
        self.phase = UPDATING
        changed = self.schedule.observe(iteration, aggregates) if self.schedule is not None else None
        return ([ScheduleBudget(*changed)] if changed else []) + [Update(iteration, aggregates)]

    def work_done(self, now: int, cpu_s: float = 0.0, result=None) -> list:
        """The workload call returned (`result`: the parameters after ReadParameters)."""
        self._expect("work_done", UPDATING, READING)
        if self.phase == UPDATING:
            self.phase = READING
            return [ReadParameters(self.msg_ids)]
        return self._scatter(result)

    def scattered(self, now: int, iteration: int) -> list:
        """Every send of `iteration`'s parameters finished."""
        if not 0 <= iteration < self.gathering:
            raise RuntimeError(f"parameter server: scatter of iteration {iteration} before its pushes")
        finishing = self.done < self.iterations <= iteration + 1
        self.done = max(self.done, iteration + 1)
        out: list = [Progress(self.done, self.iterations)]
        if finishing:
            self.phase = DONE
            out.append(Finished())
        return out

    def _scatter(self, params: dict | None) -> list:
        it = self.gathering
        self.gathering += 1
        out = [Scatter(it, params)]
        if self.gathering < self.iterations:
            self.phase = GATHERING
            return out + [BeginComm(self.gathering), AwaitPushes(self.gathering)]
        self.phase = DRAINING if self.done < self.iterations else DONE  # the last scatters to finish
        return out

    def _expect(self, event: str, *phases: str) -> None:
        if self.phase not in phases:
            raise RuntimeError(f"parameter server: {event} in iteration {self.gathering} while {self.phase}")
