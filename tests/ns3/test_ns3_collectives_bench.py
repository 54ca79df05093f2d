"""`dlcp bench collectives --json` at small sizes, as CI runs it: every collective asked for gives
a row per size and variant with nccl-tests' bandwidths, the ring on an idle fabric (locality
order: no link carries two of its flows) loses nothing and nears the link, the PS's shared link
caps it near 1/n, and the alpha-beta fit it writes plans `dlcp schedule`. Skipped without the
sim extra."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from cli_runs import ROOT, bench_json

from dlcp.comm.costmodel import load_fit
from simulation.ns3.hosts import core_missing

pytestmark = pytest.mark.skipif(core_missing() is not None, reason=str(core_missing()))


def test_bench_collectives_small(tmp_path):
    fit = tmp_path / "fits.json"
    args = ["--workers", "4", "--sizes-mb", "0.1,0.4", "--collectives", "ring,ps", "--variants", "lossless,dlcp"]
    out, result = bench_json("collectives", *args, "--hosts-per-leaf", "2", "--fit", str(fit), timeout_s=900)
    assert "busbw" in out and "nccl-tests" in result["definitions"]
    rows = {(r["collective"], r["size_mb"], r["variant"]): r for r in result["rows"]}
    assert set(rows) == {(c, s, v) for c in ("ring", "ps") for s in (0.1, 0.4) for v in ("lossless", "dlcp")}
    for (coll, size, _), r in rows.items():
        assert r["workers"] == 4 and r["ops"] == 2 and r["time_min_ms"] <= r["time_ms"] <= r["time_max_ms"]
        factor = 2 * 3 / 4 if coll == "ring" else 4
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * factor, rel=0.01)
        assert r["algbw_gbps"] == pytest.approx(size * 8e6 / (r["time_ms"] / 1e3) / 1e9, rel=0.01)
        assert r["busbw_frac"] < 0.955  # never above the link, headers included
    for variant in ("lossless", "dlcp"):
        ring = rows[("ring", 0.4, variant)]
        assert ring["busbw_frac"] > 0.8 and ring["lost_pkts"] == ring["early_drops"] == ring["tail_drops"] == 0
    # bigger messages amortise the per-step control exchange
    assert rows[("ring", 0.4, "dlcp")]["busbw_frac"] > rows[("ring", 0.1, "dlcp")]["busbw_frac"]
    fits = {(f["collective"], f["variant"]): f for f in result["fits"]}
    assert set(fits) == {(c, v) for c in ("ring", "ps") for v in ("lossless", "dlcp")}
    ring_fit = load_fit(fit, 4, variant="dlcp")
    assert ring_fit.alpha > 0 and 0 < ring_fit.beta < 2 * 8 / 10e9  # seconds per byte: near the link's
    p = subprocess.run(
        [sys.executable, "-m", "dlcp_cli", "schedule", "--profile", "resnet50-usbyte", "--workers", "4"]
        + ["--scheduler", "wfbp", "--fit", str(fit), "--fit-variant", "dlcp", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout.strip().splitlines()[-1])["predicted_iteration_s"] > 0
