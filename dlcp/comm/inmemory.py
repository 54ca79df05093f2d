"""In-process collectives, plus emulated packet loss: the trainer's tests and `dlcp bench accuracy`
run through them without a network.

`InMemoryGroup` is an exact all-reduce among N ranks behind the `Collective` interface
(dlcp/comm/api.py): a worker drives it through the same `Communicator` (and so the same scheduler)
as the transport's collectives (`memory_endpoints`), and the sum is always added in rank order (so
results do not depend on thread timing). `InMemoryPS` is the parameter-server pair: clients
`push(it, msg)` / `pull(it) -> {msg_id: ParamChunk}`, the server `gather(it)` /
`scatter(it, params)`, with the methods of PSClient / PSServer. Both block with a timeout and can
be aborted, so workers may run in threads.

`PacketLoss` emulates what the network does to one contribution (one worker's copy of a message):
the message is cut into packets of 350 values (dlcp.chunking's size) and whole packets are lost
at random, independently, with probability `rate`:
- `uniform` (default): any packet may be lost;
- `protected`: packets are tagged with the `dlcp` policy (dlcp/wire/tagging.py) and only drop-eligible
  ones (drop_prec > 0) are lost, each with probability min(1, rate * n_pkts / n_eligible): the
  expected fraction lost per message stays `rate` (while enough packets are eligible), only which
  packets are lost changes, as with the transport's bounded loss, which never gives up a
  protected packet.
The draw for (direction, iteration, rank, msg_id) comes from its own seeded generator, so a run is
reproducible whatever the order of calls.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field

import numpy as np

from dlcp.comm.api import Collective, Handle, OpData, Reduced
from dlcp.wire.header import VALUES_PER_PKT
from dlcp.wire.tagging import TaggingConfig, n_packets, tag_message
from dlcp.workloads.contract import Aggregate, GradMessage, MessageLayout, ParamChunk

LOSS_MODES = ("uniform", "protected")
PUSH, PULL = 0, 1  # directions, part of the random draw's key


class ExchangeAborted(RuntimeError):
    pass


@dataclass
class PacketLoss:
    rate: float
    mode: str = "uniform"
    seed: int = 0
    values_per_pkt: int = VALUES_PER_PKT
    tagging: TaggingConfig = field(default_factory=lambda: TaggingConfig(policy="dlcp"))
    sent_pkts: int = 0
    lost_pkts: int = 0

    def __post_init__(self):
        if not 0 <= self.rate <= 1:
            raise ValueError(f"loss rate must lie in [0, 1], got {self.rate}")
        if self.mode not in LOSS_MODES:
            raise ValueError(f"loss mode {self.mode!r} is not one of {', '.join(LOSS_MODES)}")
        self._lock = threading.Lock()

    def lost_values(
        self, values: np.ndarray, layout: MessageLayout, n_layers: int, direction: int, iteration: int, rank: int
    ) -> np.ndarray:
        """Boolean per value: True where the value's packet was lost."""
        n = n_packets(layout.n_values, self.values_per_pkt)
        rng = np.random.default_rng([self.seed, direction, iteration, rank, layout.msg_id])
        if self.mode == "uniform":
            lost = rng.random(n) < self.rate
        else:
            tags = tag_message(
                values, layout.layer_starts, layout.layer_ids, n_layers, self.tagging, self.values_per_pkt
            )
            eligible = tags.drop_prec > 0
            p = min(1.0, self.rate * n / eligible.sum()) if eligible.any() else 0.0
            lost = (rng.random(n) < p) & eligible
        with self._lock:
            self.sent_pkts += n
            self.lost_pkts += int(lost.sum())
        return np.repeat(lost, self.values_per_pkt)[: layout.n_values]


class _Rendezvous:
    """Per-iteration state shared by the endpoints of one in-memory collective."""

    def __init__(self, timeout_s: float):
        self.cond = threading.Condition()
        self.timeout_s = timeout_s
        self.error: BaseException | None = None

    def abort(self, error: BaseException) -> None:
        with self.cond:
            self.error = error
            self.cond.notify_all()

    def wait_for(self, ready, what: str) -> None:
        """Call with `cond` held."""
        if not self.cond.wait_for(lambda: self.error is not None or ready(), self.timeout_s):
            raise TimeoutError(f"in-memory exchange: gave up waiting for {what} after {self.timeout_s} s")
        if self.error is not None and not ready():
            raise ExchangeAborted(f"in-memory exchange aborted: {self.error}")


