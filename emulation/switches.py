"""Mininet switch classes whose dataplane is a separate switch process, one class per backend.

`DlcpSwitch` is what every backend shares in Mininet: the constructor (runtime file, run
directory, debug log, pcap ports), start-up of the dataplane process on the switch's Mininet
interfaces, stop (the counters stay in `<run_dir>/counters/<name>.json`), and `stop_process()`
for when Mininet's own stop cannot run. The process life cycle itself (PID records, readiness,
SCHED_RR, the error with the process's log tail and command line) is emulation/dataplane.py's.

BuiltinSwitch runs the built-in switch, Bmv2Switch simple_switch_grpc; the latter loads
emulation/bmv2/simple_switch.py (and the P4Runtime/gRPC stack) only when a switch starts. Which backend
uses which is emulation/mininet_backend.py's (registered in dlcp/backends.py).
"""

from __future__ import annotations

import json
from pathlib import Path

from mininet.node import Switch

from emulation.dataplane import BuiltinProcess, DataplaneProcess, SwitchStartError
from emulation.network import DiesWithRun

__all__ = ["Bmv2Switch", "BuiltinSwitch", "DlcpSwitch", "SwitchStartError"]


class DlcpSwitch(DiesWithRun, Switch):
    """A Mininet switch backed by a DLCP dataplane process (one per switch, in the root namespace);
    its node shell dies with the run (DiesWithRun)."""

    backend = ""
    process_options: tuple[str, ...] = ()  # extra constructor keywords passed to the process

    def __init__(self, name, runtime_json, run_dir, debug_log=False, pcap_ports=(), **params):
        options = {k: params.pop(k) for k in self.process_options if k in params}
        super().__init__(name, **params)
        self.runtime_json, self.run_dir = runtime_json, run_dir
        self.debug_log, self.pcap_ports = debug_log, tuple(pcap_ports)
        self.options = options
        self.dataplane: DataplaneProcess | None = None

    @staticmethod
    def process_class() -> type[DataplaneProcess]:
        raise NotImplementedError

    @classmethod
    def toolchain(cls, data_port: int | None = None) -> dict[str, str]:
        """Check what this backend needs installed before anything starts; returns tool versions
        for meta.json. Raises SwitchStartError with a one-line reason."""
        return {}

    def interfaces(self) -> dict[int, str]:
        return {self.ports[intf]: intf.name for intf in self.intfList() if intf.name != "lo"}

    def start(self, controllers) -> None:
        self.dataplane = self.process_class()(
            self.name,
            self.runtime_json,
            self.run_dir,
            self.interfaces(),
            debug_log=self.debug_log,
            pcap_ports=self.pcap_ports,
            **self.options,
        )
        try:
            self.dataplane.start()
        except BaseException:
            self.dataplane = None
            raise

    def stop_process(self) -> None:
        """Stop only the switch process (counters dumped), not its Mininet interfaces."""
        if self.dataplane is not None:
            self.dataplane.stop()
            self.dataplane = None

    def stop(self, deleteIntfs=True) -> None:
        try:
            self.stop_process()
        finally:
            super().stop(deleteIntfs)

    def request_counters(self) -> None:
        """Have the running process write its counter dump now."""
        self.dataplane.request_counters()

    @property
    def counters_path(self) -> Path:
        return Path(self.run_dir).resolve() / "counters" / f"{self.name}.json"

    def counters(self) -> dict:
        """The last counter dump (after stop(), or after request_counters())."""
        return json.loads(self.counters_path.read_text())


class BuiltinSwitch(DlcpSwitch):
    """The built-in switch (emulation/builtin_switch), one process per switch."""

    backend = "builtin"
    process_options = ("extra_args",)  # more builtin_switch options (--engine, ...)

    @staticmethod
    def process_class() -> type[DataplaneProcess]:
        return BuiltinProcess


class Bmv2Switch(DlcpSwitch):
    """simple_switch_grpc running p4/dlcp.p4 (emulation/bmv2/simple_switch.py). Options: grpc_port,
    thrift_port (default 9559 / 9090 + the runtime's device_id)."""

    backend = "bmv2"
    process_options = ("grpc_port", "thrift_port")

    @staticmethod
    def process_class() -> type[DataplaneProcess]:
        from emulation.bmv2.simple_switch import Bmv2Process

        return Bmv2Process

    @classmethod
    def toolchain(cls, data_port: int | None = None) -> dict[str, str]:
        from emulation.bmv2.simple_switch import toolchain

        return toolchain(data_port)
