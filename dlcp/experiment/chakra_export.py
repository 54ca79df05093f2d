"""A run's workload as Chakra execution traces, one file per worker rank (`dlcp chakra export`):
the layout and the rules are dlcp/workloads/chakra.py's (`write_rank_et`), the layers and messages
the run's (dlcp/experiment/workload_shape.py), the iteration count the run's."""

from __future__ import annotations

from pathlib import Path

from dlcp.experiment import config as configmod
from dlcp.experiment.workload_shape import workload_shape
from dlcp.workloads.chakra import EtLayer, EtMessage, write_rank_et


def export_run(run_dir: str | Path, out_dir: str | Path, iterations: int | None = None) -> list[Path]:
    """Write `<out_dir>/<experiment>.<rank>.et` for every worker rank; their paths. ValueError with
    one line when the run cannot be exported."""
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    if not (run_dir / "config.toml").is_file():
        raise ValueError(f"{run_dir}: not a run directory (no config.toml)")
    try:
        config = configmod.load(run_dir / "config.toml", [])
    except configmod.ConfigError as e:
        raise ValueError(str(e)) from None
    shape = workload_shape(config)
    workers = int(config["workload"].get("workers", 1))
    passes = iterations if iterations is not None else int(config["workload"].get("iterations", 1))
    if passes < 1:
        raise ValueError(f"iterations: {passes} < 1")
    layers = [EtLayer(lay.name, lay.forward_s, lay.backward_s) for lay in shape.layers]
    messages = [
        EtMessage(
            shape.layers[m.layers[0]].name if len(m.layers) == 1 else f"msg{m.msg_id}",
            m.nbytes,
            min(m.layers),
            m.layers,
        )
        for m in shape.messages
    ]
    name = config.get("name", "run")
    attrs = {
        "dlcp_run": str(run_dir.resolve()),
        "dlcp_profile": shape.profile,
        "dlcp_compute_scale": f"{shape.compute_scale:g}",
        "dlcp_mode": str(config["workload"].get("mode", "")),
        "dlcp_workers": str(workers),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for rank in range(workers):
        path = out_dir / f"{name}.{rank}.et"
        write_rank_et(path, layers, messages, passes, {**attrs, "dlcp_rank": str(rank)})
        paths.append(path)
    return paths
