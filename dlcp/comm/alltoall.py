"""What the DDP communication hook (dlcp/ddp_hook.py) needs from a transport, and two of them.

Both are `Collective`s (dlcp/comm/api.py): `all_reduce(OpData)` returns a Handle of a `Reduced`;
the op's `slot` is the bucket index, its wire msg_id `WireIds.message(slot)` (P2P phase), and its
`tags` the packets' tags the hook computed. `HookTransport` adds one blocking call per bucket:

    exchange(iteration, msg_id, values, tags) -> Aggregate      (= all_reduce(...).wait())

- `values`: this rank's flat float32 gradient of the bucket (a numpy view of DDP's bucket buffer;
  read it, never write it; it stays valid until `exchange` returns);
- `tags`: per-packet priority / drop precedence / layer (dlcp.tagging.Tags, packets of
  `values_per_pkt` values) for the wire;
- returns an `Aggregate` (dlcp/workloads/contract.py): per value, the sum over all ranks of the
  contributions that arrived (this rank's own included, added in rank order so every replica gets
  the same bits) and their count. Every rank calls `exchange` for the same (iteration, msg_id)
  sequence. Packets lost within the loss budget simply lower `count`; the hook fills.
It may be called from a helper thread (one call at a time per rank) and has `world`,
`values_per_pkt`, `stats` (ExchangeStats) and `close()`.

`TransportAllToAll` (the hook's default): every rank sends its bucket to every other rank as one
message of the bounded-loss transport (dlcp/transport/udp_driver.py over dlcp/transport/core/, docs/transport.md): in-band PROBE,
BITMAP / STOP / FORCE_STOP on TCP, retransmission of protected packets and of whatever exceeds the
loss budget, at most `r_max` rounds within `deadline_ms`. A message the transport had to force is
counted (`stats.forced`) and logged; its missing packets lower `count` like accepted losses.

`GlooAllReduce`: the reference path, an all-reduce of values and counts on a gloo group of its
own. It stays because it is the hook's ground truth without any DLCP wire format (the tests
compare against it) and because its `drop_rate` emulates loss that nothing recovers, protected
packets included, which the bounded-loss transport by design never produces.
"""

from __future__ import annotations

import collections
import logging
import os
import socket
import threading
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from dlcp.comm.api import Collective, Handle, OpData, Reduced, completed
from dlcp.comm.wire_ids import MSG_ID_SPACE, WireIds
from dlcp.transport.api import Peer, SendInfo, TransportConfig, TransportError
from dlcp.transport.udp_driver import UdpTransport
from dlcp.wire.chunking import MessageId, packetize
from dlcp.wire.control_frames import PS_RANK
from dlcp.wire.header import PHASE_P2P, TYPE_DATA, VALUES_PER_PKT
from dlcp.wire.tagging import Tags
from dlcp.workloads.contract import Aggregate, MessageLayout

BUCKET_IDS = WireIds(MSG_ID_SPACE, what="DDP buckets")  # bucket index = slot = wire msg_id

logger = logging.getLogger(__name__)


class HookTransport(Protocol):
    world: int
    values_per_pkt: int

    def all_reduce(self, op: OpData) -> Handle: ...

    def exchange(self, iteration: int, msg_id: int, values: np.ndarray, tags: Tags) -> Aggregate: ...

    def close(self) -> None: ...


def bucket_op(iteration: int, msg_id: int, values: np.ndarray, tags: Tags) -> OpData:
    """The OpData of one bucket exchange (layer segments are in `tags`, the layout is a label)."""
    BUCKET_IDS.message(msg_id)
    first = int(tags.layer_id.min()) if len(tags) else 0
    return OpData(
        iteration,
        msg_id,
        np.asarray(values, dtype=np.float32).reshape(-1),
        MessageLayout(msg_id, int(np.size(values)), (0,), (first,)),
        first + 1,
        tags=tags,
    )


class _Exchange(Collective):
    """`exchange` as a blocking all-reduce, for both hook transports."""

    def exchange(self, iteration: int, msg_id: int, values: np.ndarray, tags: Tags) -> Aggregate:
        res = self.all_reduce(bucket_op(iteration, msg_id, values, tags)).wait()
        return Aggregate(msg_id, res.total, res.count, res.world)