def _sum_contributions(layouts, contributions, world) -> dict[int, Aggregate]:
    """contributions[msg_id][rank] = (values, lost mask or None) -> Aggregates, rank order."""
    out = {}
    for msg_id, n in layouts.items():
        total = np.zeros(n, np.float32)
        count = np.zeros(n, np.uint16)
        for rank in range(world):
            values, lost = contributions[msg_id][rank]
            if lost is None:
                total += values
                count += 1
            else:
                total += np.where(lost, np.float32(0), values)
                count += ~lost
        out[msg_id] = Aggregate(msg_id, total, count, world)
    return out


class InMemoryGroup:
    """An exact in-process all-reduce among `world` ranks: `collective(rank)` is rank `rank`'s
    `Collective` (dlcp/comm/api.py). An operation (iteration, slot) completes once every rank of
    its group has contributed; the sum is taken in rank order, so every rank gets the same bits.
    `groups(iteration)` gives the groups of an iteration (DS-Sync); default: one group of all.
    Completions are handed to the callbacks on one dispatcher thread, so a rank's callback never
    runs inside another rank's call (and chains of operations do not nest)."""

    def __init__(self, world: int, loss: PacketLoss | None = None, groups=None, timeout_s: float = 120.0):
        self.world, self.loss, self.timeout_s = world, loss, timeout_s
        self.groups = groups or (lambda iteration: [list(range(world))])
        self._lock = threading.Lock()
        self._pending: dict[tuple[int, int, tuple], dict[int, tuple]] = {}
        self._done: queue.SimpleQueue = queue.SimpleQueue()
        self._error: BaseException | None = None
        self._dispatcher = threading.Thread(target=self._dispatch, name="inmemory-callbacks", daemon=True)
        self._dispatcher.start()

    def collective(self, rank: int) -> MemberCollective:
        if not 0 <= rank < self.world:
            raise ValueError(f"rank {rank} outside 0..{self.world - 1}")
        return MemberCollective(self, rank)

    def group_of(self, iteration: int, rank: int) -> tuple[int, ...]:
        return next(tuple(sorted(g)) for g in self.groups(iteration) if rank in g)

    def abort(self, error: BaseException) -> None:
        with self._lock:
            self._error = error
            pending, self._pending = self._pending, {}
        for contributions in pending.values():
            for _, _, handle in contributions.values():
                self._done.put((handle, None, ExchangeAborted(f"in-memory exchange aborted: {error}")))

    def _contribute(self, rank: int, op: OpData) -> Handle:
        h = Handle(f"in-memory {op.what}")
        lost = None
        if self.loss is not None and self.loss.rate > 0:
            assert op.values is not None  # losses are drawn on values, never with sizes only
            lost = self.loss.lost_values(op.values, op.layout, op.n_layers, PUSH, op.iteration, rank)
        group = self.group_of(op.iteration, rank)
        key = (op.iteration, op.slot, group)
        with self._lock:
            if self._error is not None:
                raise ExchangeAborted(f"in-memory exchange aborted: {self._error}")
            got = self._pending.setdefault(key, {})
            if rank in got:
                raise ValueError(f"rank {rank}: {op.what} contributed twice")
            got[rank] = (np.array(op.values, dtype=np.float32).reshape(-1), lost, h)
            if len(got) < len(group):
                return h
            del self._pending[key]
        sizes = {v.size for v, _, _ in got.values()}
        if len(sizes) != 1:
            error = ValueError(f"{op.what}: ranks contributed different sizes {sorted(sizes)}")
            for _, _, handle in got.values():
                self._done.put((handle, None, error))
            return h
        n = sizes.pop()
        total = np.zeros(n, np.float32)
        count = np.zeros(n, np.uint16)
        for r in group:  # rank order: every rank gets the same bits
            values, lost_r, _ = got[r]
            if lost_r is None:
                total += values
                count += 1
            else:
                total += np.where(lost_r, np.float32(0), values)
                count += ~lost_r
        for _, _, handle in got.values():
            self._done.put((handle, Reduced(total.copy(), count.copy(), len(group)), None))
        return h

    def _dispatch(self) -> None:
        while True:
            handle, result, error = self._done.get()
            if error is not None:
                handle.set_error(error)
            else:
                handle.set_result(result)


class MemberCollective(Collective):
    """One rank of an InMemoryGroup."""

    def __init__(self, group: InMemoryGroup, rank: int):
        self.group, self.rank, self.world = group, rank, group.world

    def all_reduce(self, op: OpData) -> Handle:
        return self.group._contribute(self.rank, op)

    def group_size(self, iteration: int) -> int:
        return len(self.group.group_of(iteration, self.rank))


