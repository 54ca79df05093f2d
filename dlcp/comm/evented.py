"""The comm layer driven by events instead of threads, for the simulated hosts (ns-3): the ring,
MultiTree and DS-Sync groups (`EventSteppedCollective` under `EventCommunicator`, which also re-syncs
to rank 0), and PS push / pull (`EventPSClient`, `EventPSServer`: the threaded PSClient's and
PSServer's packets and sums, dlcp/comm/ps.py).

It runs the same StepPlan schedules with the same rules as `SteppedCollective`
(dlcp/comm/stepped.py: chunks, wire ids, tagging, SendInfo counts and budgets, the lockstep rule,
the receive merge, in the same order), but nothing blocks: the caller hands it a `send(dst,
batch, info) -> key` and tells it what happened, `sent(key, result)` when a send finished and
`received(key, result)` when a message arrived (key = (src, iteration, phase, msg_id), as the
transport core reports it). An operation takes its next step as soon as what it waits for is
there; messages that arrive before their operation asks for them wait in an inbox. Handles
complete from those calls, in the caller's thread.

The caller must not re-enter: a `sent` or `received` arriving while one of this collective's calls
is still running (e.g. a send that completes another message at once) has to wait until it returns.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from dlcp.comm.api import Collective, Handle, OpData, Partial
from dlcp.comm.assemble import LayerTimes, assemble_rank
from dlcp.comm.communicator import Communicator, OrderChannel
from dlcp.comm.costmodel import CostModel
from dlcp.comm.order import LEADER, announcement_info, announcement_packets, read_announcement
from dlcp.comm.plans.collective import StepPlan
from dlcp.comm.ps import PullMessages, bubble_memory, push_message, sum_pushes
from dlcp.comm.resync import resync_messages
from dlcp.comm.settings import CommConfig, CommSetup
from dlcp.comm.stepped import AG, RS, RankSteps, StepRules, _State
from dlcp.comm.wire_ids import WireIds
from dlcp.network.topology import TopologySpec
from dlcp.transport.api import TransportError
from dlcp.wire.control_frames import PS_RANK
from dlcp.wire.header import PHASE_P2P, PHASE_PULL, PHASE_PUSH
from dlcp.workloads.contract import Aggregate, GradMessage, MessageLayout, ParamChunk


class _Run:
    """One primitive of one operation on this rank, step by step."""

    def __init__(self, coll: EventSteppedCollective, st: _State, phases, handle: Handle, result):
        self.c, self.st, self.h, self.result = coll, st, handle, result
        self.steps = coll.rules.steps(st, phases)
        self.by_step = RankSteps.of(st.sched, coll.rank)
        self.pos, self.sent_pos, self.ri = 0, -1, 0
        self.open: set = set()  # keys of this run's sends not finished yet
        self.done = False

    def advance(self) -> None:
        c, st = self.c, self.st
        while self.pos < len(self.steps):
            s = self.steps[self.pos]
            sends, recvs = self.by_step[s]
            if self.sent_pos != self.pos:
                self.sent_pos, self.ri = self.pos, 0
                for _, t, local in sends:
                    if not st.empty(t.chunk):
                        key = c.send(*c.rules.message(st, s, t, local))
                        self.open.add(key)
                        c.owner[key] = self
            while self.ri < len(recvs):
                _, t, local = recvs[self.ri]
                if not st.empty(t.chunk):
                    phase, msg_id = c.rules.recv_key(st, t, local)
                    key = (t.src, st.op.iteration & 0xFFFF, phase, msg_id)
                    res = c.inbox.pop(key, None)
                    if res is None:
                        c.waiting[key] = self
                        return
                    c.rules.merge(st, t, res)
                self.ri += 1
            if c.lockstep and self.open:
                return  # sent() comes back once this step's sends are done
            self.pos += 1
        if not self.open:
            self.done = True
            self.h.set_result(self.result(st))

    def sent(self, key, result) -> None:
        self.open.discard(key)
        if result.error:
            self.done = True
            self.h.set_error(TransportError(f"{self.c.plan.collective} {self.st.op.what}: {result.error}"))
            return
        if not self.open:
            self.advance()


class EventSteppedCollective(Collective):
    """One rank's side of a StepPlan, event-driven (see the module docstring). `sizes_only`:
    operations carry no values (OpData.values None), only per-packet contribution counts."""

    def __init__(self, send: Callable, vpp: int, cfg: CommConfig, plan: StepPlan, ids: WireIds, lockstep: bool = True):
        if plan.workers != cfg.world:
            raise ValueError(f"{plan.collective}: plan for {plan.workers} ranks, job of {cfg.world}")
        if ids.stride < plan.stride:
            raise ValueError(
                f"{plan.collective}: wire ids give {ids.stride} step ids per operation, the plan needs {plan.stride}"
            )
        self.send, self.vpp, self.cfg, self.plan, self.ids, self.lockstep = send, vpp, cfg, plan, ids, lockstep
        self.rank, self.world = cfg.rank, cfg.world
        self.rules = StepRules(cfg, plan, ids, vpp)
        self.inbox: dict[tuple, object] = {}  # (src, iteration mod 2^16, phase, msg_id) -> RecvResult
        self.waiting: dict[tuple, _Run] = {}  # the receive a run waits for
        self.owner: dict = {}  # send key -> its run

    def begin(self, iteration: int) -> None:
        """Messages of iterations before the previous one can no longer be asked for."""
        old = (iteration - 2) & 0xFFFF
        for key in [k for k in self.inbox if k[1] == old]:
            del self.inbox[key]

    def group_size(self, iteration: int) -> int:
        return self.plan.group_size(iteration, self.rank)

    def all_reduce(self, op: OpData) -> Handle:
        return self._start(
            _State(op, self.plan.schedule(op.iteration), self.vpp),
            (RS, AG),
            lambda st: st.reduced(self.group_size(op.iteration)),
        )

    def reduce_scatter(self, op: OpData) -> Handle:
        return self._start(_State(op, self.plan.schedule(op.iteration), self.vpp), (RS,), Partial)

    def all_gather(self, op: OpData, partial: Partial) -> Handle:
        st = partial.state
        if not isinstance(st, _State) or st.op.slot != op.slot or st.op.iteration != op.iteration:
            raise ValueError(
                f"{self.plan.collective}: all_gather of {op.what} needs the reduce-scatter of the same operation"
            )
        return self._start(st, (AG,), lambda st: st.reduced(self.group_size(op.iteration)))

    def _start(self, st: _State, phases, result) -> Handle:
        h = Handle(f"{self.plan.collective} {st.op.what}")
        run = _Run(self, st, phases if self.world > 1 else (), h, result)
        try:
            run.advance()
        except BaseException as e:  # noqa: BLE001 (handed to the handle's callbacks, as the threaded collective does)
            h.set_error(e)
        return h

    # --- what the transport reports ------------------------------------------------------------

    def sent(self, key, result) -> bool:
        """A send finished; False when it was not one of this collective's."""
        run = self.owner.pop(key, None)
        if run is None:
            return False
        self._guard(run, lambda: run.sent(key, result))
        return True

    def received(self, key, result) -> None:
        src, it, phase, msg_id = key
        key = (src, it & 0xFFFF, phase, msg_id)
        run = self.waiting.pop(key, None)
        self.inbox[key] = result
        if run is not None:
            self._guard(run, run.advance)

    def _guard(self, run: _Run, fn) -> None:
        if run.done:
            return
        try:
            fn()
        except BaseException as e:  # noqa: BLE001
            run.done = True
            run.h.set_error(e)


