"""Fill rules: how a worker (or the PS) turns an Aggregate with holes into the averaged gradient of
one message (`dlcp.fill`). Each rule registers itself in its own module of this package.

An Aggregate of a message holds, per value v, `total[v]` (sum of the contributions that arrived)
and `count[v]` (how many did, 0..W, W = `world`). A rule states the averaged gradient g per value
once, over the array operations both numpy and torch have (`ArrayOps`), so the torch trainer
(dlcp/workloads/trainer/fill.py) and the synthetic workload (dlcp/workloads/synthetic.py) compute
the same formula. A rule may replace a missing contribution by a `base` value: the previous
iteration's averaged gradient of the message (`previous`) or this worker's own gradient (`own`);
where that value does not exist (before the first iteration, at the PS) the rule's `fallback`
applies instead. A rule with `per_source` also fills each source's holes before the sum, where an
aggregator holds the sources apart (the PS: `bubble`, dlcp/workloads/fills/bubble.py).

Without loss (count = W everywhere) every rule returns exactly total / W, bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from dlcp.registry import Entry, Registry


@dataclass(frozen=True)
class ArrayOps:
    """The element-wise operations a rule uses beyond arithmetic, for one array library."""

    where: Callable[[Any, Any, Any], Any]
    at_least_one: Callable[[Any], Any]  # max(x, 1)
    zeros_like: Callable[[Any], Any]


NUMPY = ArrayOps(np.where, lambda x: np.maximum(x, 1), np.zeros_like)


@dataclass(frozen=True, kw_only=True)
class FillRule(Entry):
    """A registered fill rule: average(total, count, world, base, ops) -> g."""

    average: Callable[[Any, Any, Any, Any, ArrayOps], Any]
    base: Literal["previous", "own"] | None = None
    fallback: str | None = None  # the rule used when `base` is missing
    per_source: bool = False  # the PS fills each push's holes from that worker's last push first


FILLS: Registry[FillRule] = Registry("fill rule", discover="dlcp.workloads.fills")


def register_fill(rule: FillRule) -> FillRule:
    return FILLS.register(rule)


def applied_rule(name: str, previous, own) -> tuple[FillRule, Any]:
    """The rule that applies for fill `name` given the base values at hand, and its base value."""
    rule = FILLS.get(name)
    base = {"previous": previous, "own": own, None: None}[rule.base]
    if rule.base is not None and base is None:
        return applied_rule(rule.fallback, previous, own) if rule.fallback else (rule, None)
    return rule, base


def fill_mean(name: str, total: np.ndarray, count: np.ndarray, world: int, previous=None, own=None) -> np.ndarray:
    """Averaged gradient under fill `name` with numpy (float32)."""
    rule, base = applied_rule(name, previous, own)
    g = rule.average(total.astype(np.float32, copy=False), count.astype(np.float32), np.float32(world), base, NUMPY)
    return np.asarray(g).astype(np.float32, copy=False)
