"""Tagged packets of a slice of an operation's buffer: what every collective hands the transport.

The buffer's `MessageLayout` says which model layer each value belongs to (segments); the packets
of values [lo, hi) get the layer priority of their first value and a drop precedence from their
magnitude (dlcp/wire/tagging.py, as the experiment's tagging policy says)."""

from __future__ import annotations

import numpy as np

from dlcp.comm.settings import CommConfig
from dlcp.wire.chunking import MessageId, packetize
from dlcp.wire.tagging import Tags, n_packets, packet_layers, tag_message, tag_packets
from dlcp.workloads.contract import MessageLayout


def sub_layers(layout: MessageLayout, lo: int, hi: int) -> tuple[list[int], list[int]]:
    """Layer segments (starts relative to lo, layer ids) of values lo..hi-1 of a message."""
    starts = np.asarray(layout.layer_starts + (layout.n_values,), dtype=np.int64)
    ids = list(layout.layer_ids)
    out_s: list[int] = []
    out_i: list[int] = []
    for k, lid in enumerate(ids):
        a, b = max(starts[k], lo), min(starts[k + 1], hi)
        if a < b or (not out_s and k == len(ids) - 1):
            out_s.append(int(a - lo) if a < b else 0)
            out_i.append(lid)
    if not out_s:  # empty range: attribute it to the layer containing lo
        k = int(np.searchsorted(starts, lo, side="right")) - 1
        out_s, out_i = [0], [ids[min(max(k, 0), len(ids) - 1)]]
    return out_s, out_i


def tagged_packets(
    values: np.ndarray,
    ident: MessageId,
    layout: MessageLayout,
    lo: int,
    hi: int,
    n_layers: int,
    cfg: CommConfig,
    vpp: int,
    magnitudes: np.ndarray | None = None,
    protect: bool = False,
    copy: bool = False,
):
    """Tagged packets of values[lo:hi] of a message (`magnitudes` ranks drop precedence instead of
    the values themselves, e.g. parameter deltas; `protect`: every packet drop precedence 0;
    `copy`: the packets point into a copy of the values, so the caller may change them while the
    message travels); returns (batch, layer_first, layer_last)."""
    starts, ids = sub_layers(layout, lo, hi)
    chunk = values[lo:hi].copy() if copy else values[lo:hi]
    tags = tag_message(chunk if magnitudes is None else magnitudes[lo:hi], starts, ids, n_layers, cfg.tagging, vpp)
    if protect:
        tags = Tags(tags.prio, np.zeros_like(tags.drop_prec), tags.mag_class, tags.layer_id)
    return packetize(chunk, ident, tags, vpp, cfg.telemetry), min(ids), max(ids)


def sized_packets(
    ident: MessageId,
    layout: MessageLayout,
    lo: int,
    hi: int,
    n_layers: int,
    cfg: CommConfig,
    vpp: int,
    protect: bool = False,
):
    """The packets of values [lo:hi) of a message that carries no values (`workload.payload =
    "sizes"`): headers, lengths, priorities and layer ids as `tagged_packets` makes them, payloads of
    zeros read from one shared zero (no buffer of the message's size). Drop precedence and magnitude
    class rank stand-in magnitudes, one per packet, drawn from the message's identity: each message
    gets the shares of drop precedence classes any gradient without all-zero packets gets, not the
    packets its real magnitudes would pick. Returns (batch, layer_first, layer_last)."""
    starts, ids = sub_layers(layout, lo, hi)
    n = n_packets(hi - lo, vpp)
    rng = np.random.default_rng([ident.job_id, ident.src_rank, ident.iter, ident.msg_id, ident.phase, lo])
    mags = rng.random(n) + 1e-3  # never 0: an all-zero packet would get the highest drop precedence
    tags = tag_packets(mags, packet_layers(starts, ids, n, vpp), n_layers, cfg.tagging)
    if protect:
        tags = Tags(tags.prio, np.zeros_like(tags.drop_prec), tags.mag_class, tags.layer_id)
    zeros = np.broadcast_to(np.float32(0), (hi - lo,))  # stride 0: every payload byte reads the same zero
    return packetize(zeros, ident, tags, vpp, cfg.telemetry), min(ids), max(ids)
