"""Collectives over the transport: parameter-server push / pull, ring all-reduce, replica re-sync.

Driving pattern (dlcp/workloads/contract.py): in all-reduce mode `submit` every GradMessage as backward
yields it (the ring starts at once), then `wait` for the Aggregates; in PS mode workers `push`
every message and `pull` the parameters, the PS `gather`s the pushes and `scatter`s parameters.
Every message is tagged by dlcp.tagging (`tag_message`) and cut into packets by dlcp.chunking.

**PS.** A push is one message per GradMessage (phase PUSH, msg_id = layout msg_id). The PS sums a
message over workers once every worker's push is complete or forced; lost packets contribute
nothing, so `count[v]` is the number of pushes that delivered value v. Pulls (phase PULL, type
PARAM) carry the parameters; their priority comes from the layer as usual and their drop
precedence from |w_new - w_old| per packet (a lost chunk keeps the worker's previous value, which is
worst where the parameters moved most). A lost pull value is marked in `ParamChunk.lost`.

**Ring all-reduce.** Each GradMessage is cut into `world` chunks and runs reduce-scatter (world-1
steps, phase RS) then all-gather (world-1 steps, phase AG); each step is its own transport message
with wire msg_id = layout msg_id * (world - 1) + step-in-phase (records show the layout msg_id and the
ring step 0..2*world-3). Budgets (`ring_budget`):
- `protect_rs` (default): reduce-scatter steps are reliable (budget 0) and their packets protected
  (drop precedence 0, so switches only tail-drop them); all-gather steps get the message budget
  (`loss_budget`, per-layer overrides) and magnitude-based drop precedence.
- `per_step`: every step gets `1 / (2 * (world - 1))` of the message budget (`loss_budget`, or the
  smaller per-layer budget), so the compounded loss of a value stays within the message budget.
Contribution counts are exact, not estimated: every step message carries one count per packet in
its DESCRIBE (control.py, COUNTS). A reduce-scatter receiver adds its own gradient: count = count_in + 1
where the packet arrived, 1 where it was lost (the partial sum is gone). An all-gather receiver takes
the owner's counts where the packet arrived and 0 where it was lost (it forwards zeros with count 0).
`Aggregate.count` is then the number of workers whose gradient is inside `total` for every value.

**Re-sync.** All-gather losses leave replicas different (each fills holes its own way). Every
`resync_every` iterations rank 0 sends its parameters to every rank (phase P2P, reliable); the others
measure their drift from rank 0 (L2 and max |diff|, logged and returned) and adopt rank 0's values.
"""

from __future__ import annotations

import collections
import threading
from typing import Annotated, ClassVar, Literal

import numpy as np
from pydantic import Field

from dlcp.settings import Settings
from dlcp.transport.api import SendInfo, TransportError, WireByte
from dlcp.wire.chunking import MessageId, packetize
from dlcp.wire.control_frames import PS_RANK
from dlcp.wire.header import PHASE_AG, PHASE_P2P, PHASE_PULL, PHASE_PUSH, PHASE_RS, TYPE_DATA, TYPE_PARAM
from dlcp.wire.tagging import TaggingConfig, Tags, tag_message
from dlcp.workloads.contract import Aggregate, GradMessage, MessageLayout, ParamChunk

Mode = Literal["ps", "allreduce"]
RingBudget = Literal["protect_rs", "per_step"]
World = Annotated[int, Field(ge=1, le=PS_RANK - 1)]  # worker ranks 0..253 and the PS fit a wire byte


class CommSettings(Settings):
    """What an experiment sets about the collectives (keys of its `dlcp` section)."""
    section: ClassVar[str] = "dlcp"
    ring_budget: RingBudget = Field(
        "protect_rs", description="ring all-reduce: reliable reduce-scatter, or a budget per step")
    resync_every: int = Field(50, ge=0, description="ring all-reduce: replica re-sync period in iterations (0 = never)")
    telemetry: bool = Field(False, description="ask switches to stamp queue telemetry into data packets")


class CommConfig(CommSettings):
    """What the collectives of one rank need besides the transport."""
    rank: WireByte  # wire rank (PS_RANK at the PS)
    world: World  # workers
    job_id: WireByte = 1
    tagging: TaggingConfig = TaggingConfig()
    timeout_s: float = Field(60.0, gt=0)  # longest wait for one message


