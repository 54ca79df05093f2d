"""What the DDP communication hook (dlcp/torch_hook.py) needs from a transport, and two of them.

The interface (`HookTransport`) is one blocking call per bucket:

    exchange(iteration, msg_id, values, tags) -> Aggregate

- `values`: this rank's flat float32 gradient of the bucket (a numpy view of DDP's bucket buffer;
  read it, never write it; it stays valid until `exchange` returns);
- `tags`: per-packet priority / drop precedence / layer (dlcp.tagging.Tags, packets of
  dlcp.header.VALUES_PER_PKT values) for the wire;
- returns an `Aggregate` (dlcp/workload.py): per value, the sum over all ranks of the
  contributions that arrived (this rank's own included) and their count. Every rank calls
  `exchange` for the same (iteration, msg_id) sequence; keys on the wire are (iter mod 2^16,
  msg_id, src_rank). Packets lost within the loss budget simply lower `count`; the hook fills.
It may be called from a helper thread (one call at a time per rank) and has `world` and `close()`.

`UdpAllToAll`: every rank sends its DLCP packets (dlcp.chunking) to every other rank over UDP and
reassembles theirs by offset; a background thread drains the socket. Loss can be emulated at the
receiver (`drop_rate`, optionally only drop-eligible packets): a dropped packet is counted as
seen, so the message still completes at once, as it would after the bounded-loss transport's
STOP. Without emulated loss nothing is dropped; a message that is still incomplete after
`timeout_s` (a dead peer, a kernel buffer overflow) is returned as it is and counted in `forced`.

`GlooAllReduce`: the reference path, an all-reduce of values and counts on a gloo group of its
own (never lossy unless `drop_rate` drops packets of this rank's contribution before sending).
"""

from __future__ import annotations

import collections
import logging
import socket
import threading
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from .chunking import MessageId, Reassembler, packetize
from .header import PHASE_P2P, VALUES_PER_PKT, MalformedPacket, payload_offset, unpack_from
from .tagging import Tags, n_packets
from .workload import Aggregate

logger = logging.getLogger(__name__)


class HookTransport(Protocol):
    world: int

    def exchange(self, iteration: int, msg_id: int, values: np.ndarray, tags: Tags) -> Aggregate: ...

    def close(self) -> None: ...


@dataclass
class TransportStats:
    sent_pkts: int = 0
    recv_pkts: int = 0
    dropped_pkts: int = 0  # emulated loss
    lost_pkts: int = 0  # never arrived (emulated drops included)
    malformed_pkts: int = 0
    stale_pkts: int = 0  # for a message already completed, or another job
    forced: int = 0  # messages returned incomplete at the timeout
    forced_keys: list = field(default_factory=list)  # ((iter, msg_id), {src: missing pkts}), first 100
    malformed_by_field: dict = field(default_factory=dict)


class _Incoming:
    """One peer's copy of one message: reassembly plus emulated drops (`drop[seq]`: drop that
    packet if it is drop-eligible; drawn up front so a run does not depend on arrival order)."""

    def __init__(self, n_values: int, drop: np.ndarray | None):
        self.reasm = Reassembler(n_values)
        self.drop = drop
        self.dropped = 0

    @property
    def seen_all(self) -> bool:
        return self.reasm.n_received + self.dropped >= self.reasm.n_pkts


