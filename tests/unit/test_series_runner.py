"""The series runner without a network or a simulator: what it plans and refuses before anything
starts, meta.json's fields on every backend, the git revision's +dirty, and a run in a forked
process taking the parent's signals (real processes, real signals)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import dlcp.backends as backends
from dlcp.experiment import config as configmod
from dlcp.runs import run_dir
from dlcp.runs.series_runner import SeriesRequest, plan

ROOT = Path(__file__).resolve().parents[2]

TINY = """
name = "tiny"
backend = "{backend}"
[topology]
hosts = 4
[workload]
workers = 2
model = "synthetic"
iterations = 2
"""


def tiny(tmp_path: Path, backend: str = "ns3") -> str:
    path = tmp_path / "tiny.toml"
    path.write_text(TINY.format(backend=backend))
    return str(path)


def test_plan_names_every_backends_runs_alike(tmp_path):
    """--name, --set labels and --policies name runs the same way whatever the backend."""
    for backend in backends.names():
        cfg = tiny(tmp_path, backend)
        assert [r.variant for r in plan(SeriesRequest(cfg, name="mine")).runs] == ["mine"]
        assert [r.variant for r in plan(SeriesRequest(cfg, ["seed=2"])).runs] == ["seed=2"]
        pairs = plan(SeriesRequest(cfg, policies=["fifo", "dlcp"], repeat=2, name="x"))
        assert [(r.variant, r.rep, r.cfg["seed"]) for r in pairs.runs] == [
            ("fifo+x", 1, 1),
            ("dlcp+x", 1, 1),
            ("fifo+x", 2, 2),
            ("dlcp+x", 2, 2),
        ]
        assert pairs.backend is backends.get(backend)


@pytest.mark.parametrize(
    "request_args, message",
    [
        ({"run_dir": "r", "repeat": 2}, "--run-dir: takes one run"),
        ({"vary": ["backend=builtin,ns3"]}, "backend: a series runs on one backend, not ns3 and builtin"),
        ({"name": "a/b"}, "--name 'a/b': use letters"),
        ({"overrides": ["backend=ref"]}, "backend: 'ref' is now called 'builtin'"),
    ],
)
def test_plan_refuses_in_one_line_before_anything_starts(tmp_path, request_args, message):
    with pytest.raises(configmod.ConfigError) as e:
        plan(SeriesRequest(tiny(tmp_path), **request_args))
    assert message in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "r").exists()


def test_meta_has_the_same_fields_on_every_backend():
    """meta.json: one set of fields, the run's facts taken from the backend's capabilities."""
    metas = {}
    for name in backends.names():
        cfg = configmod.validate({"name": "m", "backend": name})
        metas[name] = run_dir.start_meta(cfg, "v", backends.get(name), {"tool": "1"}, ["seed=1"], 0, 1.0)
    keys = {name: list(m) for name, m in metas.items()}
    assert len({tuple(k) for k in keys.values()}) == 1, keys
    for name, meta in metas.items():
        caps = backends.capabilities(name)
        assert (meta["backend"], meta["clock"], meta["deterministic"]) == (name, caps.clock, caps.deterministic)
        assert meta["versions"]["tool"] == "1" and meta["overrides"] == ["seed=1"]


def test_git_revision_says_dirty_when_a_tracked_file_differs(tmp_path, monkeypatch):
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (tmp_path / "f").write_text("a")
    subprocess.run([*git, "add", "f"], check=True)
    subprocess.run([*git, "commit", "-qm", "f"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    monkeypatch.setattr(run_dir, "REPO", tmp_path)
    (tmp_path / "untracked").write_text("x")  # not a change of the checkout's code
    assert run_dir.git_revision() == head
    (tmp_path / "f").write_text("b")
    assert run_dir.git_revision() == head + "+dirty"


# A parent that runs `child` in a forked process (dlcp/runs/forked.py) as the series runner does,
# and says what ended it; the child writes what reached it into <dir>/child.
FORKED = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from dlcp.runs import signals
    from dlcp.runs.forked import run_forked

    out = Path(sys.argv[1])

    def child():
        (out / "child-pid").write_text(str(os.getpid()))
        try:
            time.sleep(60)
            return 0
        except (KeyboardInterrupt, signals.Terminated) as e:
            with open(out / "child", "a") as f:
                f.write(type(e).__name__ + "\\n")
            return signals.exit_code(e)

    signals.install()
    try:
        code = run_forked(child)
        print("child exited", code)
    except (KeyboardInterrupt, signals.Terminated) as e:
        print("parent stopped by", type(e).__name__)
        sys.exit(signals.exit_code(e))
    """
)


