"""Real torch training behind the Workload / ServerWorkload contract of dlcp/workloads/contract.py.

`TorchWorkload` (a worker): `compute(it)` runs forward, then backward in a helper thread; a
post-accumulate-grad hook on every parameter copies its gradient into the message's flat send
buffer, and `compute` yields each message (a numpy view of that buffer) as soon as all its
parameters have their gradient, in backward order, while backward carries on: wait-free backprop.
A message's values stay valid until the next `compute` call; collectives must not write to them.

`apply_gradients` (all-reduce mode) fills the aggregates (dlcp/workloads/trainer/fill.py), then steps the
optimizer; `apply_parameters` (PS mode) installs pulled parameters, keeping the previous value of
every lost one. `TorchServerWorkload` is the PS: it holds the authoritative parameters and the
optimizer (same initialisation as the workers: same model, same seed).

Compute from a profile (`compute = "profile"`, dlcp/workloads/compute_model.py): the real forward
and backward still run (the values are torch's), but each layer's forward ends at the profile's
deadline (a forward pre-hook on the module owning the layer's first parameter starts the layer:
it first waits for the previous layer's deadline, then for the layer's parameters), and a message
is yielded when both its real gradients exist and the profile's backward has reached its lowest
layer. The model must have the profile's tensors (sizes in `named_parameters` order).

Evaluation: `evaluate(it)` after the update of iteration `it` always reports this worker's
`train_loss` (its own shard, computed before the update) and `lost_values`; at evaluation
iterations ((it + 1) % eval_every == 0, and the last iteration) also `test_loss` and
`test_accuracy` (fraction 0..1) over the whole held-out test set.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import numpy as np
import torch
import torch.nn.functional as F

from dlcp.workloads import hadamard
from dlcp.workloads.compute_model import ParameterGate, ProfileCompute
from dlcp.workloads.contract import Aggregate, GradMessage, MessageLayout, ParamChunk
from dlcp.workloads.profiled import is_fitted, make_profile_compute, profile_for_tensors, workload_profile
from dlcp.workloads.settings import WorkloadConfig, check_fill
from dlcp.workloads.trainer.data import BatchSchedule, load_dataset
from dlcp.workloads.trainer.flat import FlatModel
from dlcp.workloads.trainer.models import build_model, parameter_layers
from dlcp.workloads.trainer.sgd import SGD


def _decoder(config: WorkloadConfig):
    """The inverse Hadamard transform of `config`'s filled averages (None without the transform)."""
    if not config.hadamard:
        return None
    return lambda values, iteration, msg_id: hadamard.decode(values, config.seed, iteration, msg_id)


def _optimizer(model, config: WorkloadConfig) -> SGD:
    return SGD(model.parameters(), lr=config.lr, momentum=config.momentum, weight_decay=config.weight_decay)


def _test_metrics(model, data, batch: int = 512) -> dict:
    model.eval()
    loss_sum, correct = 0.0, 0
    with torch.no_grad():
        for lo in range(0, len(data.test_y), batch):
            x, y = data.test_x[lo : lo + batch], data.test_y[lo : lo + batch]
            logits = model(x)
            loss_sum += float(F.cross_entropy(logits, y, reduction="sum"))
            correct += int((logits.argmax(1) == y).sum())
    model.train()
    n = len(data.test_y)
    return {"test_loss": loss_sum / n, "test_accuracy": correct / n}


class _Readiness:
    """Which messages have every gradient (and since when, on `clock`); filled by the hooks in the
    backward thread."""

    def __init__(self, pending: list[int], clock=None):
        self.pending = list(pending)
        self.ready_at: list[float | None] = [None] * len(pending)
        self.clock = clock
        self.finished = False
        self.error: BaseException | None = None
        self.cond = threading.Condition()

    def param_done(self, index: int) -> None:
        with self.cond:
            self.pending[index] -= 1
            if self.pending[index] == 0:
                self.ready_at[index] = self.clock.now() if self.clock is not None else None
                self.cond.notify_all()

    def finish(self, error: BaseException | None) -> None:
        with self.cond:
            self.finished, self.error = True, error
            self.cond.notify_all()

    def wait(self, index: int) -> None:
        with self.cond:
            self.cond.wait_for(lambda: self.pending[index] == 0 or self.finished)
            if self.pending[index] == 0:
                return
            if self.error is not None:
                raise RuntimeError(f"backward failed: {self.error}") from self.error
            raise RuntimeError(
                f"backward produced no gradient for {self.pending[index]} parameter(s) of "
                f"message {index} (parameters unused in forward?)"
            )


