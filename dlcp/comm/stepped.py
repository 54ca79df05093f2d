"""Collectives that run a step schedule (dlcp/comm/plans/) over the transport: ring, MultiTree and
DS-Sync's group rings, with the same transport, tagging and budgets for all three.

An operation's buffer is cut into the schedule's chunks (np.linspace bounds, the ring's cut). At
each step this rank sends every transfer it is the source of (one transport message each: phase
RS for `reduce`, AG for `copy`; wire ids from dlcp/comm/wire_ids.py), then receives every transfer
it is the destination of, in the schedule's order: a reduce adds what arrived, a copy replaces.

**Lockstep.** A step ends at this rank when its receives are complete and, with `lockstep` (the
default), its own sends of the step are complete too (the receiver's STOP). Only then does the next
step start, so the messages of step s+1 leave a rank after its step-s traffic is over: the per-step
barrier that stands in for MultiTree's NI scheduling (seeds-brief §6), applied to every schedule so
that ring and MultiTree are compared under the same rule. Each send reads the buffer as the step
began (a copy of the chunk is sent), so receives of the same step cannot change it.

**Counts.** Every transfer carries one contribution count per packet (SendInfo.counts, in the
DESCRIBE): how many ranks' values its packet holds. A reduce adds the arriving count where the
packet arrived (lost values are zeros and add nothing), a copy takes it where it arrived and 0
where it did not. `Reduced.count` is then exact per value, whatever was lost on the way (for the
ring and for any tree).

**Budgets** (`dlcp.ring_budget`): `protect_rs` sends reduce transfers reliably and protected (a
lost partial sum is lost for every rank after it) and copies with the message budget; `per_step`
gives every transfer 1 / (2 x steps per phase) of the message budget, so a value's compounded loss
stays within it.

Each operation runs in a thread of its own; the handle completes there. The rules above (steps,
messages, merges: `StepRules`, `RankSteps`, `_State`) are shared with the event-driven collective
the simulated hosts run (dlcp/comm/evented.py), which takes the same steps as receives arrive.
"""

from __future__ import annotations

import threading
import weakref

import numpy as np

from dlcp.comm.api import Collective, Handle, OpData, Partial, Reduced
from dlcp.comm.packets import sized_packets, tagged_packets
from dlcp.comm.plans.collective import StepPlan
from dlcp.comm.plans.schedule import Schedule, chunk_bounds
from dlcp.comm.settings import CommConfig
from dlcp.comm.wire_ids import WireIds, phase_of, transfer_ids
from dlcp.transport.api import SendInfo, TransportError
from dlcp.wire.chunking import MessageId
from dlcp.wire.header import PHASE_RS, TYPE_DATA

RS, AG = "reduce_scatter", "all_gather"


