"""emulation/procs.py catches_sigterm / wait_until_catching_sigterm: the runner waits for a
just-started agent to install its SIGTERM handler before stopping it, so the agent still writes
its record."""

import signal
import subprocess
import sys
import time
from pathlib import Path

from emulation import procs

ROOT = Path(__file__).resolve().parents[2]

CHILD = (
    "import signal, sys, time; time.sleep({delay}); signal.signal(signal.SIGTERM, lambda *a: sys.exit(0)); "
    "print('ready', flush=True); time.sleep(30)"
)


def test_a_child_is_seen_catching_sigterm_only_once_it_installed_the_handler():
    p = subprocess.Popen([sys.executable, "-c", CHILD.format(delay=0.5)], stdout=subprocess.PIPE, text=True)
    try:
        assert not procs.catches_sigterm(p.pid)  # still sleeping before the handler
        t0 = time.monotonic()
        assert procs.wait_until_catching_sigterm(p, timeout_s=10)
        assert time.monotonic() - t0 >= 0.3 and procs.catches_sigterm(p.pid)
        assert p.stdout.readline().strip() == "ready"
        p.terminate()
        assert p.wait(timeout=5) == 0  # the handler ran: a clean exit, not death by SIGTERM
    finally:
        p.kill()
        p.wait()


def test_waiting_gives_up_at_the_timeout_and_on_an_exited_child():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert not procs.wait_until_catching_sigterm(p, timeout_s=0.3)
    finally:
        p.kill()
        p.wait()
    assert procs.wait_until_catching_sigterm(p, timeout_s=0.3)  # gone: nothing to wait for
    assert not procs.catches_sigterm(p.pid)


# An agent's stop: the first SIGTERM raises, the second (the runner's, just after the parent-death
# one) arrives during the clean-up that writes the records and must not cut it short.
AGENT_STOP = """
import sys, time
from agents.common import stop_on_first_signal

class Stop(Exception):
    pass

stop_on_first_signal(Stop)
try:
    print("ready", flush=True)  # inside the try: the test's signal may come before the next line
    time.sleep(30)
except Stop as e:
    print(e, flush=True)
    time.sleep(1.0)  # the clean-up, with a second signal on its way
    print("records written", flush=True)
"""


def test_an_agent_stops_on_the_first_signal_and_a_second_cannot_cut_its_clean_up():
    p = subprocess.Popen([sys.executable, "-c", AGENT_STOP], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert p.stdout.readline().strip() == "ready"
        p.terminate()
        assert p.stdout.readline().strip() == "stopped by signal SIGTERM"
        p.terminate()  # during the clean-up
        p.send_signal(signal.SIGINT)
        assert p.stdout.readline().strip() == "records written"
        assert p.wait(timeout=5) == 0
    finally:
        p.kill()
        p.wait()
