"""Workers and the parameter server in simulated time: the emulated agents' iteration loop
(agents/worker.py, agents/ps.py) and collectives (dlcp/comm/collectives.py: PS push/pull, ring
all-reduce) driven by completions of the transport core instead of blocking calls.

The workload objects are the emulated run's (`make_workload`, `make_server_workload`: real
gradients, fill policies, parameters, evaluation), so records have the same columns and meaning.
What differs is time: compute takes `workload.compute_ms` (or, with `workload.compute =
"profile"`, the profile's forward + backward) of simulated time per iteration, spread
over the messages in backward order as the synthetic workload spreads it (message k of K is ready
(k + 1) / K of the way through), however long the real computation took on this CPU; and
communication takes what the simulated network makes it take. Python runs per message and per
ring step, never per packet (hosts.py, cpp/dlcp_host.h).

With `workload.payload = "sizes"` (`SimRun.sizes_only`; the workload is a SizesOnlyWorkload) the
agents carry and reduce no values: packets come from `sized_packets` (the same headers, lengths and
priorities), rings and the PS keep per-packet contribution counts only, and a worker's record has
its lost values but no losses. Memory per worker is then what its messages in flight hold.
"""

from __future__ import annotations

import numpy as np

from dlcp.comm.packets import sized_packets, tagged_packets  # the emulated collectives' tagging and packetising
from dlcp.wire.chunking import MessageId
from dlcp.wire.control_frames import PS_RANK
from dlcp.wire.header import PHASE_AG, PHASE_PULL, PHASE_PUSH, PHASE_RS, TYPE_DATA, TYPE_PARAM
from dlcp.workloads.contract import Aggregate, ParamChunk


