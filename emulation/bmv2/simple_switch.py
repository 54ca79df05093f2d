"""bmv2 `simple_switch_grpc` running p4/dlcp.p4 as a switch dataplane process (`Bmv2Process`; the
life cycle is emulation/dataplane.py's), and `start_bmv2` for tests and benchmarks without Mininet.

Start-up, in order: simple_switch_grpc found (PATH or DLCP_BMV2_BIN), p4/dlcp.p4 compiled if the
build is missing or stale, the gRPC and Thrift ports free, offloads off on the switch's interfaces;
then

    simple_switch_grpc --device-id N -i K@sN-ethK ... --thrift-port 9090+N [--log-console -L debug]
                       --no-p4 -- --grpc-server-addr 127.0.0.1:9559+N --priority-queues 8

until both ports listen; then the runtime file is pushed (emulation/bmv2/control.py) and the ports
bmv2 really attached are checked. The counter dump (`<run_dir>/counters/sN.json`) comes from
P4Runtime counter reads, the Thrift register read of `rr_next`, and the kernel's counters of the
switch's interfaces (`ports`: what reached bmv2 and what it sent; docs/pipeline.md).

Nothing here imports the P4Runtime/gRPC stack until a switch is started.
"""

from __future__ import annotations

import random
import socket
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dlcp.network import pipeline_names as pn
from dlcp.network.runtime_file import Runtime, RuntimeFileError, load_runtime
from dlcp.network.switch_runtime import write_runtime
from emulation.bmv2 import build as p4build
from emulation.dataplane import DataplaneProcess, SwitchStartError

BMV2_ENV = "DLCP_BMV2_BIN"
GRPC_PORT_BASE = 9559
THRIFT_PORT_BASE = 9090
PRIORITY_QUEUES = 8
START_TIMEOUT_S = 20.0

__all__ = ["Bmv2Process", "SwitchStartError", "find_bmv2", "start_bmv2", "toolchain"]


def find_bmv2() -> str | None:
    return p4build.find_tool(BMV2_ENV, "simple_switch_grpc")


def missing_bmv2_message() -> str:
    return p4build.missing_tool_message(
        BMV2_ENV,
        "simple_switch_grpc",
        "bmv2 with P4Runtime (https://github.com/p4lang/behavioral-model, configure --with-pi)",
        "/path/to/simple_switch_grpc",
    )


def bmv2_version(binary: str) -> str:
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30)
        return (out.stdout or out.stderr).strip().splitlines()[-1]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return "unknown"


def toolchain(data_port: int | None = None) -> dict[str, str]:
    """Check that bmv2 is installed and p4/dlcp.p4 is built (compiling it if missing or stale);
    returns the versions for meta.json. Raises SwitchStartError with a one-line reason."""
    binary = find_bmv2()
    if binary is None:
        raise SwitchStartError(missing_bmv2_message())
    try:
        build = p4build.ensure_built(data_port=data_port)
    except p4build.P4BuildError as e:
        raise SwitchStartError(str(e)) from None
    return {"simple_switch_grpc": bmv2_version(binary), "p4c": build.p4c_version}


def bmv2_command(
    binary: str,
    device_id: int,
    interfaces: Mapping[int, str],
    grpc_port: int,
    thrift_port: int,
    debug_log: bool = False,
    pcap_dir: Path | None = None,
) -> list[str]:
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
    cmd += ["--no-p4", "--", "--grpc-server-addr", f"127.0.0.1:{grpc_port}", "--priority-queues", str(PRIORITY_QUEUES)]
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


def free_port() -> int:
    """A TCP port nothing holds right now (for switches that must not use the default ports), from
    below the kernel's ephemeral range: a port from bind(0) is an ephemeral one, which any outgoing
    connection (a P4Runtime or Thrift client, the readiness probes) may take as its own before the
    switch listens on it."""
    lo, _ = ephemeral_range()
    for port in random.sample(range(max(1024, lo - 12000), lo), 200):
        if not port_busy(port):  # the check the switch's start-up applies to it
            return port
    raise OSError(f"no free TCP port below the ephemeral range ({lo})")


