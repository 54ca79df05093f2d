"""Both halves of one endpoint behind one set of calls, and the routing of control frames.

`Endpoint` is what a single-threaded driver needs (the virtual network, a simulator): datagrams go
to the receiver, control frames to whichever half they are for, timers and outputs are merged. The
threaded UDP driver keeps the halves apart (one lock each) and uses `parse_control` / `for_receiver`.
"""

from __future__ import annotations

import collections

from dlcp.transport.api import SendInfo, TransportConfig
from dlcp.transport.core.receiver import ReceiverCore
from dlcp.transport.core.sender import SenderCore
from dlcp.wire import control_frames as C
from dlcp.wire.header import MalformedPacket


def parse_control(body, job_id: int) -> C.Control:
    """A control frame body as a message of this job; raises MalformedPacket naming the field."""
    msg = C.decode(body)
    if msg.job_id != job_id:
        raise MalformedPacket("control.job_id", f"job {msg.job_id}, expected {job_id}")
    return msg


def for_receiver(msg: C.Control) -> bool:
    """DESCRIBE and FORCE_STOP are about data this endpoint receives; the rest answer its own sends."""
    return msg.type in (C.DESCRIBE, C.FORCE_STOP)


def merged_stats(sender: dict, receiver: dict, sender_drops, receiver_drops) -> dict:
    """One endpoint's statistics from both halves (the keys of the transport's `stats()`)."""
    out = {**sender, **receiver}
    out["control_sent"] = sender["control_sent"] + receiver["control_sent"]
    out["drops"] = dict(collections.Counter(sender_drops) + collections.Counter(receiver_drops))
    return out


class Endpoint:
    """One host's sender and receiver behind one set of calls (the driver contract:
    docs/transport.md, "The core's interface"). `peers`: the ranks whose data this endpoint accepts;
    `wall_offset_s`: added to `now` for the wall-clock times of records."""

    def __init__(self, cfg: TransportConfig, peers=(), wall_offset_s: float = 0.0):
        self.cfg = cfg
        self.sender = SenderCore(cfg, wall_offset_s)
        self.receiver = ReceiverCore(cfg, peers, wall_offset_s)
        self.control_received = 0

    def send(self, dst: int, batch, info: SendInfo, now: float) -> tuple:
        return self.sender.send(dst, batch, info, now)

    def on_datagram(self, data, ecn: int, now: float, queued_s: float = 0.0) -> None:
        self.receiver.on_datagram(data, ecn, now, queued_s)

    def on_control(self, body, channel, now: float) -> None:
        """One control frame body that arrived on connection `channel`."""
        try:
            msg = parse_control(body, self.cfg.job_id)
        except MalformedPacket as e:
            self.receiver.count_drop(e.field, e.detail)
            return
        self.control_received += 1
        if msg.type == C.DESCRIBE:
            self.receiver.on_describe(msg, channel, now)
        elif msg.type == C.FORCE_STOP:
            self.receiver.on_force_stop(msg, channel, now)
        else:
            self.sender.on_frame(msg, now)

    def set_budget(self, budget: float | None) -> None:
        """A budget schedule's budget: for messages sent from now on, and a cap on those received."""
        self.sender.set_budget(budget)
        self.receiver.set_budget_cap(budget)

    def poll_transmit(self, now: float):
        return self.sender.poll_transmit(now)

    def next_timer(self) -> float:
        return min(self.sender.next_timer(), self.receiver.next_timer())

    def on_timer(self, now: float) -> None:
        if self.sender.next_timer() <= now:
            self.sender.on_timer(now)
        if self.receiver.next_timer() <= now:
            self.receiver.on_timer(now)

    def take_outputs(self) -> list:
        return self.sender.take_outputs() + self.receiver.take_outputs()

    def stats(self) -> dict:
        out = merged_stats(self.sender.stats(), self.receiver.stats(), self.sender.drops, self.receiver.drops)
        out["control_received"] = self.control_received
        return out