@dataclass
class ExchangeStats:
    """Cumulative counts of one rank's exchanges."""

    exchanges: int = 0
    sent_pkts: int = 0  # packets of this rank's contributions, first transmissions, all destinations
    retx_pkts: int = 0  # of those, retransmissions the receivers asked for
    lost_pkts: int = 0  # packets missing from the aggregates (accepted within budget, forced or emulated)
    protected_lost: int = 0  # of those, protected ones (drop precedence 0): only a forced message loses any
    forced: int = 0  # messages (sent or received) finished by FORCE_STOP
    forced_keys: list = field(default_factory=list)  # first 100: (iteration, msg_id, peer, "sent"/"received")

    def _forced(self, iteration: int, msg_id: int, peer: int, side: str) -> None:
        self.forced += 1
        if len(self.forced_keys) < 100:
            self.forced_keys.append((iteration, msg_id, peer, side))


def _local_address() -> str:
    """This host's address towards MASTER_ADDR (torchrun sets it), else 127.0.0.1. A connected
    UDP socket picks the source address the routing table would use; nothing is sent."""
    master = os.environ.get("MASTER_ADDR")
    if not master:
        return "127.0.0.1"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((master, int(os.environ.get("MASTER_PORT", "29500"))))
        return s.getsockname()[0]


class TransportAllToAll(_Exchange):
    """All-to-all of every bucket over the bounded-loss transport (see the module docstring).

    `endpoint` is this rank's `UdpTransport` (wire rank = process-group rank) with every other rank
    as a peer; the object owns it and closes it in `close()`. `timeout_s` bounds the wait for one
    peer's message (a peer that never sends raises TransportError, which DDP re-raises in
    backward). The transport's message records of the latest `keep_rows` messages stay in
    `message_rows` (dlcp.records.MESSAGE_COLUMNS), older ones are dropped.
    """

    def __init__(self, endpoint: UdpTransport, world: int, *, timeout_s: float = 60.0, keep_rows: int = 10_000):
        self.rank = endpoint.cfg.rank
        if not 0 <= self.rank < world <= PS_RANK:
            raise ValueError(f"rank {self.rank} outside 0..{world - 1} (at most {PS_RANK} ranks)")
        missing = sorted(set(range(world)) - {self.rank} - set(endpoint.peers))
        if missing:
            raise ValueError(f"the transport of rank {self.rank} has no peer for ranks {missing}")
        self.endpoint, self.world, self.timeout_s = endpoint, world, timeout_s
        self.job_id = endpoint.cfg.job_id
        self.values_per_pkt = endpoint.vpp
        self.stats = ExchangeStats()
        self.message_rows: collections.deque = collections.deque(maxlen=keep_rows)

    @classmethod
    def for_process_group(
        cls,
        config: TransportConfig | None = None,
        group=None,
        host: str | None = None,
        data_port: int = 0,
        control_port: int = 0,
        **kwargs,
    ) -> TransportAllToAll:
        """Open this rank's endpoint on `host` (default: the address towards MASTER_ADDR, or
        127.0.0.1 without it; pass it where that guess is wrong) and the given ports (0: any free
        port), learn every rank's addresses through the (already initialised) torch.distributed
        process group, open the control connections and wait until every rank has. Collective:
        every rank calls it. `config` supplies the budgets and timers (loss_budget, r_max,
        deadline_ms, inject_loss, ...); its rank, ip and ports are replaced, and rank r draws
        injected losses from inject_seed * 1000 + r. `kwargs` go to the constructor."""
        import torch.distributed as dist

        rank, world = dist.get_rank(group), dist.get_world_size(group)
        config = config or TransportConfig()
        config = config.replace(
            rank=rank,
            ip=host or _local_address(),
            data_port=data_port,
            control_port=control_port,
            host=config.host or f"rank{rank}",
            inject_seed=config.inject_seed * 1000 + rank,
        )
        endpoint = UdpTransport(config, [])
        try:
            addresses: list = [None] * world  # every rank's (ip, data port, control port), once gathered
            dist.all_gather_object(addresses, (config.ip, endpoint.data_port, endpoint.control_port), group=group)
            for r, (ip, dport, cport) in enumerate(addresses):
                if r != rank:
                    endpoint.add_peer(Peer(r, ip, dport, cport))
            endpoint.connect()
            # an endpoint drops the DESCRIBE and packets of senders it does not know yet, and the
            # message then stalls until FORCE_STOP: nobody sends before every rank knows its peers
            dist.barrier(group)
            return cls(endpoint, world, **kwargs)
        except BaseException:
            endpoint.close()
            raise

    def all_reduce(self, op: OpData) -> Handle:
        """The bucket to every other rank, every rank's bucket summed; runs in a thread of its own."""
        h = Handle(f"bucket {op.slot} of iteration {op.iteration}")
        values = op.values
        assert values is not None  # the DDP hook always sends values

        def run():
            try:
                h.set_result(self._all_to_all(op.iteration, op.slot, values, op.tags))
            except BaseException as e:  # noqa: BLE001 (the waiter re-raises it)
                h.set_error(e)

        threading.Thread(target=run, name=f"alltoall-{self.rank}-{op.slot}", daemon=True).start()
        return h

    def _all_to_all(self, iteration: int, slot: int, values: np.ndarray, tags: Tags) -> Reduced:
        msg_id = BUCKET_IDS.message(slot)
        it16 = iteration & 0xFFFF
        t = self.endpoint
        t.advance(it16)
        batch = packetize(
            values, MessageId(self.job_id, self.rank, it16, msg_id, PHASE_P2P, TYPE_DATA), tags, self.values_per_pkt
        )
        info = SendInfo(rec_msg_id=msg_id, layer_first=int(tags.layer_id.min()), layer_last=int(tags.layer_id.max()))
        # the same packets go to every peer: the header names the source, not the destination
        handles = {r: t.send(r, batch, info) for r in range(self.world) if r != self.rank}
        total = np.zeros(values.size, np.float32)
        count = np.zeros(values.size, np.uint16)
        for r in range(self.world):  # rank order: every replica adds the same numbers in the same order
            if r == self.rank:
                total += values
                count += 1
                continue
            res = t.recv(r, it16, PHASE_P2P, msg_id, self.timeout_s)
            total += res.values  # zeros where lost
            count += ~res.loss_mask()
            self.stats.lost_pkts += res.lost_pkts
            self.stats.protected_lost += res.protected_lost
            if res.forced:
                self.stats._forced(iteration, msg_id, r, "received")
        # `values` (DDP's bucket) must stay untouched until every send is finished
        for r, h in handles.items():
            sent = h.wait(self.timeout_s)
            if sent.error:
                raise TransportError(
                    f"rank {self.rank}: bucket {msg_id} of iteration {iteration} to rank {r}: {sent.error}"
                )
            self.stats.retx_pkts += sent.retx_pkts
            if sent.forced:
                self.stats._forced(iteration, msg_id, r, "sent")
        self.stats.exchanges += 1
        self.stats.sent_pkts += len(batch) * len(handles)
        self.message_rows.extend(t.take_message_rows())
        return Reduced(total, count, self.world)

    def close(self) -> None:
        self.endpoint.close()


