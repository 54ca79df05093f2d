"""Admission by drop precedence and the ECN marking decision (docs/pipeline.md, "Ingress" 7-8):
the rules every queue of a DLCP switch applies before a packet joins it. The reference pipeline
(dlcp/switch/pipeline.py) and the transport's virtual network (dlcp/transport/virtual.py) use
these; the C statement is sw_ingress in dlcp/switch/c/switch_core.h."""

from __future__ import annotations

from dlcp.wire.header import ECN_ECT0, ECN_ECT1, ECN_MASK

ADMIT, EARLY_DROP, TAIL_DROP = 0, 1, 2


def admit(occ: int, color: int, qmax: int, k1: int, k2: int, k3: int) -> int:
    """What happens to a packet of drop precedence `color` that finds `occ` packets in its queue:
    tail drop at qmax (any color), early drop of color c > 0 at k_c, else admission."""
    if occ >= qmax:
        return TAIL_DROP
    if color and occ >= (k1, k2, k3)[color - 1]:
        return EARLY_DROP
    return ADMIT


def marks_ce(tos: int, occ: int, k: int) -> bool:
    """An admitted ECN-capable packet (ECT(0) or ECT(1)) is marked CE when its queue held k or more."""
    return tos & ECN_MASK in (ECN_ECT0, ECN_ECT1) and occ >= k