def start_forked(tmp_path: Path) -> tuple[subprocess.Popen, int]:
    p = subprocess.Popen(
        [sys.executable, "-c", FORKED, str(tmp_path)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's job is
    )
    deadline = time.monotonic() + 60
    while not (tmp_path / "child-pid").exists():
        assert p.poll() is None and time.monotonic() < deadline, p.communicate()
        time.sleep(0.05)
    time.sleep(0.2)  # past the child's handlers
    return p, int((tmp_path / "child-pid").read_text())


@pytest.mark.parametrize(
    "how, sig, code, name",
    [
        ("the terminal's Ctrl-C", signal.SIGINT, 130, "KeyboardInterrupt"),
        ("kill", signal.SIGTERM, 143, "Terminated"),
    ],
)
def test_a_forked_run_takes_the_parents_stop_once(tmp_path, how, sig, code, name):
    """Ctrl-C goes to the terminal's whole process group, kill to the parent alone: either way the
    child is stopped once, by the same signal, and reaped; the parent exits as the child did."""
    p, child = start_forked(tmp_path)
    if sig == signal.SIGINT:
        os.killpg(p.pid, sig)
    else:
        p.send_signal(sig)
    out, err = p.communicate(timeout=60)
    assert p.returncode == code, err
    assert out.strip() == f"parent stopped by {name}"
    assert (tmp_path / "child").read_text() == f"{name}\n"
    assert not Path(f"/proc/{child}").exists()


def test_a_forked_run_dies_with_its_parent(tmp_path):
    p, child = start_forked(tmp_path)
    p.kill()
    p.communicate(timeout=60)
    deadline = time.monotonic() + 30
    while not (tmp_path / "child").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (tmp_path / "child").read_text() == "Terminated\n"  # the parent-death signal: SIGTERM


def test_series_runner_cli_refuses_a_bad_config_before_writing(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\nbackend = "ref"\n')
    p = subprocess.run(
        [sys.executable, "-m", "dlcp_cli", "run", str(bad), "--out", str(tmp_path / "r")],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert p.returncode == 2 and p.stderr.strip() == "dlcp run: backend: 'ref' is now called 'builtin'"
    assert not (tmp_path / "r").exists()


# A stop that lands while the garbage collector runs a callback (Dask's scheduler installs one):
# an exception raised there is swallowed ("Exception ignored in ..."), and the series went on.
IN_GC_CALLBACK = textwrap.dedent(
    """
    import gc, os, signal
    from dlcp.runs import signals

    def callback(phase, info):
        if phase == "start":
            os.kill(os.getpid(), signal.SIG)
            sum(range(1000))  # bytecode for the handler to run at, inside the callback

    signals.install()
    gc.callbacks.append(callback)
    gc.collect()
    gc.callbacks.remove(callback)
    print("collected")
    try:
        signals.raise_pending()
    except (KeyboardInterrupt, signals.Terminated) as e:
        print("raised", type(e).__name__)
    """
)


@pytest.mark.parametrize("sig, name", [("SIGTERM", "Terminated"), ("SIGINT", "KeyboardInterrupt")])
def test_a_stop_inside_a_gc_callback_is_kept_for_the_series_loop(sig, name):
    r = subprocess.run(
        [sys.executable, "-c", IN_GC_CALLBACK.replace("signal.SIG)", f"signal.{sig})")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:2] == ["collected", f"raised {name}"]
    assert "Exception ignored" not in r.stderr and "Traceback" not in r.stderr, r.stderr