class TorchWorkload:
    """Worker side (Workload protocol of dlcp/workloads/contract.py).

    `overlap=False` runs backward to the end before the first message is yielded (no wait-free
    backprop: the baseline, and cheaper when nothing would overlap, as in the in-process bench);
    the messages and their order are the same either way."""

    def __init__(
        self,
        config: WorkloadConfig,
        rank: int = 0,
        world: int = 1,
        fill: str = "rescale",
        data=None,
        overlap: bool = True,
    ):
        if not 0 <= rank < world:
            raise ValueError(f"rank {rank} is outside 0..{world - 1}")
        self.config, self.rank, self.world, self.fill = config, rank, world, check_fill(fill)
        self.overlap = overlap
        self.data = data if data is not None else load_dataset(config.dataset)
        self.schedule = BatchSchedule(self.data.n_train, config.batch_size * world, config.seed)
        self.model = build_model(config.model, self.data.in_shape, self.data.n_classes, config.seed)
        self.flat = FlatModel(self.model, config.bucket_values)
        self.n_layers = self.flat.n_layers
        self._optimizer = _optimizer(self.model, self.config)
        self._readiness: _Readiness | None = None
        self.train_loss: float | None = None
        self.lost_values = 0
        for p in self.model.parameters():
            p.register_post_accumulate_grad_hook(self._on_gradient)
        self.timer: ProfileCompute | None = None
        self.gate: ParameterGate | None = None
        self._timed_forward = False
        self.profile_fit: str | None = None  # "exact", or another model's profile "parameter fraction"
        profile = workload_profile(config)
        if profile is not None:
            self._time_with(profile)

    def _time_with(self, profile) -> None:
        """Time forward and backward with `profile` (see the module docstring)."""
        params = list(self.model.parameters())
        sizes = [p.numel() for p in params]
        self.profile_fit = "parameter fraction" if is_fitted(profile, sizes) else "exact"
        profile = profile_for_tensors(profile, sizes, self.config.model)
        index = {id(p): i for i, p in enumerate(params)}
        layers = parameter_layers(self.model)
        self.timer, self.gate = make_profile_compute(
            profile,
            [[index[id(p)] for p in group] for group in layers],
            self.config.dilation,
            warmup=self.config.warmup_iterations,
        )
        owner = {id(p): m for m in self.model.modules() for p in m.parameters(recurse=False)}
        for layer, group in enumerate(layers):
            owner[id(group[0])].register_forward_pre_hook(lambda mod, args, layer=layer: self._on_forward(layer))

    def _on_forward(self, layer: int) -> None:
        if self._timed_forward:  # not during evaluation
            assert self.timer is not None  # forwards are timed only with one
            self.timer.forward(layer)

    def compute_stats(self) -> dict | None:
        """How well the machine kept up with the profile (None with real compute)."""
        if self.timer is None:
            return None
        return {"mode": "profile", **self.timer.stats.as_dict()}

    def layouts(self) -> list[MessageLayout]:
        return self.flat.layouts()

    def _on_gradient(self, p: torch.nn.Parameter) -> None:
        index, sl = self.flat.message_of[id(p)]
        assert p.grad is not None  # a post-accumulate-grad hook runs once the gradient is in
        self.flat.messages[index].send[sl].copy_(p.grad.reshape(-1))
        p.grad = None  # the copy is what travels; nothing accumulates into the next iteration
        if self._readiness is not None:
            self._readiness.param_done(index)

    def compute(self, iteration: int) -> Iterator[GradMessage]:
        x, y = self.data.train_batch(self.schedule.shard(iteration, self.rank, self.world))
        self.model.zero_grad(set_to_none=True)
        self.model.train()
        timer = self.timer
        if timer is not None:
            timer.begin(iteration)
            self._timed_forward = True
        try:
            loss = F.cross_entropy(self.model(x), y)
        finally:
            self._timed_forward = False
        self.train_loss = float(loss.detach())
        self.lost_values = 0
        readiness = self._readiness = _Readiness(
            [len(m.slices) for m in self.flat.messages], timer.clock if timer is not None else None
        )

        def backward():
            error = None
            try:
                loss.backward()
            except BaseException as e:  # noqa: BLE001 (handed to the consumer of compute())
                error = e
            readiness.finish(error)

        thread = None
        if self.overlap:
            thread = threading.Thread(target=backward, name=f"backward-r{self.rank}", daemon=True)
            thread.start()
        else:
            backward()
        if timer is not None:
            timer.end_forward()  # the loss was the forward's last real work; backward runs meanwhile
        try:
            for index, m in enumerate(self.flat.messages):
                readiness.wait(index)
                if timer is not None:
                    timer.gradient_ready(m.layout.layer_first, done_at=readiness.ready_at[index])
                if self.config.hadamard:  # sent transformed (the local fill's own gradient too)
                    hadamard.encode(m.send_np, self.config.seed, iteration, m.layout.msg_id)
                yield GradMessage(m.layout, m.send_np, self.n_layers)
            if timer is not None:
                timer.end()
        finally:
            if thread is not None:
                thread.join()
            self._readiness = None

    def apply_gradients(self, iteration: int, aggregates: dict[int, Aggregate]) -> None:
        self.lost_values += self.flat.install_gradients(
            iteration, aggregates, self.fill, use_own=True, decode=_decoder(self.config)
        )
        self._optimizer.step()
        if self.gate is not None:
            self.gate.release_all(iteration + 1)

    def apply_parameters(self, iteration: int, msg_id: int, chunk: ParamChunk) -> None:
        self.lost_values += self.flat.install_parameters(msg_id, chunk.values, chunk.lost)
        if self.gate is not None:  # the next forward may run these layers now
            self.gate.release(iteration + 1, self.flat.message(msg_id).layout.layer_ids)

    def parameters(self, msg_id: int) -> np.ndarray:
        """A copy of this replica's parameters of message `msg_id` (ring re-sync compares them)."""
        return self.flat.message(msg_id).params_np.copy()

    def evaluate(self, iteration: int) -> dict:
        out = {"train_loss": self.train_loss, "lost_values": self.lost_values}
        if self.config.is_eval_iteration(iteration):
            out.update(_test_metrics(self.model, self.data))
        return out

    def parameter_vector(self) -> torch.Tensor:
        return self.flat.parameter_vector()