def sub_layers(layout: MessageLayout, lo: int, hi: int) -> tuple[list[int], list[int]]:
    """Layer segments (starts relative to lo, layer ids) of values lo..hi-1 of a message."""
    starts = np.asarray(layout.layer_starts + (layout.n_values,), dtype=np.int64)
    ids = list(layout.layer_ids)
    out_s, out_i = [], []
    for k, lid in enumerate(ids):
        a, b = max(starts[k], lo), min(starts[k + 1], hi)
        if a < b or (not out_s and k == len(ids) - 1):
            out_s.append(int(a - lo) if a < b else 0)
            out_i.append(lid)
    if not out_s:  # empty range: attribute it to the layer containing lo
        k = int(np.searchsorted(starts, lo, side="right")) - 1
        out_s, out_i = [0], [ids[min(max(k, 0), len(ids) - 1)]]
    return out_s, out_i


def _packets(values: np.ndarray, ident: MessageId, layout: MessageLayout, lo: int, hi: int, n_layers: int,
             cfg: CommConfig, vpp: int, magnitudes: np.ndarray | None = None, protect: bool = False):
    """Tagged packets of values[lo:hi] of a message (`magnitudes` ranks drop precedence instead of
    the values themselves, e.g. parameter deltas); returns (batch, layer_first, layer_last)."""
    starts, ids = sub_layers(layout, lo, hi)
    chunk = values[lo:hi]
    tags = tag_message(chunk if magnitudes is None else magnitudes[lo:hi], starts, ids, n_layers, cfg.tagging, vpp)
    if protect:
        tags = Tags(tags.prio, np.zeros_like(tags.drop_prec), tags.mag_class, tags.layer_id)
    return packetize(chunk, ident, tags, vpp, cfg.telemetry), min(ids), max(ids)


class _Collective:
    def __init__(self, transport, cfg: CommConfig, layouts: list[MessageLayout], n_layers: int):
        self.t = transport
        self.cfg = cfg
        self.layouts = {lay.msg_id: lay for lay in layouts}
        self.n_layers = n_layers
        self.vpp = transport.vpp

    def begin(self, iteration: int) -> None:
        """A new iteration starts: older messages become stale at the transport."""
        self.t.advance(iteration)


# --- parameter server --------------------------------------------------------------------------------

class PSClient(_Collective):
    """Worker side: push gradients to the PS, pull parameters back."""

    def __init__(self, transport, cfg: CommConfig, layouts, n_layers: int, ps_rank: int = PS_RANK):
        super().__init__(transport, cfg, layouts, n_layers)
        self.ps = ps_rank
        self._handles: dict[int, list] = collections.defaultdict(list)

    def push(self, iteration: int, msg: GradMessage) -> None:
        lay = msg.layout
        values = np.ascontiguousarray(msg.values, dtype=np.float32).reshape(-1)
        ident = MessageId(self.cfg.job_id, self.cfg.rank, iteration, lay.msg_id, PHASE_PUSH, TYPE_DATA)
        batch, lf, ll = _packets(values, ident, lay, 0, lay.n_values, self.n_layers, self.cfg, self.vpp)
        h = self.t.send(self.ps, batch, SendInfo(rec_msg_id=lay.msg_id, layer_first=lf, layer_last=ll))
        self._handles[iteration].append(h)

    def pull(self, iteration: int) -> dict[int, ParamChunk]:
        """Wait for this iteration's pushes to finish and for every parameter message."""
        for h in self._handles.pop(iteration, []):
            h.wait(self.cfg.timeout_s)
        out = {}
        for msg_id in self.layouts:
            r = self.t.recv(self.ps, iteration, PHASE_PULL, msg_id, self.cfg.timeout_s)
            out[msg_id] = ParamChunk(r.values, r.loss_mask())
        return out


class PSServer(_Collective):
    """PS side: aggregate pushes, send parameters."""

    def __init__(self, transport, cfg: CommConfig, layouts, n_layers: int):
        super().__init__(transport, cfg, layouts, n_layers)
        self._previous: dict[int, np.ndarray] = {}

    def gather(self, iteration: int) -> dict[int, Aggregate]:
        out = {}
        for msg_id, lay in self.layouts.items():
            total = np.zeros(lay.n_values, np.float32)
            count = np.zeros(lay.n_values, np.uint16)
            for rank in range(self.cfg.world):  # fixed order: sums are reproducible bit for bit
                r = self.t.recv(rank, iteration, PHASE_PUSH, msg_id, self.cfg.timeout_s)
                total += r.values  # lost values are zeros
                count += ~r.loss_mask()
            out[msg_id] = Aggregate(msg_id, total, count, self.cfg.world)
        return out

    def scatter(self, iteration: int, params: dict[int, np.ndarray]) -> None:
        """Send every message's parameters to every worker; returns when all are done."""
        handles = []
        for msg_id, lay in self.layouts.items():
            values = np.array(params[msg_id], dtype=np.float32).reshape(-1)  # a copy: stays valid
            prev = self._previous.get(msg_id)
            delta = np.abs(values - prev) if prev is not None else np.abs(values)
            self._previous[msg_id] = values
            ident = MessageId(self.cfg.job_id, self.cfg.rank, iteration, msg_id, PHASE_PULL, TYPE_PARAM)
            batch, lf, ll = _packets(values, ident, lay, 0, lay.n_values, self.n_layers, self.cfg, self.vpp,
                                     magnitudes=delta)
            for rank in range(self.cfg.world):  # same packets for every worker
                handles.append(self.t.send(rank, batch, SendInfo(rec_msg_id=msg_id, layer_first=lf, layer_last=ll)))
        for h in handles:
            h.wait(self.cfg.timeout_s)


