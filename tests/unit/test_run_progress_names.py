"""What `dlcp run` shows and names, without root: run directory names from --name / --set /
--policies, and the progress output (phases before the first iteration, then iterations)."""

from __future__ import annotations

import io

import pytest

from dlcp.experiment.config import ConfigError
from dlcp.runs.naming import check_name, set_label, variant_names
from dlcp.runs.progress import Progress, worker_counts


def test_runs_varied_with_set_are_named_after_the_keys():
    assert variant_names(None, "dlcp", ["dlcp.load_balancing=per_flow"], None) == ["load_balancing=per_flow"]
    assert variant_names(None, "dlcp", ['dlcp.fill="zero"', "seed=2"], None) == ["fill=zero,seed=2"]
    assert variant_names(None, "fifo", [], None) == ["fifo"]  # nothing varied: the policy


def test_name_and_policies():
    assert variant_names(None, "dlcp", ["seed=2"], "mine") == ["mine"]
    assert variant_names(["fifo", "dlcp"], "dlcp", [], None) == ["fifo", "dlcp"]
    # variants are named by what --policies / --vary varies; --set applies to all of them alike
    assert variant_names(["fifo", "dlcp"], "dlcp", ["links.host_mbps=20"], None) == ["fifo", "dlcp"]
    assert variant_names(["fifo", "dlcp"], "dlcp", ["seed=2"], "slow") == ["fifo+slow", "dlcp+slow"]


def test_set_label_is_directory_safe():
    label = set_label(["background=[{kind = 'tcp'}]", "dlcp.r_max=3"])
    assert "/" not in label and " " not in label and label.endswith("r_max=3")


@pytest.mark.parametrize("bad", ["", "a/b", "../x", ".hidden", "two words"])
def test_bad_name_is_refused_in_one_line(bad):
    with pytest.raises(ConfigError, match=r"^--name "):
        check_name(bad)


def test_progress_shows_phases_then_iterations_off_a_terminal():
    out = io.StringIO()
    p = Progress(out)
    p.phase("starting the network and 1 switch process(es)")
    p.phase("starting the network and 1 switch process(es)")  # repeated: printed once
    p.phase("waiting for the first iteration (workers load the model and connect)")
    p.iterations({"h1": 3, "h2": 2}, 10, started=p.t0)
    p.done()
    lines = out.getvalue().splitlines()
    assert [line.split(" (")[0] for line in lines[:2]] == [
        "dlcp run: starting the network and 1 switch process(es)",
        "dlcp run: waiting for the first iteration",
    ]
    assert "5/20 iterations  h1:3 h2:2" in lines[2] and len(lines) == 3


def test_a_progress_line_of_many_workers_gives_their_range():
    out = io.StringIO()
    p = Progress(out)
    p.iterations({f"h{i}": 3 + (i == 7) for i in range(1, 129)}, 10, started=p.t0)
    (line,) = out.getvalue().splitlines()
    assert "385/1280 iterations  128 workers at 3-4 " in line and "h1:" not in line
    assert worker_counts({f"h{i}": 2 for i in range(1, 10)}) == "9 workers at 2"


def test_progress_on_a_terminal_draws_the_phase_with_rich():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    out = Tty()
    p = Progress(out)
    p.phase("starting the agents")
    p.iterations({"h1": 4}, 8, started=p.t0)
    p.done()
    text = out.getvalue()
    assert "training" in text and "4/8" in text