class PushedOrder(OrderChannel):
    """Rank 0's announcements as messages (the packets and ids of TransportOrder) sent through
    `send`; the followers' host pushes them into `Communicator.announced` (EventCommunicator.received)."""

    pushes = True

    def __init__(self, send: Callable, vpp: int, cfg: CommConfig, ids: WireIds, n_layers: int):
        self.send, self.vpp, self.cfg, self.ids, self.n_layers = send, vpp, cfg, ids, n_layers

    def announce(self, iteration: int, seq: int, slot: int, primitive: str) -> None:
        batch = announcement_packets(self.cfg, self.ids, self.n_layers, self.vpp, iteration, seq, slot, primitive)
        for r in range(self.cfg.world):
            if r != self.cfg.rank:
                self.send(r, batch, announcement_info(slot))

    def receive(self, iteration: int, seq: int, timeout_s: float) -> tuple[int, str]:
        raise RuntimeError("PushedOrder: announcements are pushed into Communicator.announced, not read")


class EventCommunicator(Communicator):
    """TransportCommunicator's counterpart for an event-driven host: the `[comm]` scheduler, step plan
    and wire ids (dlcp/comm/assemble.py assemble_rank), an EventSteppedCollective and PushedOrder over
    `send(dst, batch, info) -> key`. The host reports every finished send and arrived message to
    `sent` / `received`; `on_done(iteration)` says when `collect(iteration)` has the aggregates.
    `resync` is TransportCommunicator's re-sync to rank 0 (its messages, P2P ids past the order
    announcements'). Iterations are told apart by the wire's 16-bit iteration: a run has fewer
    than 65,536."""

    coll: EventSteppedCollective  # the one __init__ builds

    def __init__(
        self,
        send: Callable,
        vpp: int,
        cfg: CommConfig,
        comm: CommSetup,
        layouts: list[MessageLayout],
        n_layers: int,
        *,
        clock: Callable[[], float],
        on_done: Callable[[int], None] | None = None,
        sizes_only: bool = False,
        host_mbps: float = 50.0,
        spec: TopologySpec | None = None,
        backward_ms: float = 0.0,
        fabric_mbps: float | None = None,
        layer_times: LayerTimes | None = None,
        plan: StepPlan | None = None,
        cost: CostModel | None = None,
    ):
        scheduler, plan, self.ids = assemble_rank(
            comm,
            cfg.world,
            layouts,
            host_mbps=host_mbps,
            spec=spec,
            backward_ms=backward_ms,
            fabric_mbps=fabric_mbps,
            layer_times=layer_times,
            plan=plan,
            cost=cost,
        )
        self.comm, self.plan = comm, plan
        collective = EventSteppedCollective(send, vpp, cfg, plan, self.ids, lockstep=comm.lockstep)
        order = PushedOrder(send, vpp, cfg, self.ids, n_layers) if scheduler.timing_dependent_order else None
        super().__init__(
            scheduler,
            collective,
            layouts,
            n_layers,
            order=order,
            timeout_s=cfg.timeout_s,
            on_done=on_done,
            clock=clock,
            sizes_only=sizes_only,
        )
        self.send, self.vpp, self.cfg, self.layouts = send, vpp, cfg, {lay.msg_id: lay for lay in layouts}
        self._resync: tuple | None = None  # (iteration, parameters, on_done) while this rank re-syncs
        self._resync_sends: set = set()  # rank 0: re-sync sends not finished yet
        self._resync_in: dict = {}  # (iteration mod 2^16, message index) -> rank 0's parameters

    def sent(self, key, result) -> None:
        """A send finished (the leader's announcements need nothing more)."""
        if key in self._resync_sends:
            self._resync_sends.discard(key)
            self._resync_check()
        else:
            self.coll.sent(key, result)

    def received(self, key, result) -> None:
        src, it, phase, msg_id = key
        if phase == PHASE_P2P and msg_id >= self.ids.announcements and src == 0:  # rank 0's re-sync
            self._resync_in[(it & 0xFFFF, msg_id - self.ids.announcements)] = result
            self._resync_check()
        elif phase == PHASE_P2P:
            if not (self.follower and src == LEADER and msg_id < self.ids.announcements):
                raise ValueError(f"rank {self.coll.rank}: unexpected P2P message {key}")
            self.announced(it, msg_id, *read_announcement(result, it, msg_id))
        else:
            self.coll.received(key, result)

    def resync(self, iteration: int, params: dict | None, on_done: Callable[[dict | None], None]) -> None:
        """Re-sync to rank 0 (dlcp/comm/resync.py `resync`): rank 0 sends `params` to every
        rank; `on_done(rank 0's parameters)` once its sends finished (rank 0: `params`) or every
        message arrived (None when sizes only: `params` None)."""
        self._resync = (iteration, params, on_done)
        if self.coll.rank == 0:
            for dst, batch, info in resync_messages(
                self.cfg, self.ids, self.layouts, self.n_layers, self.vpp, iteration, params
            ):
                self._resync_sends.add(self.send(dst, batch, info))
        self._resync_check()

    def _resync_check(self) -> None:
        if self._resync is None:
            return
        iteration, params, on_done = self._resync
        if self.coll.rank == 0:
            if self._resync_sends:
                return
            ref = params
        else:
            wire = iteration & 0xFFFF
            order = sorted(self.layouts)
            if any((wire, k) not in self._resync_in for k in range(len(order))):
                return
            got = {m: self._resync_in.pop((wire, k)) for k, m in enumerate(order)}
            ref = None if params is None else {m: r.values for m, r in got.items()}
        self._resync = None
        on_done(ref)


