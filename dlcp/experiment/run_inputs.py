"""What a run needs besides a valid config, checked before anything starts (both backends call
these): a results directory it can create (a --run-dir no run has used), and layer budgets for layers the model has. Each
raises ConfigError with one line naming the option or key."""

from __future__ import annotations

import functools
import os
import tempfile
from pathlib import Path

from dlcp.settings import ConfigError


def check_results_root(path: str | Path, option: str, probe_write: bool = True) -> None:
    """`path` (a results root, or a run directory: `option` says which, e.g. "--out",
    "output.dir", "--run-dir") is a directory or can be made one: every part of it that exists is
    a directory, and (`probe_write`) a directory can be created in the deepest one (tried, then
    removed: this is what finds a read-only mount, /proc or /sys, which permissions alone do not
    show to root)."""
    path = Path(path)
    where = f"{option} {str(path)!r}"
    existing = path
    while not existing.exists():
        if existing.is_symlink():
            raise ConfigError(f"{where}: {existing} is a dangling symbolic link", option, "dangling link")
        existing = existing.parent
    if not existing.is_dir():
        what = "a file" if existing.is_file() else "not a directory"
        raise ConfigError(f"{where}: {existing} is {what}, not a directory that can hold results", option, what)
    if not probe_write:
        return
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".dlcp-write-check-", dir=existing))
    except OSError as e:
        reason = e.strerror or type(e).__name__
        raise ConfigError(f"{where}: cannot create a directory in {existing} ({reason})", option, reason) from None


def check_new_run_dir(path: str | Path) -> None:
    """`--run-dir` names a directory no run has used: it does not exist, or is empty (a run
    directory is never reused: a second run into one would overwrite some of its files and mix
    its logs with the first's)."""
    path = Path(path)
    try:
        used = path.is_dir() and any(path.iterdir())
    except OSError as e:
        raise ConfigError(f"--run-dir {str(path)!r}: cannot read it ({e.strerror})", "--run-dir") from None
    if used:
        what = "holds a run already" if (path / "meta.json").exists() else "is not empty"
        raise ConfigError(
            f"--run-dir {str(path)!r}: {what}; run directories are never reused (give a new or empty one)",
            "--run-dir",
            what,
        )


def check_layer_budgets(cfg: dict) -> None:
    """`dlcp.layer_budgets` names only layers the workload's model has (a budget for a layer it
    lacks would silently do nothing). Counting a torch model's layers builds it (imports torch),
    so it is done only when budgets are set."""
    budgets = cfg["dlcp"]["layer_budgets"]
    if not budgets:
        return
    w = cfg["workload"]
    n = model_layers(w["model"], w["dataset"], tuple(w["layers"]), w["compute"], w["profile"], w["batch_size"])
    beyond = sorted(int(k) for k in budgets if not 0 <= int(k) < n)
    if beyond:
        ids = ", ".join(map(str, beyond))
        raise ConfigError(
            f"dlcp.layer_budgets: layer {ids} not in model {w['model']}, whose layers are 0..{n - 1}",
            "dlcp.layer_budgets",
            f"layer {ids} beyond 0..{n - 1}",
        )


@functools.lru_cache(maxsize=16)
def model_layers(model: str, dataset: str, layers: tuple, compute: str, profile: str, batch_size: int) -> int:
    """How many layers (layer ids 0..n-1 on the wire) the workload's model has."""
    from dlcp.workloads.settings import TORCH_MODELS, TrainingSettings

    if model not in TORCH_MODELS:
        from dlcp.workloads.profiled import layer_sizes

        settings = TrainingSettings.parse(
            {
                "model": model,
                "dataset": dataset,
                "layers": list(layers),
                "compute": compute,
                "profile": profile,
                "batch_size": batch_size,
            }
        )
        try:
            return len(layer_sizes(settings))
        except ValueError as e:  # the profile: preflight names it the same way
            raise ConfigError(str(e)) from None
    from dlcp.workloads.trainer.data import load_dataset
    from dlcp.workloads.trainer.models import build_model, parameter_layers

    data = load_dataset(dataset)
    return len(parameter_layers(build_model(model, data.in_shape, data.n_classes, 0)))


def check_run_inputs(cfgs: list[dict], out: str | None, run_dir: str | None, probe_write: bool = True) -> None:
    """The checks above for the runs one `dlcp run` planned (their resolved configs; `out` and
    `run_dir`: its --out and --run-dir, None when not given). `probe_write` False: the user that
    checks is not the one that will write (a run refused for root is rerun under sudo)."""
    if run_dir:
        check_results_root(run_dir, "--run-dir", probe_write)
        check_new_run_dir(run_dir)
    elif out:
        check_results_root(out, "--out", probe_write)
    else:
        for root in dict.fromkeys(cfg["output"]["dir"] for cfg in cfgs):
            check_results_root(root, "output.dir", probe_write)
    for cfg in cfgs:
        check_layer_budgets(cfg)
