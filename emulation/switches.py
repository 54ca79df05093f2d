"""Mininet switch classes whose dataplane is a separate DLCP switch process.

`DlcpSwitch` holds what every backend shares: the constructor (runtime file, run directory, debug
log, pcap ports), start-up with a readiness check that reports the process's own error and exact
command line, a recorded PID (emulation/procs.py), and a stop that leaves the counters in
`<run_dir>/counters/<name>.json`. `RefSwitch` runs the built-in dataplane (`python -m
emulation.refswitch`). `BACKENDS` maps a backend name to its class; "ref" is the default.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from mininet.node import Switch

from . import procs
from .refswitch.runtime import load_runtime

ROOT = Path(__file__).resolve().parents[1]
UNIX_PATH_MAX = 100  # sun_path is 108 bytes; keep a margin


class SwitchStartError(RuntimeError):
    """A switch process that did not come up; the message has its stderr tail and command line."""


class DlcpSwitch(Switch):
    """A Mininet switch backed by a DLCP dataplane process (one per switch, in the root namespace)."""

    backend = ""
    ready_timeout_s = 15.0
    stop_grace_s = 5.0
    realtime_priority = 10  # SCHED_RR priority of the switch process (1..99)

    def __init__(self, name, runtime_json, run_dir, debug_log=False, pcap_ports=(), **params):
        super().__init__(name, **params)
        self.runtime_json = Path(runtime_json).resolve()
        self.run_dir = Path(run_dir).resolve()
        self.debug_log = debug_log
        self.pcap_ports = tuple(pcap_ports)
        self.proc: subprocess.Popen | None = None
        self.cmdline: list[str] = []

    # --- paths -------------------------------------------------------------------------------

    @property
    def counters_path(self) -> Path:
        return self.run_dir / "counters" / f"{self.name}.json"

    @property
    def log_path(self) -> Path:
        return self.run_dir / "logs" / f"{self.name}.log"

    @property
    def pcap_dir(self) -> Path:
        return self.run_dir / "pcap"

    # --- backend hooks -----------------------------------------------------------------------

    def command(self) -> list[str]:
        raise NotImplementedError

    def is_ready(self) -> bool:
        raise NotImplementedError

    def request_counters(self) -> None:
        """Ask the running process to write its counters now (optional)."""

    # --- life cycle ------------------------------------------------------------------------------

    def check_ports(self) -> None:
        """Every port of the runtime file must be one of this switch's Mininet interfaces, with the
        same port number, or the dataplane and the topology disagree about where packets go."""
        rt = load_runtime(self.runtime_json)
        mine = {intf.name: self.ports[intf] for intf in self.intfList() if intf.name != "lo"}
        for p in rt.ports:
            if p.intf not in mine:
                raise SwitchStartError(f"{self.name}: {self.runtime_json}: port {p.port} names interface "
                                       f"{p.intf}, not one of {sorted(mine)}")
            if mine[p.intf] != p.port:
                raise SwitchStartError(f"{self.name}: {self.runtime_json}: {p.intf} is port {mine[p.intf]} in "
                                       f"Mininet but port {p.port} in the runtime file")

    def start(self, controllers) -> None:
        self.check_ports()
        for d in (self.counters_path.parent, self.log_path.parent):
            d.mkdir(parents=True, exist_ok=True)
        self.cmdline = self.command()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.cmdline, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        procs.record(self.proc.pid, "switch", self.name, self.cmdline)
        self._raise_priority()
        deadline = time.monotonic() + self.ready_timeout_s
        while not self.is_ready():
            if self.proc.poll() is not None:
                self._fail(f"exited with status {self.proc.returncode} while starting")
            if time.monotonic() > deadline:
                self._fail(f"not ready after {self.ready_timeout_s:g} s")
            time.sleep(0.05)

    def _raise_priority(self) -> None:
        """Run the switch under SCHED_RR: it stands in for hardware, and on a machine shared with
        the agents a descheduled switch turns its idle time into artificial queues and drops (tail
        drops in a lightly loaded PS exchange fell from ~900 to ~50 packets). It sleeps in ppoll
        when idle, and the kernel's RT throttling keeps 5 % of each CPU for everyone else."""
        try:
            os.sched_setscheduler(self.proc.pid, os.SCHED_RR, os.sched_param(self.realtime_priority))
        except (PermissionError, OSError) as e:
            print(f"{self.name}: running without real-time priority ({e})", file=sys.stderr)

    def _fail(self, what: str) -> None:
        self._terminate()
        raise SwitchStartError(f"{self.backend} switch {self.name} {what}\n"
                               f"command: {subprocess.list2cmdline(self.cmdline)}\n"
                               f"last lines of {self.log_path}:\n{self.log_tail()}")

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def _terminate(self) -> None:
        """SIGTERM (the process dumps its counters), wait, SIGKILL if it hangs; forget the PID."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(self.stop_grace_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        procs.forget(self.proc.pid)
        self.proc = None

    def stop(self, deleteIntfs=True) -> None:  # noqa: N803 (Mininet's signature)
        self._terminate()
        super().stop(deleteIntfs)

    def stop_process(self) -> None:
        """Stop only the switch process (counters dumped), not its Mininet interfaces."""
        self._terminate()

    def counters(self) -> dict:
        """The last counter dump (after stop(), or after request_counters())."""
        return json.loads(self.counters_path.read_text())


class RefSwitch(DlcpSwitch):
    """The built-in dataplane (emulation/refswitch), one process per switch."""

    backend = "ref"

    @property
    def control_path(self) -> Path:
        path = self.run_dir / "control" / f"{self.name}.sock"
        if len(str(path)) > UNIX_PATH_MAX:  # a deep run directory: keep the socket path short
            digest = hashlib.sha1(str(path).encode()).hexdigest()[:12]
            path = procs.STATE_DIR.parent / "control" / f"{self.name}-{digest}.sock"
        return path

    def command(self) -> list[str]:
        self.control_path.parent.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "emulation.refswitch", "--runtime", str(self.runtime_json), "--name", self.name,
               "--counters", str(self.counters_path), "--control", str(self.control_path)]
        if self.pcap_ports:
            cmd += ["--pcap-dir", str(self.pcap_dir)]
            for port in self.pcap_ports:
                cmd += ["--pcap-port", str(port)]
        if self.debug_log:
            cmd.append("--debug-log")
        return cmd

    def is_ready(self) -> bool:
        from .refswitch.switch import control_request
        try:
            return control_request(self.control_path, "ping", timeout=1.0).get("ok", False)
        except (OSError, ValueError):
            return False

    def request_counters(self) -> None:
        from .refswitch.switch import control_request
        control_request(self.control_path, "dump")


BACKENDS: dict[str, type[DlcpSwitch]] = {"ref": RefSwitch}
DEFAULT_BACKEND = "ref"


def switch_class(backend: str = DEFAULT_BACKEND) -> type[DlcpSwitch]:
    try:
        return BACKENDS[backend]
    except KeyError:
        raise ValueError(f"unknown switch backend {backend!r} (one of: {', '.join(BACKENDS)})") from None