# --- parameter server ----------------------------------------------------------------------------------


class EventPSClient:
    """PSClient's counterpart for an event-driven host (dlcp/comm/ps.py): pushes through
    `send(dst, batch, info) -> key`; the host reports finished sends to `sent` and arrived messages
    to `received`. `on_done(iteration)` once every push of the iteration finished and every
    parameter message arrived; `collect(iteration)` then gives {msg_id: ParamChunk}, in arrival
    order. Pushes that finish with an error count as finished (the PS decides, as PSClient.pull
    waits). `sizes_only`: pushes carry no values."""

    def __init__(
        self,
        send: Callable,
        vpp: int,
        cfg: CommConfig,
        layouts: list[MessageLayout],
        n_layers: int,
        *,
        on_done: Callable[[int], None],
        sizes_only: bool = False,
        ps_rank: int = PS_RANK,
    ):
        self.send, self.vpp, self.cfg, self.n_layers = send, vpp, cfg, n_layers
        self.layouts = {lay.msg_id: lay for lay in layouts}
        self.ids = WireIds(max(self.layouts, default=0) + 1, what="parameter server")
        self.on_done, self.sizes_only, self.ps = on_done, sizes_only, ps_rank
        self.iteration = -1
        self._open: set = set()  # this iteration's pushes not finished yet
        self._pulls: dict[int, ParamChunk] = {}
        self._done = False

    def begin(self, iteration: int) -> None:
        self.iteration, self._pulls, self._done = iteration, {}, False

    def push(self, iteration: int, msg: GradMessage) -> None:
        batch, info = push_message(self.cfg, self.ids, self.n_layers, self.vpp, iteration, msg, self.sizes_only)
        self._open.add(self.send(self.ps, batch, info))

    def sent(self, key, result) -> None:
        self._open.discard(key)
        self._check()

    def received(self, key, result) -> None:
        _src, it, phase, msg_id = key
        if phase == PHASE_PULL and it == self.iteration & 0xFFFF:
            self._pulls[msg_id] = ParamChunk(result.values, result.loss_mask())
            self._check()

    def collect(self, iteration: int) -> dict[int, ParamChunk]:
        return self._pulls

    def _check(self) -> None:
        if not self._done and not self._open and len(self._pulls) == len(self.layouts):
            self._done = True
            self.on_done(self.iteration)


