"""What every transport shares: its settings, the peer address, what a send and a receive return,
and its errors. Plain data: the protocol core (core/), its drivers (udp_driver.py, virtual.py) and
the plain-TCP baseline (tcp_baseline.py) all build on these."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, ClassVar, Literal, get_args

import numpy as np
from pydantic import Field

from dlcp.settings import Fraction, IntKey
from dlcp.transport.bounded_settings import BoundedTransportSettings
from dlcp.wire import control_frames as C
from dlcp.wire.header import (
    DATA_PORT,
    FIELD_BITS,
    MAX_VALUES_PER_PKT,
    PHASE_NAMES,
    PROBE_FIELD_BITS,
    VALUES_PER_PKT,
)

CONTROL_PORT = 9911
# r_max retransmission rounds make r_max + 1 PROBE rounds, and the PROBE carries its round in one byte
MAX_R = (1 << dict(PROBE_FIELD_BITS)["round"]) - 2
LayerId = Annotated[int, IntKey, Field(ge=0, le=(1 << dict(FIELD_BITS)["layer_id"]) - 1)]
WireByte = Annotated[int, Field(ge=0, le=255)]  # job_id, rank: one byte on the wire
TransportKind = Literal["dlcp", "tcp"]
SendImpl = Literal["sendmmsg", "sendmsg"]  # how the UDP driver hands packets to the kernel
SEND_IMPLS = get_args(SendImpl)
CcMode = Literal["dctcp", "none"]  # sender congestion control (docs/transport.md, "Congestion control")
CC_MODES = get_args(CcMode)


class TransportError(RuntimeError):
    """A transport failure the caller must see (peer unreachable, timeout)."""


class TransportSettings(BoundedTransportSettings):
    """What an experiment sets about the transport (keys of its `dlcp` section); the newer systems'
    close rules and incast bound are their own settings (dlcp/transport/bounded_settings.py)."""

    section: ClassVar[str] = "dlcp"
    transport: TransportKind = Field("dlcp", description="gradient transport; tcp = plain TCP baseline")
    loss_budget: Fraction = Field(0.01, description="p_msg: lost fraction a message may end with")
    iter_budget: Fraction = Field(0.02, description="cap on the lost fraction of an iteration (per source)")
    layer_budgets: dict[LayerId, Fraction] = Field(
        {}, description="layer id -> budget; a message takes the smallest budget of its layers and loss_budget"
    )
    r_max: int = Field(3, ge=0, le=MAX_R, description="retransmission rounds before FORCE_STOP (0 = none)")
    deadline_ms: float = Field(2000.0, ge=1, description="message deadline (from the first PROBE) before FORCE_STOP")
    reliable: bool = Field(False, description="budget 0: every packet recovered (TCP-like baseline)")
    pacing_mbps: float = Field(0.0, ge=0, description="sender pacing in Ethernet frames; 0 = none")
    inject_loss: Fraction = Field(
        0.0, description="fraction of data packets senders skip on purpose (loss without a lossy switch)"
    )
    send_impl: SendImpl = Field("sendmmsg", description="system call the sender uses for data")
    probe_quiet_ms: float = Field(
        2.0, ge=0.1, description="receiver's initial quiet time before answering a PROBE whose round is incomplete"
    )
    probe_rto_ms: float = Field(20.0, ge=1, description="floor of the sender's PROBE timeout (re-probe)")
    cc: CcMode = Field("dctcp", description="sender congestion control: an ECN-driven window per destination, or none")
    cc_init_window: int = Field(10, ge=1, le=4096, description="packets in flight before the first FEEDBACK")
    feedback_every: int = Field(16, ge=1, le=4096, description="receivers report at least every this many packets")
    host_mark_ms: float = Field(
        5.0, ge=0, description="a packet that waited longer in its receiving host counts as CE (0 = never)"
    )


class TransportConfig(TransportSettings):
    """One endpoint: the experiment's transport settings plus who and where it is."""

    rank: WireByte = 0  # wire rank: 0..254 for workers, control_frames.PS_RANK for the PS
    job_id: WireByte = 1
    ip: str = "127.0.0.1"
    data_port: int = Field(DATA_PORT, ge=0, le=65535)  # 0: any free port
    control_port: int = Field(CONTROL_PORT, ge=0, le=65535)
    host: str = ""  # for records
    values_per_pkt: int = Field(VALUES_PER_PKT, ge=1, le=MAX_VALUES_PER_PKT)  # above 350: jumbo links (ns-3)
    per_packet: bool = False  # per-packet records
    inject_seed: int = Field(0, ge=0)
    # the experiment's [scale] dilation: the core's fixed times (FEEDBACK batching, the loss-horizon
    # floor, the cap on the quiet time) are the system's and are multiplied by it, as the timers
    # among the settings above are (dlcp/experiment/dilation.py)
    time_scale: float = Field(1.0, ge=1)
    send_batch: int = Field(32, ge=1)
    rcvbuf_bytes: int = Field(16 << 20, ge=0)
    sndbuf_bytes: int = Field(
        128 << 10, ge=0
    )  # (doubled by Linux) below a host queue: the socket blocks before the qdisc drops
    connect_timeout_s: float = Field(15.0, gt=0)
    # SCHED_RR priority the driver's threads take when they start (0: normal scheduling); agents
    # set it (agents/common.py), tests and tools leave it
    thread_rt_priority: int = Field(0, ge=0, le=99)
    # the UDP driver's receive thread's, where it differs (0: thread_rt_priority)
    rx_rt_priority: int = Field(0, ge=0, le=99)

    def budget_for(self, layer_first: int, layer_last: int, base: float | None = None) -> float:
        """The loss budget of a message covering layers layer_first..layer_last (`base`: the budget
        a schedule set in place of loss_budget, dlcp/iteration/budget_schedule.py)."""
        if self.reliable:
            return 0.0
        b = self.loss_budget if base is None else base
        for lid, v in self.layer_budgets.items():
            if layer_first <= lid <= layer_last:
                b = min(b, v)
        return b


