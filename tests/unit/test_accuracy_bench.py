"""`dlcp bench accuracy`: table first, JSON on the last line, clear errors."""

import json
import subprocess
import sys


def run(*args):
    return subprocess.run(
        [sys.executable, "-m", "dlcp_cli", "bench", "accuracy", *args], capture_output=True, text=True
    )


def test_small_run_prints_table_then_json():
    p = run("--iterations", "6", "--seeds", "1", "--losses", "0,0.2", "--fills", "rescale,stale", "--json")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.strip().splitlines()
    result = json.loads(lines[-1])
    assert result["model"] == "cnn" and result["iterations"] == 6
    rows = result["rows"]
    assert [(r["loss"], r["fill"]) for r in rows] == [(0.0, "all"), (0.2, "rescale"), (0.2, "stale")]
    assert rows[0]["delta_points"] == 0 and rows[1]["lost_pkts_pct"] > 5
    for r in rows:
        assert 0 <= r["accuracy"] <= 100
        assert abs(r["delta_points"] - (r["accuracy"] - rows[0]["accuracy"])) < 1e-2
    assert any(line.split()[:2] == ["loss", "fill"] for line in lines)  # the readable table
    assert "[3/3]" in p.stderr  # progress


def test_bad_fill_is_one_line_error():
    p = run("--fills", "mean")
    assert p.returncode != 0 and "unknown fill rule 'mean'" in p.stderr