def ephemeral_range() -> tuple[int, int]:
    """net.ipv4.ip_local_port_range (Linux's default 32768-60999 where it cannot be read)."""
    try:
        lo, hi = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(lo), int(hi)
    except (OSError, ValueError):
        return 32768, 60999


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        return True
    except OSError:
        return False


def offloads_off(intf: str) -> None:
    """Segmentation/receive offloads off on a port bmv2 captures from. With any of them on,
    libpcap sizes its receive ring for 64 KB frames and holds only ~32 packets: bmv2 then loses
    the rest of any burst before its parser sees it."""
    subprocess.run(["ethtool", "-K", intf, "tso", "off", "gso", "off", "gro", "off", "lro", "off"], capture_output=True)


KERNEL_COUNTERS = {"rx_pkts": "rx_packets", "tx_pkts": "tx_packets", "rx_bytes": "rx_bytes", "tx_bytes": "tx_bytes"}


def kernel_port_counts(interfaces: Mapping[int, str]) -> dict[int, dict[str, int] | None]:
    """port -> what the kernel counted on the switch's interface so far: frames that reached bmv2
    (`rx_pkts`, whether or not its capture kept up) and frames bmv2 sent (`tx_pkts`); None if the
    interface is gone."""
    from emulation.netns import NetError, link_counters

    out: dict[int, dict[str, int] | None] = {}
    for port, intf in interfaces.items():
        try:
            c = link_counters(intf)
        except NetError:
            out[port] = None
            continue
        out[port] = {ours: c[theirs] for ours, theirs in KERNEL_COUNTERS.items()}
    return out