class _State:
    """One operation's buffer on this rank: values (None when the run carries sizes only,
    `workload.payload = "sizes"`), per-chunk per-packet counts."""

    def __init__(self, op: OpData, sched: Schedule, vpp: int):
        self.op, self.sched = op, sched
        self.buf: np.ndarray | None
        if op.values is None:
            self.buf, n = None, op.layout.n_values
        else:
            self.buf = np.array(op.values, dtype=np.float32).reshape(-1)  # a copy: the caller's stays intact
            n = self.buf.size
        self.chunks = RankSteps.chunks(sched)
        self.bounds = chunk_bounds(n, self.chunks)
        self.n = n
        self.vpp = vpp
        self.cnt = {c: np.ones(self.npk(c), np.uint8) for c in range(self.chunks)}

    def npk(self, c: int) -> int:
        return max(1, -(-int(self.bounds[c + 1] - self.bounds[c]) // self.vpp))

    def empty(self, c: int) -> bool:
        return self.bounds[c + 1] == self.bounds[c]

    def reduced(self, world: int) -> Reduced:
        if self.buf is None:  # sizes only: no per-value arrays, just how many values fell short
            return Reduced(None, None, world, short=self.short(world))
        count = (
            np.concatenate(
                [
                    np.repeat(self.cnt[c].astype(np.uint16), self.vpp)[: self.bounds[c + 1] - self.bounds[c]]
                    for c in range(self.chunks)
                ]
            )
            if self.n
            else np.zeros(0, np.uint16)
        )
        return Reduced(self.buf, count, world)

    def short(self, world: int) -> int:
        """Values whose packet holds fewer than `world` contributions."""
        lost = 0
        for c in range(self.chunks):
            few = self.cnt[c] < world
            if few.any():
                size = int(self.bounds[c + 1] - self.bounds[c])
                lost += int(np.minimum(self.vpp, size - np.arange(len(few)) * self.vpp)[few].sum())
        return lost


class RankSteps:
    """What one rank does at each step of a schedule: [(sends, receives)] per step, each a list of
    (index in step, transfer, local wire id) in the step's order (the order both collectives send
    and merge in). Built in one pass over the schedule for every rank and kept while the schedule
    lives, so 128 simulated ranks share one index."""

    _cache: dict[int, tuple[weakref.ref, list, int]] = {}  # noqa: RUF012 (an entry lives as long as its schedule)

    @classmethod
    def of(cls, sched: Schedule, rank: int) -> list[tuple[list, list]]:
        return cls._index(sched)[1][rank]

    @classmethod
    def chunks(cls, sched: Schedule) -> int:
        """How many chunks the schedule cuts a buffer into."""
        return cls._index(sched)[2]

    @classmethod
    def _index(cls, sched: Schedule) -> tuple[weakref.ref, list, int]:
        hit = cls._cache.get(id(sched))
        if hit is None or hit[0]() is not sched:
            local, _ = transfer_ids(sched)
            per_rank: list[list[tuple[list, list]]] = [[([], []) for _ in sched.steps] for _ in range(sched.ranks)]
            for s, step in enumerate(sched.steps):
                for i, t in enumerate(step):
                    per_rank[t.src][s][0].append((i, t, local[(s, i)]))
                    per_rank[t.dst][s][1].append((i, t, local[(s, i)]))
            chunks = {t.chunks for step in sched.steps for t in step}
            hit = (weakref.ref(sched), per_rank, chunks.pop() if len(chunks) == 1 else max(chunks, default=1))
            cls._cache[id(sched)] = hit
            weakref.finalize(sched, cls._cache.pop, id(sched), None)
        return hit


class StepRules:
    """The rules both step collectives apply (see the module docstring): which steps a primitive
    runs, the message a transfer sends (tagging, wire id, SendInfo with counts and budget), and how
    a received transfer merges into the buffer."""

    def __init__(self, cfg: CommConfig, plan: StepPlan, ids: WireIds, vpp: int):
        self.cfg, self.plan, self.ids, self.vpp = cfg, plan, ids, vpp
        self.rank = cfg.rank

    def steps(self, st: _State, phases) -> list[int]:
        out: list[int] = []
        for phase in phases:
            a, b = st.sched.phases[phase]
            out.extend(range(a, b))
        return out

    def message(self, st: _State, s: int, t, local: int) -> tuple[int, object, SendInfo]:
        """(destination, packets, SendInfo) of transfer t of step s."""
        op = st.op
        phase = phase_of(t.op)
        lo, hi = int(st.bounds[t.chunk]), int(st.bounds[t.chunk + 1])
        ident = MessageId(
            self.cfg.job_id, self.rank, op.iteration & 0xFFFF, self.ids.step(op.slot, local), phase, TYPE_DATA
        )
        protect = phase == PHASE_RS and self.cfg.ring_budget == "protect_rs"
        if st.buf is None:
            batch, lf, ll = sized_packets(ident, op.layout, lo, hi, op.n_layers, self.cfg, self.vpp, protect=protect)
        else:  # copy: the step reads the buffer as it began, and later steps may write the chunk
            batch, lf, ll = tagged_packets(
                st.buf, ident, op.layout, lo, hi, op.n_layers, self.cfg, self.vpp, protect=protect, copy=True
            )
        if self.cfg.ring_budget == "per_step":
            budget = {"budget_share": 1 / (2 * max(1, st.sched.steps_per_phase))}
        else:
            budget = {"budget": 0.0} if protect else {}
        info = SendInfo(
            rec_msg_id=op.record_id, step=s, layer_first=lf, layer_last=ll, counts=st.cnt[t.chunk].copy(), **budget
        )
        return t.dst, batch, info

    def recv_key(self, st: _State, t, local: int) -> tuple[int, int]:
        """(phase, wire msg_id) of transfer t's message, as its receiver asks for it."""
        return phase_of(t.op), self.ids.step(st.op.slot, local)

    def merge(self, st: _State, t, res) -> None:
        """Transfer t's received message into the buffer: a reduce adds, a copy replaces."""
        lo, hi = int(st.bounds[t.chunk]), int(st.bounds[t.chunk + 1])
        cnt_in = res.counts if res.counts is not None else np.ones(st.npk(t.chunk), np.uint8)
        if t.op == "reduce":
            if st.buf is not None:
                st.buf[lo:hi] += res.values  # lost values are zeros: they add nothing
            st.cnt[t.chunk] = (st.cnt[t.chunk] + np.where(res.received, cnt_in, 0)).astype(np.uint8)
        else:
            if st.buf is not None:
                st.buf[lo:hi] = res.values
            st.cnt[t.chunk] = np.where(res.received, cnt_in, 0).astype(np.uint8)


class SteppedCollective(Collective):
    """One rank's side of a StepPlan over the transport (see the module docstring)."""

    def __init__(self, transport, cfg: CommConfig, plan: StepPlan, ids: WireIds, lockstep: bool = True):
        if plan.workers != cfg.world:
            raise ValueError(f"{plan.collective}: plan for {plan.workers} ranks, job of {cfg.world}")
        if ids.stride < plan.stride:
            raise ValueError(
                f"{plan.collective}: wire ids give {ids.stride} step ids per operation, the plan needs {plan.stride}"
            )
        self.t, self.cfg, self.plan, self.ids, self.lockstep = transport, cfg, plan, ids, lockstep
        self.rank, self.world = cfg.rank, cfg.world
        self.vpp = transport.vpp
        self.rules = StepRules(cfg, plan, ids, self.vpp)

    def begin(self, iteration: int) -> None:
        self.t.advance(iteration)

    def group_size(self, iteration: int) -> int:
        return self.plan.group_size(iteration, self.rank)

    # --- the three primitives: each in a thread of its own ---------------------------------------

    def all_reduce(self, op: OpData) -> Handle:
        return self._start(op, lambda: self._run(self._new(op), (RS, AG)).reduced(self.group_size(op.iteration)))

    def reduce_scatter(self, op: OpData) -> Handle:
        return self._start(op, lambda: Partial(self._run(self._new(op), (RS,))))

    def all_gather(self, op: OpData, partial: Partial) -> Handle:
        st = partial.state
        if not isinstance(st, _State) or st.op.slot != op.slot or st.op.iteration != op.iteration:
            raise ValueError(
                f"{self.plan.collective}: all_gather of {op.what} needs the reduce-scatter of the same operation"
            )
        return self._start(op, lambda: self._run(st, (AG,)).reduced(self.group_size(op.iteration)))

    def _new(self, op: OpData) -> _State:
        return _State(op, self.plan.schedule(op.iteration), self.vpp)

    def _start(self, op: OpData, body) -> Handle:
        h = Handle(f"{self.plan.collective} {op.what}")

        def run():
            try:
                h.set_result(body())
            except BaseException as e:  # noqa: BLE001 (handed to the handle's waiters and callbacks)
                h.set_error(e)

        threading.Thread(target=run, name=f"{self.plan.collective}-{self.rank}-{op.slot}", daemon=True).start()
        return h

    # --- steps ---------------------------------------------------------------------------------

    def _run(self, st: _State, phases) -> _State:
        if self.world == 1:
            return st
        rules, steps = self.rules, RankSteps.of(st.sched, self.rank)
        pending = []
        for s in rules.steps(st, phases):
            sends, recvs = steps[s]
            handles = [self.t.send(*rules.message(st, s, t, local)) for _, t, local in sends if not st.empty(t.chunk)]
            for _, t, local in recvs:
                if not st.empty(t.chunk):
                    phase, msg_id = rules.recv_key(st, t, local)
                    rules.merge(st, t, self.t.recv(t.src, st.op.iteration, phase, msg_id, self.cfg.timeout_s))
            if self.lockstep:
                self._finish_sends(st, handles)
            else:
                pending += handles
        self._finish_sends(st, pending)
        return st

    def _finish_sends(self, st: _State, handles) -> None:
        for h in handles:
            sent = h.wait(self.cfg.timeout_s)
            if sent.error:
                raise TransportError(f"{self.plan.collective} {st.op.what}: {sent.error}")
