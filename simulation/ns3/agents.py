"""Workers and the parameter server in simulated time: the iteration cores the emulated agents run
(dlcp/iteration: `WorkerCore`, `ServerCore`) driven by simulator events, over the comm layer's
event-driven PS push / pull, all-reduce and re-sync (dlcp/comm/evented.py), which the transport
core's completions drive instead of blocking calls.

The workload objects are the emulated run's (`make_workload`, `make_server_workload`: real
gradients, fill rules, parameters, evaluation), so records have the same columns and meaning.
What differs is time: compute takes `workload.compute_ms` of simulated time per iteration, spread
over the messages in backward order as the synthetic workload spreads it (message k of K is ready
(k + 1) / K of the way through), or, with `workload.compute = "profile"`, the profile's per-layer
times: the whole forward, then each message when the backward reaches its first layer (as
dlcp/workloads/compute_model.py times the emulated compute); however long the real computation took
on this CPU. Communication takes what the simulated network makes it take. All-reduce runs the
comm layer itself (`[comm]` scheduler and collective: dlcp/comm/evented.py, the emulated
TransportCommunicator's objects driven by this host's completions). Python runs per message and per
collective step, never per packet (hosts.py, cpp/dlcp_host.h).

With `workload.payload = "sizes"` (`SimRun.sizes_only`; the workload is a SizesOnlyWorkload) the
agents carry and reduce no values: packets come from `sized_packets` (the same headers, lengths and
priorities), collectives and the PS keep per-packet contribution counts only (rank 0's order
announcements still carry their two values), and a worker's record has its lost values but no losses. Memory per worker is then what its messages in flight hold.
"""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np

from dlcp import records as R
from dlcp.comm.evented import EventCommunicator, EventPSClient, EventPSServer
from dlcp.iteration import actions as A
from dlcp.iteration.budget_schedule import BudgetScheduleSettings, phase_budget
from dlcp.iteration.server_core import ServerCore
from dlcp.iteration.worker_core import WorkerCore, worker_spec
from dlcp.transport.api import TransportError


class SimRun:
    """What the agents share: the clock, the compute times, the end condition."""

    def __init__(self, clock, iterations: int, compute_s: float, sizes_only: bool = False):
        self.clock = clock
        self.iterations = iterations
        self.compute_s = compute_s
        self.set_layer_times(None)
        self.sizes_only = sizes_only  # workload.payload = "sizes": packets of the right lengths, no values
        self.done_workers = 0
        self.workers = 0
        self.servers_open = 0  # parameter servers still scattering their last parameters
        self.first_iteration_done = None  # callback(t) once every worker finished iteration 0
        self.on_finished = None  # callback once every worker finished its last iteration
        self.on_iteration = None  # callback each time a worker finished an iteration (progress)
        self._first_done = 0
        self.errors: list[str] = []

    def set_layer_times(self, layer_times) -> None:
        """(forward_s, backward_s) per model layer in simulated seconds (workload.compute =
        "profile"), or None: compute_s spread over the messages. The schedulers plan with the same
        times (dlcp/comm/assemble.py planning_profile)."""
        self.layer_times = layer_times
        self.planning_backward_ms = self.compute_s * 1e3 if layer_times is None else 0.0
        if layer_times is not None:
            fwd, bwd = layer_times
            suffix = np.cumsum(np.asarray(bwd, np.float64)[::-1])[::-1]  # backward from the last layer down to l
            self._ready_at = float(np.sum(fwd)) + suffix

    def ready_offsets(self, msgs) -> list[float]:
        """When each message (backward order) is ready, in seconds after the iteration starts: with
        per-layer times, when the backward reaches its first layer after the whole forward (as
        dlcp/workloads/compute_model.py times it); else message k of K at (k + 1) / K of compute_s."""
        if self.layer_times is None:
            per_msg = self.compute_s / max(1, len(msgs))
            return [(k + 1) * per_msg for k in range(len(msgs))]
        return [float(self._ready_at[m.layout.layer_first]) for m in msgs]

    def fail(self, error: str) -> None:
        """An agent cannot go on: stop the simulation, which then reports this error."""
        self.errors.append(error)
        if self.on_finished:
            self.on_finished()

    def us(self) -> int:
        return round(self.clock.now() * 1e6)

    def worker_finished_iteration(self, it: int) -> None:
        if self.on_iteration:
            self.on_iteration()
        if it == 0:
            self._first_done += 1
            if self._first_done == self.workers and self.first_iteration_done:
                self.first_iteration_done(self.clock.now())

    @property
    def finished(self) -> bool:
        return self.done_workers == self.workers and not self.servers_open

    def check_finished(self) -> None:
        if self.finished and self.on_finished:
            self.on_finished()


