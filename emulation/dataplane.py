"""Switch dataplane processes, with or without Mininet: the life cycle every backend shares.

`DataplaneProcess` starts one switch process on given interfaces (port -> interface name) from a
runtime file (docs/pipeline.md), and stops it:

    check the runtime's ports against the interfaces -> backend preparation (binary, build, ports)
    -> start with stdout/stderr in <run_dir>/logs/<name>.log -> record the PID (procs.py)
    -> wait until ready -> SCHED_RR -> backend configuration (bmv2: push the runtime)
    ...
    stop: counter dump in <run_dir>/counters/<name>.json, SIGTERM, SIGKILL if it hangs, forget PID

Any failure stops the process and raises SwitchStartError naming the switch; once a process ran,
the message also has the exact command line and the tail of the process's own log. `BuiltinProcess`
runs the built-in switch; `emulation.bmv2switch.Bmv2Process` runs simple_switch_grpc. The
Mininet switch classes (`emulation.switches`) and the conformance harness use these.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from dlcp.exit_status import exit_text
from emulation import procs

ROOT = Path(__file__).resolve().parents[1]
UNIX_PATH_MAX = 100  # sun_path is 108 bytes; keep a margin


class SwitchStartError(RuntimeError):
    """A switch that did not come up; the message names it (and, once a process ran, has its
    command line and log tail)."""


class DataplaneProcess:
    """One switch process. Subclasses give the command line, readiness test and counter dump."""

    backend = ""
    program = ""  # what the log calls the process
    ready_timeout_s = 15.0
    stop_grace_s = 5.0
    realtime_priority = 10  # SCHED_RR priority of the switch process (1..99)

    def __init__(
        self,
        name: str,
        runtime_json: str | Path,
        run_dir: str | Path,
        interfaces: Mapping[int, str] | None = None,
        debug_log: bool = False,
        pcap_ports=(),
    ):
        """interfaces: port -> interface the process must attach (None: the runtime's own)."""
        self.name = name
        self.runtime_json = Path(runtime_json).resolve()
        self.run_dir = Path(run_dir).resolve()
        self.interfaces = None if interfaces is None else dict(interfaces)
        self.debug_log = debug_log
        self.pcap_ports = tuple(pcap_ports)
        self.proc: subprocess.Popen | None = None
        self.cmdline: list[str] = []

    # --- paths -----------------------------------------------------------------------------------

    @property
    def counters_path(self) -> Path:
        return self.run_dir / "counters" / f"{self.name}.json"

    @property
    def log_path(self) -> Path:
        return self.run_dir / "logs" / f"{self.name}.log"

    @property
    def samples_path(self) -> Path:
        """Periodic queue samples (built-in switch; emulation/builtin_switch/process.py, Sampler)."""
        return self.run_dir / "counters" / f"{self.name}-samples.jsonl"

    @property
    def pcap_dir(self) -> Path:
        return self.run_dir / "pcap"

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    # --- backend hooks ---------------------------------------------------------------------------

    def runtime_ports(self) -> dict[int, str]:
        """port -> interface of the runtime file (raises SwitchStartError if it cannot be read)."""
        raise NotImplementedError

    def prepare(self) -> None:
        """Checks and set-up before the process starts (raise SwitchStartError)."""

    def command(self) -> list[str]:
        raise NotImplementedError

    def is_ready(self) -> bool:
        raise NotImplementedError

    def not_ready_reason(self) -> str:
        return f"not ready after {self.ready_timeout_s:g} s"

    def configure(self) -> None:
        """Work on the running process before it counts as started (raise SwitchStartError)."""

    def request_counters(self) -> None:
        """Have the counter dump written to counters_path now."""

    def release(self) -> None:
        """Close connections to the process before it is stopped."""

    # --- life cycle ------------------------------------------------------------------------------

    def check_interfaces(self) -> None:
        """Every port of the runtime file must be one of the interfaces, under the same port number,
        or the dataplane and the topology disagree about where packets go."""
        ports = self.runtime_ports()
        if self.interfaces is None:
            self.interfaces = ports
        by_intf = {intf: port for port, intf in self.interfaces.items()}
        for port, intf in sorted(ports.items()):
            if intf not in by_intf:
                self._refuse(f"{self.runtime_json}: port {port} names interface {intf}, not one of {sorted(by_intf)}")
            if by_intf[intf] != port:
                self._refuse(
                    f"{self.runtime_json}: {intf} is port {by_intf[intf]} in the topology but port "
                    f"{port} in the runtime file"
                )
        for port, intf in sorted(self.interfaces.items()):
            if not Path("/sys/class/net", intf).exists():
                self._refuse(f"interface {intf} (port {port}) does not exist")

    def start(self) -> None:
        self.check_interfaces()
        self.prepare()
        for d in (self.counters_path.parent, self.log_path.parent):
            d.mkdir(parents=True, exist_ok=True)
        self.cmdline = self.command()
        with open(self.log_path, "ab") as log:
            log.write(f"dlcp: {subprocess.list2cmdline(self.cmdline)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                procs.dying_with_parent(self.cmdline),
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        procs.record(self.proc.pid, "switch", self.name, self.cmdline)
        try:
            self._wait_ready()
            self._raise_priority()
            self.configure()
            if not self.alive():
                self._refuse(f"{self.program} {exit_text(self.proc.returncode)} after start-up")
        except SwitchStartError as e:
            self.stop(dump_counters=False)
            raise SwitchStartError(
                f"{e}\n  command: {subprocess.list2cmdline(self.cmdline)}\n"
                f"  last lines of {self.log_path}:\n{procs.log_tail(self.log_path)}"
            ) from None
        except BaseException:
            self.stop(dump_counters=False)
            raise

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        while not self.is_ready():
            if self.proc.poll() is not None:
                self._refuse(f"{self.program} {exit_text(self.proc.returncode)} during start-up")
            if time.monotonic() > deadline:
                self._refuse(self.not_ready_reason())
            time.sleep(0.05)

    def _refuse(self, what: str) -> None:
        raise SwitchStartError(f"{self.backend} switch {self.name}: {what}")

    def _raise_priority(self) -> None:
        """Run every thread of the switch under SCHED_RR: it stands in for hardware, and on a machine
        shared with the agents a descheduled switch turns its idle time into artificial queues and
        drops (tail drops in a lightly loaded PS exchange fell from ~900 to ~50 packets). It sleeps
        when idle, and the kernel's RT throttling keeps 5 % of each CPU for everyone else."""
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{self.proc.pid}/task")]
        except OSError:
            tids = [self.proc.pid]
        try:
            for tid in tids:
                os.sched_setscheduler(tid, os.SCHED_RR, os.sched_param(self.realtime_priority))
        except ProcessLookupError:
            pass  # a thread ended meanwhile
        except (PermissionError, OSError) as e:
            print(f"{self.name}: running without real-time priority ({e})", file=sys.stderr)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, dump_counters: bool = True) -> None:
        """Counter dump (unless told not to), then SIGTERM, wait, SIGKILL if it hangs; forget the PID."""
        if self.proc is None:
            return
        try:
            if dump_counters and self.alive():
                self.write_final_counters()
        finally:
            self.release()
            procs.stop_child(self.proc, grace_s=self.stop_grace_s)
            self.proc = None

    def write_final_counters(self) -> None:
        """The dump a stop leaves behind (the built-in switch writes its own on SIGTERM)."""

    def counters(self) -> dict:
        """The last counter dump (after stop(), or after request_counters())."""
        return json.loads(self.counters_path.read_text())


class BuiltinProcess(DataplaneProcess):
    """The built-in switch: `python -m emulation.builtin_switch` (emulation/builtin_switch)."""

    backend = "builtin"
    program = "builtin_switch"

    def __init__(self, *args, extra_args=(), **kw):
        """extra_args: more builtin_switch options (--engine, --seed, ...)."""
        super().__init__(*args, **kw)
        self.extra_args = list(extra_args)

    @property
    def control_path(self) -> Path:
        path = self.run_dir / "control" / f"{self.name}.sock"
        if len(str(path)) > UNIX_PATH_MAX:  # a deep run directory: keep the socket path short
            digest = hashlib.sha1(str(path).encode()).hexdigest()[:12]
            path = procs.STATE_DIR.parent / "control" / f"{self.name}-{digest}.sock"
        return path

    def runtime_ports(self) -> dict[int, str]:
        from dlcp.network.runtime_file import RuntimeFileError, load_runtime

        try:
            return {p.port: p.intf for p in load_runtime(self.runtime_json).ports}
        except RuntimeFileError as e:
            self._refuse(str(e))

    def command(self) -> list[str]:
        self.control_path.parent.mkdir(parents=True, exist_ok=True)
        cmd = [
            sys.executable,
            "-m",
            "emulation.builtin_switch",
            "--runtime",
            str(self.runtime_json),
            "--name",
            self.name,
            "--counters",
            str(self.counters_path),
            "--control",
            str(self.control_path),
        ]
        if self.pcap_ports:
            cmd += ["--pcap-dir", str(self.pcap_dir)]
            for port in self.pcap_ports:
                cmd += ["--pcap-port", str(port)]
        if self.debug_log:
            cmd.append("--debug-log")
        cmd += ["--samples", str(self.samples_path)]
        return cmd + self.extra_args

    def is_ready(self) -> bool:
        try:
            return self.control("ping", timeout=1.0).get("ok", False)
        except (OSError, ValueError):
            return False

    def not_ready_reason(self) -> str:
        return f"control socket {self.control_path} not answering after {self.ready_timeout_s:g} s"

    def control(self, command: str, timeout: float = 5.0) -> dict:
        """One control-socket request (ping, counters, dump)."""
        from emulation.builtin_switch.process import control_request

        return control_request(self.control_path, command, timeout=timeout)

    def request_counters(self) -> None:
        self.control("dump")

    def live_counters(self) -> dict:
        """The counters now, without writing the dump."""
        return self.control("counters")["counters"]
