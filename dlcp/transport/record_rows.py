"""The record rows transports produce: one per finished message and side (dlcp.records
MESSAGE_COLUMNS) and, on request, per-packet arrays (PACKET_COLUMNS). Shared by the protocol core
and the plain-TCP baseline so both write the same columns."""

from __future__ import annotations

import numpy as np

from dlcp.transport.api import record_rank
from dlcp.wire.header import PHASE_NAMES


def message_row(
    host: str,
    rank: int,
    side: str,
    peer: int,
    key,
    *,
    rec_msg_id: int,
    step: int,
    layer_first: int,
    layer_last: int,
    prio: int,
    nbytes: int,
    pkts: int,
    lost_pkts: int,
    retx_pkts: int,
    rounds: int,
    forced: bool,
    protected_lost: int,
    start_us: int,
    first_byte_us: int | None,
    complete_us: int,
) -> dict:
    """One MESSAGE_COLUMNS row; `rank` and `peer` are wire ranks (the PS shows as -1)."""
    return {
        "host": host,
        "rank": record_rank(rank),
        "side": side,
        "peer": record_rank(peer),
        "iter": key[1],
        "msg_id": rec_msg_id,
        "phase": PHASE_NAMES[key[2]],
        "step": step,
        "layer_first": layer_first,
        "layer_last": layer_last,
        "prio": prio,
        "bytes": nbytes,
        "pkts": pkts,
        "lost_pkts": lost_pkts,
        "retx_pkts": retx_pkts,
        "rounds": rounds,
        "forced": int(forced),
        "protected_lost": protected_lost,
        "start_us": start_us,
        "first_byte_us": first_byte_us,
        "complete_us": complete_us,
        "mct_us": complete_us - start_us,
    }


def packet_chunk(side: str, src: int, dst: int, key, rec_msg_id: int, prio, drop_prec, send_us, recv_us, retx) -> dict:
    """Per-packet records of one message and side as arrays (dlcp.records.write_packet_arrays);
    times < 0 mean "not known on this side"."""
    n = len(drop_prec)
    return {
        "side": side,
        "src_rank": record_rank(src),
        "dst_rank": record_rank(dst),
        "phase": PHASE_NAMES[key[2]],
        "iter": key[1],
        "msg_id": rec_msg_id,
        "seq": np.arange(n),
        "prio": prio,
        "drop_prec": drop_prec,
        "send_us": send_us,
        "recv_us": recv_us,
        "retx": retx,
    }
