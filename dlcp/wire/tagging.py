"""Per-packet priority and drop precedence for a gradient message (docs/tagging.md).

All functions are pure and vectorised over the packets of one message. Input is a flat gradient
(numpy array or CPU torch tensor, used without copying it to numpy) cut into packets of
`values_per_pkt` values; output is one (prio, drop_prec, mag_class) triple per packet.

- Queue priority from the layer of the packet's first value:
      prio(l) = 6 - floor(rank(l) * 6 / L)            (data classes 1..6; 7 = control, 0 = background)
  with rank(l) = l for `input_first` (the next forward pass needs input-side layers first) and
  L - 1 - l for `output_first`.
- Drop precedence from magnitude: m = mean |g| per packet, ranked inside the message. Packet
  position p = number of packets with strictly larger m (ties share the more protective class).
  With n packets: p < ceil(n/2) -> 0 (protected); p < ceil(3n/4) -> 1; p < ceil(7n/8) -> 2; else 3.
  A packet whose values are all zero carries nothing a fill rule cannot restore: it gets 3.
- mag_class = clamp(round(log2(m / median(m))) + 8, 0, 15); 0 for an all-zero packet.
- The six data classes map onto the queues `queues = [lo, hi]` (default 1..6, the identity):
      queue(p) = lo + floor((p - 1) * (hi - lo + 1) / 6)
  so a job given a band of the queues (a job priority class, docs/tagging.md "Jobs") keeps its
  layers' order inside the band.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, ClassVar, Literal, get_args

import numpy as np
from pydantic import Field, model_validator

from dlcp.settings import BadValue, Settings
from dlcp.wire.header import (
    DROP_PREC_MAX,
    MAG_CLASS_MAX,
    MAG_CLASS_MEDIAN,
    PRIO_DATA_MAX,
    PRIO_DATA_MIN,
    VALUES_PER_PKT,
)

Policy = Literal["fifo", "layer", "magnitude", "dlcp"]
LayerOrder = Literal["input_first", "output_first"]
LayerBias = Literal["none", "input_half", "output_half"]
POLICIES = get_args(Policy)
LAYER_ORDERS = get_args(LayerOrder)
LAYER_BIASES = get_args(LayerBias)
N_DATA_CLASSES = PRIO_DATA_MAX - PRIO_DATA_MIN + 1  # 6
FULL_BAND = (PRIO_DATA_MIN, PRIO_DATA_MAX)  # every data queue: the classes map onto themselves
DataQueue = Annotated[int, Field(ge=PRIO_DATA_MIN, le=PRIO_DATA_MAX)]


class TaggingConfig(Settings):
    """How a host tags its packets (keys of the experiment's `dlcp` section)."""

    section: ClassVar[str] = "dlcp"
    policy: Policy = Field("dlcp", description="tagging policy (fifo also makes switches FIFO)")
    layer_order: LayerOrder = Field("input_first", description="which layers get the high priorities")
    # an ablation of "back layers matter more": "input_half" makes input-side layers more droppable
    drop_layer_bias: LayerBias = Field("none", description="half of the layers made more droppable")
    queues: list[DataQueue] = Field(
        list(FULL_BAND),
        min_length=2,
        max_length=2,
        description="lowest and highest switch queue the data classes 1..6 map onto (a job's band: "
        "cluster.job_policy = 'priority' sets it per job)",
    )

    @model_validator(mode="after")
    def _band_in_order(self):
        if self.queues[0] > self.queues[1]:
            raise BadValue("queues", f"{list(self.queues)}: the lowest queue comes first")
        return self


def band_priority(prio: np.ndarray, queues=FULL_BAND) -> np.ndarray:
    """The queue of each data class 1..6 in the band `queues` = (lo, hi): lo + floor((p - 1) *
    (hi - lo + 1) / 6); the identity for the full band 1..6."""
    lo, hi = queues
    if (lo, hi) == FULL_BAND:  # the identity, without a copy
        return prio
    p = np.asarray(prio, dtype=np.int64) - PRIO_DATA_MIN
    return (lo + (p * (hi - lo + 1)) // N_DATA_CLASSES).astype(np.uint8)


@dataclass
class Tags:
    """Per-packet tags of one message (numpy uint8 arrays of length n_pkts)."""

    prio: np.ndarray
    drop_prec: np.ndarray
    mag_class: np.ndarray
    layer_id: np.ndarray  # layer of each packet's first value (uint16)

    def __len__(self) -> int:
        return len(self.prio)


def n_packets(n_values: int, values_per_pkt: int = VALUES_PER_PKT) -> int:
    return max(1, -(-n_values // values_per_pkt))


def layer_priority(layer_ids, n_layers: int, order: str = "input_first") -> np.ndarray:
    """Queue priority (1..6) of layers `layer_ids` in a model of `n_layers` layers."""
    if n_layers < 1:
        raise ValueError(f"n_layers must be >= 1, got {n_layers}")
    layers = np.asarray(layer_ids, dtype=np.int64)
    if layers.size and (layers.min() < 0 or layers.max() >= n_layers):
        raise ValueError(f"layer ids must lie in 0..{n_layers - 1}")
    rank = layers if order == "input_first" else (n_layers - 1 - layers)
    return (PRIO_DATA_MAX - (rank * N_DATA_CLASSES) // n_layers).astype(np.uint8)


def packet_layers(layer_starts, layer_ids, n_pkts: int, values_per_pkt: int = VALUES_PER_PKT) -> np.ndarray:
    """Layer of each packet's first value.

    `layer_starts[i]` is the value offset (in the flat message) where layer `layer_ids[i]` begins;
    offsets increase and the first is 0.
    """
    starts = np.asarray(layer_starts, dtype=np.int64)
    ids = np.asarray(layer_ids, dtype=np.int64)
    if starts.size == 0 or starts[0] != 0 or np.any(np.diff(starts) < 0) or starts.size != ids.size:
        raise ValueError("layer_starts must start at 0, be non-decreasing and match layer_ids")
    first_values = np.arange(n_pkts, dtype=np.int64) * values_per_pkt
    return ids[np.searchsorted(starts, first_values, side="right") - 1].astype(np.uint16)


def packet_magnitudes(grad, values_per_pkt: int = VALUES_PER_PKT) -> np.ndarray:
    """Mean |g| of each packet's values (float64 numpy, one entry per packet)."""
    n = int(grad.numel()) if hasattr(grad, "numel") else int(np.asarray(grad).size)
    n_full, tail = divmod(n, values_per_pkt)
    if hasattr(grad, "numel"):  # torch: reduce in torch, hand only the per-packet sums to numpy
        import torch

        g = grad.detach().reshape(-1)
        sums = g[: n_full * values_per_pkt].view(n_full, values_per_pkt).abs().sum(dim=1).double()
        if tail:
            sums = torch.cat([sums, g[n_full * values_per_pkt :].abs().sum(dtype=torch.float64).reshape(1)])
        sums = sums.numpy()
    else:
        g = np.asarray(grad).reshape(-1)
        sums = np.abs(g[: n_full * values_per_pkt].reshape(n_full, values_per_pkt)).sum(axis=1, dtype=np.float64)
        if tail:
            sums = np.append(sums, np.abs(g[n_full * values_per_pkt :]).sum(dtype=np.float64))
    if n == 0:
        return np.zeros(1)
    counts = np.full(len(sums), values_per_pkt, dtype=np.float64)
    if tail:
        counts[-1] = tail
    return sums / counts


def magnitude_drop_precedence(mags: np.ndarray) -> np.ndarray:
    """Drop precedence 0..3 from per-packet magnitudes, ranked within the message."""
    n = len(mags)
    order = np.sort(mags)[::-1]  # descending
    # position = number of packets strictly larger: ties share the best (most protective) position
    pos = np.searchsorted(-order, -mags, side="left")
    bounds = np.array([-(-n // 2), -(-3 * n // 4), -(-7 * n // 8)])
    dp = np.searchsorted(bounds, pos, side="right").astype(np.uint8)
    dp[mags == 0] = DROP_PREC_MAX
    return dp


def magnitude_class(mags: np.ndarray) -> np.ndarray:
    """log2 bucket of each packet's magnitude relative to the message median (0..15)."""
    median = float(np.median(mags))
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.log2(mags / median) if median > 0 else np.where(mags > 0, np.inf, -np.inf)
    cls = np.clip(np.rint(np.nan_to_num(rel, nan=-np.inf, posinf=99, neginf=-99)) + MAG_CLASS_MEDIAN, 0, MAG_CLASS_MAX)
    cls[mags == 0] = 0
    return cls.astype(np.uint8)


def tag_message(
    grad,
    layer_starts,
    layer_ids,
    n_layers: int,
    config: TaggingConfig = TaggingConfig(),
    values_per_pkt: int = VALUES_PER_PKT,
) -> Tags:
    """Tags for every packet of one message (a flat gradient made of consecutive layers)."""
    n_values = int(grad.numel()) if hasattr(grad, "numel") else int(np.asarray(grad).size)
    n = n_packets(n_values, values_per_pkt)
    layers = packet_layers(layer_starts, layer_ids, n, values_per_pkt)
    return tag_packets(packet_magnitudes(grad, values_per_pkt), layers, n_layers, config)


def tag_packets(mags: np.ndarray, layers: np.ndarray, n_layers: int, config: TaggingConfig = TaggingConfig()) -> Tags:
    """Tags of the packets of one message from each packet's magnitude (mean |g|) and the layer of
    its first value (`tag_message` without the values)."""
    n = len(mags)
    mag_class = magnitude_class(mags)
    if config.policy in ("layer", "dlcp"):
        prio = layer_priority(layers, n_layers, config.layer_order)
    else:
        prio = np.full(n, PRIO_DATA_MIN, dtype=np.uint8)
    prio = band_priority(prio, config.queues)
    if config.policy in ("magnitude", "dlcp"):
        drop_prec = magnitude_drop_precedence(mags)
        if config.drop_layer_bias != "none":
            input_half = layers.astype(np.int64) * 2 < n_layers
            biased = input_half if config.drop_layer_bias == "input_half" else ~input_half
            drop_prec = np.minimum(drop_prec + biased, DROP_PREC_MAX).astype(np.uint8)
    else:
        drop_prec = np.zeros(n, dtype=np.uint8)
    return Tags(prio=prio, drop_prec=drop_prec, mag_class=mag_class, layer_id=layers)