# --- ring all-reduce -----------------------------------------------------------------------------------

class RingAllReduce(_Collective):
    """Ring all-reduce per GradMessage; a driver thread runs the rings in submission order."""

    def __init__(self, transport, cfg: CommConfig, layouts, n_layers: int):
        super().__init__(transport, cfg, layouts, n_layers)
        P = cfg.world
        if P > 1 and max(self.layouts) * (P - 1) + P - 2 > 0xFFFF:
            raise ValueError(f"ring of {P} workers: msg_id {max(self.layouts)} does not fit the 16-bit wire msg_id")
        self._queue: collections.deque = collections.deque()
        self._results: dict[int, dict[int, Aggregate]] = collections.defaultdict(dict)
        self._cond = threading.Condition()
        self._error: BaseException | None = None
        self._closing = False
        self._thread = threading.Thread(target=self._drive, name=f"ring-{cfg.rank}", daemon=True)
        self._thread.start()

    def submit(self, iteration: int, msg: GradMessage) -> None:
        values = np.ascontiguousarray(msg.values, dtype=np.float32).reshape(-1)
        with self._cond:
            self._queue.append((iteration, msg.layout, values))
            self._cond.notify_all()

    def wait(self, iteration: int) -> dict[int, Aggregate]:
        """Aggregates of every message of `iteration` (all must have been submitted)."""
        with self._cond:
            while len(self._results[iteration]) < len(self.layouts):
                if self._error is not None:
                    raise TransportError(f"ring all-reduce failed: {self._error}") from self._error
                if not self._cond.wait(self.cfg.timeout_s * 2 * max(1, self.cfg.world)):
                    raise TransportError(f"ring all-reduce of iteration {iteration} timed out")
            return self._results.pop(iteration)

    def close(self) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join(timeout=2)

    def _drive(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if self._closing:
                    return
                it, lay, values = self._queue.popleft()
            try:
                agg = self._ring(it, lay, values)
            except BaseException as e:  # handed to wait()
                with self._cond:
                    self._error = e
                    self._cond.notify_all()
                return
            with self._cond:
                self._results[it][lay.msg_id] = agg
                self._cond.notify_all()

    def _budget(self, phase: int) -> dict:
        """SendInfo budget of a step: per_step takes 1 / (2 (world - 1)) of the message budget (the
        transport's, per-layer budgets included), protect_rs makes reduce-scatter reliable."""
        if self.cfg.ring_budget == "per_step":
            return {"budget_share": 1 / (2 * (self.cfg.world - 1))}
        return {"budget": 0.0} if phase == PHASE_RS else {}

    def _send_step(self, it, lay, phase, step_in_phase, step, values, lo, hi, counts):
        P = self.cfg.world
        wire = lay.msg_id * (P - 1) + step_in_phase
        ident = MessageId(self.cfg.job_id, self.cfg.rank, it, wire, phase, TYPE_DATA)
        protect = phase == PHASE_RS and self.cfg.ring_budget == "protect_rs"
        batch, lf, ll = _packets(values, ident, lay, lo, hi, self.n_layers, self.cfg, self.vpp, protect=protect)
        info = SendInfo(rec_msg_id=lay.msg_id, step=step, layer_first=lf, layer_last=ll,
                        counts=counts, **self._budget(phase))
        return self.t.send((self.cfg.rank + 1) % P, batch, info)

    def _recv_step(self, it, lay, phase, step_in_phase):
        P = self.cfg.world
        wire = lay.msg_id * (P - 1) + step_in_phase
        return self.t.recv((self.cfg.rank - 1) % P, it, phase, wire, self.cfg.timeout_s)

    def _ring(self, it: int, lay: MessageLayout, own: np.ndarray) -> Aggregate:
        P, r = self.cfg.world, self.cfg.rank
        n = lay.n_values
        if P == 1:
            return Aggregate(lay.msg_id, own.copy(), np.ones(n, np.uint16), 1)
        bounds = np.linspace(0, n, P + 1).astype(np.int64)
        vpp = self.vpp

        def npk(c):
            return max(1, -(-int(bounds[c + 1] - bounds[c]) // vpp))

        # Packets point into these arrays until their send finishes. Within a phase no chunk is
        # written after it was sent (each is written once, before it is forwarded); all-gather
        # writes into a fresh array because reduce-scatter sends may still be retransmitting.
        partial = own.copy()
        cnt = {c: np.ones(npk(c), np.uint8) for c in range(P)}  # per-packet contribution counts
        handles = []
        # reduce-scatter: step s sends chunk (r - s), receives chunk (r - s - 1) and adds its own part
        for s in range(P - 1):
            cs, cr = (r - s) % P, (r - s - 1) % P
            if bounds[cs + 1] > bounds[cs]:  # chunks without values (message shorter than the ring) are skipped
                handles.append(self._send_step(it, lay, PHASE_RS, s, s, partial, bounds[cs], bounds[cs + 1], cnt[cs]))
            lo, hi = bounds[cr], bounds[cr + 1]
            if hi == lo:
                continue
            res = self._recv_step(it, lay, PHASE_RS, s)
            partial[lo:hi] = res.values + own[lo:hi]  # lost values are zeros: own contribution only
            cnt_in = res.counts if res.counts is not None else np.ones(npk(cr), np.uint8)
            cnt[cr] = np.where(res.received, cnt_in + 1, 1).astype(np.uint8)
        # all-gather: step s sends chunk (r + 1 - s), receives chunk (r - s)
        total = partial.copy()
        for s in range(P - 1):
            cs, cr = (r + 1 - s) % P, (r - s) % P
            if bounds[cs + 1] > bounds[cs]:
                handles.append(self._send_step(it, lay, PHASE_AG, s, P - 1 + s, total, bounds[cs], bounds[cs + 1],
                                               cnt[cs]))
            lo, hi = bounds[cr], bounds[cr + 1]
            if hi == lo:
                continue
            res = self._recv_step(it, lay, PHASE_AG, s)
            total[lo:hi] = res.values  # zeros where lost, with count 0
            cnt_in = res.counts if res.counts is not None else np.full(npk(cr), P, np.uint8)
            cnt[cr] = np.where(res.received, cnt_in, 0).astype(np.uint8)
        for h in handles:
            h.wait(self.cfg.timeout_s)
        count = np.concatenate([np.repeat(cnt[c].astype(np.uint16), vpp)[: bounds[c + 1] - bounds[c]]
                                for c in range(P)])
        return Aggregate(lay.msg_id, total, count, P)

    # --- re-sync --------------------------------------------------------------------------------

    def resync(self, iteration: int, params: dict[int, np.ndarray]) -> tuple[dict[int, np.ndarray], dict]:
        """Rank 0 sends `params` to every rank (reliably); returns (rank 0's parameters, drift of
        this rank's `params` from them: {"drift_l2", "drift_max", "param_l2"})."""
        P, r = self.cfg.world, self.cfg.rank
        if r == 0:
            handles = []
            for msg_id, lay in self.layouts.items():
                values = np.array(params[msg_id], dtype=np.float32).reshape(-1)
                ident = MessageId(self.cfg.job_id, 0, iteration, msg_id, PHASE_P2P, TYPE_PARAM)
                batch, lf, ll = _packets(values, ident, lay, 0, lay.n_values, self.n_layers, self.cfg, self.vpp,
                                         protect=True)
                for dst in range(1, P):
                    handles.append(self.t.send(dst, batch, SendInfo(rec_msg_id=msg_id, layer_first=lf,
                                                                    layer_last=ll, budget=0.0)))
            for h in handles:
                h.wait(self.cfg.timeout_s)
            ref = params
        else:
            ref = {m: self.t.recv(0, iteration, PHASE_P2P, m, self.cfg.timeout_s).values for m in self.layouts}
        diff = [np.asarray(params[m], np.float32) - ref[m] for m in self.layouts]
        d = np.concatenate(diff) if diff else np.zeros(0, np.float32)
        ref_all = np.concatenate([np.asarray(ref[m], np.float32) for m in self.layouts])
        return ref, {"drift_l2": float(np.linalg.norm(d)), "drift_max": float(np.abs(d).max(initial=0.0)),
                     "param_l2": float(np.linalg.norm(ref_all))}
