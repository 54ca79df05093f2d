"""Strict priority: the highest non-empty queue sends next (queue 7 first). The default, and the
only discipline simple_switch's priority queues serve (bmv2)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from dlcp.queueing.registry import N_QUEUES, Discipline, register_discipline


class Strict:
    def __init__(self, options: None = None):
        pass

    def pick(self, queues: Sequence[Sequence[Any]], size_of: Callable[[Any], int]) -> int:
        for q in range(N_QUEUES - 1, -1, -1):
            if queues[q]:
                return q
        return -1


STRICT = register_discipline(
    Discipline(
        name="strict",
        description="strict priority: the highest non-empty queue sends first (7, then 6, ... 0)",
        c_id=0,
        reference=Strict,
        strict_priority=True,
    )
)