class TorchServerWorkload:
    """PS side (ServerWorkload protocol): authoritative parameters + optimizer. The `local` fill
    has no local gradient here and behaves as `rescale` (dlcp/workloads/trainer/fill.py)."""

    def __init__(self, config: WorkloadConfig, fill: str = "rescale", data=None):
        self.config, self.fill = config, check_fill(fill)
        self.data = data if data is not None else load_dataset(config.dataset)
        self.model = build_model(config.model, self.data.in_shape, self.data.n_classes, config.seed)
        self.flat = FlatModel(self.model, config.bucket_values)
        self.n_layers = self.flat.n_layers
        self.optimizer = _optimizer(self.model, config)
        self.lost_values = 0

    def layouts(self) -> list[MessageLayout]:
        return self.flat.layouts()

    def update(self, iteration: int, aggregates: dict[int, Aggregate]) -> None:
        self.lost_values = self.flat.install_gradients(
            iteration, aggregates, self.fill, use_own=False, decode=_decoder(self.config)
        )
        self.optimizer.step()

    def parameters(self, msg_id: int) -> np.ndarray:
        """A view of the live parameters: valid until the next `update`."""
        return self.flat.message(msg_id).params_np

    def evaluate(self, iteration: int) -> dict | None:
        out = {"lost_values": self.lost_values}
        if self.config.is_eval_iteration(iteration):
            out.update(_test_metrics(self.model, self.data))
        return out

    def parameter_vector(self) -> torch.Tensor:
        return self.flat.parameter_vector()
