"""Datasets and the global batch schedule shared by every worker.

- `digits`: scikit-learn's digits (1797 grey 8x8 images, 10 classes; the file ships with the
  package, nothing is downloaded), read from sklearn's data file without importing sklearn: the
  import costs ~2 s of CPU in every agent of every run, and `load_digits` only parses that file. A fixed split (independent of the training seed, so accuracies
  of different seeds are comparable): 1347 training and 450 test images. Pixels standardised with
  the mean and standard deviation of the training split.
- `synthetic`: a task for scale: 3x32x32 inputs, 10 classes, 16384 training and 1024 test samples.
  Sample i is `0.5 * template[label_i] + N(0, 1)` noise drawn from a generator seeded with i, so it
  is generated on demand (nothing large is held in memory) and identical in every process.

Batches: iteration `it` uses the global batch `global_batch_indices(it)` of `batch_size * world`
training samples (a fresh permutation per epoch, seeded by the training seed; an incomplete last
batch of an epoch is skipped). Worker `rank` trains on its own slice `[rank * b, (rank + 1) * b)`
of that batch, so N workers together see exactly what one process with a batch of N * b sees.
"""

from __future__ import annotations

import gzip
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

SPLIT_SEED = 20240601  # the train/test split never depends on the training seed


@dataclass
class Dataset:
    name: str
    in_shape: tuple[int, int, int]  # (channels, height, width)
    n_classes: int
    n_train: int
    train_x: torch.Tensor | None  # None: generated on demand (synthetic)
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    _make: Callable[[np.ndarray], torch.Tensor] | None = None  # inputs of datasets generated on demand

    def train_batch(self, indices: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        idx = torch.from_numpy(np.asarray(indices, dtype=np.int64))
        if self.train_x is not None:
            x = self.train_x[idx]
        else:
            assert self._make is not None  # a dataset without train_x generates its inputs
            x = self._make(indices)
        return x, self.train_y[idx]


def digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """(pixels (1797, 64) in 0..16, labels (1797,)): what sklearn's `load_digits` returns as
    `data` and `target`, parsed from the same file (64 pixel columns, then the label)."""
    spec = importlib.util.find_spec("sklearn")  # finds the package without running its import
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("dataset 'digits' needs scikit-learn installed (it ships the data file)")
    path = Path(spec.submodule_search_locations[0]) / "datasets" / "data" / "digits.csv.gz"
    with gzip.open(path, "rt") as f:
        table = np.loadtxt(f, delimiter=",")
    return table[:, :-1], table[:, -1].astype(np.int64)


def load_digits_dataset() -> Dataset:
    pixels, labels = digits_arrays()
    x = torch.from_numpy((pixels / 16.0).astype(np.float32)).reshape(-1, 1, 8, 8)
    y = torch.from_numpy(labels)
    perm = torch.from_numpy(np.random.default_rng(SPLIT_SEED).permutation(len(y)))
    n_test = 450
    test, train = perm[:n_test], perm[n_test:]
    x = (x - x[train].mean()) / x[train].std()
    return Dataset(
        "digits",
        (1, 8, 8),
        10,
        len(train),
        x[train].contiguous(),
        y[train].contiguous(),
        x[test].contiguous(),
        y[test].contiguous(),
    )


def load_synthetic_dataset(n_train: int = 16384, n_test: int = 1024, shape=(3, 32, 32), n_classes: int = 10) -> Dataset:
    rng = np.random.default_rng(SPLIT_SEED)
    templates = torch.from_numpy(rng.standard_normal((n_classes, *shape)).astype(np.float32))
    labels = torch.from_numpy(rng.integers(0, n_classes, n_train + n_test).astype(np.int64))

    def make(indices) -> torch.Tensor:
        out = torch.empty((len(indices), *shape))
        g = torch.Generator()
        for row, i in enumerate(np.asarray(indices).tolist()):
            g.manual_seed(SPLIT_SEED + int(i))
            torch.randn(shape, generator=g, out=out[row])
        return out.add_(0.5 * templates[labels[torch.as_tensor(np.asarray(indices), dtype=torch.int64)]])

    test_idx = np.arange(n_train, n_train + n_test)
    return Dataset(
        "synthetic", tuple(shape), n_classes, n_train, None, labels[:n_train], make(test_idx), labels[n_train:], make
    )


DATASETS = {"digits": load_digits_dataset, "synthetic": load_synthetic_dataset}


def load_dataset(name: str) -> Dataset:
    if name not in DATASETS:
        raise ValueError(f"workload.dataset: unknown dataset {name!r} (one of {', '.join(DATASETS)})")
    return DATASETS[name]()


class BatchSchedule:
    """Which training samples each iteration uses, identical in every process for a seed."""

    def __init__(self, n_train: int, global_batch: int, seed: int):
        if global_batch < 1 or global_batch > n_train:
            raise ValueError(
                f"workload.batch_size: a global batch of {global_batch} samples does not fit "
                f"the {n_train} training samples"
            )
        self.n_train, self.global_batch, self.seed = n_train, global_batch, seed
        self.per_epoch = n_train // global_batch
        self._epoch = -1
        self._perm: np.ndarray | None = None

    def global_batch_indices(self, iteration: int) -> np.ndarray:
        epoch, k = divmod(iteration, self.per_epoch)
        if epoch != self._epoch:
            self._epoch, self._perm = epoch, np.random.default_rng([self.seed, epoch]).permutation(self.n_train)
        assert self._perm is not None  # drawn at the first call: iterations start at 0, epochs at -1
        return self._perm[k * self.global_batch : (k + 1) * self.global_batch]

    def shard(self, iteration: int, rank: int, world: int) -> np.ndarray:
        """Worker `rank`'s slice of the global batch of `iteration`."""
        b = self.global_batch // world
        return self.global_batch_indices(iteration)[rank * b : (rank + 1) * b]
