"""A synthetic workload with model-like layer sizes and a real least-squares problem (no torch).

Parameters w (all layers flattened, layer 0 = input side) fit a separable weighted least-squares
problem
    f(w) = 1/(2D) * sum_j h_j (w_j - w*_j)^2
with a curvature h_j per layer (log-uniform in [0.5, 5]) and per value (x 0.5..1.5), and the
optimum w* ~ N(0, 1), all drawn from `seed` (every rank agrees). Each worker's stochastic gradient
at iteration t is the gradient of its own noisy sample of the targets,
    g = h * (w - y),   y = w* + sigma / sqrt(batch_size) * eps(seed, rank, t),
so gradients are deterministic from (seed, rank, iteration, w), their average over workers is
less noisy, and SGD with step `lr` converges to w* up to the noise floor: training makes
measurable progress, and lost chunks measurably slow it down. `train_loss` is the worker's
sample loss, `test_loss` the exact f(w); there is no accuracy.

Messages follow DDP: layers are grouped in backward order (output side first) into buckets of at
least `bucket_values` values (0 = one message per layer), layers ascending inside a message. The
default layer sizes are LeNet-5's (weights + bias per layer, 44,426 values); `workload.layers`
(list of ints) overrides them, `workload.compute_ms` adds a per-iteration backward time spread
over the layers, so communication can overlap computation. With `workload.compute = "profile"`
the layers are the profile's tensors (sizes from the profile) and every layer's forward and
backward take the profile's times (dlcp/workloads/compute_model.py): gradients become ready in
backward order at those times, and the next forward waits per layer for its parameters.

Fill rules (`dlcp.fill`) are the torch trainer's (dlcp/workloads/fills/, one formula for both):
zero, rescale, stale, local (local = rescale at the PS, which has no gradient of its own).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np

from dlcp.workloads import fills, hadamard
from dlcp.workloads.contract import Aggregate, GradMessage, MessageLayout, ParamChunk, message_layouts
from dlcp.workloads.profiled import layer_sizes, make_profile_compute, workload_profile
from dlcp.workloads.settings import WorkloadConfig, check_fill

NOISE_SIGMA = 1.0


def decoded(config: WorkloadConfig, mean: np.ndarray, iteration: int, msg_id: int) -> np.ndarray:
    """The filled mean in the parameters' domain: transformed back with `workload.hadamard` (a copy)."""
    if not config.hadamard:
        return mean
    out = np.array(mean, dtype=np.float32)
    hadamard.decode(out, config.seed, iteration, msg_id)
    return out


def fill_mean(
    agg: Aggregate, rule: str, previous: np.ndarray | None = None, own: np.ndarray | None = None
) -> np.ndarray:
    """Averaged gradient of `agg` under fill rule `rule` (dlcp/workloads/fills/)."""
    return fills.fill_mean(rule, agg.total, agg.count, agg.world, previous, own)


class _Problem:
    """The least-squares problem and the message layout, shared by workers and the PS."""

    def __init__(self, config: WorkloadConfig):
        self.config = config
        sizes = np.asarray(layer_sizes(config), dtype=np.int64)
        self.n_layers = len(sizes)
        self.layer_offsets = np.concatenate([[0], np.cumsum(sizes)])
        self.n_values = int(self.layer_offsets[-1])
        rng = np.random.default_rng([config.seed, 0xD1C9])
        layer_h = 10 ** rng.uniform(np.log10(0.5), np.log10(5.0), self.n_layers)
        self.h = (np.repeat(layer_h, sizes) * rng.uniform(0.5, 1.5, self.n_values)).astype(np.float32)
        self.w_star = rng.standard_normal(self.n_values, dtype=np.float32)
        planned = message_layouts(sizes.tolist(), config.bucket_values)
        self._layouts = [lay for lay, _ in planned]
        self.slices: dict[int, slice] = {lay.msg_id: sl for lay, sl in planned}

    def layouts(self) -> list[MessageLayout]:
        return list(self._layouts)

    def test_loss(self, w: np.ndarray) -> float:
        d = w - self.w_star
        return float(np.dot(self.h * d, d) / (2 * self.n_values))