class InMemoryPS:
    """Parameter server in memory: pushes summed at `gather`, parameters handed out at `pull`."""

    def __init__(
        self,
        world: int,
        layouts: list[MessageLayout],
        n_layers: int,
        push_loss: PacketLoss | None = None,
        pull_loss: PacketLoss | None = None,
        timeout_s: float = 120.0,
    ):
        self.world, self.n_layers = world, n_layers
        self.push_loss, self.pull_loss = push_loss, pull_loss
        self.layouts = {l.msg_id: l for l in layouts}
        self._sizes = {l.msg_id: l.n_values for l in layouts}
        self._rv = _Rendezvous(timeout_s)
        self._pushed: dict[int, dict[int, dict]] = {}
        self._params: dict[int, dict[int, np.ndarray]] = {}
        self._pulled: dict[int, int] = {}

    def client(self, rank: int) -> PSClient:
        return PSClient(self, rank)

    def server(self) -> PSServer:
        return PSServer(self)

    def abort(self, error: BaseException) -> None:
        self._rv.abort(error)

    def _push(self, rank, it, msg: GradMessage) -> None:
        if msg.msg_id not in self._sizes or msg.values is None or msg.values.size != self._sizes[msg.msg_id]:
            raise ValueError(f"rank {rank} iteration {it}: message {msg.msg_id} does not match the layouts")
        lost = None
        if self.push_loss is not None and self.push_loss.rate > 0:
            lost = self.push_loss.lost_values(msg.values, msg.layout, self.n_layers, PUSH, it, rank)
        with self._rv.cond:
            self._pushed.setdefault(it, {}).setdefault(msg.msg_id, {})[rank] = (msg.values, lost)
            self._rv.cond.notify_all()

    def _gather(self, it) -> dict[int, Aggregate]:
        with self._rv.cond:

            def complete():
                msgs = self._pushed.get(it, {})
                return len(msgs) == len(self._sizes) and all(len(r) == self.world for r in msgs.values())

            self._rv.wait_for(complete, f"every worker's push of iteration {it}")
            return _sum_contributions(self._sizes, self._pushed.pop(it), self.world)

    def _scatter(self, it, params: dict[int, np.ndarray]) -> None:
        with self._rv.cond:
            self._params[it] = params
            self._rv.cond.notify_all()

    def _pull(self, rank, it) -> dict[int, ParamChunk]:
        with self._rv.cond:
            self._rv.wait_for(lambda: it in self._params, f"the parameters of iteration {it}")
            params = self._params[it]
            self._pulled[it] = self._pulled.get(it, 0) + 1
            if self._pulled[it] == self.world:
                del self._params[it], self._pulled[it]
        out = {}
        for msg_id, values in params.items():
            if self.pull_loss is not None and self.pull_loss.rate > 0:
                lost = self.pull_loss.lost_values(values, self.layouts[msg_id], self.n_layers, PULL, it, rank)
            else:
                lost = np.zeros(values.size, bool)
            out[msg_id] = ParamChunk(values, lost)
        return out


@dataclass
class PSClient:
    ps: InMemoryPS
    rank: int

    def push(self, iteration: int, msg: GradMessage) -> None:
        self.ps._push(self.rank, iteration, msg)

    def pull(self, iteration: int) -> dict[int, ParamChunk]:
        return self.ps._pull(self.rank, iteration)


@dataclass
class PSServer:
    ps: InMemoryPS

    def gather(self, iteration: int) -> dict[int, Aggregate]:
        return self.ps._gather(iteration)

    def scatter(self, iteration: int, params: dict[int, np.ndarray]) -> None:
        self.ps._scatter(iteration, params)


def memory_communicators(
    world: int,
    layouts: list[MessageLayout],
    n_layers: int,
    comm=None,
    loss: PacketLoss | None = None,
    backward_ms: float = 0.0,
    timeout_s: float = 120.0,
):
    """One Communicator per rank over one InMemoryGroup, for the `[comm]` settings `comm`
    (default: WFBP): the same scheduler and order rules as over the transport (the collective's
    algorithm does not change an exact in-process sum; DS-Sync's groups do). Returns (comms,
    abort): `abort(error)` wakes every waiting rank."""
    from dlcp.comm.assemble import build_scheduler, cost_model, planning_profile, step_plan
    from dlcp.comm.communicator import Communicator, forward_order
    from dlcp.comm.order import MemoryOrder
    from dlcp.comm.settings import CommSetup

    comm = comm or CommSetup()
    plan = step_plan(comm, world)
    group = InMemoryGroup(world, loss, plan.groups, timeout_s)
    profile = planning_profile(forward_order(layouts), backward_ms)
    cost = cost_model(comm, world, 50.0)
    order = MemoryOrder()
    comms = [
        Communicator(
            build_scheduler(comm, profile, world, cost),
            group.collective(r),
            layouts,
            n_layers,
            order=order,
            timeout_s=timeout_s,
        )
        for r in range(world)
    ]
    return comms, group.abort