class _Agent:
    """What both roles share: the host, the workload, the core's actions performed depth first
    (dlcp/iteration/actions.py), never re-entered (`_guarded`), and the records."""

    role = ""

    def __init__(self, run: SimRun, host, acfg, workload):
        self.run, self.host, self.acfg, self.workload = run, host, acfg, workload
        self.comm = acfg.comm_config()
        self.vpp = host.endpoint.cfg.values_per_pkt
        self.layouts = workload.layouts()
        self.n_layers = workload.n_layers
        self.done = 0
        self.budget_rows: list[dict] = []  # a budget schedule's changes (records/hN-budget.csv)
        self._queue: collections.deque = collections.deque()  # host completions while the agent is busy
        self._busy = False

    def _guarded(self, fn, *args) -> None:
        """Run fn, and every host completion that arrives meanwhile after it: the core, the comm
        layer and its collective are never re-entered (a send may complete other messages at
        once). An error stops the run with its one line."""
        self._queue.append((fn, args))
        if self._busy:
            return
        self._busy = True
        try:
            while self._queue:
                f, a = self._queue.popleft()
                f(*a)
        except Exception as e:  # noqa: BLE001 - the simulation stops and says why
            self._queue.clear()
            self.run.fail(f"{self.acfg.host} ({self.who()}): {type(e).__name__}: {e}")
        finally:
            self._busy = False

    def _drive(self, actions) -> None:
        A.drive(actions, self.perform)

    def schedule_budget(self, a: A.ScheduleBudget) -> None:
        self.host.endpoint.set_budget(a.budget)
        self.budget_rows.append(a.row)

    def work(self, a: A.WorkloadCall) -> list:
        """A workload call takes no simulated time (its compute is in `SimRun`'s times)."""
        return self.core.work_done(self.run.us(), 0.0, a.run(self.workload))

    def write_records(self, rec: Path, iteration_rows=None, resync_rows=()) -> None:
        ok = self.done == self.run.iterations
        totals = R.agent_totals(
            self.acfg.host,
            self.role,
            self.acfg.rank,
            "done" if ok else "error",
            None if ok else f"{self.done} of {self.run.iterations} iterations",
            self.done,
        )
        ep = self.host.endpoint
        totals.update(ep.stats())
        totals.update(R.workload_totals(self.workload))
        R.write_agent_records(
            rec,
            self.acfg.host,
            totals,
            ep.sender.rows + ep.receiver.rows,
            iteration_rows,
            resync_rows,
            budget_rows=self.budget_rows,
        )


class SimWorker(_Agent):
    """One worker: `WorkerCore`'s iteration with compute in simulated time and the comm layer's
    event-driven PS client or `EventCommunicator` (the emulated TransportCommunicator's scheduler, step plan,
    wire ids, order announcements and re-sync, driven by this host's completions)."""

    role = "worker"

    def __init__(self, run: SimRun, host, acfg, workload, mode: str, plan=None, cost=None):
        super().__init__(run, host, acfg, workload)
        self.mode, self.rank = mode, acfg.rank
        self.core = WorkerCore(worker_spec(acfg, workload, run.sizes_only))
        self.iteration_rows: list[dict] = []
        self.resync_rows: list[dict] = []
        if mode == "ps":
            self.coll = EventPSClient(
                host.send,
                self.vpp,
                self.comm,
                self.layouts,
                self.n_layers,
                on_done=self._comm_done,
                sizes_only=run.sizes_only,
            )
        else:
            self.coll = EventCommunicator(
                host.send,
                self.vpp,
                self.comm,
                acfg.comm,
                self.layouts,
                self.n_layers,
                clock=run.clock.now,
                on_done=self._comm_done,
                sizes_only=run.sizes_only,
                host_mbps=acfg.links.host_mbps,
                fabric_mbps=acfg.links.fabric_mbps,
                spec=acfg.topology_spec(),
                backward_ms=run.planning_backward_ms,
                layer_times=run.layer_times,
                plan=plan,
                cost=cost,
            )

    def who(self) -> str:
        return f"rank {self.rank}, iteration {self.core.iteration}"

    def start(self) -> None:
        """The next iteration starts now."""
        self._guarded(lambda: self._drive(self.core.start(self.run.us())))

    # --- the core's actions ----------------------------------------------------------------------

    def perform(self, a) -> list:
        core, coll = self.core, self.coll
        if isinstance(a, A.WorkloadCall):
            return self.work(a)
        if isinstance(a, A.Compute):
            self._compute(a.iteration)
        elif isinstance(a, A.Handoff):
            if isinstance(a, A.Push):
                coll.push(a.iteration, a.message)
            elif isinstance(a, A.Submit):
                coll.submit(a.iteration, a.message)
            else:
                coll.submit_parameters(a.iteration, a.params)
            core.handed(self.run.us())
        elif isinstance(a, A.Resync):
            coll.resync(a.iteration, a.params, self._resynced)
        elif isinstance(a, A.BeginComm):
            coll.begin(a.iteration)
        elif isinstance(a, A.BackwardDone):
            coll.backward_done(a.iteration)
        elif isinstance(a, A.ScheduleBudget):
            self.schedule_budget(a)
        elif isinstance(a, A.RecordIteration):
            self.iteration_rows.append(a.row)
        elif isinstance(a, A.RecordResync):
            self.resync_rows.append(a.row)
        elif isinstance(a, A.Progress):
            self.done = a.done
            self.run.worker_finished_iteration(a.done - 1)
        elif isinstance(a, A.NextIteration):
            self.run.clock.at(a.at_us / 1e6, self.start)
        elif isinstance(a, A.Finished):
            self.run.done_workers += 1
            self.run.check_finished()
        elif isinstance(a, A.Failed):
            self.run.fail(f"{self.acfg.host} (rank {self.rank}), {a.line}")
        elif not isinstance(a, A.AwaitComm):  # the result comes as an event (_comm_done)
            raise TypeError(f"simulated worker: no way to perform {a!r}")
        return []

    def _compute(self, it: int) -> None:
        """The real gradients now, their times simulated: each message at its ready time
        (`SimRun.ready_offsets`), the compute's end with the last."""
        msgs = list(self.workload.compute(it))
        now = self.run.clock.now()
        compute_end = now + self.run.compute_s
        for k, (msg, t) in enumerate(zip(msgs, self.run.ready_offsets(msgs))):
            end = compute_end if k == len(msgs) - 1 else None
            self.run.clock.at(now + t, lambda m=msg, end=end: self._ready(m, end))

    def _ready(self, msg, compute_end: float | None) -> None:
        self._guarded(lambda: self._drive(self.core.gradient_ready(self.run.us(), msg)))
        if compute_end is not None:
            done_us = round(compute_end * 1e6)
            self._guarded(lambda: self._drive(self.core.compute_done(done_us, self.run.compute_s)))

    # --- the comm layer's events -------------------------------------------------------------------

    def _comm_done(self, it: int) -> None:
        """The comm layer finished iteration `it` (after its current call: it collects)."""
        self._queue.append((self._collect, (it,)))

    def _collect(self, it: int) -> None:
        short = self.coll.short_values(it) if self.run.sizes_only and self.mode != "ps" else 0
        try:
            result = self.coll.collect(it)
        except TransportError as e:
            return self._drive(self.core.comm_failed(self.run.us(), str(e)))
        self._drive(self.core.comm_done(self.run.us(), result, short))

    def _resynced(self, reference) -> None:
        """Rank 0's parameters are here: at once after the call that finished the re-sync (the
        host's completions queued meanwhile come after it)."""
        self._queue.appendleft((lambda: self._drive(self.core.resynced(self.run.us(), reference)), ()))

    def on_sent(self, key, result) -> None:
        self._guarded(self.coll.sent, key, result)

    def on_received(self, key, result) -> None:
        # a step of a collective, an order announcement (it may come before its operation
        # started), rank 0's re-sync, or a pull
        self._guarded(self.coll.received, key, result)

    def write_records(self, rec: Path) -> None:
        super().write_records(rec, self.iteration_rows, self.resync_rows)


