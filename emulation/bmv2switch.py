"""bmv2 `simple_switch_grpc` running p4/dlcp.p4: a launcher (`start_bmv2` / `Bmv2Process.stop`, no
Mininet needed) and the Mininet switch class `Bmv2Switch` built on it.

Start-up, in order: refuse if the gRPC or Thrift port is taken; start

    simple_switch_grpc --device-id N -i K@sN-ethK ... --thrift-port 9090+N [--log-console -L debug]
                       --no-p4 -- --grpc-server-addr 127.0.0.1:9559+N --priority-queues 8

with stdout/stderr in `<run_dir>/logs/sN.log` (bmv2's packet log too when `debug_log`; measurement
runs keep it off); record the PID (emulation/procs.py); wait until both ports listen; push the
runtime file (emulation/controller.py). Any failure stops the process and raises SwitchStartError
with the cause, the exact command line and the tail of the switch's log. `stop()` writes the
counter dump to `<run_dir>/counters/sN.json`, then stops the process by PID.

simple_switch_grpc is found on PATH, or where DLCP_BMV2_BIN points.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from dlcp.runtime import load_runtime

from . import p4build, procs

BMV2_ENV = "DLCP_BMV2_BIN"
GRPC_PORT_BASE = 9559
THRIFT_PORT_BASE = 9090
PRIORITY_QUEUES = 8
START_TIMEOUT_S = 20.0
LOG_TAIL_LINES = 20


class SwitchStartError(RuntimeError):
    """A switch did not come up; the message carries its command line and log tail."""


def find_bmv2() -> str | None:
    env = os.environ.get(BMV2_ENV)
    if env:
        return env if os.access(env, os.X_OK) else shutil.which(env)
    return shutil.which("simple_switch_grpc")


def missing_bmv2_message() -> str:
    env = os.environ.get(BMV2_ENV)
    where = f"{BMV2_ENV}={env} is not an executable" if env else "simple_switch_grpc not found on PATH"
    return (f"{where}: install bmv2 with P4Runtime (https://github.com/p4lang/behavioral-model, "
            f"configure --with-pi) and put it on PATH, or set {BMV2_ENV}=/path/to/simple_switch_grpc")


def bmv2_version(binary: str) -> str:
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30)
        return (out.stdout or out.stderr).strip().splitlines()[-1]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return "unknown"


def bmv2_command(binary: str, device_id: int, interfaces: Mapping[int, str], grpc_port: int,
                 thrift_port: int, debug_log: bool = False, pcap_dir: Path | None = None) -> list[str]:
    cmd = [binary, "--device-id", str(device_id)]
    for port in sorted(interfaces):
        cmd += ["-i", f"{port}@{interfaces[port]}"]
    cmd += ["--thrift-port", str(thrift_port)]
    if debug_log:
        cmd += ["--log-console", "-L", "debug"]
    else:
        # without it bmv2 still formats every per-packet debug message for its null logger,
        # which costs more than the pipeline itself
        cmd += ["--log-level", "off"]
    if pcap_dir is not None:
        cmd += ["--pcap", str(pcap_dir)]
    cmd += ["--no-p4", "--", "--grpc-server-addr", f"127.0.0.1:{grpc_port}",
            "--priority-queues", str(PRIORITY_QUEUES)]
    return cmd


def port_busy(port: int) -> bool:
    """True if something listens on (or holds) the TCP port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return True
    return False


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        return True
    except OSError:
        return False


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_bytes()[-16384:].decode(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join("    " + ln for ln in text.splitlines()[-lines:]) or "    (empty)"


@dataclass
class Bmv2Process:
    """A running simple_switch_grpc with its pushed runtime and open P4Runtime session."""
    name: str
    device_id: int
    cmd: list[str]
    popen: subprocess.Popen
    grpc_port: int
    thrift_port: int
    log_path: Path
    run_dir: Path
    p4rt: Any = None  # emulation.controller.P4RuntimeSwitch
    _log: Any = field(default=None, repr=False)

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def grpc_addr(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def alive(self) -> bool:
        return self.popen.poll() is None

    def counter_dump(self) -> dict[str, Any]:
        return self.p4rt.counter_dump()

    def write_counters(self) -> Path | None:
        """`<run_dir>/counters/<name>.json`; None (and a note in the log) if the switch cannot answer."""
        if self.p4rt is None or not self.alive():
            return None
        from .controller import ControllerError
        try:
            dump = self.counter_dump()
        except ControllerError as e:
            self._note(f"counter dump failed: {e}")
            return None
        path = self.run_dir / "counters" / f"{self.name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(dump, indent=1) + "\n")
        return path

    def stop(self, dump_counters: bool = True) -> None:
        try:
            if dump_counters:
                self.write_counters()
        finally:
            if self.p4rt is not None:
                self.p4rt.close()
                self.p4rt = None
            _terminate(self.popen)
            procs.forget(self.pid)
            if self._log is not None:
                self._log.close()
                self._log = None

    def _note(self, text: str) -> None:
        if self._log is not None:
            self._log.write(f"dlcp: {text}\n".encode())
            self._log.flush()


def offloads_off(intf: str) -> None:
    """Segmentation/receive offloads off on a port bmv2 captures from. With any of them on,
    libpcap sizes its receive ring for 64 KB frames and holds only ~32 packets: bmv2 then loses
    the rest of any burst before its parser sees it."""
    subprocess.run(["ethtool", "-K", intf, "tso", "off", "gso", "off", "gro", "off", "lro", "off"],
                   capture_output=True)


def _terminate(popen: subprocess.Popen, grace_s: float = 3.0) -> None:
    """SIGTERM, then SIGKILL after `grace_s`; reaped (procs.stop_pid would wait on our own zombie)."""
    if popen.poll() is None:
        popen.terminate()
        try:
            popen.wait(grace_s)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait()


def start_bmv2(name: str, runtime: Mapping[str, Any], interfaces: Mapping[int, str], run_dir: str | Path,
               debug_log: bool = False, pcap: bool = False, grpc_port: int | None = None,
               thrift_port: int | None = None, timeout_s: float = START_TIMEOUT_S) -> Bmv2Process:
    """Start a switch on `interfaces` (port -> interface name), push `runtime`, return it running."""
    binary = find_bmv2()
    if binary is None:
        raise SwitchStartError(f"{name}: {missing_bmv2_message()}")
    device_id = int(runtime["device_id"])
    grpc_port = GRPC_PORT_BASE + device_id if grpc_port is None else grpc_port
    thrift_port = THRIFT_PORT_BASE + device_id if thrift_port is None else thrift_port
    unknown = sorted({p["port"] for p in runtime["ports"]} - set(interfaces))
    if unknown:
        raise SwitchStartError(f"{name}: the runtime configures port(s) {unknown}, the switch has "
                               f"{sorted(interfaces)}")
    for port, intf in sorted(interfaces.items()):
        if not Path("/sys/class/net", intf).exists():
            raise SwitchStartError(f"{name}: interface {intf} (port {port}) does not exist")
    for label, port in (("gRPC", grpc_port), ("Thrift", thrift_port)):
        if port_busy(port):
            raise SwitchStartError(f"{name}: TCP port {port} ({label}) is busy: another switch still "
                                   "running? (`dlcp clean` stops leftovers of earlier runs)")
    _ensure_program(name, runtime)
    for intf in interfaces.values():
        offloads_off(intf)

    run_dir = Path(run_dir)
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    pcap_dir = run_dir / "pcap" if pcap else None
    if pcap_dir is not None:
        pcap_dir.mkdir(parents=True, exist_ok=True)
    log_path = run_dir / "logs" / f"{name}.log"
    cmd = bmv2_command(binary, device_id, interfaces, grpc_port, thrift_port, debug_log, pcap_dir)
    log = open(log_path, "ab")
    log.write(f"dlcp: {shlex.join(cmd)}\n".encode())
    log.flush()
    popen = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
    procs.record(popen.pid, "switch", name, cmd)
    sw = Bmv2Process(name, device_id, cmd, popen, grpc_port, thrift_port, log_path, run_dir, _log=log)
    try:
        _wait_listening(sw, timeout_s)
        from .controller import ControllerError, ThriftSwitch, push_runtime
        try:
            sw.p4rt = push_runtime(runtime, sw.grpc_addr, thrift_port)
            with ThriftSwitch(thrift_port, name=name) as th:
                attached = th.ports()
        except ControllerError as e:
            raise SwitchStartError(f"{name}: pushing the runtime failed: {e}") from None
        if attached != dict(interfaces):
            # bmv2 only logs a port it could not open and runs on without it
            raise SwitchStartError(f"{name}: bmv2 attached ports {attached}, asked for {dict(interfaces)}")
        if not sw.alive():
            raise SwitchStartError(f"{name}: simple_switch_grpc exited (code {popen.returncode}) "
                                   "after the runtime was pushed")
    except BaseException as e:
        sw.stop(dump_counters=False)
        if isinstance(e, SwitchStartError):
            raise SwitchStartError(f"{e}\n  command: {shlex.join(cmd)}\n  log tail ({log_path}):\n"
                                   f"{log_tail(log_path)}") from None
        raise
    return sw


def _ensure_program(name: str, runtime: Mapping[str, Any]) -> None:
    """Compile p4/dlcp.p4 if the runtime uses the default build and it is missing or stale."""
    from .controller import resolve
    paths = [resolve(runtime["p4info"]), resolve(runtime["bmv2_json"])]
    if all(p.parent == p4build.BUILD_DIR for p in paths):
        try:
            p4build.ensure_built()
        except p4build.P4BuildError as e:
            raise SwitchStartError(f"{name}: {e}") from None
    for p in paths:
        if not p.is_file():
            raise SwitchStartError(f"{name}: {p} missing (run `dlcp build`)")


def _wait_listening(sw: Bmv2Process, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if not sw.alive():
            raise SwitchStartError(f"{sw.name}: simple_switch_grpc exited with code {sw.popen.returncode} "
                                   "during start-up")
        if _listening(sw.grpc_port) and _listening(sw.thrift_port):
            return
        if time.monotonic() > deadline:
            raise SwitchStartError(f"{sw.name}: gRPC port {sw.grpc_port} / Thrift port {sw.thrift_port} "
                                   f"not listening after {timeout_s:.0f} s")
        time.sleep(0.05)


def _mininet_switch():
    from mininet.node import Switch
    return Switch


class Bmv2Switch(_mininet_switch()):
    """Mininet switch backed by simple_switch_grpc running p4/dlcp.p4 (same interface as RefSwitch).

    runtime_json: the switch's `sN-runtime.json` (its device_id sets the gRPC/Thrift ports unless
    grpc_port / thrift_port are given); run_dir: where logs/, counters/ and pcap/ go; debug_log:
    bmv2's per-packet log into logs/sN.log (slow: never for measurements); pcap_ports: non-empty
    turns on bmv2's pcap capture (bmv2 captures every port, into pcap/).
    """

    def __init__(self, name: str, runtime_json: str | Path, run_dir: str | Path, debug_log: bool = False,
                 pcap_ports=(), grpc_port: int | None = None, thrift_port: int | None = None, **params):
        self.runtime_json = Path(runtime_json)
        self.runtime = load_runtime(self.runtime_json)
        params.setdefault("dpid", f"{int(self.runtime['device_id']):x}")
        super().__init__(name, **params)
        self.run_dir = Path(run_dir)
        self.debug_log = debug_log
        self.pcap_ports = tuple(pcap_ports)
        self.grpc_port, self.thrift_port = grpc_port, thrift_port
        self.bmv2: Bmv2Process | None = None

    def interfaces(self) -> dict[int, str]:
        return {self.ports[intf]: intf.name for intf in self.intfList() if intf.name != "lo"}

    def start(self, controllers) -> None:
        self.bmv2 = start_bmv2(self.name, self.runtime, self.interfaces(), self.run_dir,
                               debug_log=self.debug_log, pcap=bool(self.pcap_ports),
                               grpc_port=self.grpc_port, thrift_port=self.thrift_port)

    def stop(self, deleteIntfs: bool = True) -> None:
        try:
            if self.bmv2 is not None:
                self.bmv2.stop()
                self.bmv2 = None
        finally:
            super().stop(deleteIntfs)

    def counter_dump(self) -> dict[str, Any]:
        return self.bmv2.counter_dump()