class UdpAllToAll:
    """All-to-all of DLCP packets over UDP (see the module docstring). `peers[r]` is the
    (host, port) where rank r receives; `sock` is this rank's bound socket (peers[rank])."""

    def __init__(self, rank: int, peers: list[tuple[str, int]], sock: socket.socket, *, job_id: int = 0,
                 timeout_s: float = 30.0, drop_rate: float = 0.0, drop_protected: bool = False,
                 seed: int = 0):
        if not 0 <= rank < len(peers) <= 256:
            raise ValueError(f"rank {rank} outside 0..{len(peers) - 1} (at most 256 ranks)")
        self.rank, self.world, self.peers, self.sock = rank, len(peers), list(peers), sock
        self.job_id, self.timeout_s = job_id, timeout_s
        self.drop_rate, self.drop_protected = drop_rate, drop_protected
        self.seed = seed
        self.stats = TransportStats()
        self._cond = threading.Condition()
        self._incoming: dict[tuple[int, int], dict[int, _Incoming]] = {}  # (iter, msg) -> src -> _Incoming
        self._early: dict[tuple[int, int], list[bytes]] = collections.defaultdict(list)
        self._done: collections.OrderedDict = collections.OrderedDict()  # recently completed keys
        self._closing = False
        try:  # room for a burst of every peer's packets while this rank is busy in backward
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        except OSError:
            pass
        sock.settimeout(0.1)
        self._thread = threading.Thread(target=self._receive_loop, name=f"dlcp-udp-r{rank}", daemon=True)
        self._thread.start()

    @classmethod
    def for_process_group(cls, group=None, host: str = "127.0.0.1", **kwargs) -> "UdpAllToAll":
        """Bind an ephemeral UDP port on `host` and learn every rank's address through the
        (already initialised) torch.distributed process group. Collective: every rank calls it."""
        import torch.distributed as dist
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind((host, 0))
        peers = [None] * dist.get_world_size(group)
        dist.all_gather_object(peers, sock.getsockname()[:2], group=group)
        return cls(dist.get_rank(group), [tuple(p) for p in peers], sock, **kwargs)

    # --- receiving (background thread) -----------------------------------------------------------

    def _receive_loop(self) -> None:
        buf = bytearray(65536)
        while not self._closing:
            try:
                n = self.sock.recv_into(buf)
            except socket.timeout:
                continue
            except OSError:
                if self._closing:
                    return
                raise
            self._on_frame(memoryview(buf)[:n])

    def _malformed(self, what: str) -> None:
        self.stats.malformed_pkts += 1
        self.stats.malformed_by_field[what] = self.stats.malformed_by_field.get(what, 0) + 1

    def _on_frame(self, frame: memoryview) -> None:
        try:
            h = unpack_from(frame)
        except MalformedPacket as e:
            self._malformed(e.field)
            return
        if h.job_id != self.job_id or h.phase != PHASE_P2P:
            self.stats.stale_pkts += 1
            return
        if h.src_rank >= self.world or h.src_rank == self.rank:
            self._malformed("src_rank")
            return
        key = (h.iter, h.msg_id)
        with self._cond:
            self.stats.recv_pkts += 1
            if key in self._done:
                self.stats.stale_pkts += 1
                return
            peers = self._incoming.get(key)
            if peers is None:  # this rank has not reached the message yet: keep the frame
                self._early[key].append(bytes(frame))
                return
            self._place(peers[h.src_rank], h, frame)

    def _place(self, inc: _Incoming, h, frame) -> None:
        """Called with the lock held."""
        payload = frame[payload_offset(h.flags):]
        try:
            inc.reasm.check(h, len(payload))
        except MalformedPacket as e:
            self._malformed(e.field)
            return
        if inc.reasm.received[h.seq]:
            inc.reasm.duplicates += 1
            return
        droppable = not (self.drop_protected and h.drop_prec == 0)
        if inc.drop is not None and droppable and inc.drop[h.seq]:
            inc.dropped += 1
            self.stats.dropped_pkts += 1
        else:
            inc.reasm.add(h, payload)
        if inc.seen_all:
            self._cond.notify_all()

    # --- the exchange --------------------------------------------------------------------------

    def exchange(self, iteration: int, msg_id: int, values: np.ndarray, tags: Tags) -> Aggregate:
        values = np.asarray(values).reshape(-1)
        key = (iteration & 0xFFFF, msg_id)
        with self._cond:
            peers = {r: _Incoming(values.size, self._drops(key, r, values.size)) for r in range(self.world)
                     if r != self.rank}
            self._incoming[key] = peers
            for frame in self._early.pop(key, []):
                self._place_frame(peers, frame)
        batch = packetize(values, MessageId(job_id=self.job_id, src_rank=self.rank, iter=key[0], msg_id=msg_id,
                                            phase=PHASE_P2P), tags)
        for r, addr in enumerate(self.peers):
            if r != self.rank:
                for i in range(len(batch)):
                    self.sock.sendmsg(batch.iovec(i), [], 0, addr)
        with self._cond:
            self.stats.sent_pkts += len(batch) * (self.world - 1)
            complete = self._cond.wait_for(lambda: all(p.seen_all for p in peers.values()), self.timeout_s)
            del self._incoming[key]
            self._done[key] = True
            while len(self._done) > 4096:
                self._done.popitem(last=False)
            # added in rank order, own contribution included, so every rank gets the same bits
            total = np.zeros(values.size, np.float32)
            count = np.zeros(values.size, np.uint16)
            for r in range(self.world):
                if r == self.rank:
                    total += values
                    count += 1
                    continue
                inc = peers[r]
                self.stats.lost_pkts += inc.reasm.n_pkts - inc.reasm.n_received
                total += inc.reasm.values
                count += ~inc.reasm.loss_mask()
            if not complete:
                self.stats.forced += 1
                missing = {r: inc.reasm.n_pkts - inc.reasm.n_received - inc.dropped for r, inc in peers.items()}
                logger.warning("rank %d: message %s incomplete after %.1f s, packets missing by rank: %s",
                               self.rank, key, self.timeout_s, missing)
                if len(self.stats.forced_keys) < 100:
                    self.stats.forced_keys.append((key, missing))
        return Aggregate(msg_id, total, count, self.world)

    def _drops(self, key: tuple[int, int], src: int, n_values: int) -> np.ndarray | None:
        if self.drop_rate <= 0:
            return None
        rng = np.random.default_rng([self.seed, self.rank, src, *key])
        return rng.random(n_packets(n_values)) < self.drop_rate

    def _place_frame(self, peers: dict[int, _Incoming], frame: bytes) -> None:
        h = unpack_from(frame)  # checked once already on arrival
        self._place(peers[h.src_rank], h, memoryview(frame))

    def close(self) -> None:
        self._closing = True
        self._thread.join()
        self.sock.close()


