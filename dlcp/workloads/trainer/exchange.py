"""In-process collectives with the shapes of dlcp/workloads/contract.py, plus emulated packet loss.

`InMemoryAllReduce` is an exact all-reduce: each worker's endpoint has `submit(it, msg)` and
`wait(it) -> {msg_id: Aggregate}`; the aggregate is the sum of every worker's message, always added
in rank order (so results do not depend on thread timing). `InMemoryPS` is the parameter-server
pair: clients `push(it, msg)` / `pull(it) -> {msg_id: ParamChunk}`, the server `gather(it)` /
`scatter(it, params)`. Both block with a timeout and can be aborted, so workers may run in threads.
They exist to test the trainer and to run `dlcp bench accuracy` without a network; the real
collectives over the transport have the same methods.

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

import threading
from dataclasses import dataclass, field

import numpy as np

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

    def lost_values(self, values: np.ndarray, layout: MessageLayout, n_layers: int,
                    direction: int, iteration: int, rank: int) -> np.ndarray:
        """Boolean per value: True where the value's packet was lost."""
        n = n_packets(layout.n_values, self.values_per_pkt)
        rng = np.random.default_rng([self.seed, direction, iteration, rank, layout.msg_id])
        if self.mode == "uniform":
            lost = rng.random(n) < self.rate
        else:
            tags = tag_message(values, layout.layer_starts, layout.layer_ids, n_layers, self.tagging,
                               self.values_per_pkt)
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


class InMemoryAllReduce:
    """Exact in-memory all-reduce over `world` endpoints (see the module docstring)."""

    def __init__(self, world: int, layouts: list[MessageLayout], n_layers: int,
                 loss: PacketLoss | None = None, timeout_s: float = 120.0):
        self.world, self.n_layers, self.loss = world, n_layers, loss
        self.layouts = {l.msg_id: l for l in layouts}
        self._sizes = {l.msg_id: l.n_values for l in layouts}
        self._rv = _Rendezvous(timeout_s)
        self._contrib: dict[int, dict[int, dict]] = {}  # it -> msg_id -> rank -> (values, lost)
        self._result: dict[int, dict[int, Aggregate]] = {}
        self._fetched: dict[int, int] = {}

    def endpoint(self, rank: int) -> "AllReduceEndpoint":
        return AllReduceEndpoint(self, rank)

    def abort(self, error: BaseException) -> None:
        self._rv.abort(error)

    def _submit(self, rank: int, it: int, msg: GradMessage) -> None:
        if msg.msg_id not in self._sizes or msg.values.size != self._sizes[msg.msg_id]:
            raise ValueError(f"rank {rank} iteration {it}: message {msg.msg_id} of {msg.values.size} values "
                             f"does not match the layouts")
        lost = None
        if self.loss is not None and self.loss.rate > 0:
            lost = self.loss.lost_values(msg.values, msg.layout, self.n_layers, PUSH, it, rank)
        with self._rv.cond:
            self._contrib.setdefault(it, {}).setdefault(msg.msg_id, {})[rank] = (msg.values, lost)
            self._rv.cond.notify_all()

    def _complete(self, it: int) -> bool:
        msgs = self._contrib.get(it, {})
        return len(msgs) == len(self._sizes) and all(len(r) == self.world for r in msgs.values())

    def _wait(self, rank: int, it: int) -> dict[int, Aggregate]:
        with self._rv.cond:
            self._rv.wait_for(lambda: it in self._result or self._complete(it),
                              f"every rank's messages of iteration {it}")
            if it not in self._result:
                # summed once, before any worker returns (and may overwrite its send buffer)
                self._result[it] = _sum_contributions(self._sizes, self._contrib.pop(it), self.world)
            result = self._result[it]
            self._fetched[it] = self._fetched.get(it, 0) + 1
            if self._fetched[it] == self.world:
                del self._result[it], self._fetched[it]
            return result


@dataclass
class AllReduceEndpoint:
    exchange: InMemoryAllReduce
    rank: int

    def submit(self, iteration: int, msg: GradMessage) -> None:
        self.exchange._submit(self.rank, iteration, msg)

    def wait(self, iteration: int) -> dict[int, Aggregate]:
        return self.exchange._wait(self.rank, iteration)


class InMemoryPS:
    """Parameter server in memory: pushes summed at `gather`, parameters handed out at `pull`."""

    def __init__(self, world: int, layouts: list[MessageLayout], n_layers: int,
                 push_loss: PacketLoss | None = None, pull_loss: PacketLoss | None = None,
                 timeout_s: float = 120.0):
        self.world, self.n_layers = world, n_layers
        self.push_loss, self.pull_loss = push_loss, pull_loss
        self.layouts = {l.msg_id: l for l in layouts}
        self._sizes = {l.msg_id: l.n_values for l in layouts}
        self._rv = _Rendezvous(timeout_s)
        self._pushed: dict[int, dict[int, dict]] = {}
        self._params: dict[int, dict[int, np.ndarray]] = {}
        self._pulled: dict[int, int] = {}

    def client(self, rank: int) -> "PSClient":
        return PSClient(self, rank)

    def server(self) -> "PSServer":
        return PSServer(self)

    def abort(self, error: BaseException) -> None:
        self._rv.abort(error)

    def _push(self, rank, it, msg: GradMessage) -> None:
        if msg.msg_id not in self._sizes or msg.values.size != self._sizes[msg.msg_id]:
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