class Bmv2Process(DataplaneProcess):
    """simple_switch_grpc running p4/dlcp.p4 with the runtime file pushed; one P4Runtime session
    stays open for counter reads and later table writes (`p4rt`)."""

    backend = "bmv2"
    program = "simple_switch_grpc"
    ready_timeout_s = START_TIMEOUT_S

    def __init__(self, *args, grpc_port: int | None = None, thrift_port: int | None = None, **kw):
        """grpc_port / thrift_port: default 9559 + device_id / 9090 + device_id."""
        super().__init__(*args, **kw)
        self.runtime: Runtime | None = None
        self.grpc_port, self.thrift_port = grpc_port, thrift_port
        self.p4rt = None  # emulation.controller.P4RuntimeSwitch once configured
        self.port_base: dict[int, dict[str, int] | None] = {}  # kernel counts before the pipeline was set

    @property
    def grpc_addr(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def runtime_ports(self) -> dict[int, str]:
        try:
            self.runtime = load_runtime(self.runtime_json)
        except RuntimeFileError as e:
            self._refuse(str(e))
        return {p.port: p.intf for p in self.runtime.ports}

    def prepare(self) -> None:
        self.binary = find_bmv2()
        if self.binary is None:
            self._refuse(missing_bmv2_message())
        device_id = self.runtime.device_id
        self.grpc_port = GRPC_PORT_BASE + device_id if self.grpc_port is None else self.grpc_port
        self.thrift_port = THRIFT_PORT_BASE + device_id if self.thrift_port is None else self.thrift_port
        for label, port in (("gRPC", self.grpc_port), ("Thrift", self.thrift_port)):
            if port_busy(port):
                self._refuse(
                    f"TCP port {port} ({label}) is busy: another switch still running? "
                    "(`dlcp clean` stops leftovers of earlier runs)"
                )
        self._ensure_program()
        for intf in self.interfaces.values():
            offloads_off(intf)
        if self.pcap_ports:
            self.pcap_dir.mkdir(parents=True, exist_ok=True)

    def _ensure_program(self) -> None:
        """Compile p4/dlcp.p4 if the runtime uses the default build and it is missing or stale."""
        from emulation.bmv2.control import resolve

        paths = [resolve(self.runtime.p4info), resolve(self.runtime.bmv2_json)]
        if all(p.parent == p4build.BUILD_DIR for p in paths):
            try:
                p4build.ensure_built()
            except p4build.P4BuildError as e:
                self._refuse(str(e))
        for p in paths:
            if not p.is_file():
                self._refuse(f"{p} missing (run `dlcp build`)")

    def command(self) -> list[str]:
        # bmv2 captures every port or none
        return bmv2_command(
            self.binary,
            self.runtime.device_id,
            self.interfaces,
            self.grpc_port,
            self.thrift_port,
            self.debug_log,
            self.pcap_dir if self.pcap_ports else None,
        )

    def is_ready(self) -> bool:
        return _listening(self.grpc_port) and _listening(self.thrift_port)

    def not_ready_reason(self) -> str:
        return (
            f"gRPC port {self.grpc_port} / Thrift port {self.thrift_port} not listening after "
            f"{self.ready_timeout_s:.0f} s"
        )

    def configure(self) -> None:
        from emulation.bmv2.control import ControllerError, push_runtime

        # before the pipeline exists: what reaches the ports from now on is either processed by
        # the P4 program (and counted there) or lost before it
        self.port_base = kernel_port_counts(self.interfaces)
        try:
            self.p4rt = push_runtime(self.runtime, self.grpc_addr, self.thrift_port)
            with self.thrift() as th:
                attached = th.ports()
        except ControllerError as e:
            self._refuse(f"pushing the runtime failed: {e}")
        if attached != self.interfaces:
            # bmv2 only logs a port it could not open and runs on without it
            self._refuse(f"bmv2 attached ports {attached}, asked for {self.interfaces}")

    def thrift(self):
        """A Thrift connection to the switch (queues, registers); use it as a context manager."""
        from emulation.bmv2.control import ThriftSwitch

        return ThriftSwitch(self.thrift_port, name=self.name)

    def counter_dump(self) -> dict[str, Any]:
        """The counter dump of docs/pipeline.md: P4 counters, non-zero rr_next cells, kernel port counters."""
        dump = self.p4rt.counter_dump()
        with self.thrift() as th:
            rr = th.register_read_all(pn.RR_NEXT)
        dump["registers"] = {pn.RR_NEXT: {str(i): v for i, v in enumerate(rr) if v}}
        dump["ports"] = self.port_rows()
        return dump

    def port_rows(self) -> list[dict[str, Any]]:
        """The kernel's counts on the switch's interfaces since just before the pipeline was set."""
        rows = []
        for port, now in sorted(kernel_port_counts(self.interfaces).items()):
            row = {"port": port, "intf": self.interfaces[port], "state": "gone" if now is None else "up"}
            base = self.port_base.get(port)
            if now is not None and base is not None:
                row.update({k: now[k] - base[k] for k in KERNEL_COUNTERS})
            rows.append(row)
        return rows

    def request_counters(self) -> None:
        from dlcp.switch.counter_dump import write_json_atomic
        from emulation.bmv2.control import ControllerError

        try:
            dump = self.counter_dump()
        except ControllerError as e:
            self._note(f"counter dump failed: {e}")
            return
        write_json_atomic(self.counters_path, dump)

    def write_final_counters(self) -> None:
        if self.p4rt is not None:
            self.request_counters()

    def release(self) -> None:
        if self.p4rt is not None:
            self.p4rt.close()
            self.p4rt = None

    def _note(self, text: str) -> None:
        with open(self.log_path, "a") as log:
            log.write(f"dlcp: {text}\n")


def start_bmv2(
    name: str,
    runtime: Mapping[str, Any],
    interfaces: Mapping[int, str],
    run_dir: str | Path,
    debug_log: bool = False,
    pcap: bool = False,
    grpc_port: int | None = None,
    thrift_port: int | None = None,
    timeout_s: float = START_TIMEOUT_S,
) -> Bmv2Process:
    """A running switch on `interfaces` (port -> interface name) with `runtime` pushed, without
    Mininet (tests, benchmarks). The runtime is written to `<run_dir>/runtime/` first."""
    path = write_runtime(dict(runtime, switch=runtime.get("switch", name)), Path(run_dir) / "runtime")
    sw = Bmv2Process(
        name,
        path,
        run_dir,
        interfaces,
        debug_log=debug_log,
        pcap_ports=tuple(interfaces) if pcap else (),
        grpc_port=grpc_port,
        thrift_port=thrift_port,
    )
    sw.ready_timeout_s = timeout_s
    sw.start()
    return sw