class SyntheticWorkload:
    """Worker side (Workload protocol of dlcp/workloads/contract.py)."""

    def __init__(self, config: WorkloadConfig, rank: int = 0, world: int = 1, fill: str = "rescale"):
        if not 0 <= rank < world:
            raise ValueError(f"rank {rank} is outside 0..{world - 1}")
        self.config, self.rank, self.world, self.fill = config, rank, world, check_fill(fill)
        self.problem = _Problem(config)
        self.n_layers = self.problem.n_layers
        self.w = np.zeros(self.problem.n_values, dtype=np.float32)
        self.timer = self.gate = None
        if config.compute == "profile":
            profile = workload_profile(config)
            assert profile is not None  # compute = "profile" has one (or raised)
            self.timer, self.gate = make_profile_compute(
                profile, [[i] for i in range(len(profile))], config.dilation, warmup=config.warmup_iterations
            )
        self._own: dict[int, np.ndarray] = {}
        self._previous: dict[int, np.ndarray] = {}
        self.train_loss: float | None = None
        self.lost_values = 0

    def layouts(self) -> list[MessageLayout]:
        return self.problem.layouts()

    def gradient(self, iteration: int) -> np.ndarray:
        """The full stochastic gradient of this rank at `iteration` (deterministic)."""
        p = self.problem
        rng = np.random.default_rng([self.config.seed, 1 + self.rank, iteration])
        noise = rng.standard_normal(p.n_values, dtype=np.float32)
        noise *= np.float32(NOISE_SIGMA / np.sqrt(self.config.batch_size))
        residual = self.w - p.w_star - noise
        self.train_loss = float(np.dot(p.h * residual, residual) / (2 * p.n_values))
        return p.h * residual

    def compute(self, iteration: int) -> Iterator[GradMessage]:
        if self.timer is not None:
            yield from self._compute_profiled(iteration)
            return
        g = self.gradient(iteration)
        self.lost_values = 0
        layouts = self.problem.layouts()
        per_msg_s = self.config.compute_ms / 1e3 / len(layouts)
        for layout in layouts:
            if per_msg_s:
                time.sleep(per_msg_s)  # backward time of this bucket's layers
            values = g[self.problem.slices[layout.msg_id]].copy()  # stays valid while it travels
            self._encode(values, iteration, layout.msg_id)
            self._own[layout.msg_id] = values
            yield GradMessage(layout, values, self.n_layers)

    def _compute_profiled(self, iteration: int) -> Iterator[GradMessage]:
        """Per layer at the profile's times; the gradient of a message is computed when its
        layers' parameters are in (the forward of its layers has run), from noise drawn at the
        start: the same values as `gradient` gives."""
        p, timer = self.problem, self.timer
        assert timer is not None  # compute() comes here only with a profile
        timer.begin(iteration)
        rng = np.random.default_rng([self.config.seed, 1 + self.rank, iteration])
        noise = rng.standard_normal(p.n_values, dtype=np.float32)
        noise *= np.float32(NOISE_SIGMA / np.sqrt(self.config.batch_size))
        timer.end_forward()
        self.lost_values = 0
        loss_sum = 0.0
        for layout in p.layouts():
            sl = p.slices[layout.msg_id]
            residual = self.w[sl] - p.w_star[sl] - noise[sl]
            loss_sum += float(np.dot(p.h[sl] * residual, residual))
            values = p.h[sl] * residual
            self._encode(values, iteration, layout.msg_id)
            self._own[layout.msg_id] = values
            timer.gradient_ready(layout.layer_first, done_at=timer.clock.now())
            yield GradMessage(layout, values, self.n_layers)
        timer.end()
        self.train_loss = loss_sum / (2 * p.n_values)

    def compute_stats(self) -> dict | None:
        """How well the machine kept up with the profile (None with real compute)."""
        return None if self.timer is None else {"mode": "profile", **self.timer.stats.as_dict()}

    def _encode(self, values: np.ndarray, iteration: int, msg_id: int) -> None:
        if self.config.hadamard:
            hadamard.encode(values, self.config.seed, iteration, msg_id)

    def apply_gradients(self, iteration: int, aggregates: dict[int, Aggregate]) -> None:
        for msg_id, agg in aggregates.items():
            mean = fill_mean(agg, self.fill, self._previous.get(msg_id), self._own.get(msg_id))
            self.lost_values += int((agg.count < agg.world).sum())
            self._previous[msg_id] = mean
            self.w[self.problem.slices[msg_id]] -= np.float32(self.config.lr) * decoded(
                self.config, mean, iteration, msg_id
            )
        if self.gate is not None:
            self.gate.release_all(iteration + 1)

    def apply_parameters(self, iteration: int, msg_id: int, chunk: ParamChunk) -> None:
        sl = self.w[self.problem.slices[msg_id]]
        np.copyto(sl, chunk.values, where=~chunk.lost)
        self.lost_values += int(chunk.lost.sum())
        if self.gate is not None:  # the next forward may run these layers now
            self.gate.release(iteration + 1, self.problem.layouts()[msg_id].layer_ids)

    def parameters(self, msg_id: int) -> np.ndarray:
        return self.w[self.problem.slices[msg_id]].copy()

    def evaluate(self, iteration: int) -> dict | None:
        out = {"train_loss": self.train_loss, "lost_values": self.lost_values}
        if self.config.is_eval_iteration(iteration):
            out["test_loss"] = self.problem.test_loss(self.w)
        return out


class SyntheticServerWorkload:
    """PS side (ServerWorkload protocol): authoritative parameters, SGD step on the filled mean."""

    def __init__(self, config: WorkloadConfig, fill: str = "rescale"):
        self.config, self.fill = config, check_fill(fill)
        self.problem = _Problem(config)
        self.n_layers = self.problem.n_layers
        self.w = np.zeros(self.problem.n_values, dtype=np.float32)
        self._previous: dict[int, np.ndarray] = {}
        self.lost_values = 0

    def layouts(self) -> list[MessageLayout]:
        return self.problem.layouts()

    def update(self, iteration: int, aggregates: dict[int, Aggregate]) -> None:
        self.lost_values = 0
        for msg_id, agg in aggregates.items():
            mean = fill_mean(agg, self.fill, self._previous.get(msg_id), None)
            self.lost_values += int((agg.count < agg.world).sum())
            self._previous[msg_id] = mean
            self.w[self.problem.slices[msg_id]] -= np.float32(self.config.lr) * decoded(
                self.config, mean, iteration, msg_id
            )

    def parameters(self, msg_id: int) -> np.ndarray:
        """A view of the live parameters: valid until the next `update`."""
        return self.w[self.problem.slices[msg_id]]

    def evaluate(self, iteration: int) -> dict | None:
        out: dict[str, float] = {"lost_values": self.lost_values}
        if self.config.is_eval_iteration(iteration):
            out["test_loss"] = self.problem.test_loss(self.w)
        return out