@dataclass(frozen=True)
class Peer:
    rank: int  # wire rank
    ip: str
    data_port: int = DATA_PORT
    control_port: int = CONTROL_PORT


@dataclass
class SendInfo:
    """What the transport cannot read from the packets: record labels, budget, ring counts."""

    rec_msg_id: int  # msg_id shown in records (the gradient message a ring step belongs to)
    step: int = 0
    layer_first: int = 0
    layer_last: int = 0
    budget: float | None = None  # None: from loss_budget / layer_budgets; 0: every packet
    budget_share: float = 1.0  # with budget None: the part of the message budget this send may lose (a ring step's)
    counts: np.ndarray | None = None  # per-packet contribution counts (uint8), carried in PROBE


@dataclass
class SendResult:
    lost_pkts: int
    protected_lost: int
    retx_pkts: int
    rounds: int
    forced: bool
    start_us: int
    complete_us: int
    error: str | None = None

    @property
    def mct_us(self) -> int:
        return self.complete_us - self.start_us


@dataclass
class RecvResult:
    """A received message: values (zeros where lost), which packets arrived, contribution counts."""

    src: int
    iter: int
    phase: int
    msg_id: int
    values: np.ndarray  # float32, n_values
    received: np.ndarray  # bool per packet
    counts: np.ndarray | None  # uint8 per packet (from the sender's PROBE) or None
    values_per_pkt: int
    lost_pkts: int
    protected_lost: int
    forced: bool
    rounds: int

    def loss_mask(self) -> np.ndarray:
        """Per value: True where the value never arrived."""
        return np.repeat(~self.received, self.values_per_pkt)[: self.values.size]

    def value_counts(self) -> np.ndarray | None:
        """Per value: the contribution count of its packet (None when the sender sent none)."""
        if self.counts is None:
            return None
        return np.repeat(self.counts, self.values_per_pkt)[: self.values.size]


def key_text(key) -> str:
    peer, it, phase, msg = key
    return f"(peer {peer}, iter {it}, {PHASE_NAMES.get(phase, phase)}, msg {msg})"


def record_rank(rank: int) -> int:
    return -1 if rank == C.PS_RANK else rank
