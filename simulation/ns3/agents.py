"""Workers and the parameter server in simulated time: the emulated agents' iteration loop
(agents/worker.py, agents/ps.py), PS push / pull (dlcp/comm/ps.py) and the comm layer's
all-reduce (dlcp/comm/evented.py) driven by completions of the transport core instead of blocking
calls.

The workload objects are the emulated run's (`make_workload`, `make_server_workload`: real
gradients, fill policies, parameters, evaluation), so records have the same columns and meaning.
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

import numpy as np

from dlcp.comm.communicator import param_means
from dlcp.comm.evented import EventCommunicator
from dlcp.comm.packets import sized_packets, tagged_packets  # the emulated collectives' tagging and packetising
from dlcp.comm.resync import drift, resync_messages
from dlcp.wire.chunking import MessageId
from dlcp.wire.control_frames import PS_RANK
from dlcp.wire.header import PHASE_P2P, PHASE_PULL, PHASE_PUSH, TYPE_DATA, TYPE_PARAM
from dlcp.workloads.contract import Aggregate, GradMessage, ParamChunk


class SimRun:
    """What the agents share: the clock, the per-host records, the end condition."""

    def __init__(self, clock, iterations: int, compute_s: float, sizes_only: bool = False):
        self.clock = clock
        self.iterations = iterations
        self.compute_s = compute_s
        self.set_layer_times(None)
        self.sizes_only = sizes_only  # workload.payload = "sizes": packets of the right lengths, no values
        self.iteration_rows: dict[str, list[dict]] = {}
        self.resync_rows: dict[str, list[dict]] = {}
        self.done_workers = 0
        self.workers = 0
        self.servers_open = 0  # parameter servers still scattering their last parameters
        self.first_iteration_done = None  # callback(t) once every worker finished iteration 0
        self.on_finished = None  # callback once every worker finished its last iteration
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
    def __init__(self, run: SimRun, host, acfg, workload):
        self.run, self.host, self.acfg, self.workload = run, host, acfg, workload
        self.comm = acfg.comm_config()
        self.vpp = host.endpoint.cfg.values_per_pkt
        self.layouts = {lay.msg_id: lay for lay in workload.layouts()}
        self.n_layers = workload.n_layers
        self.done = 0

    def packets(self, values, ident, lay, lo, hi, magnitudes=None, protect=False):
        if self.run.sizes_only:
            return sized_packets(ident, lay, lo, hi, self.n_layers, self.comm, self.vpp, protect)
        return tagged_packets(values, ident, lay, lo, hi, self.n_layers, self.comm, self.vpp, magnitudes, protect)

    def info(self, **kw):
        from dlcp.transport.api import SendInfo

        return SendInfo(**kw)


class SimWorker(_Agent):
    """One worker: compute (simulated duration), then push/pull (PS) or the comm layer's
    scheduler and collective (all-reduce: `EventCommunicator`, dlcp/comm/evented.py, the emulated
    TransportCommunicator's scheduler, step plan, wire ids and order announcements, driven by this
    host's completions). DS-Sync with `average = "parameters"` takes the local step, then averages
    parameters in its group, as agents/worker.py does."""

    def __init__(self, run: SimRun, host, acfg, workload, mode: str, plan=None, cost=None):
        super().__init__(run, host, acfg, workload)
        self.mode, self.rank, self.world = mode, acfg.rank, acfg.world
        run.iteration_rows[acfg.host] = []
        self.it = -1
        self._queue: collections.deque = collections.deque()  # host completions while the engine is busy
        self._busy = False
        self.engine = None
        self.params_average = acfg.comm.collective == "dssync" and acfg.comm.dssync.average == "parameters"
        # DS-Sync reaches consensus by shuffling its groups: no re-sync to rank 0 (as agents/worker.py)
        dssync = acfg.comm.collective == "dssync"
        self.resync_every = acfg.dlcp.resync_every if mode != "ps" and not dssync and self.world > 1 else 0
        self._resync_sends: set = set()  # rank 0: re-sync sends not finished yet
        self._resync_in: dict = {}  # (iteration mod 2^16, message index) -> rank 0's parameters
        self._resync_wait = None  # (iteration, lost values) while this rank's re-sync is open
        run.resync_rows[acfg.host] = []
        if mode != "ps":
            self.engine = EventCommunicator(
                host.send,
                self.vpp,
                self.comm,
                acfg.comm,
                list(self.layouts.values()),
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

    # --- one iteration -------------------------------------------------------------------------

    def start(self) -> None:
        self.it += 1
        it = self.it
        self.t = {"start_us": self.run.us(), "first_send_us": None, "comm_end_us": None}
        self.sends_open = 0
        self.pulls: dict[int, ParamChunk] = {}
        self.submitted = 0
        self.own: list = []  # DS-Sync parameter averaging: this worker's gradients
        msgs = list(self.workload.compute(it))  # the real gradients; their time is simulated
        if self.engine is not None:
            self.engine.begin(it)
        now = self.run.clock.now()
        for msg, t in zip(msgs, self.run.ready_offsets(msgs)):
            self.run.clock.at(now + t, lambda m=msg: self._ready(it, m, len(msgs)))
        self.compute_end = now + self.run.compute_s

    def _ready(self, it: int, msg, n_msgs: int) -> None:
        if self.mode == "ps":
            self._first_send()
            return self._push(it, msg)
        self.submitted += 1
        if self.params_average:
            self.own.append(msg)
            if self.submitted == n_msgs:
                self._first_send()
                self._guarded(self._average, it)
            return
        self._first_send()
        self._guarded(self.engine.submit, it, msg)
        if self.submitted == n_msgs:
            self._guarded(self.engine.backward_done, it)

    def _first_send(self) -> None:
        if self.t["first_send_us"] is None:
            self.t["first_send_us"] = self.run.us()

    def _average(self, it: int) -> None:
        """DS-Sync: the local SGD step with this worker's own gradients, then its parameters into
        the group's average (in message order, as Communicator.average submits them)."""
        ones = {m.msg_id: Aggregate(m.msg_id, m.values, np.ones(m.layout.n_values, np.uint16), 1) for m in self.own}
        self.workload.apply_gradients(it, ones)
        for lay in sorted(self.layouts.values(), key=lambda lay: lay.msg_id):
            values = None if self.run.sizes_only else np.asarray(self.workload.parameters(lay.msg_id), np.float32)
            self.engine.submit(it, GradMessage(lay, values, self.n_layers))
        self.engine.backward_done(it)

    def _guarded(self, fn, *args) -> None:
        """Run fn, and every host completion that arrives meanwhile after it: the engine and its
        collective are never re-entered (a send may complete other messages at once). An error
        stops the run with its one line."""
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
            self.run.fail(f"{self.acfg.host} (rank {self.rank}), iteration {self.it}: {type(e).__name__}: {e}")
        finally:
            self._busy = False

    def _comm_done(self, it: int) -> None:
        """The engine finished iteration `it` (after the current engine call: it collects)."""
        self._queue.append((self._end_allreduce, (it,)))

    def _end_allreduce(self, it: int) -> None:
        self.t["comm_end_us"] = self.run.us()
        short = self.engine.short_values(it) if self.run.sizes_only else 0
        aggs = self.engine.collect(it)
        if self.params_average:
            means = {} if self.run.sizes_only else param_means(aggs)  # sizes only: no parameters to average
            for msg_id, chunk in means.items():
                self.workload.apply_parameters(it, msg_id, chunk)
            lost = short if self.run.sizes_only else int(sum(int(c.lost.sum()) for c in means.values()))
        else:
            self.workload.apply_gradients(it, aggs)
            lost = short if self.run.sizes_only else int(sum(int((a.count < a.world).sum()) for a in aggs.values()))
        if self.resync_every and (it + 1) % self.resync_every == 0:
            return self._resync(it, lost)
        self._end(it, lost)

    # --- re-sync to rank 0 (dlcp/comm/resync.py; agents/worker.py) -------------------

    def _params(self) -> dict | None:
        return None if self.run.sizes_only else {m: self.workload.parameters(m) for m in self.layouts}

    def _resync(self, it: int, lost: int) -> None:
        """Rank 0 sends its parameters to every rank; the iteration ends once its sends are done
        (rank 0) or every message arrived (the others), as the emulated resync returns."""
        self._resync_wait = (it, lost)
        if self.rank == 0:
            params = self._params()
            for dst, batch, info in resync_messages(
                self.comm, self.engine.ids, self.layouts, self.n_layers, self.vpp, it, params
            ):
                self._resync_sends.add(self.host.send(dst, batch, info))
        else:
            self._resync_check()

    def _resync_check(self) -> None:
        if self._resync_wait is None:
            return
        it, lost = self._resync_wait
        order = sorted(self.layouts)
        if self.rank == 0:
            if self._resync_sends:
                return
            ref = params = self._params()
        else:
            if any((it & 0xFFFF, k) not in self._resync_in for k in range(len(order))):
                return
            got = {m: self._resync_in.pop((it & 0xFFFF, k)) for k, m in enumerate(order)}
            params = self._params()
            ref = None if params is None else {m: r.values for m, r in got.items()}
        if params is not None:  # sizes only: the traffic, but no parameters to compare or adopt
            row = drift(params, ref)
            if self.rank != 0:
                for m, values in ref.items():
                    self.workload.apply_parameters(it, m, ParamChunk(values, np.zeros(values.size, bool)))
            self.run.resync_rows[self.acfg.host].append({"host": self.acfg.host, "rank": self.rank, "iter": it, **row})
        self._resync_wait = None
        self._end(it, lost)

    def _maybe_end(self) -> None:
        complete = self.sends_open == 0 and len(self.pulls) == len(self.layouts)
        if not complete or self.t["comm_end_us"] is not None:
            return
        self.t["comm_end_us"] = self.run.us()
        it = self.it
        for msg_id, chunk in self.pulls.items():
            self.workload.apply_parameters(it, msg_id, chunk)
        self._end(it, int(sum(int(c.lost.sum()) for c in self.pulls.values())))

    def _end(self, it: int, lost: int) -> None:
        metrics = self.workload.evaluate(it) or {}
        end = max(self.run.us(), round(self.compute_end * 1e6))
        first = self.t["comm_end_us"] if self.t["first_send_us"] is None else self.t["first_send_us"]
        self.run.iteration_rows[self.acfg.host].append(
            {
                "host": self.acfg.host,
                "rank": self.rank,
                "iter": it,
                "start_us": self.t["start_us"],
                "end_us": end,
                "iteration_us": end - self.t["start_us"],
                "compute_us": round(self.run.compute_s * 1e6),
                "comm_us": self.t["comm_end_us"] - first,
                "lost_values": metrics.get("lost_values", lost),
                "train_loss": metrics.get("train_loss"),
                "test_loss": metrics.get("test_loss"),
                "test_accuracy": metrics.get("test_accuracy"),
            }
        )
        self.done = it + 1
        self.run.worker_finished_iteration(it)
        if self.done == self.run.iterations:
            self.run.done_workers += 1
            self.run.check_finished()
        else:
            self.run.clock.at(end / 1e6, self.start)

    # --- PS push / pull (dlcp/comm/ps.py PSClient) -----------------------------------

    def _push(self, it: int, msg) -> None:
        lay = msg.layout
        values = None if self.run.sizes_only else np.ascontiguousarray(msg.values, dtype=np.float32).reshape(-1)
        ident = MessageId(self.comm.job_id, self.comm.rank, it, lay.msg_id, PHASE_PUSH, TYPE_DATA)
        batch, lf, ll = self.packets(values, ident, lay, 0, lay.n_values)
        self.sends_open += 1
        self.host.send(PS_RANK, batch, self.info(rec_msg_id=lay.msg_id, layer_first=lf, layer_last=ll))

    def on_sent(self, key, result) -> None:
        if self.mode == "ps":
            self.sends_open -= 1
            self._maybe_end()
        elif key in self._resync_sends:
            self._resync_sends.discard(key)
            self._resync_check()
        else:
            self._guarded(self.engine.sent, key, result)

    def on_received(self, key, result) -> None:
        _src, it, phase, msg_id = key
        if phase == PHASE_PULL:
            if it == self.it:
                self.pulls[msg_id] = ParamChunk(result.values, result.loss_mask())
                self._maybe_end()
        elif phase == PHASE_P2P and msg_id >= self.engine.ids.announcements:  # rank 0's re-sync
            self._resync_in[(it & 0xFFFF, msg_id - self.engine.ids.announcements)] = result
            self._resync_check()
        else:  # a step of a collective or an order announcement; it may come before its operation started
            self._guarded(self.engine.received, key, result)


class SimPS(_Agent):
    """The parameter server: gather every worker's push of every message, update, scatter."""

    def __init__(self, run: SimRun, host, acfg, workload):
        super().__init__(run, host, acfg, workload)
        self.world = acfg.world
        self.got: dict[int, dict] = {}  # iteration -> {(rank, msg_id): RecvResult}
        self._previous: dict[int, np.ndarray] = {}
        self.pulls_open: dict[int, int] = {}  # iteration -> parameter sends not finished yet
        run.servers_open += 1

    def on_sent(self, key, result) -> None:
        """A parameter send finished; the PS is done once the last iteration's all are (as the
        emulated PS waits for its scatter before it exits)."""
        it = key[1]
        self.pulls_open[it] -= 1
        if not self.pulls_open[it]:
            del self.pulls_open[it]
            self.done = max(self.done, it + 1)
            if self.done == self.run.iterations:
                self.run.servers_open -= 1
                self.run.check_finished()

    def on_received(self, key, result) -> None:
        src, it, phase, msg_id = key
        if phase != PHASE_PUSH:
            return
        got = self.got.setdefault(it, {})
        got[(src, msg_id)] = None if self.run.sizes_only else result  # sizes only: no values to keep
        if len(got) < self.world * len(self.layouts):
            return
        del self.got[it]
        if self.run.sizes_only:
            return self._scatter(it, dict.fromkeys(self.layouts, (None, None)))
        aggregates = {}
        for msg_id, lay in self.layouts.items():
            total = np.zeros(lay.n_values, np.float32)
            count = np.zeros(lay.n_values, np.uint16)
            for rank in range(self.world):  # fixed order: sums are reproducible bit for bit
                r = got[(rank, msg_id)]
                total += r.values
                count += ~r.loss_mask()
            aggregates[msg_id] = Aggregate(msg_id, total, count, self.world)
        self.workload.update(it, aggregates)
        params = {}
        for msg_id in self.layouts:
            values = np.array(self.workload.parameters(msg_id), dtype=np.float32).reshape(-1)
            prev = self._previous.get(msg_id)
            params[msg_id] = values, (np.abs(values - prev) if prev is not None else np.abs(values))
            self._previous[msg_id] = values
        self._scatter(it, params)

    def _scatter(self, it: int, params: dict) -> None:
        """Send every worker each message's parameters (values, delta magnitudes; None, None: sizes only)."""
        for msg_id, (values, delta) in params.items():
            lay = self.layouts[msg_id]
            ident = MessageId(self.comm.job_id, self.comm.rank, it, msg_id, PHASE_PULL, TYPE_PARAM)
            batch, lf, ll = self.packets(values, ident, lay, 0, lay.n_values, magnitudes=delta)
            for rank in range(self.world):
                self.pulls_open[it] = self.pulls_open.get(it, 0) + 1
                self.host.send(rank, batch, self.info(rec_msg_id=msg_id, layer_first=lf, layer_last=ll))
