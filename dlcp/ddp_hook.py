"""A PyTorch DDP communication hook that moves gradient buckets through a DLCP transport.

Usage (every rank, after `dist.init_process_group`, before the first backward)::

    from dlcp.ddp_hook import DlcpHookState, dlcp_hook

    ddp = DistributedDataParallel(model)
    state = DlcpHookState(model, fill="rescale")  # collective: opens the DLCP transport
    ddp.register_comm_hook(state, dlcp_hook)
    ...                       # train as usual
    state.close()

Budgets and timers come from a TransportConfig: `DlcpHookState(model,
TransportAllToAll.for_process_group(TransportConfig(loss_budget=0.01, r_max=3)))`.

For each bucket, `dlcp_hook` tags the bucket's packets (layer priority from the parameters in the
bucket, drop precedence from gradient magnitude: dlcp/wire/tagging.py), hands the flat bucket to the
transport (a `Collective`'s `all_reduce`, dlcp/comm/alltoall.py; the bucket index is the operation's
slot and wire msg_id) on a helper thread, and returns a
Future that completes with the averaged bucket once the transport returns. The default transport,
`TransportAllToAll`, sends the bucket to every other rank as one message of the bounded-loss DLCP
transport (dlcp/transport/udp_driver.py): lost packets are retransmitted until the message is within its loss
budget with every protected packet in, or forced at `r_max` / the deadline. Values some ranks'
packets still never delivered are filled by the fill rule (dlcp/workloads/trainer/fill.py; `local` fills
with this rank's own bucket). The process group is used only to set the transport up; the
gradients travel through the transport.

Layers: `model`'s layers (dlcp.workloads.trainer.models.parameter_layers; 0 = input side) are mapped to the
parameters of each bucket through `bucket.parameters()`, never through `bucket.index()`, because
DDP rebuilds its buckets after the first iteration. The `stale` fill's previous value is kept per
bucket index and forgotten when the bucket's parameters change.
"""

# No `from __future__ import annotations`: DDP checks the hook's annotations as real objects.
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from dlcp.comm.alltoall import TransportAllToAll, bucket_op
from dlcp.settings import Fraction, check_argument
from dlcp.wire.tagging import TaggingConfig, tag_message
from dlcp.workloads.contract import Aggregate
from dlcp.workloads.settings import check_fill
from dlcp.workloads.trainer.fill import fill_average
from dlcp.workloads.trainer.models import parameter_layers

logger = logging.getLogger(__name__)


