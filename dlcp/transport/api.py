"""What every transport shares: its settings, the peer address, what a send and a receive return,
and its errors. Plain data: the protocol core (core/), its drivers (udp_driver.py, virtual.py) and
the plain-TCP baseline (tcp_baseline.py) all build on these."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dlcp.wire import control_frames as C
from dlcp.wire.header import DATA_PORT, PHASE_NAMES, VALUES_PER_PKT

CONTROL_PORT = 9911
MAX_R = 250  # retransmission rounds: the round number travels in one byte
SEND_IMPLS = ("sendmmsg", "sendmsg")  # how the UDP driver hands packets to the kernel
CC_MODES = ("dctcp", "none")  # sender congestion control (docs/transport.md, "Congestion control")


class TransportError(RuntimeError):
    """A transport failure the caller must see (peer unreachable, timeout)."""


@dataclass
class TransportConfig:
    """Settings of one endpoint; the names follow the agent config's `dlcp` section."""
    rank: int = 0  # wire rank: 0..254 for workers, control.PS_RANK for the PS
    job_id: int = 1
    ip: str = "127.0.0.1"
    data_port: int = DATA_PORT
    control_port: int = CONTROL_PORT
    host: str = ""  # for records
    values_per_pkt: int = VALUES_PER_PKT
    loss_budget: float = 0.01  # p_msg
    iter_budget: float = 0.02  # per-iteration cap, per source
    layer_budgets: dict = field(default_factory=dict)  # layer id -> budget
    r_max: int = 3  # retransmission rounds
    deadline_ms: float = 2000.0  # from the first PROBE
    reliable: bool = False  # budget 0 for every message
    pacing_mbps: float = 0.0  # 0 = no pacing; counts Ethernet frames
    telemetry: bool = False
    per_packet: bool = False  # per-packet records
    inject_loss: float = 0.0  # fraction of data packets the sender skips (tests, no lossy switch)
    inject_seed: int = 0
    send_impl: str = "sendmmsg"
    send_batch: int = 32
    probe_quiet_ms: float = 2.0  # initial quiet time before answering a PROBE with data missing (adapts per source)
    probe_rto_ms: float = 20.0  # floor of the PROBE timeout (re-probe after max(floor, srtt + 4 rttvar), doubling)
    rcvbuf_bytes: int = 16 << 20
    sndbuf_bytes: int = 128 << 10  # (doubled by Linux) below a host queue: the socket blocks before the qdisc drops
    connect_timeout_s: float = 15.0
    cc: str = "dctcp"  # "dctcp": ECN-driven window per destination; "none": send as fast as the host lets
    cc_init_window: int = 10  # packets in flight before the first feedback (slow start starts here)
    feedback_every: int = 16  # receiver: a FEEDBACK frame at least every this many packets of a source
    host_mark_ms: float = 5.0  # receiver: a packet that waited longer in this host counts as CE (0: never)

    def __post_init__(self):
        def bad(key, why):
            raise ValueError(f"dlcp.{key}: {why}")
        for key in ("loss_budget", "iter_budget", "inject_loss"):
            v = getattr(self, key)
            if not isinstance(v, (int, float)) or not 0 <= v <= 1:
                bad(key, f"{v!r} is not a fraction in 0..1")
        for lid, v in self.layer_budgets.items():
            if not isinstance(v, (int, float)) or not 0 <= v <= 1:
                bad(f"layer_budgets.{lid}", f"{v!r} is not a fraction in 0..1")
        self.layer_budgets = {int(k): float(v) for k, v in self.layer_budgets.items()}
        if not isinstance(self.r_max, int) or not 0 <= self.r_max <= MAX_R:
            bad("r_max", f"{self.r_max!r} must be an integer in 0..{MAX_R}")
        if not self.deadline_ms > 0:
            bad("deadline_ms", f"{self.deadline_ms!r} must be > 0")
        if not self.probe_rto_ms > 0:
            bad("probe_rto_ms", f"{self.probe_rto_ms!r} must be > 0")
        if not self.probe_quiet_ms > 0:
            bad("probe_quiet_ms", f"{self.probe_quiet_ms!r} must be > 0")
        if self.pacing_mbps is None:
            self.pacing_mbps = 0.0
        if self.pacing_mbps < 0:
            bad("pacing_mbps", f"{self.pacing_mbps!r} must be >= 0")
        if self.send_impl not in SEND_IMPLS:
            bad("send_impl", f"{self.send_impl!r} is not one of {', '.join(SEND_IMPLS)}")
        if not 0 <= self.rank <= 255:
            bad("rank", f"{self.rank} outside 0..255")
        if not 1 <= self.values_per_pkt <= VALUES_PER_PKT:
            bad("values_per_pkt", f"{self.values_per_pkt} outside 1..{VALUES_PER_PKT}")
        if self.cc not in CC_MODES:
            bad("cc", f"{self.cc!r} is not one of {', '.join(CC_MODES)}")
        if isinstance(self.host_mark_ms, bool) or not isinstance(self.host_mark_ms, (int, float)) \
                or self.host_mark_ms < 0:
            bad("host_mark_ms", f"{self.host_mark_ms!r} must be a number >= 0")
        for key in ("cc_init_window", "feedback_every"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 4096:
                bad(key, f"{v!r} must be an integer in 1..4096")

    def budget_for(self, layer_first: int, layer_last: int) -> float:
        """The loss budget of a message covering layers layer_first..layer_last."""
        if self.reliable:
            return 0.0
        b = self.loss_budget
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


