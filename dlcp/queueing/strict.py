"""Strict priority: the highest non-empty queue sends next (queue 7 first). The default, and the
only discipline simple_switch's priority queues serve (bmv2)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from dlcp.queueing.registry import N_QUEUES, Discipline, register
from dlcp.settings import Settings


class Strict:
    def __init__(self, options: Settings | None = None):
        pass

    def pick(self, queues: Sequence[Sequence[Any]], size_of: Callable[[Any], int]) -> int:
        for q in range(N_QUEUES - 1, -1, -1):
            if queues[q]:
                return q
        return -1


STRICT = register(
    Discipline(
        name="strict",
        c_id=0,
        doc="strict priority, the highest non-empty queue first",
        reference=Strict,
    )
)