class EventPSServer:
    """PSServer's counterpart for an event-driven host: pushes reported to `received` are kept
    per iteration; `on_gathered(iteration)` once every worker's push of every message is in
    (`gathered(iteration)` then sums them: {msg_id: Aggregate}, None per message when sizes only);
    `scatter` sends the parameters, `on_scattered(iteration)` once every send of them finished."""

    def __init__(
        self,
        send: Callable,
        vpp: int,
        cfg: CommConfig,
        layouts: list[MessageLayout],
        n_layers: int,
        *,
        on_gathered: Callable[[int], None],
        on_scattered: Callable[[int], None],
        sizes_only: bool = False,
        fill: str = "rescale",
    ):
        self.send, self.cfg, self.world, self.sizes_only = send, cfg, cfg.world, sizes_only
        self.bubbles = bubble_memory(fill)  # the `bubble` fill rule's per-worker memory
        self.layouts = {lay.msg_id: lay for lay in layouts}
        self.ids = WireIds(max(self.layouts, default=0) + 1, what="parameter server")
        self.pulls = PullMessages(cfg, self.ids, self.layouts, n_layers, vpp)
        self.on_gathered, self.on_scattered = on_gathered, on_scattered
        self._got: dict[int, dict] = {}  # iteration -> {(rank, msg_id): RecvResult}
        self._full: dict[int, dict] = {}  # iteration -> every push, until gathered()
        self._open: dict[int, int] = {}  # iteration -> parameter sends not finished yet
        self._iteration_of: dict = {}  # send key -> its iteration

    def received(self, key, result) -> None:
        src, it, phase, msg_id = key
        if phase != PHASE_PUSH:
            return
        got = self._got.setdefault(it, {})
        got[(src, msg_id)] = None if self.sizes_only else result  # sizes only: no values to keep
        if len(got) < self.world * len(self.layouts):
            return
        self._full[it] = self._got.pop(it)
        self.on_gathered(it)

    def gathered(self, iteration: int) -> Mapping[int, Aggregate | None]:
        pushes = self._full.pop(iteration & 0xFFFF)
        if self.sizes_only:
            return dict.fromkeys(self.layouts)
        return sum_pushes(self.layouts, self.world, pushes, self.bubbles)

    def scatter(self, iteration: int, params: dict | None) -> None:
        """Every message's parameters to every worker (the same packets for all); None: sizes only."""
        for _, batch, info in self.pulls.build(iteration, params):
            for rank in range(self.world):
                self._open[iteration] = self._open.get(iteration, 0) + 1
                self._iteration_of[self.send(rank, batch, info)] = iteration

    def sent(self, key, result) -> None:
        it = self._iteration_of.pop(key)
        self._open[it] -= 1
        if not self._open[it]:
            del self._open[it]
            self.on_scattered(it)
