"""Replica re-sync in all-reduce mode. All-gather losses leave replicas different (each fills holes
its own way). Every `resync_every` iterations rank 0 sends its parameters to every rank (phase P2P,
reliable, wire ids `WireIds.resync`); the others measure their drift from rank 0 (L2 and max
|diff|, logged and returned) and adopt rank 0's values.
"""

from __future__ import annotations

import numpy as np

from dlcp.comm.packets import sized_packets, tagged_packets
from dlcp.comm.settings import CommConfig
from dlcp.comm.wire_ids import WireIds
from dlcp.transport.api import SendInfo
from dlcp.wire.chunking import MessageId
from dlcp.wire.header import PHASE_P2P, TYPE_PARAM
from dlcp.workloads.contract import MessageLayout


def resync(
    transport,
    cfg: CommConfig,
    ids: WireIds,
    layouts: dict[int, MessageLayout],
    n_layers: int,
    iteration: int,
    params: dict[int, np.ndarray],
) -> tuple[dict[int, np.ndarray], dict]:
    """Rank 0 sends `params` to every rank (reliably); returns (rank 0's parameters, drift of
    this rank's `params` from them: {"drift_l2", "drift_max", "param_l2"})."""
    order = sorted(layouts)
    if cfg.rank == 0:
        handles = [
            transport.send(*m) for m in resync_messages(cfg, ids, layouts, n_layers, transport.vpp, iteration, params)
        ]
        for h in handles:
            h.wait(cfg.timeout_s)
        ref = params
    else:
        ref = {
            m: transport.recv(0, iteration, PHASE_P2P, ids.resync(order.index(m)), cfg.timeout_s).values for m in order
        }
    return ref, drift(params, ref)


def resync_messages(
    cfg: CommConfig,
    ids: WireIds,
    layouts: dict[int, MessageLayout],
    n_layers: int,
    vpp: int,
    iteration: int,
    params: dict[int, np.ndarray] | None,
) -> list[tuple[int, object, SendInfo]]:
    """Rank 0's re-sync: (destination, packets, SendInfo) of every message to every other rank
    (P2P, TYPE_PARAM, wire id `ids.resync(index in msg_id order)`, protected, budget 0). `params`
    None: packets of the right sizes without values (workload.payload = "sizes")."""
    out = []
    for k, msg_id in enumerate(sorted(layouts)):
        lay = layouts[msg_id]
        ident = MessageId(cfg.job_id, 0, iteration, ids.resync(k), PHASE_P2P, TYPE_PARAM)
        if params is None:
            batch, lf, ll = sized_packets(ident, lay, 0, lay.n_values, n_layers, cfg, vpp, protect=True)
        else:
            values = np.array(params[msg_id], dtype=np.float32).reshape(-1)
            batch, lf, ll = tagged_packets(values, ident, lay, 0, lay.n_values, n_layers, cfg, vpp, protect=True)
        for dst in range(1, cfg.world):
            out.append((dst, batch, SendInfo(rec_msg_id=msg_id, layer_first=lf, layer_last=ll, budget=0.0)))
    return out


def drift(params: dict[int, np.ndarray], ref: dict[int, np.ndarray]) -> dict:
    """How far this rank's parameters are from rank 0's: L2 and max |diff|, and rank 0's L2."""
    order = sorted(ref)
    diff = [np.asarray(params[m], np.float32) - ref[m] for m in order]
    d = np.concatenate(diff) if diff else np.zeros(0, np.float32)
    ref_all = np.concatenate([np.asarray(ref[m], np.float32) for m in order])
    return {
        "drift_l2": float(np.linalg.norm(d)),
        "drift_max": float(np.abs(d).max(initial=0.0)),
        "param_l2": float(np.linalg.norm(ref_all)),
    }
