"""OptiReduce's randomised Hadamard transform around the gradient exchange (`workload.hadamard`,
docs/bounded-loss.md): each message's gradient is sent transformed, and the filled average is
transformed back, so a lost packet no longer wipes out its 350 values but costs every value of
its block a little.

OptiReduce [V: arXiv 2310.06993 abstract] uses "Hadamard Transform" to mitigate the impact of
dropped gradient entries; the details are our reconstruction [D], after the randomised Hadamard
transform of the compression literature and a course reproduction that pads the bucket to a power
of two and transforms it whole [S: DoctorSheep-yi/OptiReduce `optireduce.py`]:

- x -> H D x per block: D a diagonal of random signs drawn from (seed, iteration, message), the
  same on every rank, so the transform is one linear map and the sum of transformed contributions
  is the transform of their sum; H the normalised Walsh-Hadamard matrix of the block (H H = I).
- Blocks instead of padding, so a message keeps its length (and its packets, wire ids, layouts):
  n values are cut into blocks of `MAX_BLOCK` (4096) and the rest into the powers of two of its
  binary expansion (156 = 128 + 16 + 8 + 4). A block longer than a packet (350 values) spreads a
  lost packet over the block; blocks shorter than a packet (a message's tail) do not spread it.
- The inverse is D H per block. Fill rules act on the transformed aggregate (total / count is the
  mean of what arrived, transformed), so the trainer transforms back after the fill
  (dlcp/workloads/trainer/torch_workload.py, synthetic.py). `stale` keeps the previous average in
  the trainer's domain and is refused with the transform (dlcp/experiment/config.py).

Pure numpy on float32 views, in place.
"""

from __future__ import annotations

import numpy as np

MAX_BLOCK = 4096


def blocks(n: int) -> list[int]:
    """Block lengths (powers of two) that cut n values: full MAX_BLOCK blocks, then the rest's bits."""
    out = [MAX_BLOCK] * (n // MAX_BLOCK)
    rest = n % MAX_BLOCK
    bit = MAX_BLOCK >> 1
    while rest:
        if rest & bit:
            out.append(bit)
            rest -= bit
        bit >>= 1
    return out


def signs(seed: int, iteration: int, msg_id: int, n: int) -> np.ndarray:
    """The random signs D of message `msg_id` in `iteration` (the same on every rank)."""
    rng = np.random.default_rng([seed, iteration, msg_id, 0x4ADA])
    return np.where(rng.integers(0, 2, n, dtype=np.int8) > 0, np.float32(1.0), np.float32(-1.0))


def _walsh_hadamard(x: np.ndarray) -> None:
    """x <- H x per block, in place (H normalised: H H = I)."""
    start = 0
    for b in blocks(x.size):
        seg: np.ndarray = x[start : start + b].astype(np.float64).reshape(1, b)
        h = 1
        while h < b:
            seg = seg.reshape(1, b // (2 * h), 2, h)
            seg = np.stack((seg[:, :, 0, :] + seg[:, :, 1, :], seg[:, :, 0, :] - seg[:, :, 1, :]), axis=2)
            h *= 2
        x[start : start + b] = (seg.reshape(b) / np.sqrt(b)).astype(np.float32)
        start += b


def encode(values: np.ndarray, seed: int, iteration: int, msg_id: int) -> None:
    """values <- H D values, in place (a flat float32 array of one message)."""
    v = values.reshape(-1)
    v *= signs(seed, iteration, msg_id, v.size)
    _walsh_hadamard(v)


def decode(values: np.ndarray, seed: int, iteration: int, msg_id: int) -> None:
    """values <- D H values, in place: `encode`'s inverse."""
    v = values.reshape(-1)
    _walsh_hadamard(v)
    v *= signs(seed, iteration, msg_id, v.size)