class DlcpHookState:
    """State of `dlcp_hook` on one rank.

    Knobs:
    - `transport`: a HookTransport (dlcp/comm/alltoall.py); the state owns it and closes it in
      `close()`. Default: `TransportAllToAll.for_process_group()` (the DLCP transport with the
      default TransportConfig, on the default process group; collective).
    - `fill`: `zero`, `rescale` (default: the mean of what arrived, unbiased), `stale`, `local`.
    - `tagging`: the tagging policy of the packets (default `dlcp`: layer priority and magnitude
      drop precedence).
    - `loss_budget`: fraction of a bucket's values allowed to miss a contribution (the transport
      enforces its own per-message budget; the hook only counts and logs buckets over this one).
      None: no check.
    Statistics, cumulative: `iteration` (advanced after the last bucket of a backward),
    `exchanged_values`, `filled_values` (values that missed at least one rank's contribution),
    `budget_violations` (buckets over `loss_budget`).
    """

    __slots__ = (
        "_executor",
        "_layer_of",
        "_layouts",
        "_previous",
        "budget_violations",
        "exchanged_values",
        "fill",
        "filled_values",
        "iteration",
        "loss_budget",
        "n_layers",
        "tagging",
        "transport",
    )

    def __init__(
        self,
        model: torch.nn.Module,
        transport=None,
        fill: str = "rescale",
        tagging: TaggingConfig = TaggingConfig(policy="dlcp"),
        loss_budget: float | None = None,
    ):
        module = model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model
        layers = parameter_layers(module)
        self.fill = check_fill(fill)
        self.tagging = tagging
        if loss_budget is not None:
            loss_budget = check_argument("loss_budget", Fraction, loss_budget)
        self.transport = transport if transport is not None else TransportAllToAll.for_process_group()
        self.loss_budget = loss_budget
        self.budget_violations = 0
        self.n_layers = len(layers)
        self.iteration = 0
        self.exchanged_values = 0
        self.filled_values = 0
        self._layer_of = {id(p): layer for layer, group in enumerate(layers) for p in group}
        self._layouts: dict[tuple, tuple[tuple, tuple]] = {}  # bucket signature -> (layer_starts, layer_ids)
        self._previous: dict[int, tuple] = {}  # bucket index -> (signature, last averaged bucket)
        # one exchange at a time, in bucket order: every rank walks the buckets in the same order
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dlcp-hook")

    def bucket_layout(self, params):
        """(signature, layer_starts, layer_ids) of a bucket holding `params` in this order."""
        signature = tuple(id(p) for p in params)
        if signature not in self._layouts:
            starts: list[int] = []
            ids: list[int] = []
            offset = 0
            for p in params:
                if id(p) not in self._layer_of:
                    raise ValueError(
                        "dlcp_hook: a bucket holds a parameter that is not in the model given to DlcpHookState"
                    )
                layer = self._layer_of[id(p)]
                if not ids or ids[-1] != layer:
                    starts.append(offset)
                    ids.append(layer)
                offset += p.numel()
            self._layouts[signature] = (tuple(starts), tuple(ids))
        return (signature, *self._layouts[signature])

    def _reduce(self, iteration: int, index: int, signature, starts, ids, buffer: torch.Tensor) -> torch.Tensor:
        values = buffer.detach().reshape(-1).numpy()
        vpp = self.transport.values_per_pkt
        tags = tag_message(values, starts, ids, self.n_layers, self.tagging, vpp)
        res = self.transport.all_reduce(bucket_op(iteration, index, values, tags)).wait()
        agg = Aggregate(index, res.total, res.count, res.world)
        previous = self._previous.get(index)
        previous = previous[1] if previous is not None and previous[0] == signature else None
        avg = fill_average(agg, self.fill, previous=previous, own=values)
        if self.fill == "stale":
            self._previous[index] = (signature, avg.clone())  # DDP may reuse the result as its buffer
        filled = int(np.count_nonzero(np.asarray(agg.count) < agg.world))
        self.exchanged_values += values.size
        self.filled_values += filled
        if self.loss_budget is not None and filled > self.loss_budget * values.size:
            self.budget_violations += 1
            logger.warning(
                "dlcp_hook: bucket %d of iteration %d: %.2f %% of values filled, budget %.2f %%",
                index,
                iteration,
                100.0 * filled / values.size,
                100.0 * self.loss_budget,
            )
        return avg.view_as(buffer)

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        self.transport.close()


def dlcp_hook(state: DlcpHookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: exchange `bucket` through `state.transport` and return a Future of
    the averaged (and filled) bucket, shaped like `bucket.buffer()`."""
    buffer = bucket.buffer()
    if buffer.dtype != torch.float32 or buffer.device.type != "cpu":
        raise ValueError(f"dlcp_hook: buckets must be float32 on the CPU, got {buffer.dtype} on {buffer.device}")
    signature, starts, ids = state.bucket_layout(bucket.parameters())
    iteration, index = state.iteration, bucket.index()
    if bucket.is_last():
        state.iteration += 1
    # of a Tensor; Any because torch annotates set_exception's argument with the result type
    fut: torch.futures.Future[Any] = torch.futures.Future()

    def run():
        try:
            fut.set_result(state._reduce(iteration, index, signature, starts, ids, buffer))
        except BaseException as e:  # noqa: BLE001 (DDP re-raises it in backward)
            logger.error("dlcp_hook: bucket %d of iteration %d failed: %s", index, iteration, e)
            fut.set_exception(e)

    state._executor.submit(run)
    return fut