class SimRun:
    """What the agents share: the clock, the per-host records, the end condition."""

    def __init__(self, clock, iterations: int, compute_s: float, sizes_only: bool = False):
        self.clock = clock
        self.iterations = iterations
        self.compute_s = compute_s
        self.sizes_only = sizes_only  # workload.payload = "sizes": packets of the right lengths, no values
        self.iteration_rows: dict[str, list[dict]] = {}
        self.done_workers = 0
        self.workers = 0
        self.servers_open = 0  # parameter servers still scattering their last parameters
        self.first_iteration_done = None  # callback(t) once every worker finished iteration 0
        self.on_finished = None  # callback once every worker finished its last iteration
        self._first_done = 0
        self.errors: list[str] = []

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
    """One worker: compute (simulated duration), then push/pull or ring all-reduce per message."""

    def __init__(self, run: SimRun, host, acfg, workload, mode: str):
        super().__init__(run, host, acfg, workload)
        self.mode, self.rank, self.world = mode, acfg.rank, acfg.world
        run.iteration_rows[acfg.host] = []
        self.it = -1
        self._ring_queue: list = []
        self._ring = None
        self._inbox: dict = {}  # (iteration, phase, wire msg_id) -> RecvResult of a ring step

    # --- one iteration -------------------------------------------------------------------------

    def start(self) -> None:
        self.it += 1
        it = self.it
        self.t = {"start_us": self.run.us(), "first_send_us": None, "comm_end_us": None}
        self.sends_open = 0
        self.pulls: dict[int, ParamChunk] = {}
        self.aggregates: dict[int, Aggregate | None] = {}  # None: sizes only
        self.ring_lost = 0  # values of this iteration's rings that lack a contribution
        msgs = list(self.workload.compute(it))  # the real gradients; their time is simulated
        per_msg = self.run.compute_s / max(1, len(msgs))
        now = self.run.clock.now()
        for k, msg in enumerate(msgs):
            self.run.clock.at(now + (k + 1) * per_msg, lambda m=msg: self._ready(it, m))
        self.compute_end = now + self.run.compute_s

    def _ready(self, it: int, msg) -> None:
        if self.t["first_send_us"] is None:
            self.t["first_send_us"] = self.run.us()
        if self.mode == "ps":
            self._push(it, msg)
        else:
            self._ring_queue.append((it, msg))
            if self._ring is None:
                self._next_ring()

    def _maybe_end(self) -> None:
        if self.mode == "ps":
            complete = self.sends_open == 0 and len(self.pulls) == len(self.layouts)
        else:
            complete = len(self.aggregates) == len(self.layouts)
        if not complete or self.t["comm_end_us"] is not None:
            return
        self.t["comm_end_us"] = self.run.us()
        it = self.it
        if self.mode == "ps":
            for msg_id, chunk in self.pulls.items():
                self.workload.apply_parameters(it, msg_id, chunk)
            lost = int(sum(int(c.lost.sum()) for c in self.pulls.values()))
        else:
            self.workload.apply_gradients(it, self.aggregates)
            lost = self.ring_lost
        metrics = self.workload.evaluate(it) or {}
        end = max(self.run.us(), round(self.compute_end * 1e6))
        first = self.t["comm_end_us"] if self.t["first_send_us"] is None else self.t["first_send_us"]
        self.run.iteration_rows[self.acfg.host].append({
            "host": self.acfg.host, "rank": self.rank, "iter": it, "start_us": self.t["start_us"], "end_us": end,
            "iteration_us": end - self.t["start_us"], "compute_us": round(self.run.compute_s * 1e6),
            "comm_us": self.t["comm_end_us"] - first, "lost_values": metrics.get("lost_values", lost),
            "train_loss": metrics.get("train_loss"), "test_loss": metrics.get("test_loss"),
            "test_accuracy": metrics.get("test_accuracy")})
        self.done = it + 1
        self.run.worker_finished_iteration(it)
        if self.done == self.run.iterations:
            self.run.done_workers += 1
            self.run.check_finished()
        else:
            self.run.clock.at(end / 1e6, self.start)

    # --- PS push / pull (dlcp/comm/collectives.py PSClient) -----------------------------------

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
        elif self._ring is not None:
            self._ring.sent(key)

    def on_received(self, key, result) -> None:
        _src, it, phase, msg_id = key
        if phase == PHASE_PULL:
            if it == self.it:
                self.pulls[msg_id] = ParamChunk(result.values, result.loss_mask())
                self._maybe_end()
        else:  # a ring step; it may come before this rank started that message's ring
            self._inbox[(it, phase, msg_id)] = result
            if self._ring is not None:
                self._ring.advance()

    # --- ring all-reduce (dlcp/comm/collectives.py RingAllReduce, one ring at a time) ----------

    def _next_ring(self) -> None:
        if not self._ring_queue:
            self._ring = None
            return
        it, msg = self._ring_queue.pop(0)
        self._ring = _Ring(self, it, msg)
        self._ring.advance()

    def ring_done(self, it: int, msg_id: int, agg: Aggregate | None, lost: int) -> None:
        if it == self.it:
            self.aggregates[msg_id] = agg
            self.ring_lost += lost
        self._ring = None
        self._next_ring()
        self._maybe_end()


