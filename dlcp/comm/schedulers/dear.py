"""DeAR (Zhang et al., ICDCS'23): all-reduce decoupled into a reduce-scatter that overlaps the
backward and an all-gather that overlaps the next forward, with tensor fusion
[C: lzhangbv/dear_pytorch dear/dopt_rsag.py; seeds-brief §3], restated in our own words:

* fusion groups: consecutive tensors in forward order; a tensor joins the current group while
  the group is empty or group bytes + tensor bytes < `threshold_bytes` (DeAR's THRESHOLD, 25 MB
  where MB = 2**20 bytes; 0 = no fusion). DeAR groups modules; profiles list tensors, so we group
  tensors (a module's weight and bias can fall in different groups).
* backward: when every tensor of a group is ready, reduce-scatter the group.
* end of backward (DeAR's optimizer.step): once every reduce-scatter is done, all-gather group 0.
* next forward: when the forward reaches a group's first tensor, it waits for that group's
  all-gather (the timeline's gate) and then DeAR starts the all-gather of the next group, i.e.
  all-gather g+1 is released at max(all-gather g done, forward reaches group g).

Costs: each of reduce-scatter and all-gather is half an all-reduce of the group's full buffer
(costmodel.py). DeAR pads each buffer to a multiple of P (and by P more when it already is one);
that is at most P elements per group and is not modelled. DeAR tunes the threshold by Bayesian
optimisation (10 trials in [1, 100] MB); `dlcp.comm.prediction.tune` grid-searches it under the model.
"""

from __future__ import annotations

from pydantic import Field

from dlcp.comm.schedulers.base import Op, Scheduler, register_scheduler
from dlcp.settings import Settings
from dlcp.workloads.profile import BYTES_PER_ELEMENT

MB = 1 << 20
DEFAULT_THRESHOLD_BYTES = 25 * MB


def fusion_groups(sizes, threshold_bytes: int) -> list[list[int]]:
    groups: list[list[int]] = []
    group: list[int] = []
    total = 0
    for t, n in enumerate(sizes):
        nbytes = BYTES_PER_ELEMENT * n
        if not group or total + nbytes < threshold_bytes:
            group.append(t)
            total += nbytes
        else:
            groups.append(group)
            group, total = [t], nbytes
    groups.append(group)
    return groups


class _IterationState:
    def __init__(self, groups):
        self.missing = [len(g) for g in groups]  # gradients not yet ready, per group
        self.rs_left = len(groups)  # reduce-scatters not yet complete
        self.ag_done = [False] * len(groups)
        self.ag_issued = [False] * len(groups)
        self.reached = [False] * len(groups)  # next forward reached the group's first tensor


class DeAROptions(Settings):
    threshold_bytes: int = Field(DEFAULT_THRESHOLD_BYTES, ge=0, description="dear: fusion buffer size (0 = no fusion)")


@register_scheduler(
    "dear",
    "DeAR (Zhang et al., ICDCS'23): reduce-scatter in the backward, all-gather in the next forward, fused",
    DeAROptions,
)
class DeAR(Scheduler):
    def __init__(self, profile, cost=None, workers=None, threshold_bytes: int = DEFAULT_THRESHOLD_BYTES):
        if isinstance(threshold_bytes, bool) or not isinstance(threshold_bytes, int) or threshold_bytes < 0:
            raise ValueError(f"dear: threshold_bytes must be an integer >= 0, got {threshold_bytes!r}")
        super().__init__(profile.sizes)
        self.threshold_bytes = threshold_bytes
        self.groups = fusion_groups(self.sizes, threshold_bytes)
        self.group_of = {t: g for g, members in enumerate(self.groups) for t in members}
        self.first_of = {members[0]: g for g, members in enumerate(self.groups)}
        self._state: dict[int, _IterationState] = {}
        self._ops: dict[int, tuple[int, str, int]] = {}  # op id -> (iteration, primitive, group)

    def _st(self, iteration: int) -> _IterationState:
        if iteration not in self._state:
            self._state[iteration] = _IterationState(self.groups)
        return self._state[iteration]

    def _op(self, iteration: int, primitive: str, g: int) -> Op:
        members = self.groups[g]
        op = self.new_op(iteration, primitive, [self.whole(t) for t in members], members[0])
        self._ops[op.op_id] = (iteration, primitive, g)
        return op

    def _all_gather(self, iteration: int, g: int) -> list[Op]:
        st = self._state[iteration]
        st.ag_issued[g] = True
        return [self._op(iteration, "all_gather", g)]

    def on_ready(self, iteration: int, tensor: int, now: float) -> list[Op]:
        st = self._st(iteration)
        g = self.group_of[tensor]
        st.missing[g] -= 1
        return [self._op(iteration, "reduce_scatter", g)] if st.missing[g] == 0 else []

    def on_complete(self, op_id: int, now: float) -> list[Op]:
        iteration, primitive, g = self._ops.pop(op_id)
        st = self._state[iteration]
        if primitive == "reduce_scatter":
            st.rs_left -= 1
            return self._all_gather(iteration, 0) if st.rs_left == 0 else []
        st.ag_done[g] = True
        if g + 1 == len(self.groups):
            del self._state[iteration]  # every all-gather done: this iteration is over
            return []
        if st.reached[g] and not st.ag_issued[g + 1]:
            return self._all_gather(iteration, g + 1)
        return []

    def on_forward(self, iteration: int, tensor: int, now: float) -> list[Op]:
        g = self.first_of.get(tensor)
        st = self._state.get(iteration - 1)
        if g is None or st is None:
            return []
        st.reached[g] = True
        if st.ag_done[g] and g + 1 < len(self.groups) and not st.ag_issued[g + 1]:
            return self._all_gather(iteration - 1, g + 1)
        return []

    def describe(self) -> dict:
        return {"groups": [list(g) for g in self.groups], "threshold_bytes": self.threshold_bytes}

    def units(self):
        return [tuple(self.whole(t) for t in g) for g in self.groups]

    def ops_per_iteration(self) -> int:
        return 2 * len(self.groups)  # a reduce-scatter and an all-gather per group