class GlooAllReduce(_Exchange):
    """Reference HookTransport: all-reduce of (values, counts) over a dedicated gloo group.
    Collective constructor: every rank calls it. `drop_rate` drops whole packets of this rank's
    contribution (emulated loss, nothing recovers it) before the all-reduce."""

    values_per_pkt = VALUES_PER_PKT

    def __init__(self, group=None, drop_rate: float = 0.0, seed: int = 0):
        import torch.distributed as dist

        self._dist = dist
        self.group = dist.new_group(ranks=list(range(dist.get_world_size(group))), backend="gloo")
        self.world = dist.get_world_size(self.group)
        self.drop_rate = drop_rate
        self._rng = np.random.default_rng([seed, dist.get_rank(self.group)])
        self.stats = ExchangeStats()

    def all_reduce(self, op: OpData) -> Handle:
        """Blocking (gloo's all-reduce is collective): the handle is done when it returns."""
        import torch

        tags = op.tags
        total = torch.from_numpy(np.array(op.values, dtype=np.float32, copy=True).reshape(-1))
        count = torch.ones(total.numel(), dtype=torch.int32)
        if self.drop_rate > 0:
            lost_pkts = self._rng.random(len(tags)) < self.drop_rate
            lost = torch.from_numpy(np.repeat(lost_pkts, VALUES_PER_PKT)[: total.numel()])
            total[lost] = 0
            count[lost] = 0
            self.stats.lost_pkts += int(lost_pkts.sum())
            self.stats.protected_lost += int((lost_pkts & (tags.drop_prec == 0)).sum())
        self._dist.all_reduce(total, group=self.group)
        self._dist.all_reduce(count, group=self.group)
        self.stats.exchanges += 1
        self.stats.sent_pkts += len(tags)
        return completed(op.what, Reduced(total.numpy(), count.numpy().astype(np.uint16), self.world))

    def close(self) -> None:
        pass