class _Ring:
    """One message's ring all-reduce on one rank, step by step as its receives arrive; the same
    chunks, wire message ids, budgets and contribution counts as the emulated ring
    (dlcp/comm/stepped.py). With `comm.lockstep` (the default), as there, a step's send also waits
    until this rank's send of the previous step is done; without it sends of successive steps
    overlap and are all awaited at the end."""

    def __init__(self, w: SimWorker, it: int, msg):
        self.w, self.it, self.lay = w, it, msg.layout
        P, n = w.world, msg.layout.n_values
        self.values = not w.run.sizes_only  # sizes only: counts per packet, no value buffers
        self.own = np.ascontiguousarray(msg.values, dtype=np.float32).reshape(-1) if self.values else None
        self.bounds = np.linspace(0, n, P + 1).astype(np.int64)
        self.partial = self.own.copy() if self.values else None
        self.total = None
        self.cnt = {c: np.ones(self._npk(c), np.uint8) for c in range(P)}
        self.phase, self.s = PHASE_RS, 0
        self.sent_step = -1  # the step (of self.phase) whose send went out
        self.open_sends: set = set()
        self.lockstep = w.acfg.comm.lockstep
        self.finishing = False

    def _npk(self, c: int) -> int:
        return max(1, -(-int(self.bounds[c + 1] - self.bounds[c]) // self.w.vpp))

    def _chunks(self):
        P, r, s = self.w.world, self.w.rank, self.s
        if self.phase == PHASE_RS:
            return (r - s) % P, (r - s - 1) % P
        return (r + 1 - s) % P, (r - s) % P

    def advance(self) -> None:
        w, P = self.w, self.w.world
        if P == 1:
            agg = Aggregate(self.lay.msg_id, self.own.copy(), np.ones(self.lay.n_values, np.uint16), 1) \
                if self.values else None
            return self._finish_now(agg, 0)
        while not self.finishing:
            cs, cr = self._chunks()
            b = self.bounds
            if self.sent_step != self.s:
                if self.lockstep and self.open_sends:
                    return  # sent() comes back here once the previous step's send is done
                self.sent_step = self.s
                if b[cs + 1] > b[cs]:
                    src = self.partial if self.phase == PHASE_RS else self.total
                    self._send(cs, src)
            lo, hi = b[cr], b[cr + 1]
            if hi > lo:
                wire = self.lay.msg_id * (P - 1) + self.s
                res = w._inbox.pop((self.it, self.phase, wire), None)
                if res is None:
                    return  # wait for the receive of this step
                if self.phase == PHASE_RS:
                    if self.values:
                        self.partial[lo:hi] = res.values + self.own[lo:hi]
                    cnt_in = res.counts if res.counts is not None else np.ones(self._npk(cr), np.uint8)
                    self.cnt[cr] = np.where(res.received, cnt_in + 1, 1).astype(np.uint8)
                else:
                    if self.values:
                        self.total[lo:hi] = res.values
                    cnt_in = res.counts if res.counts is not None else np.full(self._npk(cr), P, np.uint8)
                    self.cnt[cr] = np.where(res.received, cnt_in, 0).astype(np.uint8)
            self.s += 1
            if self.s == P - 1:
                if self.phase == PHASE_RS:
                    self.phase, self.s, self.sent_step = PHASE_AG, 0, -1
                    self.total = self.partial.copy() if self.values else None
                else:
                    self.finishing = True
        if not self.open_sends:
            self._finish()

    def _send(self, c: int, values) -> None:
        w, P = self.w, self.w.world
        step_in_phase = self.s
        wire = self.lay.msg_id * (P - 1) + step_in_phase
        ident = MessageId(w.comm.job_id, w.comm.rank, self.it, wire, self.phase, TYPE_DATA)
        protect = self.phase == PHASE_RS and w.comm.ring_budget == "protect_rs"
        batch, lf, ll = w.packets(values, ident, self.lay, self.bounds[c], self.bounds[c + 1], protect=protect)
        if w.comm.ring_budget == "per_step":
            budget = {"budget": w.host.endpoint.cfg.loss_budget / (2 * (P - 1))}
        else:
            budget = {"budget": 0.0} if self.phase == PHASE_RS else {}
        step = step_in_phase if self.phase == PHASE_RS else P - 1 + step_in_phase
        key = w.host.send((w.rank + 1) % P, batch, w.info(rec_msg_id=self.lay.msg_id, step=step, layer_first=lf,
                                                         layer_last=ll, counts=self.cnt[c], **budget))
        self.open_sends.add(key)

    def sent(self, key) -> None:
        self.open_sends.discard(key)
        if self.finishing:
            if not self.open_sends:
                self._finish()
        elif self.lockstep and not self.open_sends:
            self.advance()

    def _finish(self) -> None:
        P, vpp, b = self.w.world, self.w.vpp, self.bounds
        lost = 0  # values whose packet lacks a contribution: from the per-packet counts
        for c in range(P):
            short = self.cnt[c] < P
            if short.any():
                sizes = np.minimum(vpp, (b[c + 1] - b[c]) - np.arange(len(short)) * vpp)
                lost += int(sizes[short].sum())
        agg = None
        if self.values:
            count = np.concatenate([np.repeat(self.cnt[c].astype(np.uint16), vpp)[: b[c + 1] - b[c]]
                                    for c in range(P)])
            agg = Aggregate(self.lay.msg_id, self.total, count, P)
        self._finish_now(agg, lost)

    def _finish_now(self, agg: Aggregate | None, lost: int) -> None:
        self.finishing = True
        self.w.ring_done(self.it, self.lay.msg_id, agg, lost)


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
            return self._scatter(it, {msg_id: (None, None) for msg_id in self.layouts})
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