class GlooAllReduce:
    """Reference HookTransport: all-reduce of (values, counts) over a dedicated gloo group.
    Collective constructor: every rank calls it. `drop_rate` drops whole packets of this rank's
    contribution (emulated loss) before the all-reduce."""

    def __init__(self, group=None, drop_rate: float = 0.0, seed: int = 0):
        import torch.distributed as dist
        self._dist = dist
        self.group = dist.new_group(ranks=list(range(dist.get_world_size(group))), backend="gloo")
        self.world = dist.get_world_size(self.group)
        self.drop_rate = drop_rate
        self._rng = np.random.default_rng([seed, dist.get_rank(self.group)])
        self.stats = TransportStats()

    def exchange(self, iteration: int, msg_id: int, values: np.ndarray, tags: Tags) -> Aggregate:
        import torch
        total = torch.from_numpy(np.array(values, dtype=np.float32, copy=True).reshape(-1))
        count = torch.ones(total.numel(), dtype=torch.int32)
        if self.drop_rate > 0:
            lost_pkts = self._rng.random(len(tags)) < self.drop_rate
            lost = torch.from_numpy(np.repeat(lost_pkts, VALUES_PER_PKT)[: total.numel()])
            total[lost] = 0
            count[lost] = 0
            self.stats.dropped_pkts += int(lost_pkts.sum())
            self.stats.lost_pkts += int(lost_pkts.sum())
        self._dist.all_reduce(total, group=self.group)
        self._dist.all_reduce(count, group=self.group)
        self.stats.sent_pkts += len(tags)
        return Aggregate(msg_id, total.numpy(), count.numpy().astype(np.uint16), self.world)

    def close(self) -> None:
        pass