class SimPS(_Agent):
    """The parameter server: `ServerCore`'s loop over the comm layer's `EventPSServer` (gather
    every worker's push of every message, update, scatter)."""

    role = "ps"

    def __init__(self, run: SimRun, host, acfg, workload):
        super().__init__(run, host, acfg, workload)
        self.server = EventPSServer(
            host.send,
            self.vpp,
            self.comm,
            self.layouts,
            self.n_layers,
            on_gathered=self._gathered,
            on_scattered=self._scattered,
            sizes_only=run.sizes_only,
            fill=acfg.dlcp.fill,
        )
        schedule = phase_budget(acfg.dlcp.project(BudgetScheduleSettings), acfg.host, acfg.rank)
        self.core = ServerCore(
            run.iterations, tuple(lay.msg_id for lay in self.layouts), run.sizes_only, schedule=schedule
        )
        run.servers_open += 1
        self._drive(self.core.start(0))

    def who(self) -> str:
        return f"PS, iteration {self.core.gathering}"

    def perform(self, a) -> list:
        if isinstance(a, A.WorkloadCall):
            return self.work(a)
        if isinstance(a, A.Scatter):
            self.server.scatter(a.iteration, a.params)
        elif isinstance(a, A.ScheduleBudget):
            self.schedule_budget(a)
        elif isinstance(a, A.Progress):
            self.done = a.done
        elif isinstance(a, A.Finished):
            self.run.servers_open -= 1
            self.run.check_finished()
        elif not isinstance(a, (A.BeginComm, A.AwaitPushes)):  # pushes come as events
            raise TypeError(f"simulated parameter server: no way to perform {a!r}")
        return []

    def _gathered(self, wire_it: int) -> None:
        it = self.core.gathering
        if it & 0xFFFF != wire_it:
            raise RuntimeError(f"pushes of iteration {wire_it} (mod 2^16) complete while gathering {it}")
        self._drive(self.core.gathered(self.run.us(), it, self.server.gathered(it)))

    def _scattered(self, it: int) -> None:
        self._drive(self.core.scattered(self.run.us(), it))

    def on_sent(self, key, result) -> None:
        """A parameter send finished (the PS is done once the last iteration's all are, as the
        emulated PS waits for its scatter before it exits)."""
        self._guarded(self.server.sent, key, result)

    def on_received(self, key, result) -> None:
        self._guarded(self.server.received, key, result)
